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

# a sweep starting in this process: (its folder, the outermost folder of it that did not exist yet)
_new_sweep: tuple[Path, Path] | None = None


class NeverOverwrite(Callback):
    """Refuses, before Hydra writes ``.hydra/`` into it, an output dir that already holds a
    finished run (a run dir, or any job of a sweep dir). Prints one line and exits with status 2.

    Hydra's stderr stays held (:mod:`attnlab.hydra_errors`) until a job starts, so an error
    while Hydra composes a sweep's jobs is still made one line; :func:`remove_unstarted_sweep`
    then removes the folder Hydra made for the sweep."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir))
        self._refuse("hydra.run.dir", run_dir, [run_dir])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _new_sweep
        sweep_dir = Path(str(config.hydra.sweep.dir))
        jobs = [p.parent for p in sweep_dir.rglob(artifacts.SUMMARY)] if sweep_dir.is_dir() else []
        self._refuse("hydra.sweep.dir", sweep_dir, jobs)
        top = None
        for folder in [sweep_dir, *sweep_dir.absolute().parents]:
            if folder.exists():
                break
            top = folder
        _new_sweep = (sweep_dir.absolute(), top) if top is not None else None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        release_stderr()  # the job's config composed: nothing more for the stderr gate to hold

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
    table, write ``summary.csv`` and record the sweep's exit status; then, with
    ``logging.report``, the sweep's ``report.html`` (:func:`attnlab.report.write_sweep_report`)."""

    def __init__(self, print_table: bool = True, csv_name: str = sweep.SUMMARY_CSV) -> None:
        self.print_table = print_table
        self.csv_name = csv_name

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep.summarize(sweep_dir, self.print_table, self.csv_name)
        if config.logging.get("report", False):
            from attnlab.errors import AttnlabError
            from attnlab.report import write_sweep_report

            try:
                print(f"report: {write_sweep_report(sweep_dir)}")
            except (OSError, AttnlabError) as err:
                print(f"warning: {sweep_dir / 'report.html'} not written: {err}", file=sys.stderr)


def remove_unstarted_sweep() -> None:
    """Remove the folder Hydra made for a sweep that was refused before any job started (it
    holds only Hydra's ``multirun.yaml``), with the parent folders made for it; anything else
    is left as it is."""
    if _new_sweep is None:
        return
    sweep_dir, top = _new_sweep
    if not sweep_dir.is_dir() or sorted(p.name for p in sweep_dir.iterdir()) not in ([], ["multirun.yaml"]):
        return
    (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
    folder = sweep_dir
    while True:
        try:
            folder.rmdir()
        except OSError:  # not empty: something else lives there
            return
        if folder == top:
            return
        folder = folder.parent
