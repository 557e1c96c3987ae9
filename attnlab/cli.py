"""The ``attnlab`` command: one Hydra job (``attnlab [overrides]``) or a sweep (``attnlab -m ...``).

Thin entry point: composes the config (``conf/`` + ``experiment=NAME`` + overrides), then
:func:`run_job` writes the run dir and trains (``task=train``) or narrates (``task=walkthrough``).
Our own errors (bad config values, tokenizer problems) end the job with one line on stderr and
exit status 2; a diverged or interrupted run exits 1. ``HYDRA_FULL_ERROR=1`` shows tracebacks.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import signal
import sys
import time
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnlab import artifacts
from attnlab.config import Task, apply_schema, plain, register_configs
from attnlab.errors import AttnlabError
from attnlab.exercises import observe
from attnlab import sweep as _sweep  # registers ${attnlab.job_dir:...} in every job process
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


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM raises KeyboardInterrupt, so a run that is terminated takes the
    Ctrl-C path: records flushed, sinks closed, status ``interrupted``. A no-op outside the
    main thread (where signal handlers cannot be set)."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_job(cfg: DictConfig, run_dir: Path) -> str:
    """Run one job into ``run_dir`` and return its final status (completed, diverged,
    interrupted). Raises AttnlabError (one line) on bad input, after writing
    ``summary.json`` with status ``failed``; raises RunDirError, writing nothing, when
    ``run_dir`` already holds a finished run. ``cfg`` may be untyped (a saved config.yaml):
    it is checked against the schema first (``config.apply_schema``). SIGTERM and Ctrl-C
    end the run as ``interrupted``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    artifacts.check_not_finished(run_dir)
    artifacts.write_summary(run_dir, status="running", task=plain(cfg.task),
                            started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                            final_loss=None, steps_run=0, wall_time_s=None, error=None,
                            versions=artifacts.environment(cfg.device))
    try:
        with sigterm_as_interrupt():
            return _run(cfg, run_dir)
    except KeyboardInterrupt:  # outside the training loop (which records its own interrupt)
        artifacts.write_summary(run_dir, status="interrupted", error="interrupted before or after the training steps")
        return "interrupted"


def _run(cfg: DictConfig, run_dir: Path) -> str:
    try:
        cfg = apply_schema(cfg)
        if cfg.task == Task.walkthrough:
            from attnlab.walkthrough import walkthrough

            t0 = time.perf_counter()
            walkthrough(cfg, run_dir)
            artifacts.write_summary(run_dir, status="completed", wall_time_s=round(time.perf_counter() - t0, 6),
                                    **observe(cfg, run_dir))
            if cfg.logging.console:
                from attnlab.console import display_path

                print(f"\ncompleted: walkthrough  ->  {display_path(run_dir)}/{artifacts.WALKTHROUGH}")
            return "completed"
        from attnlab.training import train

        status = train(cfg, make_sinks(cfg, run_dir), run_dir=run_dir, keep_snapshots=False).status
        artifacts.write_summary(run_dir, **observe(cfg, run_dir))  # exercise observations (attnlab.exercises)
        return status
    except Exception as err:  # ours are one line as they stand; others get their type
        message = str(err) if isinstance(err, AttnlabError) else f"{type(err).__name__}: {err}"
        artifacts.write_summary(run_dir, status="failed", error=message)
        raise


@hydra.main(version_base="1.3", config_path="pkg://attnlab.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    release_stderr()  # the config composed: the job's stderr is live
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        status = run_job(cfg, run_dir)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        if not sweep:
            sys.exit(EXIT_BAD_INPUT)
        status = "failed"
    except Exception as err:  # in a sweep, an unexpected error is this job's row, not the sweep's end
        if not sweep or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        status = "failed"
    if status != "completed":
        if status != "failed":
            error = artifacts.read_summary(run_dir).get("error")
            from attnlab.console import display_path

            print(f"{status}: {error}; records kept in {display_path(run_dir)}", file=sys.stderr)
        if not sweep or status == "interrupted":  # Ctrl-C stops a sweep; a bad job does not
            sys.exit(EXIT_FAILED_RUN)
    return status


class NeverOverwrite(Callback):
    """Hydra callback (``hydra.callbacks.never_overwrite`` in conf/config.yaml): refuses, before
    Hydra writes ``.hydra/`` into it, an output dir that already holds a finished run (a run
    dir, or any job of a sweep dir). Prints one line and exits with status 2."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        release_stderr()  # the config composed: nothing more for StderrGate to hold
        self._refuse("hydra.run.dir", Path(str(config.hydra.run.dir)), [Path(str(config.hydra.run.dir))])

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
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


HYDRA_ERROR_HINT = "Set the environment variable HYDRA_FULL_ERROR=1"


class StderrGate:
    """A stand-in for ``sys.stderr`` while Hydra composes the config: writes are held until
    :meth:`release` (called when the task function starts), then pass straight through.

    Hydra reports a composition error (a mistyped key, a wrong type, an unknown option) in
    several lines and exits with status 1 before any job starts; :func:`main` turns the held
    report into one line (:func:`hydra_error_line`)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self._held: list[str] | None = []

    def write(self, text: str) -> int:
        if self._held is None:
            return self.stream.write(text)
        self._held.append(text)
        return len(text)

    def flush(self) -> None:
        if self._held is None:
            self.stream.flush()

    def held(self) -> str:
        return "".join(self._held or [])

    def release(self) -> None:
        held, self._held = self.held(), None
        if held:
            self.stream.write(held)
            self.stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding ... of the real stream
        return getattr(self.stream, name)


def release_stderr() -> None:
    """Let held and further stderr output through (a no-op unless :func:`main` set a gate)."""
    if isinstance(sys.stderr, StderrGate):
        sys.stderr.release()


def hydra_error_line(report: str, argv: list[str] | None = None) -> str:
    """Hydra's multi-line composition error as one line naming the key, the value and what is
    allowed, e.g. ``error: model.positional='sin': Invalid value 'sin', expected one of
    [learned, none]`` or ``error: optimizer=adamm: no such option; allowed: adam, adamw, sgd``.
    ``argv`` (the command's arguments) supplies the value of a mistyped key."""
    lines = [ln.strip() for ln in report.splitlines() if ln.strip() and HYDRA_ERROR_HINT not in ln]
    text = "\n".join(lines)
    options = re.search(r"Could not find '([^']+)/([^'/]+)'.*?Available options in '[^']+':\n(.*?)(?:\nConfig search path|$)",
                        text, re.S)
    if options:
        group, option, allowed = options.group(1), options.group(2), options.group(3).split()
        return f"error: {group}={option}: no such option; allowed: {', '.join(allowed)}"
    override = re.search(r"Could not override '([^']+)'", text)
    if override:
        key = override.group(1)
        given = next((a for a in (argv or []) if a.split("=", 1)[0].lstrip("+~") == key), key)
        return (f"error: {given}: no such config key (see `attnlab --cfg job` for the keys); "
                f"to add a new key on purpose use +{given}")
    merging = re.match(r"Error merging override ([^=\s]+)=(.*)", lines[0]) if lines else None
    if merging and len(lines) > 1:
        return f"error: {merging.group(1)}={merging.group(2)!r}: {lines[1]}"
    syntax = ("mismatched input", "extraneous input", "no viable", "noviable", "token recognition error")
    if lines and any(k in lines[0].lower() for k in syntax):
        return (f"error: {lines[0]} in the overrides (Hydra's override syntax): quote values that contain "
                "= , [ ] { } ( ) : or non-ASCII text, e.g. 'sentence=\"a=b, c\"'")
    details = [ln for ln in lines if not ln.startswith(("full_key:", "reference_type=", "object_type=",
                                                        "See https", "provider=", "Config search path"))]
    return "error: " + "; ".join(details[:2])


def main() -> None:
    """Console-script entry point: ``attnlab [overrides]`` / ``attnlab -m [overrides]``.

    Exit status: 0 completed; 1 a run (or a sweep job) did not complete; 2 bad input, one line
    on stderr (``HYDRA_FULL_ERROR=1`` shows Hydra's full report and traceback instead)."""
    register_configs()
    gate = None
    if os.environ.get("HYDRA_FULL_ERROR") != "1":
        gate = sys.stderr = StderrGate(sys.stderr)
    try:
        _hydra_main()
    except SystemExit as exit_:
        report = gate.held() if gate else ""
        if exit_.code == 1 and HYDRA_ERROR_HINT in report:
            gate._held = None
            print(hydra_error_line(report, sys.argv[1:]), file=gate.stream)
            sys.exit(EXIT_BAD_INPUT)
        raise
    finally:
        if gate is not None:
            gate.release()
            sys.stderr = gate.stream
    if _sweep.last_exit_status:  # the sweep summary saw a job that did not complete (any launcher)
        sys.exit(_sweep.last_exit_status)


if __name__ == "__main__":
    main()
