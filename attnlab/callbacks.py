"""Hydra callbacks (``hydra.callbacks`` in ``conf/config.yaml``): never overwrite a finished run,
and print a summary at the end of every sweep."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnlab import artifacts, sweep
from attnlab.hydra_errors import EXIT_BAD_INPUT, release_stderr


class NeverOverwrite(Callback):
    """Refuses, before Hydra writes ``.hydra/`` into it, an output dir that already holds a
    finished run (a run dir, or any job of a sweep dir). Prints one line and exits with status 2."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        release_stderr()  # the config composed: nothing more for the stderr gate to hold
        run_dir = Path(str(config.hydra.run.dir))
        self._refuse("hydra.run.dir", run_dir, [run_dir])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        release_stderr()
        sweep_dir = Path(str(config.hydra.sweep.dir))
        jobs = [p.parent for p in sweep_dir.rglob(artifacts.SUMMARY)] if sweep_dir.is_dir() else []
        self._refuse("hydra.sweep.dir", sweep_dir, jobs)

    @staticmethod
    def _refuse(key: str, out: Path, run_dirs: list[Path]) -> None:
        finished = [d for d in run_dirs if artifacts.read_summary(d).get("status") in artifacts.FINISHED]
        if not finished:
            return
        what = (f"a {artifacts.read_summary(finished[0])['status']} run" if finished == [out]
                else f"{len(finished)} finished run(s)")
        print(f"error: {key}={str(out)!r}: already holds {what}; choose another {key} "
              "(runs are never overwritten)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


class SweepSummary(Callback):
    """At the end of a multirun, :func:`attnlab.sweep.summarize` the sweep dir: print the jobs'
    table, write ``summary.csv`` and record the sweep's exit status."""

    def __init__(self, print_table: bool = True, csv_name: str = sweep.SUMMARY_CSV) -> None:
        self.print_table = print_table
        self.csv_name = csv_name

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep.summarize(Path(str(config.hydra.sweep.dir)), self.print_table, self.csv_name)
