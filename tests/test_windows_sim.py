"""attnlab as Windows would see it (docs/compat.md): each command in a subprocess started with
tests/winsim/ first on PYTHONPATH, whose sitecustomize removes the POSIX-only modules (``fcntl``,
``resource``, ``termios``) and names (``signal.SIGHUP``/``SIGQUIT``, ``os.O_NOFOLLOW``/``O_NONBLOCK``/
``O_DIRECTORY``/``O_CLOEXEC``, ``posix_fallocate``, ``statvfs``, ``sysconf``): the tutorial's run, a sweep,
attnlab-compare, attnlab-report, attnlab-reproduce and the Python API. Tiny configs, figures off."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import GOLDEN_SECTION5, ROOT

SIM = ROOT / "tests" / "winsim"
TINY = ("logging=off", "train.steps=5", "train.snapshot_steps=[0,4]")


def simulated(*argv: str, cwd: Path, wait: bool = True):
    """``python ARGV`` in the simulation: its CompletedProcess (exit status, text output), or when not
    ``wait`` the Popen. The locale's encoding is ASCII (as Windows' ANSI code page is not UTF-8: a file
    opened without ``encoding=`` fails on Chinese); the standard streams are UTF-8."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SIM), str(ROOT)]), "MPLBACKEND": "Agg",
           "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def command(name: str, *args: str, cwd: Path, wait: bool = True):
    """The console script ``name`` (its entry point, as the installed command runs it)."""
    from importlib.metadata import entry_points

    target = next(e for e in entry_points(group="console_scripts") if e.name == name).value
    module, func = target.split(":")
    return simulated("-c", f"import sys; from {module} import {func}; sys.argv[0] = {name!r}; sys.exit({func}())",
                     *args, cwd=cwd, wait=wait)


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    return tmp_path_factory.mktemp("winsim")


@pytest.fixture(scope="module")
def tutorial(here):
    """``attnlab`` (the tutorial's §5 run, figures off) in the simulation: (run dir, process)."""
    return here / "tutorial", command("attnlab", "logging=off", "hydra.run.dir=tutorial", cwd=here)


@pytest.fixture(scope="module")
def probe(here):
    """One simulated ``python -c``: what the simulation left of the POSIX names, every attnlab module
    imported and what it chose (a line each), then a 5-step run through the Python API (its shapes last)."""
    return simulated("-c", """if True:
        import os, signal, sys
        for name in ("fcntl", "resource", "termios"):
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                print("importable:", name)
        print([n for n in ("SIGHUP", "SIGQUIT") if hasattr(signal, n)],
              [n for n in ("O_NOFOLLOW", "O_NONBLOCK", "O_DIRECTORY", "O_CLOEXEC", "posix_fallocate", "statvfs",
                           "fstatvfs", "sysconf") if hasattr(os, n)])
        import importlib, pkgutil, attnlab
        for module in pkgutil.walk_packages(attnlab.__path__, "attnlab."):  # every module imports
            if module.name != "attnlab.__main__":
                importlib.import_module(module.name)
        from attnlab.core import files, interrupts
        from attnlab.core.checks import available_memory
        from attnlab.commands.learner import start_method
        print(files._OPENAT, [int(s) for s in interrupts.SIGNALS], available_memory(), start_method(),
              sorted(m for m in ("fcntl", "resource", "termios") if sys.modules.get(m) is not None))
        from attnlab.commands.api import compose, train
        result = train(compose("train.steps=5", "train.snapshot_steps=[0,4]"))
        print(result.losses.shape, [s.step for s in result.snapshots])
        """, cwd=here)


def test_the_simulation_removes_what_windows_lacks(probe):
    assert (probe.returncode, probe.stderr) == (0, "")
    # no POSIX name left; attnlab takes the lstat walk, Ctrl-C, SIGTERM and Ctrl-Break, no memory figure, spawn
    assert probe.stdout.splitlines()[:2] == ["[] []", "False [2, 15, 21] None spawn []"]


def test_attnlab_prints_the_tutorials_five_lines(tutorial):
    run, proc = tutorial
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step")]
    assert [line[:24] for line in lines] == [f"step {step:3d}  loss={loss:.4f}  |" for step, (loss, _) in
                                             GOLDEN_SECTION5.items()]
    assert lines[-1].endswith("'Your'=0.99 'journey'=0.00 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert not (run / ".attnlab.lock").exists()


def test_a_sweep_and_attnlab_compare(here):
    (here / "zh.txt").write_text("你的旅程从一步开始", encoding="utf-8")  # Chinese in every file the job writes
    proc = command("attnlab", "-m", *TINY, 'sentence="a:b?c","d*e|f."', "text_file=null,zh.txt",
                   "hydra.sweep.dir=sweep", cwd=here)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p.name for p in (here / "sweep").iterdir() if p.is_dir())
    # job folders valid on NTFS: no : * ? " < > | (a trailing dot: tests/test_sweep.py)
    assert jobs == ["0_sentence=a_b_c,text_file=null", "1_sentence=a_b_c,text_file=zh.txt",
                    "2_sentence=d_e_f.,text_file=null", "3_sentence=d_e_f.,text_file=zh.txt"]
    assert "4 jobs, 4 completed" in proc.stdout
    compare = command("attnlab-compare", "sweep", cwd=here)
    assert compare.returncode == 0, compare.stderr
    rows = {line.split()[0]: line for line in compare.stdout.splitlines()[2:6]}
    assert sorted(rows) == jobs
    assert "'的'" in rows["1_sentence=a_b_c,text_file=zh.txt"]  # the focus token of the Chinese text


def test_attnlab_report_and_attnlab_reproduce(tutorial, here):
    run, _ = tutorial
    report = command("attnlab-report", str(run), "-o", "tutorial.html", cwd=here)
    assert (report.returncode, report.stderr) == (0, "")
    assert report.stdout.startswith("report: tutorial.html (1 run, ")
    page = (here / "tutorial.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and 'id="attnlab-data"' in page
    again = command("attnlab-reproduce", str(run), "--out", "again", cwd=here)
    assert again.returncode == 0, again.stdout + again.stderr  # 0: the same numbers
    assert json.loads((here / "again" / "summary.json").read_text())["status"] == "completed"


def test_the_python_api(probe):
    assert (probe.returncode, probe.stderr) == (0, "")
    assert probe.stdout.splitlines()[-1] == "(5,) [0, 4]"


def long_run(here: Path, folder: str) -> subprocess.Popen:
    """``attnlab`` into ``here/folder`` with 2 million steps, once it has recorded 100 of them."""
    proc = command("attnlab", "logging=off", "logging.console=false", "train.steps=2000000",
                   "train.snapshot_steps=[0]", f"hydra.run.dir={folder}", cwd=here, wait=False)
    partial = here / folder / ".metrics.csv.partial"
    deadline = time.monotonic() + 120
    while not (partial.is_file() and partial.read_bytes().count(b"\n") > 100):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def test_a_live_run_is_refused_with_its_pid_and_ctrl_break_stops_it_at_the_next_step(here):
    run = here / "long"
    proc = long_run(here, "long")
    second = command("attnlab", "hydra.run.dir=long", cwd=here)  # the lock: filelock's, the pid from byte 1
    assert (second.returncode, second.stderr) == (2, f"error: hydra.run.dir='long': another attnlab process "
                                                     f"(pid {proc.pid}) is writing a run there; choose another "
                                                     "hydra.run.dir\n")
    os.kill(proc.pid, 21)  # the simulation's SIGBREAK
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "interrupted" and err == f"{summary['error']}; records kept in long\n"


def test_attnlab_check_runs_the_learners_file_in_a_spawned_child(here):
    from test_check import TUTORIAL

    (here / "mine.py").write_text(TUTORIAL, encoding="utf-8")
    proc = command("attnlab-check", "mine.py", cwd=here)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[-1] == "all 6 stages match the tutorial's numbers"


def test_a_killed_run_is_told_from_a_live_one(here):
    proc = long_run(here, "killed")
    proc.kill()  # the OS drops the lock; the lock file and summary.json (running) stay
    proc.communicate()
    again = command("attnlab", "hydra.run.dir=killed", cwd=here)
    assert (again.returncode, again.stderr) == (2, "error: hydra.run.dir='killed': holds a run that was killed (its "
                                                   "summary.json says running and no process holds its lock); choose "
                                                   "another hydra.run.dir (runs are never overwritten)\n")
