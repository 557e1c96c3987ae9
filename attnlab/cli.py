"""The ``attnlab`` command: one Hydra job (``attnlab [overrides]``) or a sweep (``attnlab -m ...``).

Thin entry point: composes the config (``conf/`` + ``experiment=NAME`` + overrides), then
:func:`run_job` writes the run dir and trains (``task=train``) or narrates (``task=walkthrough``).
Our own errors (bad config values, tokenizer problems) end the job with one line on stderr and
exit status 2; a diverged or interrupted run exits 1. ``HYDRA_FULL_ERROR=1`` shows tracebacks.
"""
from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from attnlab import artifacts
from attnlab.config import Task, register_configs
from attnlab.errors import AttnlabError
from attnlab.records import Sink

EXIT_FAILED_RUN = 1  # the run started but did not complete (diverged, interrupted)
EXIT_BAD_INPUT = 2  # the config or the text was refused before training


def make_sinks(cfg: DictConfig, run_dir: Path) -> list[Sink]:
    """The sinks ``logging.*`` asks for; the run-dir artifacts are always written. Optional
    sinks import their libraries only when switched on."""
    sinks: list[Sink] = [artifacts.RunDirSink(run_dir)]
    if cfg.logging.console:
        from attnlab.console import ConsoleSink

        sinks.append(ConsoleSink(progress=cfg.train.progress))
    if cfg.logging.tensorboard:
        from attnlab.tensorboard import TensorBoardSink

        sinks.append(TensorBoardSink(run_dir, images=cfg.logging.images))
    if cfg.logging.figures:
        from attnlab.plots import FigureSink

        sinks.append(FigureSink(run_dir))
    return sinks


def run_job(cfg: DictConfig, run_dir: Path) -> str:
    """Run one job into ``run_dir`` and return its final status (completed, diverged,
    interrupted). Raises AttnlabError (one line) on bad input, after writing
    ``summary.json`` with status ``failed``; raises RunDirError, writing nothing, when
    ``run_dir`` already holds a finished run."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    artifacts.check_not_finished(run_dir)
    artifacts.write_summary(run_dir, status="running", task=str(cfg.task.value if hasattr(cfg.task, "value") else cfg.task),
                            started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                            final_loss=None, steps_run=0, wall_time_s=None, error=None,
                            versions=artifacts.environment(cfg.device))
    try:
        if cfg.task == Task.walkthrough:
            from attnlab.walkthrough import walkthrough

            walkthrough(cfg, run_dir)
            artifacts.write_summary(run_dir, status="completed")
            return "completed"
        from attnlab.training import train

        return train(cfg, make_sinks(cfg, run_dir), run_dir=run_dir, keep_snapshots=False).status
    except AttnlabError as err:
        artifacts.write_summary(run_dir, status="failed", error=str(err))
        raise
    except Exception as err:
        artifacts.write_summary(run_dir, status="failed", error=f"{type(err).__name__}: {err}")
        raise


@hydra.main(version_base="1.3", config_path="pkg://attnlab.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        status = run_job(cfg, run_dir)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if status != "completed":
        sys.exit(EXIT_FAILED_RUN)
    return status


def main() -> None:
    """Console-script entry point: ``attnlab [overrides]`` / ``attnlab -m [overrides]``."""
    register_configs()
    _hydra_main()


if __name__ == "__main__":
    main()
