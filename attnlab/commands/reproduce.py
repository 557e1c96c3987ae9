"""``attnlab-reproduce RUN_DIR [--out DIR] [--text-file FILE]``: re-run a saved run and check it
gives the same numbers.

RUN_DIR may come from someone else: it is read as data only, through :mod:`attnlab.saved.safe_read`
(bounded reads, regular files, no symlinks, no YAML tags). The config ``summary.json`` recorded
(else ``.hydra/config.yaml``) becomes plain data: a ``_target_`` anywhere but
``optimizer._target_`` is refused, a ``${...}`` only resolved when it is a plain reference to
another key, a ``text_file`` only read when ``--text-file FILE`` names it; then it is checked
against the schema. The original's ``summary.json``, ``metrics.csv`` and ``attention.npz`` (or
``walkthrough.npz``) are checked in full before anything runs. The job runs through ``run_job``
into a new folder (``RUN_DIR-repro-<time>`` beside RUN_DIR, or ``--out DIR``), and
:mod:`attnlab.saved.verdict` compares the two bit for bit.

Output: a warning on stderr per difference of the recorded environment, then the verdict on
stdout (``reproduced exactly`` or a table of what differs). Exit status 0 identical, 1
different, 2 RUN_DIR is not a run that can be reproduced (one line; ``HYDRA_FULL_ERROR=1``
shows the traceback).
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import itertools
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from attnlab.core.errors import AttnlabError, ConfigError, RunDirError
from attnlab.outputs import artifacts
from attnlab.outputs.console import display_path
from attnlab.saved import runs, safe_read
from attnlab.saved.safe_read import printable
from attnlab.saved.verdict import Difference, compare_runs, environment_differences, format_verdict

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_NOT_A_RUN = 2
REPRODUCIBLE = runs.RAN  # the statuses whose training wrote its artifacts
ALLOWED_TARGETS = ("optimizer._target_",)  # the only instantiation key a saved config may hold
MAX_JOBS_LISTED = 8  # job folders named when RUN_DIR is a sweep folder
MAX_ENTRIES_SCANNED = 10_000  # entries of a sweep folder looked at to find its jobs
ERROR_LIMIT = 1500  # characters of an error line (a sweep folder lists up to 8 job names)
JOB_NAME_LIMIT = 100  # characters of one job name in that list


def _run_job(cfg, out: Path) -> str:
    """The one call into the job runner (the same code path as ``attnlab``); the status."""
    from attnlab.commands.job import run_job

    result = run_job(cfg, out)
    if result.bad_input:  # checked before: only a text that changed since can get here
        raise ConfigError("<saved config>", None, result.error or "refused")
    return result.status


def job_folders(folder: Path) -> tuple[list[str], int]:
    """Names of the sub-folders of ``folder`` that hold ``.hydra/config.yaml`` (jobs of a sweep),
    sorted, and how many there are; looks at most :data:`MAX_ENTRIES_SCANNED` entries, never
    follows a symlink."""
    names = []
    try:
        with os.scandir(folder) as it:
            for entry in itertools.islice(it, MAX_ENTRIES_SCANNED):
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    hydra = Path(entry.path) / ".hydra"
                    if hydra.is_dir() and not hydra.is_symlink() and (hydra / "config.yaml").is_file():
                        names.append(entry.name)
    except OSError:
        return [], 0
    return sorted(names, key=lambda n: (len(n.split("_")[0]), n)), len(names)


def _recorded_config(run_dir: Path) -> dict[str, Any] | None:
    """The resolved config attnlab recorded in ``summary.json`` (``config``), or None for a run
    of an older attnlab (or a summary that has none, or cannot be read: the config file and
    :func:`check_original` report those)."""
    try:
        summary = safe_read.read_json_data(Path(run_dir) / safe_read.SUMMARY, root=run_dir)
    except RunDirError:
        return None
    config = summary.get("config") if isinstance(summary, dict) else None
    return config if isinstance(config, dict) else None


def read_saved_config(run_dir: Path, text_file: Path | None = None) -> tuple[dict[str, Any], bytes, str | None]:
    """The run's config as checked plain data (see the module docstring), the bytes for the
    reproduction's ``.hydra/config.yaml`` and a warning (or None): the resolved config recorded in
    ``summary.json`` (the values the run used, whatever the environment says now), else
    ``RUN_DIR/.hydra/config.yaml``. With a recorded config, Hydra's file is copied when it says the
    same values; when it is missing, unreadable or says other values (an edited or damaged copy),
    the recorded config is written instead, and the warning names the difference (none for a
    missing file or one holding resolver interpolations, as a preset's ``${attnlab.per_head:...}``:
    those cannot be compared without running a resolver). Raises RunDirError
    (missing, a sweep folder, unsafe or unreadable, not a mapping, an interpolation) or
    ConfigError (a refused ``_target_``, a ``text_file`` without ``--text-file``), one line each."""
    run_dir = Path(run_dir)
    path = run_dir / safe_read.CONFIG
    recorded = _recorded_config(run_dir)
    if recorded is not None:
        import yaml

        data = _checked(recorded, run_dir / safe_read.SUMMARY, text_file, references=False)
        try:  # Hydra's own file goes into the reproduction's .hydra/ as it is when it says what was recorded
            raw = safe_read.read_bytes(path, safe_read.CONFIG_LIMIT, root=run_dir)
            saved = _checked(safe_read.parse_yaml_data(safe_read.decode_utf8(raw, path), path), path, text_file,
                             references=True)
            why = _differences(saved, data)
        except (RunDirError, ConfigError) as err:
            # missing, or holding what attnlab never resolves (a preset's ${attnlab.per_head:...}): it cannot be
            # compared, so the recorded config is saved, silently; anything else unreadable is named
            quiet = (safe_read.MissingRunFile, safe_read.ResolverInterpolation)
            raw, why = None, (str(err) if not isinstance(err, quiet) else None)
        if why is not None or raw is None:
            raw = yaml.safe_dump(recorded, sort_keys=False, allow_unicode=True).encode("utf-8")
        warning = None if why is None else (
            f"warning: {printable(str(path), 300)} is not the config summary.json recorded ({printable(why, 1000)}); "
            "the recorded one runs and is saved as the reproduction's .hydra/config.yaml")
        return data, raw, warning
    try:
        raw = safe_read.read_bytes(path, safe_read.CONFIG_LIMIT, root=run_dir)
    except safe_read.MissingRunFile:
        jobs, n = job_folders(run_dir)
        if jobs:
            shown = ", ".join(printable(j, JOB_NAME_LIMIT) for j in jobs[:MAX_JOBS_LISTED])
            more = f" (+{n - MAX_JOBS_LISTED} more)" if n > MAX_JOBS_LISTED else ""
            raise RunDirError(f"{printable(str(run_dir), 300)}: a sweep folder, not a run; pass a job folder: "
                              f"{shown}{more}") from None
        raise safe_read.MissingRunFile(path, "missing (RUN_DIR must be a run or sweep-job folder made by "
                                       "attnlab)") from None
    data = safe_read.parse_yaml_data(safe_read.decode_utf8(raw, path), path)
    return _checked(data, path, text_file, references=True), raw, None


class _Absent:
    """A key one config has and the other has not (never equal to a config value)."""

    def __repr__(self) -> str:
        return "(no such key)"


_ABSENT = _Absent()


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind: 0 is not False, nor 6 the same as 6.0, in a config."""
    numbers = (bool, int, float)
    return a == b and (type(a) is type(b) or not isinstance(a, numbers) or not isinstance(b, numbers))


def _differences(saved: dict[str, Any], recorded: dict[str, Any]) -> str | None:
    """Which keys of a run's ``.hydra/config.yaml`` (``saved``) differ from the config its
    ``summary.json`` recorded (at most 3 named, each with both values), or None when they agree.
    ``saved`` is read as summary.json records a config (:func:`attnlab.core.config.with_recorded_snapshot_steps`:
    Hydra keeps ``train.snapshot_steps: null``, the record the steps it meant)."""
    from attnlab.core.config import with_recorded_snapshot_steps

    found: list[tuple[str, Any, Any]] = []

    def diff(a: Any, b: Any, key: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in dict.fromkeys([*a, *b]):
                diff(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{key}.{k}" if key else str(k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                diff(x, y, f"{key}[{i}]")
        elif not _same(a, b):  # a value, or a list / mapping against something else: shown whole (shortened)
            found.append((key, a, b))

    diff(with_recorded_snapshot_steps(copy.deepcopy(saved)), recorded, "")
    if not found:
        return None
    shown = ", ".join(f"{printable(key, 100)}: {printable(repr(a), 80)} there, {printable(repr(b), 80)} recorded"
                      for key, a, b in found[:3])
    return shown + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def _checked(data: Any, path: Path, text_file: Path | None, references: bool) -> dict[str, Any]:
    """``data`` (a saved config) checked as the module docstring says; ``references``: resolve
    whole-string ``${key}`` references (Hydra's saved config) — a recorded, resolved config has
    none, and any ``${`` in it is text."""
    if not isinstance(data, dict):
        raise safe_read.RunFileError(path, "not a config (a YAML mapping is expected)")
    for key, value in safe_read.special_keys(data):
        if key not in ALLOWED_TARGETS:
            shown = value if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
            raise ConfigError(key, shown, "a saved config may name a _target_ only at optimizer._target_ "
                              f"(nothing else is ever instantiated; in {printable(str(path), 300)})")
    if references:
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
    return data


def load_saved_config(run_dir: Path, text_file: Path | None = None):
    """``RUN_DIR/.hydra/config.yaml`` as a typed config (:func:`read_saved_config`, then
    ``config.apply_schema``), without importing, instantiating or resolving anything it names.
    Raises RunDirError or ConfigError, one line each."""
    return _typed(read_saved_config(run_dir, text_file)[0], run_dir)


def _typed(data: dict[str, Any], run_dir: Path):
    from attnlab.core.config import apply_schema, literal

    try:
        return apply_schema(literal(data))  # a ${ left in the data is text, never interpolated
    except ConfigError as err:
        where = printable(str(Path(run_dir) / safe_read.CONFIG), 300)
        raise ConfigError(err.key, err.value, f"{err.allowed} (in {where})") from None


def check_original(run_dir: Path, task: str) -> dict[str, Any]:
    """Read and check everything of the original that the comparison will use, before
    anything runs: ``summary.json`` (a reproducible status, fields of the right types), and for
    training ``metrics.csv`` (every row) and ``attention.npz`` (every member, CRC), for
    ``task=walkthrough`` ``walkthrough.npz``. Returns the summary. Raises RunDirError (one
    line naming the file)."""
    run_dir = Path(run_dir)
    summary_path = run_dir / safe_read.SUMMARY
    try:
        summary = safe_read.read_summary(run_dir)
    except safe_read.MissingRunFile:
        raise safe_read.RunFileError(summary_path, "missing (the run never started); nothing to reproduce") from None
    status = summary.get("status")
    if status not in REPRODUCIBLE:
        why = {"running": "says running: the run is still going or was killed",
               "failed": f"says failed: {printable(summary.get('error'), 200)}"}.get(
            status, f"has unknown status {printable(repr(status), 60)}")
        raise safe_read.RunFileError(summary_path, f"{why}; nothing to reproduce")
    if task == "walkthrough":
        with safe_read.NpzArchive(run_dir / safe_read.WALKTHROUGH, safe_read.WALKTHROUGH_MEMBERS, root=run_dir) as npz:
            npz.verify()
    else:
        safe_read.read_run_metrics(run_dir)
        with safe_read.open_attention(run_dir) as npz:
            npz.verify()
    return summary


def default_out(run_dir: Path) -> Path:
    """``RUN_DIR-repro-<YYYYmmdd-HHMMSS.ffffff>`` beside RUN_DIR (resolved first, so ``.`` or
    ``job/..`` give a real name); for a job of a sweep (its folder has ``multirun.yaml``),
    ``SWEEP_DIR-repro-<time>/JOB`` beside the sweep, so the sweep folder keeps only its own jobs
    (its summary and ``attnlab-compare`` see no extra row)."""
    run_dir = Path(run_dir).resolve()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S.%f")
    sweep = run_dir.parent
    if (sweep / "multirun.yaml").is_file():
        return sweep.parent / f"{sweep.name}-repro-{stamp}" / run_dir.name
    return run_dir.parent / f"{run_dir.name}-repro-{stamp}"


def reproduce(run_dir: Path, out: Path | None = None, stderr=None,
              text_file: Path | None = None) -> tuple[int, Path, list[Difference]]:
    """Re-run ``run_dir`` into ``out`` (default :func:`default_out`) and compare.

    Returns ``(exit status, out, differences)``. Raises RunDirError / ConfigError (one line)
    when ``run_dir`` cannot be reproduced (see the module docstring; the original's artifacts
    are checked before anything runs) or ``out`` is refused (inside RUN_DIR, or already holds a
    finished run). Environment warnings go to ``stderr`` before the run starts. ``text_file``
    replaces the saved config's ``text_file`` (which is refused without it).
    """
    import yaml

    from attnlab.core.config import plain

    stderr = stderr or sys.stderr
    given = Path(run_dir)
    if not given.is_dir():
        raise RunDirError(f"{printable(str(given), 300)}: not a directory")
    run_dir = given.resolve()
    data, raw, warning = read_saved_config(run_dir, text_file)
    cfg = _typed(data, run_dir)
    summary = check_original(run_dir, plain(cfg.task))
    status = summary["status"]
    out = Path(out) if out is not None else default_out(run_dir)
    if out.resolve() == run_dir or run_dir in out.resolve().parents:
        raise RunDirError(f"--out {printable(str(out), 300)}: inside RUN_DIR {printable(str(run_dir), 300)}; "
                          "a reproduction never writes into the run it checks")
    if artifacts.read_summary(out).get("status") in artifacts.FINISHED:
        raise RunDirError(f"--out {printable(str(out), 300)}: already holds a {artifacts.read_summary(out)['status']} "
                          "run; choose another folder (runs are never overwritten)")
    from attnlab.core import checks, tokenizer

    checks.validate(cfg)  # value and text checks (ConfigError / TokenizerError) before any folder is made
    tokenizer.tokenize(cfg)

    from attnlab.core import threads

    versions = summary.get("versions")
    recorded_threads = threads.for_reproduction(versions)
    if recorded_threads is None:
        print("warning: summary.json records no torch_threads; running with threads=auto (losses may differ "
              "in the last bits)", file=stderr)
    else:
        cfg.threads = recorded_threads  # the count the run used: the same reductions, the same bits
    now = artifacts.environment(str(cfg.device))
    if recorded_threads is not None:
        now = {**now, "torch_threads": recorded_threads}
    for line in [*environment_differences(versions, now), *([warning] if warning else [])]:
        print(line, file=stderr)
    if cfg.model.dropout > 0:
        print(f"note: model.dropout={cfg.model.dropout}: the dropout masks are drawn from seed={cfg.seed}, so "
              "they repeat bit for bit with the same torch and machine", file=stderr)
    if status == "interrupted":
        print(f"note: the run was interrupted after {summary.get('steps_run')} steps; the reproduction runs "
              f"all train.steps={cfg.train.steps} and compares the recorded steps", file=stderr)

    from attnlab.outputs import rundir

    rundir.claim(out, key="--out")  # new or empty, and ours alone, before anything is written
    try:
        (out / ".hydra").mkdir(parents=True, exist_ok=True)
        saved = raw if text_file is None else yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode("utf-8")
        artifacts.atomic_write_bytes(out / ".hydra" / "config.yaml", saved)
    except BaseException:
        rundir.abandon(out)
        raise
    cfg.logging.console = False  # the verdict is the output; the numbers do not depend on it
    _run_job(cfg, out)
    artifacts.write_summary(out, reproduced_from=str(run_dir))
    diffs = compare_runs(run_dir, out)
    return (EXIT_SAME if not diffs else EXIT_DIFFERENT), out, diffs


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 same, 1 different, 2 not a run)."""
    parser = argparse.ArgumentParser(
        prog="attnlab-reproduce",
        description="Re-run a saved attnlab run from the config its summary.json recorded (else "
                    "RUN_DIR/.hydra/config.yaml) into a new folder "
                    "and check metrics.csv and attention.npz are bitwise identical. RUN_DIR is read "
                    "as data: nothing in it is instantiated, resolved or printed raw.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder or a sweep job folder")
    parser.add_argument("--out", metavar="DIR", type=Path, default=None,
                        help="the new run folder (default: RUN_DIR-repro-<time> beside RUN_DIR; "
                             "for a sweep job SWEEP_DIR-repro-<time>/JOB)")
    parser.add_argument("--text-file", metavar="FILE", type=Path, default=None,
                        help="the text of a run made with text_file= (a saved config never chooses a file to read)")
    args = parser.parse_args(argv)
    try:
        code, out, diffs = reproduce(args.run_dir, args.out, text_file=args.text_file)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {printable(str(err), ERROR_LIMIT)}", file=sys.stderr)
        return EXIT_NOT_A_RUN
    print(format_verdict(diffs))
    print(f"reproduction: {printable(display_path(out), 300)}")  # relative below the working folder
    return code


def console_main() -> None:
    """``attnlab-reproduce`` console script."""
    from attnlab.outputs import streams

    streams.install()
    sys.exit(main())


if __name__ == "__main__":
    console_main()
