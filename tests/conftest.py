"""Shared test helpers: compose configs with Hydra's compose API, run the CLI in a subprocess."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

import attnlab.sweep  # noqa: F401  (registers attnlab's resolvers, as the command does)
from attnlab.argv import prepare
from attnlab.config import register_configs

ROOT = Path(__file__).resolve().parent.parent

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


def compose_cfg(*overrides: str):
    """The config ``attnlab OVERRIDES`` would run (no Hydra runtime, no run dir; free text
    made Hydra syntax as the command does, attnlab.argv.prepare)."""
    register_configs()
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        return compose("config", overrides=prepare(overrides))


@pytest.fixture
def cfg_of():
    return compose_cfg


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``attnlab ARGS`` in a subprocess (the installed entry point's module), text output."""
    full_env = {**os.environ, "MPLBACKEND": "Agg", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "attnlab.cli", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


def read_csv(path: Path) -> list[dict[str, str]]:
    """A ``summary.csv`` back as a list of dicts of strings (empty cells are ``""``)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------ runs shared by the report tests
@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> Path:
    """The tutorial's default run (``attnlab hydra.run.dir=DIR``, default logging), made once."""
    run_dir = tmp_path_factory.mktemp("report-default") / "default"
    proc = run_cli(f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture(scope="session")
def report_sweep(tmp_path_factory) -> Path:
    """``attnlab -m optimizer.lr=0.01,0.05 logging=off``: two jobs of the default run, made once."""
    sweep_dir = tmp_path_factory.mktemp("report-sweep") / "sweep"
    proc = run_cli("-m", "optimizer.lr=0.01,0.05", f"hydra.sweep.dir={sweep_dir}", "logging=off")
    assert proc.returncode == 0, proc.stderr
    return sweep_dir


@pytest.fixture(scope="session")
def large_run(tmp_path_factory) -> Path:
    """A real training run with a snapshot at each of 1,000 steps at T = 256 (attention.npz
    262 MB; benchmarks.report.make_large_run), made once."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # benchmarks/ is not an installed package
    from benchmarks.report import make_large_run

    return make_large_run(tmp_path_factory.mktemp("report-large") / "run")
