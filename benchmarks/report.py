"""A large run dir for the report tests (``tests/conftest.py``'s ``large_run`` fixture).

:func:`make_large_run` trains with a snapshot at every step (1,000 steps at T = 256 by
default), so ``attention.npz`` is the size a long run makes (262 MB).
"""
from __future__ import annotations

from pathlib import Path


def make_large_run(run_dir: Path, snapshots: int = 1000, T: int = 256) -> Path:
    """A real training run of ``snapshots`` steps with a snapshot at every step on a text of
    exactly ``T`` GPT-2 tokens (d_model 6 as the tutorial, ``logging=off``), written by
    :func:`attnlab.commands.job.run_job` into ``run_dir``, plus ``.hydra/config.yaml`` as Hydra would
    save it. ``attention.npz`` holds (snapshots, 1, T, T) float32: 262 MB for 1,000 x 256."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from attnlab.commands.hydra_config import register_configs
    from attnlab.commands.job import run_job
    from benchmarks.run import text_with_tokens

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = run_dir.parent / f"text_{T}.txt"
    text.write_text(text_with_tokens(T), encoding="utf-8")
    register_configs()
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"text_file={text}", f"train.steps={snapshots}", "train.snapshot_steps=[0]",
                                           "logging=off", "logging.console=false", "logging.progress=false"])
    cfg.train.snapshot_steps = list(range(snapshots))  # faster set here than parsed as an override
    status = run_job(cfg, run_dir).status
    if status != "completed":
        raise RuntimeError(f"large run ended {status}")
    (run_dir / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    return run_dir
