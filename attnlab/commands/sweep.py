"""Sweeps: job folder names (``hydra.sweep.subdir``, e.g. ``0_model.d_model=6``) and the table printed
at the end of every multirun, read from disk as ``attnlab-compare`` reads it."""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, read_write

from attnlab.core.files import printable
from attnlab.core.i18n import _
from attnlab.saved.answers import answer, table_columns
from attnlab.saved.runs import broken, collect_rows
from attnlab.saved.table import distribution, format_table, write_csv

MAX_NAME_BYTES = 160  # well under the 255-byte file-name limit of common filesystems
EXIT_SOME_JOBS_FAILED = 1

_UNSAFE = re.compile(r'[/\\\x00-\x1f\x7f:*?"<>|]|\s')  # separators, controls, what NTFS forbids, whitespace
# names Windows reserves for devices, also with an extension (CON, nul.txt, COM1); matched case-blind
_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(COM|LPT)[0-9¹²³])(\..*)?", re.IGNORECASE)
_ESCAPED = re.compile(r"\\([\\()\[\]{}:=, \t])")


def job_dirname(num: Any, override_dirname: Any = "") -> str:
    """``"{num}_{override_dirname}"`` as one folder name valid on every platform's file system (NTFS's
    rules are the strictest): Hydra's quotes and escapes dropped; separators, control characters,
    whitespace, ``: * ? " < > |``, the ``$`` of ``${`` and a trailing dot as ``_``; a name Windows
    reserves (``CON``, ``nul.txt``, ``COM1``) prefixed by ``_``; at most :data:`MAX_NAME_BYTES` UTF-8
    bytes (a cut name ends in ``~`` + 8 hex digits of its sha1).

    >>> job_dirname(1, 'sentence="a/b c"')
    '1_sentence=a_b_c'
    """
    rest = _ESCAPED.sub(r"\1", str(override_dirname or "")).replace('"', "").replace("'", "")
    name = _UNSAFE.sub("_", f"{num}_{rest}" if rest else f"{num}")
    name = name.replace("${", "_{")  # Hydra keeps the folder in its config, where ${ would interpolate
    raw = name.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        cut = raw[: MAX_NAME_BYTES - 9].decode("utf-8", errors="ignore")
        name = f"{cut}~{hashlib.sha1(raw).hexdigest()[:8]}"
    name = re.sub(r"\.+$", lambda m: "_" * len(m.group()), name)  # (spaces are _ already)
    return f"_{name}" if _RESERVED.fullmatch(name) else name


def name_by_swept_keys(config: DictConfig) -> None:
    """Make the jobs of the sweep ``config`` (Hydra's, at its start) name their folders by the keys that vary:
    the keys of the overrides with one value (``seed=1``) join Hydra's ``override_dirname.exclude_keys``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    typed = OverridesParser.create().parse_overrides(OmegaConf.to_container(config.hydra.overrides.task))
    excluded = [*OmegaConf.to_container(config.hydra.job.config.override_dirname.exclude_keys),
                *(o.key_or_group for o in typed if not o.is_sweep_override())]
    with read_write(config.hydra.overrides):
        config.hydra.overrides.hydra.append("hydra.job.config.override_dirname.exclude_keys=["
                                            + ",".join(f"'{key}'" for key in dict.fromkeys(excluded)) + "]")


def summarize(sweep_dir: Path) -> int:
    """Print the jobs' table of ``sweep_dir`` (a row per job folder, read or not) and write ``summary.csv``.
    Returns 1 when a job did not complete, has a file that cannot be read, or there is no job, else 0."""
    rows = collect_rows([Path(sweep_dir)], sweep_end=True)
    if not rows:
        print(_("sweep summary: no job folders under {path}").format(path=sweep_dir), file=sys.stderr)
        return EXIT_SOME_JOBS_FAILED
    csv_path = Path(sweep_dir) / "summary.csv"
    write_csv(rows, csv_path)
    bad = [r for r in rows if r["status"] != "completed"]
    damaged = [r for r in rows if r["status"] == "completed" and broken(r)]
    print("\n" + format_table(rows, table_columns(rows)))
    if line := distribution(rows):
        print(line)
    if text := answer(rows):
        print("\n" + text)
    statuses = ", ".join(sorted({printable(r["status"], 40) for r in bad}))
    print("\n" + (_("1 job") if len(rows) == 1 else _("{n} jobs")).format(n=len(rows))
          + _(", {n} completed").format(n=len(rows) - len(bad))
          + (_(" ({n} with files that cannot be read)").format(n=len(damaged)) if damaged else "")
          + (_(", {n} not completed ({statuses})").format(n=len(bad), statuses=statuses) if bad else "")
          + _("; summary: {path}").format(path=csv_path), flush=True)
    return EXIT_SOME_JOBS_FAILED if bad or damaged else 0
