"""Shared test helpers: compose configs with Hydra's compose API, run the CLI in a subprocess,
and the expensive runs several tests read (session fixtures).

Speed (``make test`` runs ``pytest -n 2 --dist loadscope``, pytest-xdist: a module's tests stay
on one worker, so a module fixture's run is made once): every test process and every ``attnlab``
it starts uses one torch thread (``OMP_NUM_THREADS=1`` unless set: the suite's sizes are tiny,
and two busy workers share the cores); tests of several modules that read one expensive run share
it through a session fixture made once for all workers (:func:`shared_once`).
"""
from __future__ import annotations

import copy
import csv
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported here or in a child process
os.environ["LANGUAGE"] = "en"  # attnlab's lang default (the locale): English, whatever this machine's locale

import pytest  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402

from attnlab.commands.argv import prepare  # noqa: E402
from attnlab.commands.hydra_config import register_configs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _memoize_interpolation_parsing() -> None:
    """OmegaConf parses a ``${...}`` string with its ANTLR grammar each time a config holding it is made
    or read: ~15 % of composing a config, which a test process does hundreds of times (Hydra's own
    configs are full of them). A string's parse tree is always the same, so the test process keeps
    each (``omegaconf.grammar_parser.parse`` memoized where OmegaConf looks it up; left as it is when
    those names are not there). Errors are not kept: a bad string raises each time."""
    import functools
    import importlib

    try:
        from omegaconf import grammar_parser
        modules = [grammar_parser, *map(importlib.import_module, ("omegaconf._utils", "omegaconf.base",
                                                                  "omegaconf.resolvers.oc"))]
    except ImportError:
        return
    parse = getattr(grammar_parser, "parse", None)
    if parse is None or not all(getattr(m, "parse", None) is parse for m in modules):
        return
    memoized = functools.lru_cache(maxsize=None)(parse)
    for module in modules:
        module.parse = memoized


_memoize_interpolation_parsing()


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


# the joblib launcher is an extra (make setup installs it; `pip install -e ".[test]"` does not)
JOBLIB = pytest.mark.skipif(not _installed("hydra_plugins.hydra_joblib_launcher"),
                            reason="the joblib launcher is not installed: pip install -e '.[launchers]'")

# Tutorial §5 (seed 42, std 1.0, Adam lr 0.05): printed loss and ' journey' row at each snapshot.
GOLDEN_SECTION5 = {
    0: (2.3566, [0.22, 0.12, 0.13, 0.14, 0.19, 0.21]),
    20: (0.2104, [0.57, 0.21, 0.07, 0.14, 0.01, 0.00]),
    50: (0.0465, [0.84, 0.09, 0.03, 0.04, 0.00, 0.00]),
    100: (0.0005, [0.99, 0.01, 0.00, 0.00, 0.00, 0.00]),
    200: (0.0000, [0.99, 0.00, 0.00, 0.00, 0.00, 0.00]),
}
TUTORIAL_IDS = [7120, 7002, 4940, 351, 530, 2239]
# Tutorial §2 (seed 123, std 0.02): the first rows of token_embeddings as printed.
GOLDEN_EMBEDDING_ROWS = [
    [-0.0089, -0.0162, 0.0229, 0.0074, 0.0064, 0.0093],
    [-0.0019, 0.0021, 0.0019, 0.0218, -0.0174, 0.0149],
    [0.0269, -0.0466, -0.0141, 0.0305, 0.0215, 0.0328],
]


_COMPOSED: dict[tuple[str, ...], object] = {}


def compose_cfg(*overrides: str):
    """The config ``attnlab OVERRIDES`` would run (no Hydra runtime, no run dir; free text
    made Hydra syntax as the command does, attnlab.commands.argv.prepare). Composed once per overrides in
    a test process (~180 ms each: the suite asks for the same few configs ~150 times); each call
    returns a copy of its own (a test may change it). Interpolations stay unresolved, as composed."""
    key = tuple(overrides)
    if key not in _COMPOSED:
        register_configs()
        with initialize_config_module("attnlab.conf", version_base="1.3"):
            _COMPOSED[key] = compose("config", overrides=prepare(overrides))
    return copy.deepcopy(_COMPOSED[key])


def sweep_jobs(n: int) -> list[list[str]]:
    """The overrides of each job of preset exerciseN's sweep, in Hydra's basic sweeper's order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    register_configs()
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        params = compose("config", overrides=[f"experiment=exercise{n}"], return_hydra_config=True).hydra.sweeper.params
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    choices = [[f"{o.key_or_group}={v}" for v in o.sweep_string_iterator()] for o in parsed]
    return [list(job) for job in itertools.product(*choices)]


@pytest.fixture
def cfg_of():
    return compose_cfg


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``attnlab ARGS`` in a subprocess (the installed entry point's module), text output."""
    full_env = {**os.environ, "MPLBACKEND": "Agg", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "attnlab.commands.cli", *args], cwd=cwd or ROOT, env=full_env,
                          timeout=timeout, capture_output=True, text=True, stdin=subprocess.DEVNULL)


@pytest.fixture
def cli():
    return run_cli


def run_here(*args: str, cwd: Path | None = None, stdout=None) -> subprocess.CompletedProcess:
    """``attnlab ARGS`` run in this process (:func:`attnlab.commands.cli.main` with ``sys.argv``):
    a CompletedProcess with its exit status and what it printed (``stdout``: a text stream that
    gets the output instead). Hydra's singletons, the signal handlers, the environment and the
    working folder are restored afterwards; the handlers the command installs for the rest of its
    process are not installed (the real command's signals are tested in a subprocess); the language
    is set back too."""
    import contextlib
    import io
    import signal

    from hydra.core.singleton import Singleton

    from attnlab.commands import cli
    from attnlab.core import i18n, interrupts

    handlers = {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS}
    saved = (Singleton.get_state(), os.getcwd(), dict(os.environ), sys.argv, cli.install_signal_handlers)
    lang = i18n.language()
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.environ.pop("HYDRA_FULL_ERROR", None)
    os.environ["MPLBACKEND"] = "Agg"
    sys.argv, cli.install_signal_handlers = ["attnlab", *args], lambda: None
    try:
        with contextlib.redirect_stdout(stdout or out), contextlib.redirect_stderr(err):
            if cwd is not None:
                os.chdir(cwd)
            cli.main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        singletons, here, environ, sys.argv, cli.install_signal_handlers = saved
        Singleton.set_state(singletons)
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        i18n.set_language(lang)
    return subprocess.CompletedProcess(["attnlab", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def attnlab_here():
    return run_here


def read_csv(path: Path) -> list[dict[str, str]]:
    """A ``summary.csv`` back as a list of dicts of strings (empty cells are ``""``)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def shared_once(tmp_path_factory, name: str, make: Callable[[Path], dict]) -> tuple[Path, dict]:
    """Run ``make(folder)`` once per test session, whichever pytest-xdist worker asks first
    (a file lock in the folder the workers share); every caller gets ``(folder, what make
    returned)``, the result kept as JSON beside the folder."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the workers' basetemps are siblings in one session folder
    folder, result = base / f"shared-{name}", base / f"shared-{name}.json"
    with FileLock(str(base / f"shared-{name}.lock")):
        if not result.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            result.write_text(json.dumps(make(folder)), encoding="utf-8")
    return folder, json.loads(result.read_text(encoding="utf-8"))


def _cli_run(*args: str) -> Callable[[Path], dict]:
    def make(folder: Path) -> dict:
        proc = run_cli(*(a.format(folder=folder) for a in args))
        return {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    return make


@pytest.fixture(scope="session")
def default_cli_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``attnlab hydra.run.dir=LOGDIR/default``: the tutorial's section-5 run with every default
    (console lines, run-dir files, TensorBoard with images, figures, report), made once per session
    for every worker (LOGDIR holds only this run). Returns (run dir, the finished process). Tests
    read it and must not change it."""
    logdir, done = shared_once(tmp_path_factory, "default_run", _cli_run("hydra.run.dir={folder}/default"))
    return logdir / "default", subprocess.CompletedProcess(**done)


@pytest.fixture(scope="session")
def default_run(default_cli_run) -> Path:
    """The run dir of :func:`default_cli_run` (asserting it completed)."""
    run_dir, proc = default_cli_run
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture(scope="session")
def report_sweep(tmp_path_factory) -> Path:
    """``attnlab -m optimizer.lr=0.01,0.05 logging=off``: two jobs of the default run, made once
    (in the process of the worker that asks first: :func:`run_here`)."""
    def make(folder: Path) -> dict:
        proc = run_here("-m", "optimizer.lr=0.01,0.05", f"hydra.sweep.dir={folder}/sweep", "logging=off")
        return {"returncode": proc.returncode, "stderr": proc.stderr}

    folder, done = shared_once(tmp_path_factory, "report_sweep", make)
    assert done["returncode"] == 0, done["stderr"]
    return folder / "sweep"


@pytest.fixture(scope="session")
def large_run(tmp_path_factory) -> Path:
    """A real training run with a snapshot at each of 1,000 steps at T = 256 (attention.npz
    262 MB; benchmarks.report.make_large_run), made once."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # benchmarks/ is not an installed package

    def make(folder: Path) -> dict:
        from benchmarks.report import make_large_run

        make_large_run(folder / "run")
        return {}

    folder, _ = shared_once(tmp_path_factory, "large_run", make)
    return folder / "run"


# --- the hostile / broken run-dir corpus (tests/hostile_runs.py): its healthy runs and the folder
# outside every run dir, built once per session and worker (hostile_runs caches them)
@pytest.fixture(scope="session")
def healthy(tmp_path_factory):
    import hostile_runs

    return hostile_runs.healthy_runs(tmp_path_factory)


@pytest.fixture(scope="session")
def outside(tmp_path_factory):
    import hostile_runs

    return hostile_runs.outside_folder(tmp_path_factory)


@pytest.fixture
def figure_worker():
    """The figure worker starts as in the real command (see :func:`draw_in_this_process`)."""


@pytest.fixture(autouse=True)
def draw_in_this_process(request, monkeypatch):
    """An ``attnlab`` run in the test process draws its figures itself, without the spawned figure worker
    (attnlab.outputs.drawing; the same functions, the same bytes): a worker costs a new Python of ~1 s
    CPU per run. A test that names the fixture :func:`figure_worker` keeps it (tests/test_plots.py tests
    the worker itself); every run a test starts in a process of its own has it."""
    if "figure_worker" not in request.fixturenames:
        from attnlab.outputs import drawing

        monkeypatch.setattr(drawing, "start", lambda cfg, warm_up=None: None)


@pytest.fixture(autouse=True)
def no_child_left():
    """A test that fails before it stops the ``attnlab`` it started leaves no process behind: every
    ``attnlab`` child of this test process still running at the end is killed (the children of each
    of its threads, /proc/PID/task/TID/children)."""
    yield
    if not Path("/proc").is_dir():  # (macOS, Windows: no /proc to look in)
        return
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:  # the thread ended
            continue
        for pid in children:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()  # (attnlab-check's forkserver lives on)
                if b"attnlab" in command and b"multiprocessing.forkserver" not in command:
                    os.kill(int(pid), 9)
            except OSError:
                pass


def _default_run_dirs() -> set[Path]:
    """The folders two levels below the repo's ``outputs/`` and ``multirun/`` (Hydra's default run
    and sweep dirs: ``outputs/DATE/TIME``)."""
    return {run for top in ("outputs", "multirun") if (ROOT / top).is_dir()
            for day in (ROOT / top).iterdir() if day.is_dir() for run in day.iterdir()}


@pytest.fixture(scope="session", autouse=True)
def repo_outputs_untouched():
    """The suite leaves nothing in the repo's ``outputs/`` or ``multirun/``: a run a test starts from
    the repo's folder without a run dir fails the session here, naming its folder (pass ``cwd=tmp_path``)."""
    before = _default_run_dirs()
    yield
    new = sorted(_default_run_dirs() - before)
    assert not new, f"tests left runs in the repo (their summary.json names the overrides): {new}"


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    """A 2-step mini-GPT (``experiment=gpt``), its config saved in ``.hydra/`` as the command saves it."""
    from omegaconf import OmegaConf

    from attnlab.commands.job import run_job

    run = tmp_path_factory.mktemp("gpt") / "run"
    cfg = compose_cfg("experiment=gpt", "train.steps=2", "logging=off", "logging.console=false")
    assert run_job(cfg, run).status == "completed"
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return run
