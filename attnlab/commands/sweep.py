"""Sweeps that read well: job folder names, and the summary printed at the end of every multirun.

Job folders. ``conf/config.yaml`` sets ``hydra.sweep.subdir`` to
``${attnlab.job_dir:${hydra.job.num},${hydra.job.override_dirname}}``, e.g.
``0_model.d_model=6,model.init_std=0.02``. Hydra's ``override_dirname`` holds the job's own
overrides (never ``hydra.*`` ones such as ``hydra/launcher=joblib``, so a sweep gets the same
folder names under any launcher), sorted, ``key=value`` joined by ``,``. It is made one safe
folder name by :func:`job_dirname`: the job number first (names are unique within a sweep),
Hydra's quotes and backslash escapes dropped, ``/``, ``\\``, control characters and whitespace as ``_``, at most
:data:`MAX_NAME_BYTES` UTF-8 bytes (longer names are cut and end in ``~`` + 8 hex digits of
a hash of the full name). Chinese and emoji are kept as they are.

The resolvers (this one and ``attnlab.per_head`` of the ``heads`` preset) are registered when
this module is imported (``attnlab.commands.cli`` and ``attnlab.commands.api`` import it, so every job process,
whatever the launcher, has them).

Summary. :func:`summarize` runs once at the end of a multirun, on the machine that started it
(the :class:`attnlab.commands.callbacks.SweepSummary` callback, after every job returned, also with
joblib, submitit and Ray). It reads every job folder under the sweep dir back from disk
(:func:`attnlab.saved.runs.collect_rows`, the same code as ``attnlab-compare``, so the two always
agree), prints the table, writes ``summary.csv`` in the sweep dir atomically, and records the
sweep's exit status in :data:`last_exit_status`: 1 when any job did not complete (failed,
diverged, interrupted, or never wrote its summary) or has a file that cannot be read, else 0.
``attnlab.commands.cli.main`` exits with it after Hydra returns.
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

RESOLVER = "attnlab.job_dir"
MAX_NAME_BYTES = 160  # well under the 255-byte file-name limit of common filesystems
SUMMARY_CSV = "summary.csv"
EXIT_SOME_JOBS_FAILED = 1

# Exit status of the last multirun in this process (None: no multirun ended here).
last_exit_status: int | None = None

_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f]|\s")
_ESCAPED = re.compile(r"\\([\\()\[\]{}:=, \t])")


def job_dirname(num: Any, override_dirname: Any = "", max_bytes: int = MAX_NAME_BYTES) -> str:
    """One safe folder name for a sweep job: ``"{num}_{override_dirname}"`` (just ``"{num}"``
    without overrides) with Hydra's quotes removed, path separators, control characters,
    whitespace and the ``$`` of ``${`` replaced by ``_``, and at most ``max_bytes`` UTF-8 bytes (cut at a character
    boundary, then ``~`` and 8 hex digits of the full name's sha1 so cut names stay distinct).

    >>> job_dirname(1, 'sentence="a/b c"')
    '1_sentence=a_b_c'
    """
    rest = str(override_dirname or "")
    rest = _ESCAPED.sub(r"\1", rest)  # Hydra writes swept unquoted values with \-escapes ("one\ step")
    rest = rest.replace('"', "").replace("'", "")
    name = f"{num}_{rest}" if rest else f"{num}"
    name = _UNSAFE.sub("_", name)
    name = name.replace("${", "_{")  # Hydra stores the job's folder in its config, where ${ would be an interpolation
    if name in (".", ".."):
        name = name.replace(".", "_")
    raw = name.encode("utf-8")
    if len(raw) > max_bytes:
        digest = hashlib.sha1(raw).hexdigest()[:8]
        cut = raw[: max_bytes - 9].decode("utf-8", errors="ignore")
        name = f"{cut}~{digest}"
    return name


def per_head(total: Any, n_heads: Any) -> int:
    """``${attnlab.per_head:TOTAL,${model.n_heads}}``: a size per head that keeps the heads'
    total at ``TOTAL`` (``TOTAL // n_heads``, at least 1), e.g. d_k 4 → 4, 2, 1 for 1, 2, 4 heads
    (the ``heads`` preset). Raises ValueError for non-positive integers."""
    total, n_heads = int(total), int(n_heads)
    if total < 1 or n_heads < 1:
        raise ValueError(f"attnlab.per_head needs positive integers, got {total}, {n_heads}")
    return max(1, total // n_heads)


def register_resolvers() -> None:
    """Register ``${attnlab.job_dir:NUM,OVERRIDE_DIRNAME}`` (:func:`job_dirname`) and
    ``${attnlab.per_head:TOTAL,N_HEADS}`` (:func:`per_head`); idempotent."""
    for name, function in ((RESOLVER, job_dirname), ("attnlab.per_head", per_head)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)


register_resolvers()


def summarize(sweep_dir: Path, print_table: bool = True, csv_name: str = SUMMARY_CSV) -> int:
    """Print the jobs' table of ``sweep_dir`` and write ``csv_name`` in it (one row per job
    folder, columns as :data:`attnlab.saved.runs.COLUMNS` plus the exercise observations present).
    Returns the sweep's exit status (also kept in :data:`last_exit_status`): 1 when a job did
    not complete, has a file that cannot be read, or there is none, else 0. A problem reading
    one job becomes that job's row (status ``missing``/``unreadable``/``running`` and an
    ``error`` naming the file)."""
    global last_exit_status
    from attnlab.saved.runs import broken, collect_rows
    from attnlab.saved.safe_read import printable
    from attnlab.saved.table import format_table, write_csv

    sweep_dir = Path(sweep_dir)
    rows = collect_rows([sweep_dir], sweep_end=True)
    if not rows:
        print(f"sweep summary: no job folders under {sweep_dir}", file=sys.stderr)
        last_exit_status = EXIT_SOME_JOBS_FAILED
        return last_exit_status
    csv_path = sweep_dir / csv_name
    write_csv(rows, csv_path)
    bad = [r for r in rows if r["status"] != "completed"]
    damaged = [r for r in rows if r["status"] == "completed" and broken(r)]
    if print_table:
        print()
        print(format_table(rows))
        print(f"\n{len(rows)} job{'s' if len(rows) != 1 else ''}, {len(rows) - len(bad)} completed"
              + (f" ({len(damaged)} with files that cannot be read)" if damaged else "")
              + (f", {len(bad)} not completed ({', '.join(sorted({printable(r['status'], 40) for r in bad}))})"
                 if bad else "")
              + f"; summary: {csv_path}")
        sys.stdout.flush()
    last_exit_status = EXIT_SOME_JOBS_FAILED if bad or damaged else 0
    return last_exit_status
