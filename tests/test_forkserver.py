"""tests/forkserver.py gives what a fresh ``python -m attnlab...`` gives, and starts a fresh one
whenever a forked copy could differ."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest

from conftest import ROOT

ENV = {**forkserver.BASE_ENV}


def both(args: list[str], tmp: Path, module: str = "attnlab.cli") -> tuple[subprocess.CompletedProcess, ...]:
    """``python -m MODULE ARGS`` forked and fresh, each with its own run dir (``{run}`` in ARGS)."""
    out = []
    for how in ("forked", "fresh"):
        cmd = [sys.executable, "-m", module, *(a.format(run=tmp / how) for a in args)]
        if how == "forked":
            assert forkserver._fresh_because(cmd, tmp, ENV, None) is None
            out.append(forkserver.run(cmd, cwd=tmp, env=ENV, timeout=300))
        else:
            out.append(subprocess.run(cmd, cwd=tmp, env=ENV, capture_output=True, text=True, timeout=300))
    return tuple(out)


def same_text(forked: str, fresh: str, tmp: Path) -> None:
    def norm(text: str) -> str:  # the run dirs' names and the seconds a run took differ
        text = re.sub(r"\b(forked|fresh)\b", "RUN", text.replace(str(tmp), "TMP"))
        return re.sub(r"\d+\.\d\d s\b", "S s", re.sub(r"\[\d{4}-[^]]+\]", "[T]", text))

    assert norm(forked) == norm(fresh)


def test_a_run_forked_writes_and_prints_what_a_fresh_one_does(tmp_path):
    forked, fresh = both(["hydra.run.dir={run}", "logging=off"], tmp_path)
    assert (forked.returncode, fresh.returncode) == (0, 0), fresh.stderr
    same_text(forked.stdout, fresh.stdout, tmp_path)
    same_text(forked.stderr, fresh.stderr, tmp_path)
    assert "' journey'" in forked.stdout and "completed: 201 steps" in forked.stdout
    for name in ("metrics.csv", "attention.npz"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name


@pytest.mark.parametrize("args, code", [
    (["hydra.run.dir={run}", "model.d_k=-1"], 2),  # attnlab's own one-line refusal
    (["hydra.run.dir={run}", "optimizer=no_such_optimizer"], 2),  # Hydra's, made one line
    (["--frobnicate"], 2),
])
def test_refusals_forked_are_the_fresh_ones(tmp_path, args, code):
    forked, fresh = both(args, tmp_path)
    assert (forked.returncode, fresh.returncode) == (code, code)
    assert forked.stdout == fresh.stdout
    same_text(forked.stderr, fresh.stderr, tmp_path)
    assert forked.stderr.startswith("error: ") and forked.stderr.count("\n") == 1


def test_attnlab_reproduce_forked_is_the_fresh_one(tmp_path):
    assert forkserver.run([sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / 'run'}", "logging=off",
                           "train.steps=20", "train.snapshot_steps=[0,19]"], cwd=tmp_path, env=ENV).returncode == 0
    forked, fresh = both([str(tmp_path / "run"), "--out", "{run}"], tmp_path, module="attnlab.reproduce")
    assert (forked.returncode, fresh.returncode) == (0, 0), fresh.stderr
    same_text(forked.stdout, fresh.stdout, tmp_path)
    assert "reproduced exactly" in forked.stdout


def test_what_could_differ_starts_a_fresh_process(tmp_path):
    cmd = [sys.executable, "-m", "attnlab.cli", "logging=off"]
    why = forkserver._fresh_because
    assert why(cmd, ROOT, ENV, None) is None  # attnlab's checkout: the code the server imported
    assert why(cmd, tmp_path, {**ENV, "PYTHONIOENCODING": "cp1252"}, None) == "environment: PYTHONIOENCODING"
    assert why(cmd, tmp_path, {**ENV, "OMP_NUM_THREADS": "2"}, None) == "environment: OMP_NUM_THREADS"
    without = {k: v for k, v in ENV.items() if k != "MPLBACKEND"}
    assert why(cmd, tmp_path, without, None) == "environment: MPLBACKEND"
    assert why(cmd, tmp_path, {**ENV, "ATTNLAB_TEST_PAUSE_AT": "x", "HYDRA_FULL_ERROR": "1"}, None) is None
    assert why(cmd, tmp_path, ENV, lambda: None) == "preexec_fn"
    assert why([sys.executable, "-c", "pass"], tmp_path, ENV, None) == "not python -m attnlab"
    assert why([sys.executable, "-m", "attnlab.compare"], tmp_path, ENV, None) == "not python -m attnlab"
    for name in ("numpy.py", "torch", "json.py"):  # an installed module, a package, the stdlib
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        target = folder / name
        if name.endswith(".py"):
            target.write_text("raise SystemExit('imported from the working directory')\n")
        else:
            target.mkdir()
            (target / "__init__.py").write_text("")
        assert why(cmd, folder, ENV, None) == "the working directory holds Python code", name
    (tmp_path / "notes.txt").write_text("not code")
    assert why(cmd, tmp_path / "numpy_py", ENV, None) is not None
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "notes.txt").write_text("not code")
    assert why(cmd, clean, ENV, None) is None


def test_a_numpy_py_in_the_working_directory_reaches_the_run_as_in_a_fresh_process(tmp_path):
    (tmp_path / "numpy.py").write_text("raise SystemExit('numpy.py from the working directory')\n")
    proc = forkserver.run([sys.executable, "-m", "attnlab.cli", "logging=off"], cwd=tmp_path, env=ENV, timeout=300)
    assert "numpy.py from the working directory" in proc.stderr


def test_the_timeout_kills_the_forked_process(tmp_path):
    cmd = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / 'run'}", "logging=off"]
    paused = tmp_path / "paused"  # the run waits at model_built for this file to go (up to 120 s)
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(cmd, cwd=tmp_path, timeout=8,
                       env={**ENV, "ATTNLAB_TEST_PAUSE_AT": "model_built", "ATTNLAB_TEST_PAUSE_FILE": str(paused)})
    assert time.monotonic() - start < 30 and paused.exists()
    pid = int((tmp_path / "run" / ".attnlab.lock").read_bytes()[:32].split(b"\n")[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the forked process outlived its timeout"
        time.sleep(0.05)


def test_the_server_holds_no_thread_and_none_of_the_modules_a_run_never_imports():
    path = forkserver._start()
    assert path is not None, "the fork server did not start: see its log beside the socket"
    assert forkserver._server["proc"].poll() is None
    assert os.path.exists(path + ".ready")


def test_a_killed_server_means_fresh_processes_from_then_on(tmp_path, monkeypatch):
    """The server is one process per test process; when it is gone, commands run as real
    subprocesses (nothing is run twice, nothing hangs) and the folder it used is removed at exit."""
    monkeypatch.setattr(forkserver, "_server", {})
    monkeypatch.setattr(forkserver, "COUNTS", {})
    path = forkserver._start()
    folder = forkserver._server["folder"]
    forkserver._server["proc"].kill()
    forkserver._server["proc"].wait()
    cmd = [sys.executable, "-m", "attnlab.cli", "model.d_k=-1"]
    proc = forkserver.run(cmd, cwd=tmp_path, env=ENV, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "error: model.d_k=-1: must be a positive integer\n")
    assert forkserver.COUNTS == {"fresh (no server)": 1} and forkserver._server["socket"] is None
    assert os.path.exists(path)  # left by the killed server; _stop removes the folder
    forkserver._stop()
    assert not os.path.exists(folder)


def test_code_in_the_working_directory_that_nothing_imported_yet_runs_fresh_too(tmp_path):
    """Optional modules a library tries (found nowhere when the server imported it) and namespace
    packages are Python code in the cwd as well (adversary: tensorflow.py, hydra_plugins/x/)."""
    cmd = [sys.executable, "-m", "attnlab.cli", "logging=off"]
    optional = tmp_path / "optional"
    optional.mkdir()
    (optional / "tensorflow.py").write_text("print('imported from the working directory')\n")
    namespace = tmp_path / "namespace" / "hydra_plugins" / "attnlab_sweeper"
    namespace.mkdir(parents=True)
    (namespace / "__init__.py").write_text("")
    runs = tmp_path / "runs" / "run" / ".hydra"  # run dirs are data, not code
    runs.mkdir(parents=True)
    (runs / "config.yaml").write_text("a: 1\n")
    why = forkserver._fresh_because
    assert why(cmd, optional, ENV, None) == why(cmd, tmp_path / "namespace", ENV, None) == \
        "the working directory holds Python code"
    assert why(cmd, tmp_path / "runs", ENV, None) is None


def test_paths_in_argv_huge_requests_and_the_umask_are_as_with_subprocess(tmp_path):
    old = os.umask(0o077)
    try:
        cmd = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / 'run'}", "logging=off",
               "train.steps=2", "train.snapshot_steps=[0,1]"]
        assert forkserver.run(cmd, cwd=tmp_path, env=ENV).returncode == 0
        assert oct((tmp_path / "run" / "summary.json").stat().st_mode & 0o777) == oct(0o600)
    finally:
        os.umask(old)
    missing = tmp_path / "nope"  # a Path, as subprocess takes it
    forked = forkserver.run([sys.executable, "-m", "attnlab.reproduce", missing], cwd=tmp_path, env=ENV)
    fresh = subprocess.run([sys.executable, "-m", "attnlab.reproduce", missing], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True)
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) and forked.returncode == 2
    counts = dict(forkserver.COUNTS)
    huge = forkserver.run([sys.executable, "-m", "attnlab.cli", "--help", *["x" * 60_000] * 5], cwd=tmp_path, env=ENV)
    too_large = "fresh (the request does not fit one message)"
    assert forkserver.COUNTS.get(too_large, 0) == counts.get(too_large, 0) + 1
    assert forkserver.run([sys.executable, "-m", "attnlab.cli", "model.d_k=-1"], cwd=tmp_path,
                          env=ENV).returncode == 2
    assert forkserver.COUNTS["forked"] == counts["forked"] + 1  # the server still serves
    assert huge.returncode == subprocess.run([sys.executable, "-m", "attnlab.cli", "--help", *["x" * 60_000] * 5],
                                             cwd=tmp_path, env=ENV, capture_output=True).returncode


def test_rlimits_reach_the_forked_process_as_a_preexec_fn_reaches_a_fresh_one(tmp_path):
    import resource

    limits = {resource.RLIMIT_FSIZE: (1000, 1000)}  # .hydra/hydra.yaml (~5 KB) cannot be written
    out = []
    for how in ("forked", "fresh"):
        cmd = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / how}", "logging=off"]
        if how == "forked":
            out.append(forkserver.run(cmd, cwd=tmp_path, env=ENV, rlimits=limits, timeout=300))
        else:
            out.append(subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300,
                                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))))
    forked, fresh = out
    assert (forked.returncode, fresh.returncode) == (2, 2)
    same_text(forked.stderr, fresh.stderr, tmp_path)
    assert "cannot write Hydra's config there (file too large)" in forked.stderr
    assert resource.getrlimit(resource.RLIMIT_FSIZE) != (1000, 1000)  # only the command's process


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_popen_forked_streams_polls_and_takes_signals_as_subprocess_popen(tmp_path, sig):
    """forkserver.Popen: the run's pid (in its lock file), a line read from its stdout pipe,
    poll() None while it runs, a signal, then communicate(): status and text as subprocess's."""
    out = []
    for how in ("forked", "fresh"):
        cmd = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / how}", "logging=off",
               "train.steps=2000000", "train.snapshot_steps=[0]"]
        start = forkserver.Popen if how == "forked" else subprocess.Popen
        proc = start(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert isinstance(proc, forkserver.Forked) == (how == "forked")
        first = proc.stdout.readline()  # the first snapshot's line: the steps have begun
        assert proc.poll() is None and proc.returncode is None
        lock = tmp_path / how / ".attnlab.lock"
        assert lock.read_bytes().split(b"\n")[0] == str(proc.pid).encode()
        proc.send_signal(sig)
        rest, err = proc.communicate(timeout=120)
        out.append((proc.returncode, first, err))
        assert proc.poll() == proc.returncode and proc.wait() == proc.returncode
    (code, first, err), (fresh_code, fresh_first, fresh_err) = out
    assert code == fresh_code == (1 if sig == signal.SIGINT else -signal.SIGKILL)
    assert first == fresh_first and first.startswith("step   0  loss=2.3566")
    steps = re.compile(r"\b\d+ (steps?)\b|step \d+")  # where the signal landed differs
    same_text(steps.sub("N", err), steps.sub("N", fresh_err), tmp_path)
    if sig == signal.SIGINT:
        assert re.fullmatch(r"interrupted at step (\d+); \1 steps? recorded; records kept in .*\n", err), err


def test_popen_forked_timeouts_leave_the_process_running_as_subprocess_does(tmp_path):
    cmd = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / 'run'}", "logging=off",
           "train.steps=2000000", "logging.console=false"]
    proc = forkserver.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert isinstance(proc, forkserver.Forked) and proc.stdout is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.5)
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_popen_forked_edges_are_subprocess_popens(tmp_path):
    """(adversary F4-F9) wait(timeout=0), one pipe read after a readline, a communicate() after a
    timed-out one, a closed pipe, an impossible rlimit, and the server gone mid-command."""
    import resource

    helpcmd = [sys.executable, "-m", "attnlab.cli", "--help"]
    outs = []
    for start in (forkserver.Popen, subprocess.Popen):
        proc = start(helpcmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        outs.append((first, proc.communicate()[0], proc.returncode))
    assert outs[0] == outs[1] and len(outs[0][1]) > 1000
    long_run = [sys.executable, "-m", "attnlab.cli", f"hydra.run.dir={tmp_path / 'run'}", "logging=off",
                "train.steps=2000000", "train.snapshot_steps=[0]"]
    proc = forkserver.Popen(long_run, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert isinstance(proc, forkserver.Forked)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0)
    while not (tmp_path / "run" / ".metrics.csv.partial").exists():
        time.sleep(0.05)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert out.startswith("step   0  loss=2.3566") and err.startswith("interrupted at step ")  # nothing lost
    assert proc.returncode == 1
    closed = forkserver.Popen(helpcmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    closed.stdout.close()
    assert closed.communicate(timeout=60) == (b"", b"") and closed.returncode == 0  # as subprocess
    with pytest.raises(ValueError, match="above its hard limit"):
        forkserver.Popen(helpcmd, cwd=tmp_path, env=ENV, rlimits={resource.RLIMIT_NOFILE: (10, 5)})
    # the server killed while a command runs: the command ends with it, and the caller is told
    proc = forkserver.Popen([*long_run[:3], f"hydra.run.dir={tmp_path / 'run2'}", *long_run[4:]], cwd=tmp_path,
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert isinstance(proc, forkserver.Forked)
    forkserver._server["proc"].kill()
    forkserver._server["proc"].wait()
    with pytest.raises(RuntimeError, match="the server ended"):
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{proc.pid}").exists() and Path(f"/proc/{proc.pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the command outlived its server"
        time.sleep(0.05)
    forkserver._stop()
    forkserver._server.clear()  # the next command starts a new server
