"""``attnlab-reproduce PATH... [--out DIR] [--csv FILE] [-j N] [--artifacts]``: re-run saved runs from the
configs they recorded (read as data, :mod:`attnlab.saved.safe_read`) and compare every file bit for bit
(:mod:`attnlab.saved.verdict`), on the kernels the run recorded when this CPU has them (:func:`verify`),
else on every kernel path here. One run: its verdict and differences; several, or folders of runs: one
table sorted by student. Exit 0 reproduced exactly or within rounding, 1 not (not reproduced, undecided,
interrupted), 2 not a run that can be reproduced (one line; ``HYDRA_FULL_ERROR=1`` raises instead).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import io
import multiprocessing
import os
import platform
import signal
import sys
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from omegaconf import DictConfig

from attnlab.commands.arguments import HelperParser, console_script, speak
from attnlab.commands.job import run_job
from attnlab.core import checks, i18n, interrupts, threads
from attnlab.core.config import apply_schema, literal, plain
from attnlab.core.errors import AttnlabError, ConfigError, RunDirError, describe
from attnlab.core.files import printable
from attnlab.core.i18n import N_, _
from attnlab.core.tokenizer import Tokens
from attnlab.outputs import artifacts, destination
from attnlab.outputs.console import display_path
from attnlab.outputs.drawing import end_with_parent
from attnlab.saved import runs, safe_read, verdict
from attnlab.saved.report import render
from attnlab.saved.report_data import collect_records
from attnlab.saved.table import csv_text, format_table
from attnlab.saved.verdict import CANNOT, INTERRUPTED, STOPPED, VERDICTS, Rerun, Verdict

EXIT_SAME, EXIT_DIFFERENT, EXIT_NOT_A_RUN = 0, 1, 2
# the count line's templates, one per verdict (:data:`VERDICTS`)
COUNTS = (N_("{n} reproduced exactly"), N_("{n} within rounding"), N_("{n} not reproduced"), N_("{n} undecided"),
          N_("{n} interrupted"), N_("{n} cannot be reproduced"))
KERNELS = ("DEFAULT", "AVX2", "AVX512")  # torch's x86 kernels, in order: a CPU that has one has those before it


def saved_config(run_dir: Path, text_file: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The config to run as plain data, and its file: ``summary.json``'s ``config``, else
    ``.hydra/config.yaml`` (whole-string ``${key}`` references resolved). Raises RunDirError or ConfigError
    (one line): a ``_target_`` but ``optimizer._target_``, a ``???``, a ``text_file`` without ``--text-file``."""
    path = run_dir / safe_read.SUMMARY
    try:
        data = safe_read.read_json_data(path, root=run_dir).get("config")
    except (RunDirError, AttributeError):  # no summary (check_original says so), or not a mapping
        data = None
    if not isinstance(data, dict):
        path = run_dir / safe_read.CONFIG
        try:
            data = safe_read.read_config(run_dir, resolve=False)
        except safe_read.MissingRunFile:
            raise safe_read.MissingRunFile(path, "missing (RUN_DIR must be a run or sweep-job folder made by "
                                           "attnlab)") from None
    for key, value in safe_read.special_keys(data):
        if key != "optimizer._target_":  # the only instantiation key a saved config may hold
            shown = value if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
            raise ConfigError(key, shown, _("a saved config may name a _target_ only at optimizer._target_ (nothing "
                                            "else is ever instantiated; in {path})").format(
                path=printable(str(path), 300)))
    if path.name != safe_read.SUMMARY:
        data = safe_read.resolve_references(data, path)
    for key, value in safe_read.walk(data):
        if value == "???":  # OmegaConf's "missing": merged onto the schema it would silently become the default
            raise ConfigError(key, value, N_("a missing value in a saved config (the run recorded no value)"))
    if data.get("text_file") is not None:
        if text_file is None:
            raise ConfigError("text_file", data["text_file"],
                              N_("a shared config does not choose which file of this machine is read; pass "
                                 "--text-file FILE (the run's text) to reproduce it"))
        data["text_file"] = str(text_file)
    elif text_file is not None:
        raise ConfigError("--text-file", str(text_file), N_("the saved config has no text_file (it uses sentence)"))
    return data, path


def check_original(run_dir: Path, task: str) -> dict[str, Any]:
    """The original's summary, after checking what the comparison reads: the status, every row and column
    of ``metrics.csv``, every member (CRC) of the npz, none attnlab does not write. Raises RunDirError."""
    path = run_dir / safe_read.SUMMARY
    try:
        summary = safe_read.read_summary(run_dir)
    except safe_read.MissingRunFile:
        raise safe_read.RunFileError(path, "missing (the run never started); nothing to reproduce") from None
    status = summary.get("status")
    if status not in runs.RAN:
        why = {"running": "says running: the run is still going or was killed",
               "failed": f"says failed: {printable(summary.get('error'), 200)}"}.get(
            status, f"has unknown status {printable(repr(status), 60)}")
        raise safe_read.RunFileError(path, f"{why}; nothing to reproduce")
    if task == "walkthrough":
        name, members = safe_read.WALKTHROUGH, safe_read.WALKTHROUGH_MEMBERS
    else:
        safe_read.read_run_metrics(run_dir)
        verdict.metric_columns(run_dir)  # a column attnlab does not write is refused
        name, members = safe_read.ATTENTION, safe_read.ATTENTION_MEMBERS
    safe_read.read_npz(run_dir / name, members, root=run_dir, strict=True)  # every member, CRC checked
    return summary


def stamped(prefix: str) -> Path:
    """``PREFIX-<YYYYmmdd-HHMMSS.ffffff>``."""
    return Path(f"{prefix}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S.%f')}")


class Plan(NamedTuple):
    """A run to reproduce: its folder (resolved), the new one, the config to run (typed and as data), the
    original's summary, the tokens (:func:`checks.validated_tokens`: checked and tokenized once)."""

    run_dir: Path
    out: Path
    cfg: DictConfig
    data: dict[str, Any]
    summary: dict[str, Any]
    tokens: Tokens


def prepare(run_dir: Path, out: Path | None, text_file: Path | None = None) -> Plan:
    """The :class:`Plan` after every check that needs no torch; ``out`` defaults to ``RUN_DIR-repro-<time>``
    beside the run, for a sweep's job ``SWEEP_DIR-repro-<time>/JOB``. Raises RunDirError / ConfigError /
    TokenizerError; writes nothing."""
    if not Path(run_dir).is_dir():
        raise RunDirError(_("{path}: not a directory").format(path=printable(str(run_dir), 300)))
    run_dir = Path(run_dir).resolve()
    data, source = saved_config(run_dir, text_file)
    try:
        cfg = apply_schema(literal(data))  # a ${ left in the data is text, never interpolated
    except ConfigError as err:
        raise ConfigError(err.key, err.value, _("{allowed} (in {path})").format(
            allowed=err.allowed, path=printable(str(source), 300))) from None
    summary = check_original(run_dir, plain(cfg.task))
    if out is None:
        sweep = run_dir.parent
        in_sweep = (sweep / "multirun.yaml").is_file()  # a sweep folder keeps only its own jobs
        out = stamped(f"{sweep}-repro") / run_dir.name if in_sweep else stamped(f"{run_dir}-repro")
    if (problem := safe_read.output_problem(Path(out), [run_dir])) is not None:
        raise RunDirError(problem)
    tokens = checks.validated_tokens(cfg)  # value and text checks (ConfigError / TokenizerError) before any folder
    return Plan(run_dir, Path(out), cfg, data, summary, tokens)


def checked(fn, *args) -> Any:
    """``fn(*args)`` with its output swallowed, or why it failed in one line (a row of the table)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn(*args)
    except AttnlabError as err:
        return printable(str(err), 1500)
    except Exception as err:  # still a row, naming it
        return printable(describe(err), 1500)


def rerun(plan: Plan, out: Path, draw: bool = False) -> Rerun:
    """Re-run a :func:`prepare`d run into ``out`` with this process's torch and kernels and compare. ``draw``:
    figures, TensorBoard and the report page too. Raises ConfigError when its text file changed since."""
    run_dir, _out, cfg, data, summary, tokens = plan
    story = verdict.config_story(run_dir, data) if isinstance(summary.get("config"), dict) else []
    if (recorded_threads := threads.for_reproduction(summary.get("versions"))) is not None:
        cfg.threads = data["threads"] = recorded_threads  # the same reductions, the same bits
    views = {"console": False} if draw else dict.fromkeys(("console", "figures", "tensorboard", "report"), False)
    cfg.logging.update(views)  # the verdict is the output; the numbers do not depend on the views
    if isinstance(data.get("logging"), dict):
        data["logging"].update(views)
    result = run_job(cfg, out, key="--out", recorded={"reproduced_from": str(run_dir)}, tokens=tokens,
                     saved={"config": data})  # the config it runs saved beside it
    if result.bad_input:  # checked by prepare: only a text file that changed since can get here
        raise ConfigError("text_file", data.get("text_file"), result.error or "refused")
    status = "interrupted" if result.late_signal is not None else result.status  # Ctrl-C after its last step
    now = artifacts.environment(str(cfg.device))
    diffs = verdict.compare_runs(run_dir, out) if status != "interrupted" else []
    return Rerun(str(out), now["cpu_capability"], {k: now.get(k) for k in (*verdict.BITS, "torch_threads")},
                 status, diffs, story)


def _use_kernels(kernels: str, lang: str) -> None:
    """A worker's initializer: torch loaded with ``kernels`` (``ATEN_CPU_CAPABILITY``, read once as torch
    loads; "": this machine's); the command's ``lang``; Ctrl-C left to the command. RuntimeError when torch
    was loaded before."""
    i18n.set_language(lang)
    if "torch" in sys.modules:
        raise RuntimeError("torch was loaded before the kernels were chosen")
    if kernels:
        os.environ["ATEN_CPU_CAPABILITY"] = kernels.lower()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()  # a killed command leaves no worker behind
    import torch  # noqa: F401  (once per worker, while the others start)


@contextlib.contextmanager
def _sigint_ignored():
    """Ctrl-C ignored meanwhile: a worker started now inherits it from its first instruction."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _rank(kernels: str) -> int:
    return KERNELS.index(kernels) if kernels in KERNELS else -1


def verify(plans: Sequence[Plan | str], jobs: int = 1, draw: bool = False) -> list[Verdict]:
    """The verdict on each :func:`prepare`d run (a str: why it cannot be reproduced; :func:`verdict.decide`):
    re-run on the kernels it recorded when this CPU has them, else on its own, then on each other kernel path
    here if that differs. At most ``jobs`` processes: this one, a worker pool per other kernel setting (torch
    starts once per worker, not once per run), then more workers of this CPU's kernels. Never raises but
    KeyboardInterrupt before it starts (a run not finished then is ``interrupted``)."""
    errors = {i: plan for i, plan in enumerate(plans) if isinstance(plan, str)}
    recorded = [{} if i in errors else plan.summary.get("versions") or {} for i, plan in enumerate(plans)]
    machine = platform.machine()
    asked = {i: v.get("cpu_capability") if v.get("machine") == machine and v.get("cpu_capability") in KERNELS
             else "" for i, v in enumerate(recorded) if i not in errors}
    # ATEN_CPU_CAPABILITY in this process's environment caps its kernels below what the CPU may have: then
    # every kernel setting up to the last of KERNELS is asked of a worker, where torch falls back to the best
    # it has (each re-run records the kernels it used, and the verdict compares with those)
    capped = bool(os.environ.get("ATEN_CPU_CAPABILITY"))
    pools: dict[str, ProcessPoolExecutor] = {}  # by ATEN_CPU_CAPABILITY ("": this machine's)
    reruns: list[list[Rerun]] = [[] for _ in plans]
    futures: dict[Future, int] = {}

    def start(i: int, kernels: str | None, suffix: str = "", workers: int = 1) -> Future | None:
        """Re-run plan ``i`` into its out + ``suffix`` in a worker of ``kernels`` (None: in this process)."""
        args = (rerun, plans[i], Path(f"{plans[i].out}{suffix}"), draw)
        if kernels is None:
            return take(i, checked(*args))
        if kernels not in pools:
            pools[kernels] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_use_kernels, initargs=(kernels, i18n.language()))
        with _sigint_ignored():  # a Ctrl-C reaches only the runs, which record it
            futures[future := pools[kernels].submit(checked, *args)] = i
        return future

    def take(i: int, result: Rerun | str) -> None:
        if isinstance(result, str):
            errors[i] = result
            return
        reruns[i].append(result)
        if result.status == "interrupted":  # a Ctrl-C reached the run (here or in a worker): the batch stops
            raise KeyboardInterrupt
        if (len(reruns[i]) == 1 and result.diffs and not result.story and not result.made_like(recorded[i])
                and not any(d.rounding_cannot for d in result.diffs)):
            for kernels in ("DEFAULT", *(k for k in KERNELS if 0 < _rank(k) < top), ""):
                if (kernels or native) != result.kernels:  # every other kernel path here: is the original one?
                    start(i, kernels or None, f"-{(kernels or native).lower()}")

    try:
        early = "" if capped else "DEFAULT"  # capped: this process's own kernels may be DEFAULT's
        for i, a in asked.items():  # DEFAULT's worker starts first; this machine's kernels known next
            if early and a == early:
                start(i, a)
        with interrupts.deferred(), interrupts.shielded():  # a Ctrl-C never cuts torch's import short
            import torch  # loaded here

            native = torch.backends.cpu.get_cpu_capability()
            stopped = interrupts.requested()
        top = len(KERNELS) if capped else _rank(native)
        if stopped is not None:
            raise KeyboardInterrupt
        here = []
        for i, a in asked.items():
            if a and a not in (early, native) and _rank(a) < top:
                start(i, a)
            elif not a or a != early:
                here.append(i)
        extra = max(0, jobs - 1 - len(pools))  # workers of this machine's kernels take from the front
        ahead = {i: start(i, "", workers=extra) for i in here} if extra and len(here) > 1 else {}
        for i in reversed(here):  # this process takes from the back what no worker has started
            if i not in ahead or ahead[i].cancel():
                futures.pop(ahead.get(i), None)
                start(i, None)
        while futures:
            done, _pending = wait(list(futures), return_when=FIRST_COMPLETED)
            for future in done:
                take(futures.pop(future), future.result())
    except KeyboardInterrupt:
        pass  # the runs not finished are interrupted
    finally:
        with _sigint_ignored():  # the workers end their runs within a step; none outlives the command
            for pool in pools.values():
                pool.shutdown(cancel_futures=True)
    return [Verdict(CANNOT, errors[i]) if i in errors else verdict.decide(recorded[i], reruns[i], reruns[i][0].story)
            if reruns[i] else Verdict(INTERRUPTED, _(STOPPED), [], str(plan.out)) for i, plan in enumerate(plans)]


def verdict_row(judged: Verdict) -> dict[str, Any]:
    """A verdict as a table row: ``verdict`` (its :data:`VERDICTS` key), ``differs`` (the quantities, those
    no rounding makes first; or why it cannot be reproduced or decided), ``reproduction``."""
    names = ", ".join(dict.fromkeys(d.quantity for d in judged.diffs))
    differs = names or (judged.why if judged.key in (CANNOT, INTERRUPTED) else None)
    if judged.key == verdict.UNDECIDED:
        differs = f"{names}: {judged.why}"
    return {"verdict": judged.key, "differs": printable(differs, 600) if differs else None,
            "reproduction": judged.out}


def verdict_table(rows: Sequence[dict[str, Any]], out: Path) -> str:
    """The verdict table of ``rows`` (``verdict``: a :data:`VERDICTS` key) and its count line."""
    counts = Counter(r["verdict"] for r in rows)
    table = format_table([{**r, "verdict": _(r["verdict"])} for r in rows], ["job", "name", "verdict", "differs"]
                         if any(r["name"] for r in rows) else ["job", "verdict", "differs"])
    return table + "\n" + _("{n} runs: {counts}; reproductions in {out}").format(
        n=len(rows), counts=_(", ").join(_(t).format(n=counts[v]) for v, t in zip(VERDICTS, COUNTS) if counts[v]),
        out=display_path(out))


def reproduce_many(paths: Sequence[Path], out: Path | None, csv: Path | None, jobs: int, draw: bool = False,
                   force: bool = False, report: Path | None = None, against: Path | None = None) -> int:
    """Every run under ``paths`` verified (:func:`verify`) into ``OUT/NAME`` (default ``PATH-repro-<time>``, or
    ``repro-<time>`` for several PATHs); one verdict table sorted by student (``name``, then folder);
    ``report``: the class's page too (keys differing from ``against``, else from most runs). Exit status 1 when
    a run is not verified, else 0. Raises RunDirError / ConfigError before any run."""
    found = runs.named_runs(paths)
    out = out or stamped(f"{str(paths[0]).rstrip('/')}-repro" if len(paths) == 1 else "repro")
    read = [r for r, _, _ in found]
    page = {"key": "--report", "kind": "page", "force": force, "reads": read}
    if (problem := safe_read.output_problem(out, read, key="--out")) or csv is not None and (
            problem := destination.refusal(csv, key="--csv", kind="csv", force=force, reads=read)) or (
            report is not None and (problem := destination.refusal(report, **page))):
        raise RunDirError(problem)
    assignment = None
    if against is not None:  # a bad preset: one line, nothing run (compare's reader loads torch: not for workers)
        from attnlab.commands.compare import preset_config

        assignment = preset_config(against)
    try:
        plans = [checked(prepare, r, out / name) for r, name, _files in found]  # a run refused is a row
        verdicts, interrupted = verify(plans, jobs, draw), False
    except KeyboardInterrupt:  # before any pool started
        verdicts, interrupted = [Verdict(INTERRUPTED, _(STOPPED))] * len(found), True
    rows = sorted(({"job": name, "name": runs.setting(files.config, "name", str, None),
                    **verdict_row(judged)} for judged, (_r, name, files) in zip(verdicts, found)),
                  key=lambda row: (row["name"] is None, row["name"] or "", row["job"]))
    print(verdict_table(rows, out))
    if csv is not None:
        destination.write(csv, csv_text(rows, ["job", "name", "verdict", "differs", "reproduction"]).encode("utf-8"),
                          key="--csv", kind="csv", force=force, reads=read)
        print(_("csv: {file}").format(file=printable(str(csv), 300)))
    if report is not None:
        records = collect_records(paths, found=found, against=assignment, verdicts={r["job"]: r for r in rows})
        destination.write(report, render(records).encode("utf-8"), **page)
        print(_("report: {file}").format(file=printable(str(report), 300)))
    if interrupted or any(r["verdict"] == INTERRUPTED for r in rows):
        print(_("interrupted: the runs not verified say so"), file=sys.stderr)
    return EXIT_SAME if all(r["verdict"] in verdict.REPRODUCED for r in rows) else EXIT_DIFFERENT


def reproduce(run_dir: Path, out: Path | None = None, text_file: Path | None = None,
              draw: bool = False) -> int:
    """One run verified (:func:`verify`) into ``out`` (default: beside it, :func:`prepare`): its verdict
    printed, notes to stderr; the exit status. Raises RunDirError / ConfigError when it cannot be reproduced."""
    plan = prepare(run_dir, out, text_file)
    run_dir, out, cfg, _data, summary, _tokens = plan
    versions, now = summary.get("versions"), artifacts.environment(str(cfg.device))  # torch loads here
    if (recorded_threads := threads.for_reproduction(versions)) is not None:
        now = {**now, "torch_threads": recorded_threads}  # the reproduction runs with them
    notes = [] if recorded_threads is not None else [
        _("warning: summary.json records no torch_threads; running with threads=auto (losses may differ "
          "in the last bits)")]
    notes += verdict.environment_differences(versions, now)
    if cfg.model.dropout > 0:
        notes.append(_("note: model.dropout={dropout}: the dropout masks are drawn from seed={seed}, so they repeat "
                       "bit for bit with the same torch and machine").format(dropout=cfg.model.dropout, seed=cfg.seed))
    if summary["status"] == "interrupted":
        notes.append(_("note: the run was interrupted after {n} steps; the reproduction runs all train.steps={steps} "
                       "and compares the recorded steps").format(n=summary.get("steps_run"), steps=cfg.train.steps))
    for line in notes:
        print(line, file=sys.stderr)
    judged = verify([plan], 1, draw)[0]
    if judged.key == CANNOT:
        raise RunDirError(judged.why)
    print(verdict.format_verdict(judged))
    print(_("reproduction: {folder}").format(folder=printable(display_path(Path(judged.out)), 300)))
    return EXIT_SAME if judged.key in verdict.REPRODUCED else EXIT_DIFFERENT


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status of ``attnlab-reproduce ARGV`` (module docstring)."""
    argv = speak(argv)
    parser = HelperParser("attnlab-reproduce", _(
        "Re-run saved attnlab runs from their recorded configs into new folders and check their "
                      "files are bitwise identical (or differ by floating-point rounding only); several runs, or "
                      "folders of runs, give one verdict table. A run is read as data: nothing in it is run or "
                      "printed raw."))
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path,
                        help=_("a run folder or a sweep job folder; or several, or folders of runs (a sweep, a "
                               "class's runs): every run below them"))
    parser.add_argument("--out", metavar="DIR", type=Path, help=_("the new run folder (default: "
                        "RUN_DIR-repro-<time> beside RUN_DIR; for a sweep job SWEEP_DIR-repro-<time>/JOB)")
                        + _("; for several runs the folder of their reproductions (default: PATH-repro-<time>)"))
    parser.add_argument("--text-file", metavar="FILE", type=Path,
                        help=_("the text of a run made with text_file= (a saved config never chooses a file to read)"))
    parser.add_argument("--csv", metavar="FILE", type=Path,
                        help=_("write the verdict table as CSV too (one run then gets the table too)"))
    parser.add_argument("-j", "--jobs", metavar="N", type=int, default=os.cpu_count() or 1,
                        help=_("several runs: reproductions at a time (default: this machine's cores)"))
    parser.add_argument("--force", action="store_true", help=_("replace a --csv file that attnlab did not write"))
    parser.add_argument("--report", metavar="FILE", type=Path,
                        help=_("several runs: write the class's page too (attnlab-report's, with each run's verdict)"))
    parser.add_argument("--against", metavar="PRESET.yaml", type=Path,
                        help=_("with --report: show per run the keys whose values differ from this preset (the "
                               "assignment, read as data)"))
    parser.add_argument("--artifacts", action="store_true",
                        help=_("draw each reproduction's figures, TensorBoard and report page too (default: only "
                               "the files the verdict compares)"))
    args = parser.parse_args(argv)
    many = len(args.paths) > 1 or args.csv or args.report or (args.paths[0].is_dir()
                                                               and not runs.is_job_dir(args.paths[0]))
    if args.against is not None and args.report is None:
        parser.error(_("--against names the assignment for the --report page: give --report FILE too"))
    if many and args.text_file is not None:
        parser.error(_("--text-file reproduces one run: pass its RUN_DIR alone"))
    try:
        if many:
            return reproduce_many(args.paths, args.out, args.csv, args.jobs, args.artifacts, args.force, args.report,
                                  args.against)
        return reproduce(args.paths[0], args.out, args.text_file, args.artifacts)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(_("error: {message}").format(message=printable(str(err), 1500)), file=sys.stderr)
        return EXIT_NOT_A_RUN


console_main = console_script(main)


if __name__ == "__main__":
    console_main()
