"""The ``attnlab`` command: one Hydra job (``attnlab [overrides]``) or a sweep (``attnlab -m ...``).

Composes the config (``conf/`` + ``experiment=NAME`` + overrides) and hands it to
:func:`attnlab.commands.job.run_job`. Exit status: 0 completed; 1 a run (or a sweep job) did not complete
(diverged, interrupted, failed, a file that could not be written); 2 bad input or an output
folder that is refused (it holds a run or someone else's files, another attnlab process writes
there, or it cannot be written), one line on stderr (``HYDRA_FULL_ERROR=1`` shows Hydra's
report and tracebacks instead).

The console script starts in :mod:`attnlab.commands.launch` (Ctrl-C deferred, console output made safe,
before this module's imports); ``python -m attnlab.commands.cli`` does the same from :func:`main`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from attnlab.commands import argv, callbacks
from attnlab.commands import sweep as _sweep  # registers ${attnlab.job_dir:...} in every job process
from attnlab.commands.fastexit import exit_now
from attnlab.commands.hydra_errors import CANNOT_WRITE, EXIT_BAD_INPUT, one_line_errors, release_stderr
from attnlab.commands.job import EXIT_FAILED_RUN, run_job
from attnlab.core import interrupts
from attnlab.core.config import register_configs, schema_keys
from attnlab.core.errors import RunDirError
from attnlab.outputs import rundir, streams


@hydra.main(version_base="1.3", config_path="pkg://attnlab.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    release_stderr()  # the config composed: the job's stderr is live
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    in_sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    overrides = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)  # as typed, never resolved
    try:
        result = run_job(cfg, run_dir, overrides=overrides, key="hydra.sweep.dir" if in_sweep else "hydra.run.dir")
    except RunDirError as err:  # a sweep's job folder refused (a run's own folder was claimed before Hydra wrote)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if result.exception is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise result.exception
    from attnlab.outputs.console import display_path

    if result.status != "completed":
        callbacks.jobs_not_completed += 1
    if result.unrecorded is not None:  # not even summary.json could be written: say it here
        print(f"error: {result.unrecorded}; nothing recorded in {display_path(run_dir)}"
              if result.unrecorded == result.error else
              f"{_reason(result)}; summary.json does not say so ({result.unrecorded}); "
              f"records kept in {display_path(run_dir)}", file=sys.stderr)
        sys.exit(EXIT_FAILED_RUN)
    if result.status != "completed":
        if result.bad_input:
            print(f"error: {result.error}", file=sys.stderr)
        else:
            print(f"{_reason(result)}; records kept in {display_path(run_dir)}", file=sys.stderr)
        if not in_sweep or result.status == "interrupted":  # Ctrl-C stops a sweep; a bad job does not
            sys.exit(result.exit_code)
    elif interrupts.requested() is not None:  # Ctrl-C after the last step: the run completed
        if in_sweep:
            print(f"interrupted: the sweep stops after {display_path(run_dir)}, which completed", file=sys.stderr)
            sys.exit(EXIT_FAILED_RUN)
        print(f"note: interrupt received after the last step; the run completed ({display_path(run_dir)})",
              file=sys.stderr)
    return result.status


def _reason(result) -> str:
    """``status: error`` (``failed: file too large while writing loss.png``), the error alone
    when it already starts with the status (``interrupted at step 12; 12 steps recorded``)."""
    error = result.error or ""
    return error if error.startswith(result.status) else f"{result.status}: {error}"


def main() -> None:
    """Console-script entry point: ``attnlab [overrides]`` / ``attnlab -m [overrides]``.

    The arguments are made Hydra syntax first (:func:`attnlab.commands.argv.prepare`: free text as typed);
    Hydra options attnlab refuses (:func:`attnlab.commands.argv.refused_option`) and a ``+key``/``~key``
    outside attnlab's schema are refused before Hydra sees them."""
    interrupts.install()  # (already done by attnlab.commands.launch for the console script)
    streams.install()
    callbacks.stop_if_interrupted()
    register_configs()
    typed = sys.argv[1:]
    refused = argv.refused_option(typed)
    if refused is not None:
        print(refused, file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    args = argv.prepare(typed)
    for bad in argv.unknown_added_keys(args, schema_keys()):
        print(f"error: {bad}: no such config key; attnlab's keys are fixed by its schema and cannot be "
              "added or removed (`attnlab --help` lists them)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.argv[1:] = args
    try:
        try:
            with interrupts.deferred(), one_line_errors(typed, on_error=_unstarted):
                _hydra_main()
        except ValueError as err:  # Hydra's own check of its options (-sc without a command, -m with --cfg)
            if not _raised_by_hydras_option_check(err):
                raise
            release_stderr()
            print(f"error: {str(err).splitlines()[0]} (`attnlab --help` lists the options)", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:  # a second Ctrl-C outside a job (a job records its own)
            release_stderr()
            print("interrupted: the sweep stopped; the jobs that ran kept their records" if callbacks.jobs_started
                  else "interrupted: before the run started; nothing was kept", file=sys.stderr)
            sys.exit(EXIT_FAILED_RUN)
        finally:
            rundir.abandon_all()  # a folder claimed for a job that never started is removed again
            interrupts.ignore_from_now()
    except SystemExit as exit_:
        exit_now(exit_.code)  # without the interpreter's teardown of torch (attnlab.commands.fastexit)
    # the sweep summary saw a job that did not complete (any launcher): 1
    exit_now(_sweep.last_exit_status or 0)


def _raised_by_hydras_option_check(err: BaseException) -> bool:
    """Whether ``err`` was raised in Hydra's command-line handling (``hydra/_internal/utils.py``),
    i.e. by options that cannot go together, not by a job."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).parts[-3:] == ("hydra", "_internal", "utils.py")


def _unstarted(line: str) -> str | None:
    """Hydra stopped with an error before a job started: remove what was claimed for it; when
    Hydra could not save its config into the claimed folder, name that folder."""
    held = rundir.claims()
    callbacks.remove_unstarted_sweep()
    rundir.abandon_all()
    if held and line.startswith(CANNOT_WRITE):
        reason = line.rsplit(": ", 1)[-1]
        name = held[-1].shown.split("=", 1)[0]
        return f"error: {held[-1].shown}: cannot write Hydra's config there ({reason}); choose another {name}"
    return None


if __name__ == "__main__":
    main()
