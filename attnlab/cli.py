"""The ``attnlab`` command: one Hydra job (``attnlab [overrides]``) or a sweep (``attnlab -m ...``).

Composes the config (``conf/`` + ``experiment=NAME`` + overrides) and hands it to
:func:`attnlab.job.run_job`. Exit status: 0 completed; 1 a run (or a sweep job) did not complete
(diverged, interrupted, crashed); 2 bad input, one line on stderr (``HYDRA_FULL_ERROR=1`` shows
Hydra's report and tracebacks instead).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from attnlab import argv, callbacks, interrupts
from attnlab import sweep as _sweep  # registers ${attnlab.job_dir:...} in every job process
from attnlab.config import register_configs, schema_keys
from attnlab.fastexit import exit_now
from attnlab.hydra_errors import EXIT_BAD_INPUT, one_line_errors, release_stderr
from attnlab.job import run_job


@hydra.main(version_base="1.3", config_path="pkg://attnlab.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    release_stderr()  # the config composed: the job's stderr is live
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    in_sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    overrides = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)  # as typed, never resolved
    result = run_job(cfg, run_dir, overrides=overrides)
    if result.exception is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise result.exception
    if result.status != "completed":
        if result.bad_input:
            print(f"error: {result.error}", file=sys.stderr)
        else:
            from attnlab.console import display_path

            print(f"{result.status}: {result.error}; records kept in {display_path(run_dir)}", file=sys.stderr)
        if not in_sweep or result.status == "interrupted":  # Ctrl-C stops a sweep; a bad job does not
            sys.exit(result.exit_code)
    return result.status


def main() -> None:
    """Console-script entry point: ``attnlab [overrides]`` / ``attnlab -m [overrides]``.

    The arguments are made Hydra syntax first (:func:`attnlab.argv.prepare`: free text as typed)
    and a ``+key``/``~key`` outside attnlab's schema is refused before Hydra adds it."""
    register_configs()
    typed = sys.argv[1:]
    args = argv.prepare(typed)
    for bad in argv.unknown_added_keys(args, schema_keys()):
        print(f"error: {bad}: no such config key; attnlab's keys are fixed by its schema and cannot be "
              "added or removed (`attnlab --help` lists them)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.argv[1:] = args
    try:
        with interrupts.deferred(), one_line_errors(typed, on_error=callbacks.remove_unstarted_sweep):
            _hydra_main()
    except SystemExit as exit_:
        exit_now(exit_.code)  # without the interpreter's teardown of torch (attnlab.fastexit)
    # the sweep summary saw a job that did not complete (any launcher): 1
    exit_now(_sweep.last_exit_status or 0)


if __name__ == "__main__":
    main()
