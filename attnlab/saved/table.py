"""Rows of saved runs as a printed table, the report's table and CSV, by the one column spec
:mod:`attnlab.saved.columns`. The CSV keeps every column (floats as ``repr``, text ``printable``, ``'`` before
a formula); the printed table drops columns by the spec's ``hide``, cuts wide cells, counts Chinese and emoji
as two columns, and speaks the learner's language (headers, statuses, yes/no, ``uniform (1/T)``)."""
from __future__ import annotations

import csv
import io
import math
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab.core.focus import FOCUS_THRESHOLD, Uniform, shown
from attnlab.core.i18n import N_, _
from attnlab.outputs import artifacts
from attnlab.saved.columns import MAX_CELL, OBSERVED, ROW_KEYS, column
from attnlab.saved.runs import as_float
from attnlab.saved.safe_read import printable

CSV_TEXT_LIMIT = 10_000  # characters of one CSV text cell, escapes included (a summary.json holds at most 1 MiB)
FORMULA_START = ("=", "+", "-", "@")  # a spreadsheet reads a cell starting with one of these as a formula
STATUSES = (N_("completed"), N_("diverged"), N_("interrupted"), N_("failed"), N_("running"), N_("killed"),
            N_("missing"), N_("unreadable"))  # translated in a status cell (the CSV keeps summary.json's word)


def header(col: str) -> str:
    """The column's header in the learner's language."""
    return _(column(col).header)


def columns_of(rows: Sequence[dict[str, Any]], table: bool = False) -> list[str]:
    """The row columns, the observation columns some row has, ``path`` (:mod:`attnlab.saved.columns`'
    order); with ``table=True`` those the spec shows for these rows (``hide``), ``error`` last."""
    cols = ROW_KEYS + [c for c in OBSERVED if any(r.get(c) is not None for r in rows)] + ["path"]
    if any("verdict" in r for r in rows):  # attnlab-reproduce's verdicts, beside the student's name
        cols.insert(cols.index("name") + 1, "verdict")
    if table:
        def shows(c: str) -> bool:
            hide, values = column(c).hide, [r.get(c) for r in rows if r.get(c) not in (None, "")]
            return (hide == "never" or hide != "csv" and bool(values)
                    and (hide != "same" or len(rows) == 1 or len({str(v) for v in values}) > 1))
        cols = [c for c in cols if shows(c)]
        cols.sort(key=lambda c: c == "error")  # the long text last
    return cols


def sort_key(v: Any) -> tuple[int, float, str]:
    """Numbers numerically, then text, then empty cells (None, NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return (2, 0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v, "")
    return (1, 0, str(v))


def sort_rows(rows: list[dict[str, Any]], column: str, reverse: bool = False) -> list[dict[str, Any]]:
    """``rows`` sorted by ``column`` (:func:`sort_key`, empty last). KeyError naming the allowed columns."""
    if column not in (allowed := columns_of(rows)):
        raise KeyError(f"--sort {column!r}: unknown column; one of {', '.join(allowed)}")
    empty = [sort_key(r.get(column))[0] == 2 for r in rows]
    present = sorted((r for r, e in zip(rows, empty) if not e), key=lambda r: sort_key(r.get(column)), reverse=reverse)
    return present + [r for r, e in zip(rows, empty) if e]


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):  # bool too: True/False
        return v
    text = printable(v, CSV_TEXT_LIMIT)
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_text(rows: Sequence[dict[str, Any]], cols: Sequence[str] | None = None) -> str:
    """The rows as CSV text (header ``cols``, default :func:`columns_of`)."""
    cols = columns_of(rows) if cols is None else cols
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([cols] + [[_csv_value(r.get(c)) for c in cols] for r in rows])
    return buf.getvalue()


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write :func:`csv_text` to ``path`` atomically."""
    artifacts.atomic_write(Path(path), csv_text(rows))


def _cell(col: str, v: Any, limit: int | None = None) -> str:
    """A cell's text before :func:`clip`, cut at ``limit`` characters (default the column's width + 1)."""
    spec = column(col)
    limit = limit or spec.width + 1
    if v is None or v == "":
        return "-"
    if isinstance(v, Uniform):  # uniform (1/6): 均匀 (1/6)
        n = str(v).rpartition("/")[2].rstrip(")")
        return printable(_("uniform (1/{T})").format(T=n) if n.isdigit() else str(v), limit)
    if col in ("focus_token", "focus_target"):
        return printable(shown(str(v)), limit)
    if col == "status" and v in STATUSES:
        return _(v)
    if isinstance(v, bool):
        return _("yes") if v else _("no")
    if isinstance(v, float):
        return format(v, spec.fmt or (".2e" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5) else ".4f"))
    if isinstance(v, int):
        return str(v)
    if col == "heads_focus":
        v = str(v).replace(":uniform=", f":{_('uniform')}=")
    return printable(v, limit)


def cell_text(col: str, v: Any) -> str:
    """A cell as :func:`format_table` prints it."""
    return clip(_cell(col, v), column(col).width)


def page_cells(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One row's :func:`page_cell` per column of attnlab-report's runs table."""
    return {c: page_cell(c, row.get(c)) for c in columns_of([row]) if column(c).hide != "csv"}


def page_cell(col: str, v: Any) -> dict[str, Any]:
    """``text`` (:func:`cell_text`), ``full`` when ``text`` is cut, and ``value``, which :func:`page_table`
    sorts by and leaves off the page."""
    cell = {"text": cell_text(col, v), "value": v}
    full = _cell(col, v, CSV_TEXT_LIMIT)  # a cut cell (clip's … or printable's …[+N chars]): whole on hover
    if cell["text"].endswith(("…", " chars]")) and full != cell["text"]:
        cell["full"] = full
    return cell


def page_table(tables: Sequence[dict[str, dict]]) -> tuple[list[dict[str, Any]], list[dict[str, dict]]]:
    """The printed table's columns (``key``, ``title``, ``right``) and each run's :func:`page_cells`
    with ``sort``, its place in :func:`sort_rows`' order by that column (ties share one; None when empty)."""
    rows = [{c: cell["value"] for c, cell in t.items()} for t in tables]
    cols = columns_of(rows, table=True)
    columns = [{"key": c, "title": header(c), "right": all(sort_key(r.get(c))[0] != 1 for r in rows)}
               for c in cols]
    ranked: list[dict[str, dict]] = [{} for _ in tables]
    for c in cols:
        keys = [sort_key(r.get(c)) for r in rows]
        place = {k: i for i, k in enumerate(sorted({k for k in keys if k[0] < 2}))}
        for out, t, k in zip(ranked, tables, keys):
            if c in t:
                out[c] = {**{n: v for n, v in t[c].items() if n != "value"}, "sort": place.get(k)}
    return columns, ranked


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 0 if unicodedata.combining(ch) else 1
               for ch in text)


def clip(text: str, n: int = MAX_CELL) -> str:
    """``text`` on one line, cut to ``n`` display columns with ``…``."""
    text = " ".join(text.split())  # one line
    if _width(text) <= n:
        return text
    while _width(text) > n - 1:  # a cell is at most a few hundred characters
        text = text[:-1]
    return text + "…"


def distribution(rows: Sequence[dict[str, Any]]) -> str | None:
    """One line over the completed training rows with a focus (at least 2, one focus token): its targets
    at the last snapshot, its weight (range, median, how many above FOCUS_THRESHOLD), the final loss."""
    done = [r for r in rows if r.get("status") == "completed" and r.get("snapshot_step") is not None
            and isinstance(r.get("focus_weight"), float) and isinstance(r.get("final_loss"), (int, float))]
    if len(done) < 2 or len({r.get("focus_token") for r in done}) > 1:
        return None
    targets = Counter(_cell("focus_target", r["focus_target"]) for r in done).most_common()
    w = np.array([r["focus_weight"] for r in done])
    loss = np.array([as_float(r["final_loss"]) for r in done])
    n, above = len(done), int((w > FOCUS_THRESHOLD).sum())
    return _("{n} runs, {token} at the last snapshot → {targets}; weight {low:.2f}–{high:.2f} (median "
             "{median:.2f}), above {threshold} in {above} of {n}; final loss {loss_low}–{loss_high} (median "
             "{loss_median})").format(
        n=n, token=_cell("focus_token", done[0]["focus_token"]), targets=", ".join(f"{t} {k}" for t, k in targets),
        low=w.min(), high=w.max(), median=np.median(w), threshold=FOCUS_THRESHOLD, above=above,
        loss_low=_cell("", loss.min()), loss_high=_cell("", loss.max()), loss_median=_cell("", float(np.median(loss))))


def format_table(rows: Sequence[dict[str, Any]], cols: Sequence[str] | None = None) -> str:
    """The rows as an aligned plain-text table (``cols``: these columns, default the table's)."""
    cols = columns_of(rows, table=True) if cols is None else cols
    head = [header(c) for c in cols]
    body = [[cell_text(c, r.get(c)) for c in cols] for r in rows]
    widths = [max(_width(x) for x in [h] + [b[i] for b in body]) for i, h in enumerate(head)]
    numeric = {c for c in cols if all(sort_key(r.get(c))[0] != 1 for r in rows)}  # numbers or empty: right-aligned

    def line(cells: Sequence[str]) -> str:
        pads = [" " * (w - _width(x)) for x, w in zip(cells, widths)]
        return "  ".join(p + x if c in numeric else x + p for c, x, p in zip(cols, cells, pads)).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(b) for b in body])
