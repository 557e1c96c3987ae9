"""``attnlab-reproduce RUN_DIR [--out DIR] [--text-file FILE]``: re-run a saved run from the config it
recorded (read as data, :mod:`attnlab.saved.safe_read`) and compare the two bit for bit
(:mod:`attnlab.saved.verdict`); when the run recorded other kernels, BLAS, torch or machine, a second
reproduction with other kernels tells rounding from a different run. Exit status 0 identical or within
rounding, 1 different, 2 not a run that can be reproduced (one line; ``HYDRA_FULL_ERROR=1`` raises
instead). ``attnlab-reproduce PATH... [--csv FILE] [-j N]``: one verdict table (:func:`reproduce_many`).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import io
import multiprocessing
import os
import subprocess
import sys
from argparse import SUPPRESS
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import yaml

from attnlab.commands.arguments import HelperParser, speak
from attnlab.commands.job import run_job
from attnlab.core import checks, threads
from attnlab.core.config import apply_schema, literal, plain
from attnlab.core.errors import AttnlabError, ConfigError, RunDirError, describe
from attnlab.core.files import printable
from attnlab.core.i18n import N_, _, language
from attnlab.outputs import artifacts, destination, rundir, streams
from attnlab.outputs.console import display_path
from attnlab.saved import runs, safe_read
from attnlab.saved.table import csv_text, format_table
from attnlab.saved.verdict import Difference, compare_runs, environment_differences, format_verdict, within_rounding

EXIT_SAME, EXIT_DIFFERENT, EXIT_NOT_A_RUN = 0, 1, 2
BITS = ("cpu_capability", "blas", "torch", "machine", "device")  # with torch_threads: what decides the bits
# a row's verdict is its English key (the CSV's data), translated where shown; the count line's templates
VERDICTS = (N_("reproduced exactly"), N_("within rounding"), N_("not reproduced"), N_("cannot be reproduced"))
COUNTS = (N_("{n} reproduced exactly"), N_("{n} within rounding"), N_("{n} not reproduced"),
          N_("{n} cannot be reproduced"))
KERNELS = ("DEFAULT", "AVX2", "AVX512")  # torch's kernels a second reproduction may ask for (a CPU without one fails)


def saved_config(run_dir: Path, text_file: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The config to run as plain data, and the file it came from: ``summary.json``'s ``config``, else
    ``.hydra/config.yaml`` (whole-string ``${key}`` references resolved; in a recorded config ``${`` is
    text). Raises RunDirError (missing, unsafe, not a mapping) or ConfigError, one line: a ``_target_``
    other than ``optimizer._target_``, a ``???``, a ``text_file`` without ``--text-file FILE`` or the reverse."""
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
            raise ConfigError(key, shown, "a saved config may name a _target_ only at optimizer._target_ "
                              f"(nothing else is ever instantiated; in {printable(str(path), 300)})")
    if path.name != safe_read.SUMMARY:
        data = safe_read.resolve_references(data, path)
    for key, value in safe_read.walk(data):
        if value == "???":  # OmegaConf's "missing": merged onto the schema it would silently become the default
            raise ConfigError(key, value, "a missing value in a saved config (the run recorded no value)")
    if data.get("text_file") is not None:
        if text_file is None:
            raise ConfigError("text_file", data["text_file"],
                              "a shared config does not choose which file of this machine is read; pass "
                              "--text-file FILE (the run's text) to reproduce it")
        data["text_file"] = str(text_file)
    elif text_file is not None:
        raise ConfigError("--text-file", str(text_file), "the saved config has no text_file (it uses sentence)")
    return data, path


def check_original(run_dir: Path, task: str) -> dict[str, Any]:
    """The original's summary, after checking what the comparison reads: the status, every row
    of ``metrics.csv``, every member (CRC) of the npz. Raises RunDirError (one line)."""
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
        archive = safe_read.NpzArchive(run_dir / safe_read.WALKTHROUGH, safe_read.WALKTHROUGH_MEMBERS, root=run_dir)
    else:
        safe_read.read_run_metrics(run_dir)
        archive = safe_read.open_attention(run_dir)
    with archive as npz:
        npz.verify()
    return summary


def stamped(prefix: str) -> Path:
    """``PREFIX-<YYYYmmdd-HHMMSS.ffffff>``."""
    return Path(f"{prefix}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S.%f')}")


def reproduce(run_dir: Path, out: Path | None = None, text_file: Path | None = None,
              one_path: bool = False) -> tuple[int, Path, list[Difference], str | None]:
    """Re-run ``run_dir`` into ``out`` (default ``RUN_DIR-repro-<time>`` beside it; for a sweep's job
    ``SWEEP_DIR-repro-<time>/JOB``) and compare; returns ``(exit status, out, differences, why they are
    rounding or None)``; ``one_path``: no second reproduction. Raises RunDirError / ConfigError (one
    line) when it cannot be reproduced or ``out`` is refused. Environment warnings go to stderr first."""
    if not Path(run_dir).is_dir():
        raise RunDirError(f"{printable(str(run_dir), 300)}: not a directory")
    run_dir = Path(run_dir).resolve()
    data, source = saved_config(run_dir, text_file)
    try:
        cfg = apply_schema(literal(data))  # a ${ left in the data is text, never interpolated
    except ConfigError as err:
        raise ConfigError(err.key, err.value, f"{err.allowed} (in {printable(str(source), 300)})") from None
    summary = check_original(run_dir, plain(cfg.task))
    if out is None:  # a sweep folder keeps only its own jobs
        sweep = run_dir.parent
        in_sweep = (sweep / "multirun.yaml").is_file()
        out = stamped(f"{sweep}-repro") / run_dir.name if in_sweep else stamped(f"{run_dir}-repro")
    if (problem := safe_read.output_problem(Path(out), [run_dir])) is not None:
        raise RunDirError(problem)
    tokens = checks.validated_tokens(cfg)  # value and text checks (ConfigError / TokenizerError) before any folder
    # the environment: the recorded thread count (the same reductions, the same bits), the rest warned about
    versions = summary.get("versions")
    recorded_threads = threads.for_reproduction(versions)
    now = artifacts.environment(str(cfg.device))
    notes = [_("warning: summary.json records no torch_threads; running with threads=auto (losses may differ "
               "in the last bits)")] if recorded_threads is None else []
    if recorded_threads is not None:
        cfg.threads, now = recorded_threads, {**now, "torch_threads": recorded_threads}
    notes += environment_differences(versions, now)
    if cfg.model.dropout > 0:
        notes.append(_("note: model.dropout={dropout}: the dropout masks are drawn from seed={seed}, so they repeat "
                       "bit for bit with the same torch and machine").format(dropout=cfg.model.dropout, seed=cfg.seed))
    if summary["status"] == "interrupted":
        notes.append(_("note: the run was interrupted after {n} steps; the reproduction runs all train.steps={steps} "
                       "and compares the recorded steps").format(n=summary.get("steps_run"), steps=cfg.train.steps))
    for line in notes:
        print(line, file=sys.stderr)
    # the run: into a folder claimed first (new or empty, ours alone), the config it ran saved beside it
    out = Path(out)
    rundir.claim(out, key="--out")
    try:
        (out / ".hydra").mkdir(parents=True, exist_ok=True)
        artifacts.atomic_write_text(out / safe_read.CONFIG, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    except BaseException:
        rundir.abandon(out)
        raise
    cfg.logging.console = False  # the verdict is the output; the numbers do not depend on it
    result = run_job(cfg, out, recorded={"reproduced_from": str(run_dir)}, tokens=tokens)
    if result.bad_input:  # checked above: only a text file that changed since can get here
        raise ConfigError("text_file", data.get("text_file"), result.error or "refused")
    diffs = compare_runs(run_dir, out)
    rounding = None if not diffs or one_path else _rounding(run_dir, out, diffs, versions, now, text_file)
    return (EXIT_SAME if not diffs or rounding else EXIT_DIFFERENT), out, diffs, rounding


def _rounding(run_dir: Path, out: Path, diffs: list[Difference], versions: Any, now: dict[str, Any],
              text_file: Path | None) -> str | None:
    """Why ``diffs`` are rounding (:func:`attnlab.saved.verdict.within_rounding`), from a second reproduction
    into ``OUT-<kernels>`` with the run's kernels (else DEFAULT); None when the run recorded this machine's
    kernels, BLAS and torch (rounding explains nothing), or this machine has no second kernel path."""
    versions = versions if isinstance(versions, dict) else {}
    made, here = versions.get("cpu_capability"), now["cpu_capability"]
    path = made if made in KERNELS and made != here else "DEFAULT" if here != "DEFAULT" else None
    if path is None or all(versions.get(key) == now.get(key) for key in BITS):
        return None
    other = out.with_name(f"{out.name}-{path.lower()}")
    args = [sys.executable, "-m", "attnlab.commands.reproduce", str(run_dir), "--out", str(other), "--one-path",
            "--lang", language(),
            *(["--text-file", str(text_file)] if text_file is not None else [])]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": path.lower(), "HYDRA_FULL_ERROR": "0"}
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except KeyboardInterrupt:  # the child is interrupted too: no second opinion
        done = subprocess.CompletedProcess(args, -2, "", "interrupted")
    ran = done.returncode in (EXIT_SAME, EXIT_DIFFERENT)
    print(_("reproduction with {path} kernels: {result}").format(path=path, result=printable(display_path(other), 300)
          if ran else _("failed: {error}").format(error=printable(done.stderr.strip()[-300:], 300))), file=sys.stderr)
    return within_rounding(diffs, run_dir, out, other, made, here, path) if ran else None


def verdict_row(run_dir: Path, out: Path) -> dict[str, Any]:
    """The verdict row of :func:`reproduce` ``run_dir`` into ``out``: ``verdict`` (:data:`VERDICTS`), ``differs``
    (what differs, what rounding does not explain first; or why it cannot be reproduced). Never raises."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            _, out, diffs, rounding = reproduce(run_dir, out)
    except Exception as err:  # AttnlabError: one line; anything else is still a row, naming it
        return {"verdict": VERDICTS[3], "differs": printable(str(err) if isinstance(err, AttnlabError) else
                                                             describe(err), 300)}
    names = [d.quantity for d in diffs if d.rounding is False] + [d.quantity for d in diffs if d.rounding is not False]
    return {"verdict": VERDICTS[0 if not diffs else 1 if rounding else 2], "differs": ", ".join(names) or None,
            "reproduction": str(out)}


def verdict_table(rows: Sequence[dict[str, Any]], out: Path) -> str:
    """The verdict table of ``rows`` (``verdict``: a :data:`VERDICTS` key) and its count line, in the
    learner's language, aligned by display width."""
    counts = Counter(r["verdict"] for r in rows)
    table = format_table([{**r, "verdict": _(r["verdict"])} for r in rows], ["job", "name", "verdict", "differs"]
                         if any(r["name"] for r in rows) else ["job", "verdict", "differs"])
    return table + "\n" + _("{n} runs: {counts}; reproductions in {out}").format(
        n=len(rows), counts=_(", ").join(_(t).format(n=counts[v]) for v, t in zip(VERDICTS, COUNTS) if counts[v]),
        out=display_path(out))


def reproduce_many(paths: Sequence[Path], out: Path | None, csv: Path | None, jobs: int, force: bool = False) -> int:
    """Every run under ``paths`` reproduced into ``OUT/NAME`` (default ``PATH-repro-<time>`` for one PATH, else
    ``repro-<time>``), ``jobs`` at a time in worker processes (torch's seed and threads are per process); one
    verdict table. Exit status 1 when a run is not reproduced (or cannot be), else 0. Raises RunDirError."""
    found = runs.named_runs(paths)
    out = out or stamped(f"{str(paths[0]).rstrip('/')}-repro" if len(paths) == 1 else "repro")
    read = [r for r, _, _ in found]
    if (problem := safe_read.output_problem(out, read, key="--out")) or csv is not None and (
            problem := destination.refusal(csv, key="--csv", kind="csv", force=force, reads=read)):
        raise RunDirError(problem)
    with ProcessPoolExecutor(max(1, min(jobs, len(found))), mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(verdict_row, [r for r, _, _ in found], [out / name for _, name, _ in found]))
    rows = [{"job": name, "name": runs.setting(runs.read_run(r, root).config, "name", str, None), **row}
            for (r, name, root), row in zip(found, done)]
    print(verdict_table(rows, out))
    if csv is not None:
        destination.write(csv, csv_text(rows, ["job", "name", "verdict", "differs", "reproduction"]).encode("utf-8"),
                          key="--csv", kind="csv", force=force, reads=read)
        print(_("csv: {file}").format(file=printable(str(csv), 300)))
    return EXIT_DIFFERENT if any(r["verdict"] in VERDICTS[2:] for r in rows) else EXIT_SAME


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status of ``attnlab-reproduce ARGV``: 0 same or within rounding, 1 different, 2 not a run;
    for several runs 0 every run reproduced, 1 some not (:func:`reproduce_many`), 2 no run."""
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
    parser.add_argument("--one-path", action="store_true", help=SUPPRESS)  # the second reproduction
    args = parser.parse_args(argv)
    many = len(args.paths) > 1 or args.csv or (args.paths[0].is_dir() and not runs.is_job_dir(args.paths[0]))
    if many and args.text_file is not None:
        parser.error(_("--text-file reproduces one run: pass its RUN_DIR alone"))
    try:
        if many:
            return reproduce_many(args.paths, args.out, args.csv, args.jobs, args.force)
        code, out, diffs, rounding = reproduce(args.paths[0], args.out, args.text_file, args.one_path)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(_("error: {message}").format(message=printable(str(err), 1500)), file=sys.stderr)
        return EXIT_NOT_A_RUN
    print(format_verdict(diffs, rounding))
    print(_("reproduction: {folder}").format(folder=printable(display_path(out), 300)))  # relative below cwd
    return code


def console_main() -> None:
    streams.install()
    sys.exit(main())


if __name__ == "__main__":
    console_main()
