"""Beyond one machine, on Hydra's own engines (docs/launchers.md): a sweep under
``hydra/launcher=submitit_local`` (the launcher SLURM clusters use with ``submitit_slurm``), and the
task function's return value, the run's final loss, which Hydra's optimising sweepers minimise
(an Optuna search over ``optimizer.lr``)."""
from __future__ import annotations

import json
import math
import pickle

import pytest
import yaml

from attnlab.commands import callbacks

from conftest import run_cli, run_here

SMALL = ("train.steps=5", "train.snapshot_steps=[0,4]", "logging=off")


def final_losses(sweep) -> dict[str, float]:
    return {job.name: json.loads((job / "summary.json").read_text())["final_loss"]
            for job in sweep.iterdir() if (job / "summary.json").is_file()}


def test_a_job_returns_its_final_loss_and_what_the_command_needs():
    """The task function's return value is a float, the final loss (NaN when the run has none), and
    keeps the status and exit code the command reads, through a launcher worker's pickle too."""
    callbacks.exit_status()
    done, refused = callbacks.JobEnd("completed", loss=0.25), callbacks.JobEnd("failed", 2)
    assert isinstance(done, float) and float(done) == 0.25 and done < 0.5 and math.isnan(refused)
    again = pickle.loads(pickle.dumps(done))
    assert (again.status, again.code, float(again)) == ("completed", 0, 0.25)
    assert callbacks.exit_status() == 2


def test_submitit_local_runs_a_two_job_sweep(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep = tmp_path / "sweep"
    proc = run_cli("-m", "hydra/launcher=submitit_local", "seed=1,2", *SMALL, f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    assert sorted(final_losses(sweep)) == ["0_seed=1", "1_seed=2"]
    assert {json.loads((sweep / job / "summary.json").read_text())["status"] for job in ("0_seed=1", "1_seed=2")} == {
        "completed"}
    assert proc.stdout.splitlines()[-1].startswith("2 jobs, 2 completed; summary: ")
    assert (sweep / ".submitit").is_dir()  # submitit's own job files, beside the jobs


def test_optuna_minimises_the_final_loss_over_the_learning_rate(tmp_path):
    """Three trials of ``optimizer.lr`` in [0.001, 0.5] (seeded sampler): Optuna's best value is the
    smallest final loss the jobs recorded, and its best lr that job's."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    proc = run_here("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.seed=1",
                    "optimizer.lr=interval(0.001,0.5)", *SMALL, f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    losses = final_losses(sweep)
    assert len(losses) == 3 and len(set(losses.values())) == 3
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    best = min(losses, key=losses.get)
    assert result["best_value"] == losses[best]
    assert f"optimizer.lr={result['best_params']['optimizer.lr']}" in best
