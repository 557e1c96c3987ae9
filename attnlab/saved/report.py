"""``attnlab-report PATH... [-o FILE]``: one offline HTML page that shows attention learning.

One run gives its detail view: a step scrubber over the snapshots (slider, play/pause, arrow
keys), the attention heatmap (rows = query tokens, columns = key tokens, each row sums to 1;
tutorial §4.3 and §5) with token labels and cell values, a head selector (each head and their
mean), hover a query token to highlight its row and list where it attends (click locks it), the
loss curve on a log axis with the current step marked, how the focus token's attention moves
over training, and the run's status, steps-to-threshold, config and versions. Two or more runs
(or a sweep dir) give a comparison: a sortable table (the columns of ``attnlab-compare``), small
multiples of every run's attention on one shared step slider (each run shows its nearest
snapshot), the config keys that differ, the losses overlaid; click a run to open its detail view.

Rendering: plain JavaScript with ``<canvas>`` (heatmaps) and SVG (line charts) in one template
(``report_template.html``), no library and no network: a T x T heatmap is one ``putImageData``
per slider step, and the row highlight, lock and shared slider are a few event handlers.

The data is embedded as DESIGN.md says:
``<script type="application/json" id="attnlab-data">{"runs": [...]}</script>``, one record per
run as :func:`load_run` returns it. The JSON is escaped so no text from a run (token, config
value, error) can end the script element (``<``, ``>``, ``&``, U+2028/9 as ``\\uXXXX``), and the
page inserts every piece of text into the DOM as text (``textContent``), never as HTML.

The data side (reading runs into records, downsampling) is :mod:`attnlab.saved.report_data`, and
what it guarantees about a run dir from someone else is said there: every read goes through
:mod:`attnlab.saved.safe_read`, and a damaged run becomes a record whose ``error`` says what is wrong
while the rest of the report is written.
"""
from __future__ import annotations

import argparse
import html
import json
import string
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from attnlab import __version__
from attnlab.core.errors import AttnlabError, RunDirError
from attnlab.outputs import streams
from attnlab.outputs.artifacts import atomic_write_text
from attnlab.saved.report_data import (
    BYTES_PER_WEIGHT,
    DECIMALS,
    MAX_DEPTH,
    MAX_LOSS_POINTS,
    MAX_NODES,
    MAX_STR,
    MIN_FRAMES,
    NPZ_LIMIT,
    WEIGHT_BUDGET,
    collect_records,
    frame_bytes,
    load_run,
    pick_frames,
    share_budget,
    weight_need,
)
from attnlab.saved.runs import find_runs, named_runs
from attnlab.saved.safe_read import output_problem, printable
from attnlab.saved.table import page_table

REPORT = "report.html"
TEMPLATE = Path(__file__).with_name("report_template.html")
DATA_ID = "attnlab-data"
PAGE_BUDGET = 20_000_000  # bytes: a page never needs more

__all__ = [  # the page side, and the data side's API (attnlab.saved.report_data) as it was importable from here
    "BYTES_PER_WEIGHT", "DATA_ID", "DECIMALS", "MAX_DEPTH", "MAX_LOSS_POINTS", "MAX_NODES", "MAX_STR", "MIN_FRAMES",
    "NPZ_LIMIT", "PAGE_BUDGET", "REPORT", "TEMPLATE", "WEIGHT_BUDGET", "cli", "collect_records", "find_runs",
    "frame_bytes", "load_run", "main", "pick_frames", "render", "script_json", "share_budget",
    "weight_need", "write_page", "write_report", "write_run_report", "write_sweep_report",
]


# ============================================================================ the page
class _PageTemplate(string.Template):
    delimiter = "@@"  # never used by the page's own JavaScript or CSS


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``: ``<``, ``>``,
    ``&``, U+2028 and U+2029 written as ``\\uXXXX`` escapes (still the same JSON value), so no
    string can close the element or start a comment."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def render(records: Sequence[dict[str, Any]], title: str | None = None) -> str:
    """The page for ``records`` (one run: detail view; two or more: comparison) as HTML text."""
    if title is None:
        title = (f"attnlab · {records[0]['name']}" if len(records) == 1 else f"attnlab · {len(records)} runs")
    # attnlab-compare's printed table: its columns for these runs, each run's cells with its place in each order
    columns, tables = page_table([rec.get("table") or {} for rec in records])
    data = {"runs": [{**rec, "table": t} for rec, t in zip(records, tables)], "title": printable(title, MAX_STR),
            "table_columns": columns,
            "generator": {"attnlab": __version__, "weight_budget_bytes": WEIGHT_BUDGET,
                          "bytes_per_weight": BYTES_PER_WEIGHT, "decimals": DECIMALS}}
    template = _PageTemplate(TEMPLATE.read_text(encoding="utf-8"))
    return template.substitute(title=html.escape(printable(title, MAX_STR)), data=script_json(data))


def write_page(records: Sequence[dict[str, Any]], out: Path | str, title: str | None = None) -> Path:
    """Write :func:`render` of ``records`` to ``out`` atomically (UTF-8); returns ``out``.
    Raises RunDirError when ``out``'s folder does not exist."""
    out = Path(out)
    if out.is_dir():
        out = out / REPORT
    if not out.parent.is_dir():
        raise RunDirError(f"{out}: folder {out.parent} does not exist")
    atomic_write_text(out, render(records, title))
    return out


def write_report(paths: Iterable[Path | str], out: Path | str) -> Path:
    """One page for the runs under ``paths`` (run dirs and/or sweep dirs: every run dir below
    a sweep dir) written atomically to ``out``; one run gives the detail view, two or more a
    comparison. Returns the path written. Raises RunDirError for a PATH that is not a run/sweep
    dir or an ``out`` whose folder does not exist; damaged runs become records with an error."""
    return write_page(collect_records(paths), out)


def write_run_report(run_dir: Path | str) -> Path:
    """``RUN_DIR/report.html`` for one run (what a training job writes at its end)."""
    run_dir = Path(run_dir)
    return write_page([load_run(run_dir)], run_dir / REPORT)


def write_sweep_report(sweep_dir: Path | str) -> Path:
    """``SWEEP_DIR/report.html`` over every run below ``sweep_dir`` (what a sweep writes at its end)."""
    sweep_dir = Path(sweep_dir)
    return write_report([sweep_dir], sweep_dir / REPORT)


# ============================================================================ CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``attnlab-report PATH... [-o FILE]``: exit 0; 1 when a run has a file that cannot be read
    (the page is written all the same, and a warning line per such run goes to stderr); 2 with
    one line on stderr for a PATH that is not a run or sweep dir, an output that cannot be
    written, or one inside a run dir it reads (except that run's own report.html)."""
    parser = argparse.ArgumentParser(
        prog="attnlab-report",
        description="One offline HTML page of attention over training: a run dir gives its detail view, "
                    "several runs or a sweep dir a comparison.")
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="run dir or sweep dir")
    parser.add_argument("-o", "--out", metavar="FILE", type=Path, default=Path(REPORT),
                        help=f"the page to write (default: ./{REPORT})")
    args = parser.parse_args(argv)
    out = args.out / REPORT if args.out.is_dir() else args.out
    try:
        found = named_runs(args.paths)
        problem = output_problem(out, [r for r, _, _ in found], key="-o", allow=(REPORT,))
        if problem:
            raise RunDirError(problem)
        records = collect_records(args.paths, found=found)
        out = write_page(records, out)
    except (AttnlabError, OSError) as err:
        print(f"attnlab-report: error: {printable(str(err), 1500)}", file=sys.stderr)
        return 2
    for rec in records:  # names and problems are printable already (load_run)
        if rec["problems"]:
            print(f"attnlab-report: warning: {rec['name']}: {'; '.join(rec['problems'])}", file=sys.stderr)
    shown = sum(len(r["steps"]) for r in records)
    total = sum(r["snapshots_total"] for r in records)
    more = f", showing {shown} of {total} snapshots" if shown < total else ""
    print(f"report: {printable(str(out), 300)} ({len(records)} run{'s' if len(records) != 1 else ''}{more}, "
          f"{out.stat().st_size / 1e6:.2f} MB)")
    return 1 if any(rec["problems"] for rec in records) else 0


def cli() -> None:
    """Console-script entry point (``attnlab-report``)."""
    streams.install()
    sys.exit(main())


if __name__ == "__main__":
    cli()
