"""One job: the run dir, the sinks ``logging`` asks for, ``summary.json`` and the final status.
:func:`run_job` never raises for a job that went wrong: every end is a :class:`JobResult`."""
from __future__ import annotations

import datetime as _dt
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from attnlab.core import checks, i18n, interrupts
from attnlab.core.config import Task, apply_schema, plain, resolve
from attnlab.core.errors import AttnlabError, WriteError, describe
from attnlab.core.exercises import observe
from attnlab.core.focus import FocusSink
from attnlab.core.i18n import _
from attnlab.core.records import Sink
from attnlab.core.tokenizer import Tokens
from attnlab.outputs import artifacts, drawing, plots, rundir
from attnlab.outputs.console import ConsoleSink, display_path, job_prefix, prefixed
from attnlab.saved.report import REPORT, write_page
from attnlab.saved.report_data import PageSink, run_record

EXIT_FAILED_RUN = 1  # the run started but did not complete (diverged, interrupted, crashed)
EXIT_BAD_INPUT = 2  # the config or the text was refused before training


class JobResult(NamedTuple):
    """How a job ended: ``status`` completed, diverged, interrupted or failed; ``error`` one line;
    ``bad_input``: refused (exit 2); ``unrecorded``: why not even ``summary.json`` was written;
    ``late_signal``: a signal after the last step (the run completed)."""

    status: str
    error: str | None = None
    bad_input: bool = False
    exception: BaseException | None = None
    unrecorded: str | None = None
    late_signal: int | None = None
    final_loss: float | None = None


def make_sinks(cfg: DictConfig, run_dir: Path, show_dir: bool = True) -> list[Sink]:
    """The sinks ``logging.*`` asks for beside the run-dir files', those showing the status last, so a
    file not written at the end makes them say ``failed``."""
    sinks: list[Sink] = []
    if cfg.logging.figures:
        from attnlab.outputs.plots import FigureSink

        sinks.append(FigureSink(run_dir))
    if cfg.logging.tensorboard:
        from attnlab.outputs.tensorboard import TensorBoardSink

        sinks.append(TensorBoardSink(run_dir, images=cfg.logging.images))
    if cfg.logging.console:
        sinks.append(ConsoleSink(progress=cfg.logging.progress, prefix=job_prefix(), where=show_dir))
    return sinks


def run_job(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None,
            key: str = "hydra.run.dir", recorded: dict[str, Any] | None = None,
            tokens: Tokens | None = None, show_dir: bool = True, saved: dict[str, Any] | None = None) -> JobResult:
    """Run one job (``task=train``: tutorial §5, ``walkthrough``: §1–4; ``cfg`` may be a saved, untyped one) into
    ``run_dir``, claimed first (RunDirError naming ``key``). ``summary.json`` says ``running`` (with ``overrides``,
    ``recorded``) until every other file is written, then how it ended. ``tokens``: :func:`checks.validated_tokens`
    (None: made here); ``saved``: the ``.hydra/`` files (name -> config) of a job Hydra did not start."""
    run_dir = Path(run_dir)
    hc = HydraConfig.get() if HydraConfig.initialized() else None  # None: attnlab-reproduce, the benchmarks
    if hc is not None:  # .hydra/ as Hydra saves it (Hydra writes nothing: hydra.output_subdir=null)
        saved = {"config": cfg, "hydra": {"hydra": hc}, "overrides": hc.overrides.task}
    rundir.claim(run_dir, key=key).started = True  # a job writes there now: abandon() leaves the folder be
    try:
        with interrupts.deferred(), interrupts.shielded():  # only the training loop is interruptible
            result = _job(cfg, run_dir, overrides, hc, recorded or {}, tokens, show_dir, saved or {})
            return result._replace(late_signal=interrupts.requested()) if result.status == "completed" else result
    finally:
        drawing.shutdown()
        rundir.release(run_dir)


def _job(cfg: DictConfig, run_dir: Path, overrides: list[str] | None, hc: DictConfig | None,
         recorded: dict[str, Any], tokens: Tokens | None, show_dir: bool, saved: dict[str, Any]) -> JobResult:
    job_num = OmegaConf.select(hc, "job.num", default=None) if hc is not None else None
    summary: dict[str, Any] = {
        "status": "running", "task": None,
        "started_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "final_loss": None, "steps_run": 0, "wall_time_s": None, "error": None,
        "overrides": list(overrides or []), "config": None,
        **({"job_num": job_num} if isinstance(job_num, int) else {}), **recorded}
    try:  # running, before anything else is looked at (a job whose config is refused says failed after)
        artifacts.write_summary(run_dir, summary)
    except WriteError as err:
        return JobResult("failed", str(err), exception=err, unrecorded=str(err))
    typed, held = None, {}  # held: what the run's own report.html is made of (report_data.run_record)
    try:
        if saved:
            (run_dir / ".hydra").mkdir(exist_ok=True)
            for name, node in saved.items():
                artifacts.atomic_write(run_dir / ".hydra" / f"{name}.yaml", OmegaConf.to_yaml(node))
        interrupts.pause_point("before_training")
        interrupts.check()
        typed = apply_schema(cfg)  # the config checked and the text tokenized once, before torch loads
        if hc is not None:  # a Hydra job speaks its config's lang (a sweep may vary it)
            i18n.set_language(plain(typed.lang))
        resolved = resolve(typed)
        summary.update(task=resolved["task"], config=resolved)
        tokens = tokens or checks.validated_tokens(typed)
        resolved["train"]["focus_token"] = tokens.focus
        drawing.start(typed, plots.warm_up)  # figure workers import matplotlib while this process imports torch
        summary["versions"] = artifacts.environment(resolved["device"])
        result = _run(typed, run_dir, tokens, summary, held, show_dir)
        summary["versions"] = artifacts.environment(resolved["device"])  # the torch threads used
    except KeyboardInterrupt:  # outside the training loop, which records its own interrupt
        result = JobResult("interrupted", "interrupted before the training steps")
    except AttnlabError as err:  # ours are one line as they stand; a file not written is no bad input
        result = JobResult("failed", str(err), bad_input=not isinstance(err, WriteError), exception=err)
    except Exception as err:
        result = JobResult("failed", describe(err), exception=err)
    summary.update(status=result.status, error=result.error)
    try:
        artifacts.write_summary(run_dir, summary)
    except WriteError as err:
        return result._replace(unrecorded=str(err))
    if result.status == "completed" and typed.logging.report:
        try:  # from what the run holds: the page attnlab-report RUN_DIR makes of its files
            write_page([run_record(run_dir, summary, **held)], run_dir / REPORT)
        except (OSError, AttnlabError) as err:  # a view: never the run's status
            print(_("warning: {path} not written: {reason}").format(path="report.html", reason=err), file=sys.stderr)
    return result._replace(final_loss=summary["final_loss"])


def _run(cfg: DictConfig, run_dir: Path, tokens: Tokens, summary: dict[str, Any], held: dict[str, Any],
         show_dir: bool) -> JobResult:
    """The task on the checked ``cfg``: its measures into ``summary``, what its report page shows into ``held``."""
    if cfg.task == Task.walkthrough:  # §1–4 printed, [job N]-prefixed in a parallel sweep; arrays saved
        from attnlab.core.walkthrough import walkthrough

        t0, prefix, shown = time.perf_counter(), job_prefix(), cfg.logging.console
        arrays = walkthrough(cfg, print_line=lambda line: print(prefixed(line, prefix)) if shown else None,
                             tokens=tokens)
        artifacts.atomic_write(run_dir / artifacts.WALKTHROUGH, arrays)
        held["walkthrough"] = arrays
        summary.update(wall_time_s=round(time.perf_counter() - t0, 6),
                       **observe(cfg, tokens.token_ids, tokens.labels, arrays, tokens=tokens))
        if shown:
            where = f"  ->  {display_path(run_dir)}/{artifacts.WALKTHROUGH}" if show_dir else ""
            print(prefixed("\n" + _("completed: walkthrough{where}").format(where=where), prefix))
        return JobResult("completed")
    from attnlab.core.training import train

    files = artifacts.RunDirSink(run_dir)  # its fields: this summary, at the end
    focus, layers = FocusSink(), [FocusSink(layer) for layer in range(cfg.model.n_layers)]  # a GPT's blocks too
    page = [PageSink()] if cfg.logging.report else []
    try:
        result = train(cfg, [files, *make_sinks(cfg, run_dir, show_dir), focus, *layers, *page], run_dir=run_dir,
                       keep_snapshots=False, keep_losses=bool(page), tokens=tokens)
        if page:
            held.update(losses=result.losses, page=page[0], focus=focus)
    finally:
        summary.update(files.summary)  # what the files hold, also of a run that failed
    per_layer = {"focus_layers": [s.summary()["focus"] for s in layers]} if layers and focus.last is not None else {}
    summary.update(**focus.summary(), **per_layer, **observe(cfg, result.token_ids, result.tokens, tokens=tokens))
    return JobResult(result.status, result.error)
