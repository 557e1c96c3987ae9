"""Every process attnlab starts ends with its run, however the run ends: after ``kill -9`` of the run,
its figure worker and multiprocessing's resource tracker end (drawing.end_with_parent), and so do
attnlab-check's child processes (the learner's code, the forkserver). Linux: processes are read in /proc."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads processes in /proc")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children of each of its threads, recursively)."""
    found, todo = set(), [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += sorted(kids - found)
            found |= kids
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(condition, seconds: float = 120) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return False


def killed_leaves_nothing(proc: subprocess.Popen, kinds: list[str]) -> None:
    """Once a process of each of ``kinds`` (words of its command line) runs below ``proc``: kill -9
    ``proc``; every process below it must end (those left are killed, then the test fails)."""
    below: set[int] = set()
    try:
        def running() -> bool:
            commands = [command(p) for p in descendants(proc.pid)]
            return all(sum(k in c for c in commands) >= kinds.count(k) for k in kinds)

        assert wait_for(running), [command(p) for p in descendants(proc.pid)]
        below |= descendants(proc.pid)
        proc.kill()
        proc.wait()
        left = [p for p in below if not wait_for(lambda p=p: not alive(p), 30)]
        assert left == [], [command(p) for p in left]
    finally:
        proc.kill()
        for p in below | descendants(proc.pid):
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_the_figure_worker_and_the_resource_tracker_end_with_a_killed_run(tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={tmp_path / 'run'}",
                             "train.steps=10000000", "logging.console=false", "logging.tensorboard=false"],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    killed_leaves_nothing(proc, ["multiprocessing.spawn", "resource_tracker"])


def test_the_learners_code_ends_with_a_killed_check(tmp_path):
    script = ("from attnlab.commands import check\n"
              "if __name__ == '__main__':\n"
              "    check.check_source('while True:\\n    pass\\n', 'mine.py', time_limit=600)\n")
    (tmp_path / "run_check.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run_check.py")], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_leaves_nothing(proc, ["forkserver", "forkserver"])  # the server and the learner's process
