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
from pathlib import Path

import pytest

from conftest import GOLDEN_SECTION5, ROOT

SIM = ROOT / "tests" / "winsim"
TINY = ("logging=off", "train.steps=5", "train.snapshot_steps=[0,4]")


def simulated(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGV`` in the simulation (exit status and text output)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SIM), str(ROOT)]), "MPLBACKEND": "Agg"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def command(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The console script ``name`` (its entry point, as the installed command runs it)."""
    from importlib.metadata import entry_points

    target = next(e for e in entry_points(group="console_scripts") if e.name == name).value
    module, func = target.split(":")
    return simulated("-c", f"import sys; from {module} import {func}; sys.argv[0] = {name!r}; sys.exit({func}())",
                     *args, cwd=cwd)


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    return tmp_path_factory.mktemp("winsim")


@pytest.fixture(scope="module")
def tutorial(here):
    """``attnlab`` (the tutorial's §5 run, figures off) in the simulation: (run dir, process)."""
    return here / "tutorial", command("attnlab", "logging=off", "hydra.run.dir=tutorial", cwd=here)


def test_the_simulation_removes_what_windows_lacks(here):
    proc = simulated("-c", """if True:
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
        import attnlab.commands.cli
        from attnlab.core import files, interrupts
        from attnlab.core.checks import available_memory
        print(files._OPENAT, sorted(s.name for s in interrupts.SIGNALS), available_memory(),
              sorted(m for m in ("fcntl", "resource", "termios") if sys.modules.get(m) is not None))
        """, cwd=here)
    assert (proc.returncode, proc.stderr) == (0, "")
    # no POSIX name left; attnlab takes the lstat walk, Ctrl-C and SIGTERM only, no memory figure
    assert proc.stdout == "[] []\nFalse ['SIGINT', 'SIGTERM'] None []\n"


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
    proc = command("attnlab", "-m", *TINY, "seed=1,2", 'sentence="a:b?c","d*e|f."', "hydra.sweep.dir=sweep",
                   cwd=here)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p.name for p in (here / "sweep").iterdir() if p.is_dir())
    # job folders valid on NTFS: no : * ? " < > |, no trailing dot
    assert jobs == ["0_seed=1,sentence=a_b_c", "1_seed=1,sentence=d_e_f_", "2_seed=2,sentence=a_b_c",
                    "3_seed=2,sentence=d_e_f_"]
    assert "4 jobs, 4 completed" in proc.stdout
    compare = command("attnlab-compare", "sweep", cwd=here)
    assert compare.returncode == 0, compare.stderr
    assert [line.split()[0] for line in compare.stdout.splitlines() if line[:1].isdigit()] == jobs


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


def test_the_python_api(here):
    proc = simulated("-c", """if True:
        import attnlab
        from attnlab.commands.api import compose, train
        result = train(compose("train.steps=5", "train.snapshot_steps=[0,4]"))
        print(result.losses.shape, [s.step for s in result.snapshots])
        """, cwd=here)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[-1] == "(5,) [0, 4]"
