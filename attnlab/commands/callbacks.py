"""Hydra callbacks (``hydra.callbacks`` in ``conf/config.yaml``): claim every output folder
before Hydra writes into it (never overwrite a run, never write into someone else's folder,
one live attnlab process per folder), and print a summary at the end of every sweep."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnlab.commands import sweep
from attnlab.commands.hydra_errors import EXIT_BAD_INPUT, release_stderr
from attnlab.core import interrupts
from attnlab.core.errors import RunDirError, describe
from attnlab.outputs import rundir

EXIT_INTERRUPTED = 1
# a sweep starting in this process: (its folder, the outermost folder of it that did not exist yet)
_new_sweep: tuple[Path, Path] | None = None
# jobs of this process's sweep that did not complete (set by attnlab.commands.cli as each job returns)
jobs_not_completed = 0
jobs_started = 0  # jobs that started in this process


def stop_if_interrupted() -> None:
    """Exit (status 1, one line) when Ctrl-C / SIGTERM came before anything was written."""
    if interrupts.requested() is not None:
        print("interrupted: before the run started; nothing was written", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


class NeverOverwrite(Callback):
    """Claims the output dir (:func:`attnlab.outputs.rundir.claim`) before Hydra writes ``.hydra/``
    into it: ``hydra.run.dir`` for a run, ``hydra.sweep.dir`` for a sweep (each job's folder
    is claimed by ``job.run_job`` when it starts). The folder must be new or empty; one that
    holds a run (finished, killed, or live in another process), files attnlab did not write,
    or cannot be written is refused with one line on stderr and exit status 2, and nothing is
    written. The claim's lock is held until the run or sweep ends.

    Hydra's stderr stays held (:mod:`attnlab.commands.hydra_errors`) until a job starts, so an error
    while Hydra composes a sweep's jobs is still made one line; :func:`remove_unstarted_sweep`
    then removes the folder Hydra made for the sweep."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        stop_if_interrupted()
        self._claim("hydra.run.dir", self._dir(config, "run"))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _new_sweep
        stop_if_interrupted()
        sweep_dir = Path(self._dir(config, "sweep"))
        top = None
        for folder in [sweep_dir, *sweep_dir.absolute().parents]:
            if folder.exists():
                break
            top = folder
        self._claim("hydra.sweep.dir", str(config.hydra.sweep.dir))
        _new_sweep = (sweep_dir.absolute(), top) if top is not None else None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        global jobs_started
        release_stderr()  # the job's config composed: nothing more for the stderr gate to hold
        jobs_started += 1
        interrupts.enter_shield()  # a job's files end with one status: only its training loop stops at once
        interrupts.pause_point("job_start")

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        interrupts.exit_shield()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        rundir.release(Path(str(config.hydra.sweep.dir)))  # after SweepSummary (Hydra ends callbacks in reverse)

    @staticmethod
    def _dir(config: DictConfig, kind: str) -> str:
        """``hydra.<kind>.dir`` resolved; one line and exit status 2 when it cannot be (an unset
        environment variable, a missing key: Hydra would only warn and fail later, at length)."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            return str(config.hydra[kind].dir)
        except OmegaConfBaseException as err:
            raw = OmegaConf.to_container(config.hydra[kind], resolve=False).get("dir")
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            print(f"error: hydra.{kind}.dir={raw!r}: cannot be resolved: {reason}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)

    @staticmethod
    def _claim(key: str, value: str) -> None:
        try:
            rundir.claim(Path(value), key=key, value=value)
        except RunDirError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)


class SweepSummary(Callback):
    """At the end of a multirun, :func:`attnlab.commands.sweep.summarize` the sweep dir: print the jobs'
    table, write ``summary.csv`` and record the sweep's exit status; then, with
    ``logging.report``, the sweep's ``report.html`` (:func:`attnlab.saved.report.write_sweep_report`)."""

    def __init__(self, print_table: bool = True, csv_name: str = sweep.SUMMARY_CSV) -> None:
        self.print_table = print_table
        self.csv_name = csv_name

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # the exit status first, so nothing below can make a sweep with a failed job exit 0
        failed_here = sweep.EXIT_SOME_JOBS_FAILED if jobs_not_completed else 0
        sweep.last_exit_status = sweep.EXIT_SOME_JOBS_FAILED  # until the table says every job completed
        sweep_dir = Path(str(config.hydra.sweep.dir))
        interrupts.pause_point("sweep_end")
        try:
            status = sweep.summarize(sweep_dir, self.print_table, self.csv_name)
        except Exception as err:  # the table is a view: its failure never hides the jobs' status
            print(f"error: the sweep summary was not written: {describe(err)}", file=sys.stderr)
        else:
            sweep.last_exit_status = max(status, failed_here)
        if config.logging.get("report", False):
            from attnlab.saved.report import write_sweep_report

            try:
                print(f"report: {write_sweep_report(sweep_dir)}")
            except Exception as err:
                print(f"warning: {sweep_dir / 'report.html'} not written: {describe(err)}", file=sys.stderr)


def remove_unstarted_sweep() -> None:
    """Remove the folder Hydra made for a sweep that was refused before any job started (it
    holds only Hydra's ``multirun.yaml``), with the parent folders made for it; anything else
    is left as it is."""
    if _new_sweep is None:
        return
    sweep_dir, top = _new_sweep
    rundir.release(sweep_dir)
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
