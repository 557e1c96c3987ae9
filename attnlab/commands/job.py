"""One job: the run dir, the sinks ``logging`` asks for, ``summary.json`` and the final status.

:func:`run_job` is what ``attnlab`` (``cli.py``), ``attnlab-reproduce`` and the benchmarks all
call. It never raises for a job that went wrong: a bad value, a divergence, an interrupt or a
crash each end as a :class:`JobResult` whose status and error ``summary.json`` also holds.
"""
from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from attnlab.core import checks, interrupts
from attnlab.core.config import Task, apply_schema, resolve
from attnlab.core.errors import AttnlabError, WriteError, describe
from attnlab.core.records import Sink
from attnlab.outputs import artifacts, rundir

EXIT_COMPLETED = 0
EXIT_FAILED_RUN = 1  # the run started but did not complete (diverged, interrupted, crashed)
EXIT_BAD_INPUT = 2  # the config or the text was refused before training


class JobResult(NamedTuple):
    """How a job ended: ``status`` completed, diverged, interrupted or failed; ``error`` one line
    (None when completed); ``bad_input`` when attnlab refused the config or text (exit status 2);
    ``exception`` the exception behind an unexpected failure (for ``HYDRA_FULL_ERROR=1``);
    ``unrecorded`` the reason when even ``summary.json`` could not be written (the run dir
    then does not say how the job ended: ``attnlab`` says so on stderr, exit status 1)."""

    status: str
    error: str | None = None
    bad_input: bool = False
    exception: BaseException | None = None
    unrecorded: str | None = None

    @property
    def exit_code(self) -> int:
        """0 completed, 2 bad input, 1 any other ending."""
        if self.status == "completed":
            return EXIT_COMPLETED
        return EXIT_BAD_INPUT if self.bad_input else EXIT_FAILED_RUN


def draws_figures(cfg: DictConfig) -> bool:
    """Whether the job draws with matplotlib: ``logging.figures``, or TensorBoard's images."""
    return bool(cfg.logging.figures or (cfg.logging.tensorboard and cfg.logging.images))


def make_sinks(cfg: DictConfig, run_dir: Path) -> list[Sink]:
    """The sinks ``logging.*`` asks for; the run-dir artifacts are always written. Optional
    sinks import their libraries only when switched on.

    The order is the order in which they end: the run-dir files first, then the figures, then
    the sinks that record the run's status (TensorBoard's session status, the console's last
    line), so a file that cannot be written at the end makes those say ``failed`` too."""
    sinks: list[Sink] = [artifacts.RunDirSink(run_dir, final_status=False)]  # the status: _job, at the end
    if cfg.logging.figures:
        from attnlab.outputs.plots import FigureSink

        sinks.append(FigureSink(run_dir))
    if cfg.logging.tensorboard:
        from attnlab.outputs.tensorboard import TensorBoardSink

        sinks.append(TensorBoardSink(run_dir, images=cfg.logging.images))
    if cfg.logging.console:
        from attnlab.outputs.console import ConsoleSink, job_prefix

        sinks.append(ConsoleSink(progress=cfg.logging.progress, prefix=job_prefix()))
    return sinks


def run_job(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None,
            key: str = "hydra.run.dir") -> JobResult:
    """Run one job into ``run_dir``: ``task=train`` trains (tutorial §5), ``task=walkthrough``
    narrates §1–4. ``cfg`` may be untyped (a saved config): it is checked against the schema
    first (``config.apply_schema``) and resolved once (``config.resolve``).

    ``run_dir`` is claimed first (:func:`attnlab.outputs.rundir.claim`: its lock is held until the job
    ends; it must be new, empty or hold only Hydra's saved files for this job, unless this
    process claimed it already). Raises RunDirError, writing nothing, when it is refused (``key``
    names it in the message: a finished run, a killed run, a live run of another process,
    someone else's files, a folder that cannot be written).

    ``summary.json`` is written first as ``running`` (with the resolved ``config`` the run uses
    and the command-line ``overrides``, so the run can be read and reproduced from it alone) and
    last with the returned status and error, and the exercise observations
    (:mod:`attnlab.core.exercises`). Ctrl-C and SIGTERM are deferred to a safe point
    (:mod:`attnlab.core.interrupts`) and end the job as ``interrupted``; after the last step they
    change nothing (the run completed). A file that cannot be written ends the job as
    ``failed`` with the reason (``no space left on device while writing metrics.csv at step
    57``); when not even ``summary.json`` can be written, :attr:`JobResult.unrecorded` says so.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    subdir, log, job_num = ".hydra", None, None
    if HydraConfig.initialized():  # what Hydra wrote for this job: its saved config and its job log
        subdir, log = HydraConfig.get().output_subdir, f"{HydraConfig.get().job.name}.log"
        job_num = OmegaConf.select(HydraConfig.get(), "job.num", default=None, throw_on_missing=False)
    rundir.claim(run_dir, key=key, hydra_subdir=subdir or ".hydra", hydra_log=log)
    rundir.mark_started(run_dir)
    try:
        with interrupts.deferred(), interrupts.shielded():  # only the training loop is interruptible
            return _job(cfg, run_dir, overrides, job_num if isinstance(job_num, int) else None)
    finally:
        rundir.release(run_dir)


def _job(cfg: DictConfig, run_dir: Path, overrides: list[str] | None, job_num: int | None = None) -> JobResult:
    try:
        artifacts.write_summary(run_dir, status="running", task=None,
                                started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                                final_loss=None, steps_run=0, wall_time_s=None, error=None,
                                overrides=list(overrides or []), config=None,
                                **({} if job_num is None else {"job_num": job_num}))  # a sweep's job
    except WriteError as err:
        return JobResult("failed", str(err), exception=err, unrecorded=str(err))
    try:
        interrupts.pause_point("before_training")
        interrupts.check()
        typed = apply_schema(cfg)
        resolved = resolve(typed)
        artifacts.write_summary(run_dir, task=resolved["task"], config=resolved)
        # a bad value or text is one line before torch, TensorBoard and matplotlib load (~3 s)
        checks.validate(typed)
        if typed.task == Task.train:
            from attnlab.core.tokenizer import tokenize

            tokenize(typed)
        artifacts.write_summary(run_dir, versions=artifacts.environment(resolved["device"]))
        result = _run(typed, run_dir)
    except KeyboardInterrupt:  # outside the training loop, which records its own interrupt
        result = JobResult("interrupted", "interrupted before the training steps")
    except WriteError as err:  # a file of the run dir could not be written
        result = JobResult("failed", str(err), exception=err)
    except AttnlabError as err:  # ours are one line as they stand
        result = JobResult("failed", str(err), bad_input=True, exception=err)
    except Exception as err:
        result = JobResult("failed", describe(err), exception=err)
    try:  # the final status, once every other file is written (a job killed before reads as killed)
        artifacts.write_summary(run_dir, status=result.status, error=result.error)
    except WriteError as err:
        return result._replace(unrecorded=str(err))
    if result.status == "completed" and typed.logging.report:
        _write_report(run_dir)
    return result


def _run(cfg: DictConfig, run_dir: Path) -> JobResult:
    from attnlab.core.exercises import observe

    if cfg.task == Task.walkthrough:
        from attnlab.core.tokenizer import token_labels
        from attnlab.core.walkthrough import walkthrough

        t0 = time.perf_counter()
        arrays = walkthrough(cfg, run_dir)
        ids = arrays["token_ids"].tolist()
        artifacts.write_summary(run_dir, status="completed", wall_time_s=round(time.perf_counter() - t0, 6),
                                versions=artifacts.environment(str(cfg.device)),  # the torch threads used
                                **observe(cfg, ids, token_labels(ids, cfg.tokenizer.encoding), arrays))
        if cfg.logging.console:
            from attnlab.outputs.console import display_path, job_prefix, prefixed

            print(prefixed(f"\ncompleted: walkthrough  ->  {display_path(run_dir)}/{artifacts.WALKTHROUGH}",
                           job_prefix()))
        return JobResult("completed")
    from attnlab.core.focus import FocusSink
    from attnlab.core.training import train

    focus = FocusSink()
    result = train(cfg, [*make_sinks(cfg, run_dir), focus], run_dir=run_dir, keep_snapshots=False, keep_losses=False)
    artifacts.write_summary(run_dir, versions=artifacts.environment(str(cfg.device)),  # the torch threads used
                            **focus.summary(), **observe(cfg, result.token_ids, result.tokens))
    return JobResult(result.status, result.error)


def _write_report(run_dir: Path) -> None:
    """``report.html`` (:mod:`attnlab.saved.report`) as the run's last file; a report that cannot be
    written is a warning, never the run's status."""
    import sys

    from attnlab.saved.report import write_run_report

    try:
        write_run_report(run_dir)
    except (OSError, AttnlabError) as err:
        print(f"warning: report.html not written: {err}", file=sys.stderr)
