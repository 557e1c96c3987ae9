"""Hydra callbacks (``hydra.callbacks`` in ``conf/config.yaml``): claim every output folder
before anything is written into it, and print the table at the end of every sweep."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.commands import sweep
from attnlab.commands.job import EXIT_BAD_INPUT
from attnlab.core import interrupts
from attnlab.core.errors import AttnlabError, ConfigError, describe
from attnlab.core.i18n import N_, _
from attnlab.outputs import rundir
from attnlab.saved.report import write_sweep_report

_open_sweep: DictConfig | None = None  # a sweep that started and has not ended (its config)
# in a launcher's worker: the (command's pid, sweep dir) of each sweep one of its jobs stopped; kept here, not in
# commands.cli, whose job function a worker gets pickled by value with copied globals
stopped_sweeps: set[tuple[str, str]] = set()
_codes: list[int] = []  # the exit statuses asked of the command in this process: by JobEnds, by a sweep's table


class JobEnd(float):
    """What a job returns: the run's final loss (NaN: none), which Hydra's optimising sweepers (Optuna,
    Nevergrad) minimise, its ``status`` and the exit status ``code`` it asks of the command. A launcher's
    worker pickles it; made again in the command's process, it notes its code there for :func:`exit_status`."""

    def __new__(cls, status: str, code: int = 0, loss: float | None = None) -> JobEnd:
        end = super().__new__(cls, math.nan if loss is None else loss)
        end.status, end.code = status, code
        _codes.append(code)
        return end

    def __reduce__(self) -> tuple[Any, tuple[str, int, float]]:
        return JobEnd, (self.status, self.code, float(self))


def exit_status() -> int:
    """The highest exit status asked for (:class:`JobEnd`, :class:`SweepSummary`) since the last call (0: none)."""
    code = max(_codes, default=0)
    _codes.clear()
    return code


def _claim(config: DictConfig, kind: str) -> None:
    """Claim ``hydra.<kind>.dir``; one line and exit 2 when refused or not resolvable (Hydra turns a
    callback's exception into a warning)."""
    interrupts.check()
    try:
        try:
            value = str(config.hydra[kind].dir)
        except OmegaConfBaseException as err:  # e.g. an unset environment variable
            raw = OmegaConf.to_container(config.hydra[kind], resolve=False).get("dir")
            raise ConfigError(f"hydra.{kind}.dir", raw, _("cannot be resolved: {reason}").format(
                reason=str(err).splitlines()[0])) from None
        rundir.claim(Path(value), key=f"hydra.{kind}.dir", value=value)
    except AttnlabError as err:
        print(_("error: {message}").format(message=err), file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def start_resource_trackers() -> None:
    """Start multiprocessing's and joblib's (loky's) resource trackers with SIGHUP ignored: a closed
    terminal then interrupts a joblib sweep's jobs, which record their status, instead of killing the
    trackers, whose replacements print a traceback per resource."""
    from multiprocessing import resource_tracker

    hup = getattr(signal, "SIGHUP", None)  # (none on Windows)
    previous = signal.signal(hup, signal.SIG_IGN) if hup is not None else None  # inherited through fork and exec
    try:
        resource_tracker.ensure_running()
        with contextlib.suppress(ImportError, AttributeError):  # no joblib, or its tracker module moved
            from joblib.externals.loky.backend import resource_tracker as loky_tracker

            loky_tracker.ensure_running()
    finally:
        if hup is not None:
            signal.signal(hup, previous)


def end_stopped_sweep(table: bool = True) -> None:
    """A sweep a job stopped (Hydra never calls ``on_multirun_end``): the table, summary.csv and report of
    the jobs that ran, unless no job folder was made or ``table`` is False (a refusal)."""
    global _open_sweep
    config, _open_sweep = _open_sweep, None
    if config is None or not table:
        return
    with contextlib.suppress(OSError), os.scandir(Path(str(config.hydra.sweep.dir))) as entries:
        if any(e.is_dir(follow_symlinks=False) for e in entries):
            SweepSummary().on_multirun_end(config)
            NeverOverwrite().on_multirun_end(config)


# the launchers' English log lines (Hydra's basic launcher, joblib's), said in the learner's language
LAUNCHER_LINES = [(re.compile(r"Launching (?P<n>\d+) jobs locally"), N_("Launching {n} jobs locally")),
                  (re.compile(r"Launching jobs, sweep output dir : (?P<dir>.*)"),
                   N_("Launching jobs, sweep output dir: {dir}")),
                  (re.compile(r"Joblib\.Parallel\((?P<args>.*)\) is launching (?P<n>\d+) jobs"),
                   N_("Joblib.Parallel({args}) is launching {n} jobs"))]
LAUNCHER_LOGGERS = ("hydra._internal.core_plugins.basic_launcher", "hydra_plugins.hydra_joblib_launcher._core")


def launcher_lines(record: logging.LogRecord) -> bool:
    """A logging filter: a launcher's line of :data:`LAUNCHER_LINES` in the learner's language."""
    for pattern, said in LAUNCHER_LINES:
        if m := pattern.fullmatch(record.getMessage()):
            record.msg, record.args = _(said).format(**m.groupdict()), None
    return True


class NeverOverwrite(Callback):
    """Claim ``hydra.run.dir`` or ``hydra.sweep.dir`` (each job's folder: ``run_job``) before anything
    is written into it; a Ctrl-C that came while Python was importing stops here."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _claim(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _open_sweep
        _claim(config, "sweep")
        _open_sweep = config
        if config.hydra.runtime.choices.get("hydra/launcher") == "joblib":
            start_resource_trackers()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _open_sweep
        _open_sweep = None
        rundir.release(Path(str(config.hydra.sweep.dir)))  # after SweepSummary (Hydra ends callbacks in reverse)


class SweepSummary(Callback):
    """Job folders named by the keys that vary; at the end :func:`attnlab.commands.sweep.summarize` (its
    exit status noted for :func:`exit_status`) and with ``logging.report`` the sweep's ``report.html``."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        for name in LAUNCHER_LOGGERS:
            logging.getLogger(name).addFilter(launcher_lines)  # (once: addFilter skips a filter it has)
        sweep.name_by_swept_keys(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        interrupts.pause_point("sweep_end")
        code = sweep.EXIT_SOME_JOBS_FAILED  # unless the table says every job completed
        try:
            code = sweep.summarize(sweep_dir)
        except Exception as err:  # the table is a view: its failure never hides the jobs' status
            print(_("error: the sweep summary was not written: {reason}").format(reason=describe(err)), file=sys.stderr)
        _codes.append(code)
        if config.logging.get("report", False):
            try:
                print(_("report: {path}").format(path=write_sweep_report(sweep_dir)))
            except Exception as err:
                print(_("warning: {path} not written: {reason}").format(path=sweep_dir / "report.html",
                                                                         reason=describe(err)), file=sys.stderr)
