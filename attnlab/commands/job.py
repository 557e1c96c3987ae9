"""One job: the run dir, the sinks ``logging`` asks for, ``summary.json`` and the final status.

:func:`run_job` is what ``attnlab``, ``attnlab-reproduce`` and the benchmarks call. It never
raises for a job that went wrong: a bad value, a divergence, an interrupt or a crash each end
as a :class:`JobResult` whose status and error ``summary.json`` also holds.
"""
from __future__ import annotations

import datetime as _dt
import inspect
import sys
import time
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from attnlab.core import checks, interrupts
from attnlab.core.config import Task, apply_schema, resolve
from attnlab.core.errors import AttnlabError, WriteError, describe
from attnlab.core.records import Sink
from attnlab.core.tokenizer import tokenize
from attnlab.outputs import artifacts, rundir

EXIT_COMPLETED = 0
EXIT_FAILED_RUN = 1  # the run started but did not complete (diverged, interrupted, crashed)
EXIT_BAD_INPUT = 2  # the config or the text was refused before training


class JobResult(NamedTuple):
    """How a job ended: ``status`` completed, diverged, interrupted or failed; ``error`` one line
    (None when completed); ``bad_input`` when attnlab refused the config or text (exit status 2);
    ``exception`` the exception behind a failure (``HYDRA_FULL_ERROR=1`` raises it);
    ``unrecorded`` the reason when not even ``summary.json`` could be written; ``late_signal``
    a Ctrl-C / SIGTERM that came after the last step (the run completed)."""

    status: str
    error: str | None = None
    bad_input: bool = False
    exception: BaseException | None = None
    unrecorded: str | None = None
    late_signal: int | None = None

    @property
    def exit_code(self) -> int:
        """0 completed, 2 bad input, 1 any other ending."""
        if self.status == "completed":
            return EXIT_COMPLETED
        return EXIT_BAD_INPUT if self.bad_input else EXIT_FAILED_RUN


def make_sinks(cfg: DictConfig, run_dir: Path) -> list[Sink]:
    """The sinks ``logging.*`` asks for; the run-dir files are always written. The order is the
    order in which they end: the files first, then the figures, then the sinks that show the
    run's status (TensorBoard's session, the console's last line), so a file that cannot be
    written at the end makes those say ``failed`` too."""
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
    (``config.apply_schema``) and resolved once (``config.resolve``).

    ``run_dir`` is claimed first (:func:`attnlab.outputs.rundir.claim`; new, empty, or holding
    only what Hydra wrote for this job); RunDirError, naming ``key``, when it is refused, and
    nothing is written. ``summary.json`` is written first as ``running`` (with the resolved
    ``config`` and the command-line ``overrides``, so the run can be reproduced from it alone)
    and last with the status and error. A signal is held until the training loop's next step
    (:mod:`attnlab.core.interrupts`) and ends the job ``interrupted``; after the last step it
    changes nothing (``late_signal``). A file that cannot be written ends the job ``failed``."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    subdir, log, job_num = ".hydra", None, None
    if HydraConfig.initialized():  # what Hydra wrote for this job: its saved config and its job log
        subdir, log = HydraConfig.get().output_subdir or ".hydra", f"{HydraConfig.get().job.name}.log"
        job_num = OmegaConf.select(HydraConfig.get(), "job.num", default=None, throw_on_missing=False)
    rundir.claim(run_dir, key=key, hydra_subdir=subdir, hydra_log=log)
    rundir.mark_started(run_dir)
    try:
        with interrupts.deferred(), interrupts.shielded():  # only the training loop is interruptible
            result = _job(cfg, run_dir, overrides, job_num if isinstance(job_num, int) else None)
            return result._replace(late_signal=interrupts.requested()) if result.status == "completed" else result
    finally:
        rundir.release(run_dir)


def _job(cfg: DictConfig, run_dir: Path, overrides: list[str] | None, job_num: int | None) -> JobResult:
    # phase 1: summary.json says running, before anything else is looked at
    try:
        artifacts.write_summary(run_dir, status="running", task=None,
                                started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                                final_loss=None, steps_run=0, wall_time_s=None, error=None,
                                overrides=list(overrides or []), config=None,
                                **({} if job_num is None else {"job_num": job_num}))
    except WriteError as err:
        return JobResult("failed", str(err), exception=err, unrecorded=str(err))
    # phase 2: the config checked (one line before torch loads), then the run
    typed = None
    try:
        interrupts.pause_point("before_training")
        interrupts.check()
        typed = apply_schema(cfg)
        resolved = resolve(typed)
        artifacts.write_summary(run_dir, task=resolved["task"], config=resolved)
        checks.validate(typed)
        tokenize(typed)  # the text's checks too, before torch loads
        artifacts.write_summary(run_dir, versions=artifacts.environment(resolved["device"]))
        result = _run(typed, run_dir)
    except KeyboardInterrupt:  # outside the training loop, which records its own interrupt
        result = JobResult("interrupted", "interrupted before the training steps")
    except WriteError as err:
        result = JobResult("failed", str(err), exception=err)
    except AttnlabError as err:  # ours are one line as they stand
        result = JobResult("failed", str(err), bad_input=True, exception=err)
    except Exception as err:
        result = JobResult("failed", describe(err), exception=err)
    # phase 3: the final status, once every other file is written (a killed job still says running)
    try:
        artifacts.write_summary(run_dir, status=result.status, error=result.error)
    except WriteError as err:
        return result._replace(unrecorded=str(err))
    if result.status == "completed" and typed.logging.report:
        from attnlab.saved.report import write_run_report

        try:
            write_run_report(run_dir)
        except (OSError, AttnlabError) as err:  # a view: never the run's status
            print(f"warning: report.html not written: {err}", file=sys.stderr)
    return result


def _run(cfg: DictConfig, run_dir: Path) -> JobResult:
    from attnlab.core.exercises import observe
    from attnlab.outputs.console import display_path, job_prefix, prefixed

    if cfg.task == Task.walkthrough:
        from attnlab.core.tokenizer import token_labels

        t0 = time.perf_counter()
        arrays = _walkthrough(cfg)
        artifacts.atomic_savez(run_dir / artifacts.WALKTHROUGH, **arrays)
        ids = arrays["token_ids"].tolist()
        artifacts.write_summary(run_dir, status="completed", wall_time_s=round(time.perf_counter() - t0, 6),
                                versions=artifacts.environment(str(cfg.device)),  # the torch threads used
                                **observe(cfg, ids, token_labels(ids, cfg.tokenizer.encoding), arrays))
        if cfg.logging.console:
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


def _walkthrough(cfg: DictConfig):
    """Tutorial §1–4 printed (each line ``[job N] ``-prefixed when jobs run side by side; nothing
    with ``logging.console=false``); the intermediates as arrays (:mod:`attnlab.core.walkthrough`)."""
    from attnlab.core.walkthrough import walkthrough
    from attnlab.outputs.console import job_prefix, prefixed

    prefix = job_prefix()

    def print_line(line: str) -> None:
        if cfg.logging.console:
            print(prefixed(line, prefix))

    if "print_line" not in inspect.signature(walkthrough).parameters:  # core before walkthrough(cfg, print_line)
        import io

        return walkthrough(cfg, file=sys.stdout if cfg.logging.console else io.StringIO())
    return walkthrough(cfg, print_line=print_line)
