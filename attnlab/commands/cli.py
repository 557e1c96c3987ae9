"""The ``attnlab`` command: one Hydra job (``attnlab [overrides]``) or a sweep (``attnlab -m ...``).
Exit status: 0 completed; 1 a run (or a sweep job) did not complete; 2 bad input or a refused output
folder, one line on stderr (:func:`error_line`; ``HYDRA_FULL_ERROR=1`` raises instead)."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import MissingConfigException, OverrideParseException, SearchPathException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from attnlab.commands import argv, callbacks, config_folder
from attnlab.commands.argv import HYDRA_WRITES_NOTHING, refusal
from attnlab.commands.hydra_config import VERSION_BASE, register_configs
from attnlab.commands.job import EXIT_BAD_INPUT, EXIT_FAILED_RUN, run_job
from attnlab.core import i18n, interrupts
from attnlab.core.config import did_you_mean
from attnlab.core.errors import AttnlabError, os_reason, schema_allowed
from attnlab.core.files import printable
from attnlab.core.i18n import _
from attnlab.outputs import artifacts, rundir, streams
from attnlab.outputs.console import display_path

FULL_ERROR = "ATTNLAB_FULL_ERROR"  # the user's HYDRA_FULL_ERROR (attnlab sets Hydra's to 1 to catch its errors)
MAIN_PID = "ATTNLAB_MAIN_PID"  # the command's process (a job in a launcher's worker runs in another)


def _end_command(code: int, status: str, sweep: tuple[str, str] | None) -> callbacks.JobEnd:
    """``sys.exit(code)`` in the command's process; in a launcher's worker (``sweep``), where joblib would kill
    the other workers mid-write, no further job of that sweep runs and the return value carries ``code``."""
    if sweep is None:
        sys.exit(code)
    callbacks.stopped_sweeps.add(sweep)
    return callbacks.JobEnd(status, code)


@hydra.main(**VERSION_BASE, config_path="pkg://attnlab.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> callbacks.JobEnd:
    streams.install()  # a launcher's worker process too (idempotent)
    hc = HydraConfig.get()
    run_dir, in_sweep = Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN
    main_pid = os.environ.get(MAIN_PID, str(os.getpid()))
    in_worker = (main_pid, str(hc.sweep.dir)) if main_pid != str(os.getpid()) else None
    if in_worker in callbacks.stopped_sweeps:  # the sweep was stopped: this job does not start
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # the empty folder Hydra made for it
        return callbacks.JobEnd("interrupted")
    os.chdir(hc.runtime.cwd)  # hydra.job.chdir=true changes no path's meaning (Hydra changes back after the job)
    overrides = OmegaConf.to_container(hc.overrides.task, resolve=False)  # as typed, never resolved
    try:
        result = run_job(cfg, run_dir, overrides=overrides, key="hydra.sweep.subdir" if in_sweep else "hydra.run.dir")
    except AttnlabError as err:  # a sweep job's folder refused
        print(_("error: {message}").format(message=err), file=sys.stderr)
        return _end_command(EXIT_BAD_INPUT, "failed", in_worker)
    if result.exception is not None and os.environ.get(FULL_ERROR) == "1":
        raise result.exception
    reason = result.error if (result.error or "").startswith(result.status) else f"{result.status}: {result.error}"
    if result.unrecorded is not None:  # not even summary.json could be written: say it here
        print((_("error: {message}; nothing recorded in {run_dir}") if result.unrecorded == result.error else
               _("{reason}; summary.json does not say so ({message}); records kept in {run_dir}")).format(
            message=result.unrecorded, reason=reason, run_dir=display_path(run_dir)), file=sys.stderr)
        return _end_command(EXIT_FAILED_RUN, result.status, in_worker)
    elif result.status != "completed":
        print(_("error: {message}").format(message=result.error) if result.bad_input else
              _("{reason}; records kept in {run_dir}").format(reason=reason, run_dir=display_path(run_dir)),
              file=sys.stderr)
        if not in_sweep or result.status == "interrupted":  # Ctrl-C stops a sweep; a bad job does not
            return _end_command(EXIT_BAD_INPUT if result.bad_input else EXIT_FAILED_RUN, result.status, in_worker)
    elif result.late_signal is not None and in_sweep:  # after the last step: the run completed
        print(_("interrupted: the sweep stops after {run_dir}, which completed").format(run_dir=display_path(run_dir)),
              file=sys.stderr)
        return _end_command(EXIT_FAILED_RUN, result.status, in_worker)
    elif result.late_signal is not None:
        print(_("note: interrupt received after the last step; the run completed ({run_dir})").format(
            run_dir=display_path(run_dir)), file=sys.stderr)
    return callbacks.JobEnd(result.status, loss=result.final_loss if result.status == "completed" else None)


def error_line(err: BaseException, typed: list[str]) -> str:
    """An error raised reading the command line ``typed`` or composing the config as one line naming
    the argument and what is allowed, e.g. ``error: optimizer=adamm: no such option; allowed: adam, ...``."""
    cause = err.__cause__ if err.__cause__ is not None else err
    text = str(cause)
    first = text.splitlines()[0] if text.strip() else type(cause).__name__
    key = getattr(cause, "full_key", None) or next(iter(re.findall(r"full_key: (\S+)", text)), None)
    base = re.sub(r"(\[\d+\])+$", "", key) if key else None  # optimizer.betas for optimizer.betas[0]
    given = next((a for a in reversed(typed) if a.split("=", 1)[0].lstrip("+~") == base), None) if key else None
    if isinstance(err, AttnlabError):
        return _("error: {message}").format(message=err)
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        return _("error: {choice}: no such option; allowed: {options}").format(
            choice=err.missing_cfg_file.replace("/", "=", 1), options=", ".join(err.options))
    if isinstance(err, MissingConfigException):  # an OSError too: a config file not in the search path
        where = re.match(r"In '([^']+)'", first)
        return _("error: {name}: no such config file in the config search path (attnlab's, --config-dir)").format(
            name=printable(err.missing_cfg_file or first, 120)) + (
            _("; the defaults list of {config} names it").format(config=where[1]) if where else "")
    if isinstance(err, SearchPathException) and (folder := re.search(r"directory '(.+)' not found", first)):
        return _("error: --config-dir {path}: no such folder").format(path=printable(folder[1], 300))
    if isinstance(err, OSError):
        return _("error: cannot write {path}: {reason}").format(
            path=printable(err.filename or _("the output folder"), 300), reason=os_reason(err))
    if isinstance(err, OverrideParseException):
        return _syntax_line(text, err.override, typed)
    if first.startswith("Ambiguous value for argument"):
        key, value = re.match(r"Ambiguous value for argument '([^=']+)=(.*)'$", first).groups()
        value = next((a.split("=", 1)[1] for a in reversed(typed) if a.split("=", 1)[0].lstrip("+") == key), value)
        quoted = '"' + value.replace('"', '\\"') + '"'
        return _("error: {key}={value!r}: a comma separates values; to keep it in the value, quote it for Hydra "
                 "and the shell: '{key}={quoted}'; with -m (--multirun) the commas sweep over the values").format(
            key=key, value=value, quoted=quoted)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        typed_key = next((a.split("=", 1)[0].lstrip("+~") for a in reversed(typed)
                          if a.split("=", 1)[0].lstrip("+~").startswith(key)), key)
        line = _("error: {key}: no such config key (`attnlab --help` lists every key)").format(
            key=printable(given or key, 120))
        if close := did_you_mean(typed_key):
            line += _("; did you mean {key}?").format(key=close)
        return line
    if isinstance(cause, OverflowError):
        return _("error: {key}: too large for a float (at most 1.8e308)").format(key=printable(given or key, 120))
    if given is not None and "=" in given:
        value = getattr(cause, "value", None)  # in a sweep, the one value of the list that was refused
        shown = value if isinstance(value, str) else given.split("=", 1)[1]
        allowed = printable(schema_allowed(first), 300)
        return _("error: {message}").format(message=f"{key}={printable(shown, 300)!r}: {allowed}")
    return _("error: {message} (`attnlab --help` lists the options)").format(message=printable(first, 300))


def _syntax_line(report: str, refused: str, typed: list[str]) -> str:
    """Hydra's override-grammar error ``report`` about ``refused`` (as Hydra got it), as one line."""
    lines = [ln.strip() for ln in report.splitlines() if ln.strip() and not ln.startswith("See https")]
    what = re.sub(r"^Error parsing override '.*'$", "", lines[0]).strip() or (lines[1] if len(lines) > 1 else "")
    what = re.sub(r" expecting \{.*\}$", "", what)  # the grammar's token list says nothing to a user
    arg = next((candidate for candidate in typed if argv.prepare([candidate]) == [refused]), None)
    hint = _("quote values that contain = , [ ] {{ }} ( ) : or non-ASCII text for Hydra").format()
    if arg is None:
        return _("error: {what} in the overrides (Hydra's override syntax): {hint}, e.g. "
                 "'model.positional=\"learned\"'").format(what=what, hint=hint)
    shown = arg if len(arg) <= 80 else arg[:77] + "..."
    key = arg.split("=", 1)[0].lstrip("+") if "=" in arg else None
    if key is None:
        return _("error: {arg!r}: not an override (key=value); a text with spaces must be one argument: "
                 "quote the whole override for the shell, e.g. 'sentence=Your journey starts'").format(arg=shown)
    if key in argv.FREE_TEXT_KEYS:
        return _("error: {arg!r}: not valid override syntax ({what}); {key} takes text as typed unless it "
                 "starts with a quote, [ or {{, which must then be closed: '{key}=\"[a] b\"' keeps them as text"
                 ).format(arg=shown, what=what, key=key)
    return _("error: {arg!r}: not valid override syntax ({what}); {hint}, e.g. '{key}=\"a=b\"'").format(
        arg=shown, what=what, hint=hint, key=key)


install_signal_handlers = interrupts.install  # SIGINT, SIGTERM, SIGHUP: interrupted at the next step


def main() -> None:
    """``attnlab [-m] [overrides]``: the arguments checked and made Hydra syntax (:mod:`attnlab.commands.argv`),
    then Hydra; its errors before a job are :func:`error_line`."""
    install_signal_handlers()
    streams.install()
    typed = sys.argv[1:]
    lang = i18n.set_language(argv.language(typed))
    register_configs()
    prepared = argv.prepare(typed)
    help_page = ["hydra/help=attnlab_zh"] if lang == "zh" else []  # `attnlab --help` in the learner's language
    sys.argv[1:] = [*argv.multirun_flag(prepared), *HYDRA_WRITES_NOTHING, *help_page,
                    *argv.overrides_first(prepared)]  # before the user's
    try:  # a config folder someone else made is held to the command line's rules before Hydra reads it
        refused = refusal(typed) or config_folder.refusal(sys.argv[1:])
    except Exception as err:
        refused = error_line(err, typed)
    if refused is not None:
        print(refused, file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    os.environ[MAIN_PID] = str(os.getpid())
    callbacks.exit_status()  # none left by an earlier command in this process
    os.environ.setdefault(FULL_ERROR, os.environ.get("HYDRA_FULL_ERROR", "0"))
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors here instead of printing its report
    # a launcher whose worker was killed leaves its semaphores to multiprocessing's tracker: no warning for that
    os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker")
    code: int | str | None = EXIT_FAILED_RUN
    try:
        with interrupts.deferred():
            _hydra_main()
        code = callbacks.exit_status()  # a sweep with a job that did not complete: 1; a job's folder refused: 2
    except SystemExit as end:  # a job that stopped the command (interrupted, or its folder refused: 2)
        code = end.code
        raise
    except KeyboardInterrupt:  # outside a job (a job records its own): EXIT_FAILED_RUN
        print(_("interrupted: the runs that started kept their records"), file=sys.stderr)
    except Exception as err:
        if os.environ.get(FULL_ERROR) == "1":
            raise
        what = f"{type(err).__name__}: {printable(str(err).strip().split(chr(10))[0], 300)}"
        # a launcher that lost a worker (the OOM killer, a signal): each job whose process died says failed
        closed = [display_path(p) for p in artifacts.close_orphans(f"its process ended before the run did ({what})")]
        print(_("error: {message}; these jobs did not complete (summary.json says failed): {jobs}").format(
            message=what, jobs=", ".join(closed)) if closed else error_line(err, typed), file=sys.stderr)
        code = EXIT_FAILED_RUN if closed else EXIT_BAD_INPUT
    finally:
        callbacks.end_stopped_sweep(table=code != EXIT_BAD_INPUT)  # a stopped sweep's table; a refusal: one line
        for held in rundir.claims():  # a folder claimed for a job that never started is removed again
            rundir.abandon(held.path)
        interrupts.ignore_from_now()
    sys.exit(code)


def console_main() -> None:
    """:func:`main`, then ``os._exit`` once the logs and streams are flushed: no teardown of torch's
    modules (~0.4 s). A normal exit while another thread or child process runs."""
    try:
        main()  # it ends in sys.exit
    except SystemExit as end:
        code = end.code
    mp = sys.modules.get("multiprocessing")
    if not isinstance(code, int) or threading.active_count() > 1 or (mp is not None and mp.active_children()):
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
