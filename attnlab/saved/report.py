"""``attnlab-report PATH... [-o FILE]``: one offline HTML page that shows attention learning. One
run: a step scrubber, the heatmap (tutorial §4.3, §5) with a head selector and row highlight,
the loss curve, the focus token's attention, config and versions. Several runs: a sortable table
(attnlab-compare's), small multiples on one step slider, the differing config keys, the losses.
Plain JavaScript (``report_template.html``), no network; the data is embedded as
``<script type="application/json" id="attnlab-data">`` escaped so no run text ends the element,
and the page inserts text with ``textContent`` only."""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import re
import string
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from attnlab import __version__
from attnlab.core.errors import AttnlabError, RunDirError
from attnlab.core.focus import FOCUS_THRESHOLD, UNIFORM_SPREAD, Uniform
from attnlab.core.i18n import _, language, translations
from attnlab.outputs import destination, streams
from attnlab.outputs.artifacts import atomic_write_text
from attnlab.outputs.fonts import SHIPPED_FONT
from attnlab.saved import safe_read
from attnlab.saved.answers import answer
from attnlab.saved.report_data import BYTES_PER_WEIGHT, DECIMALS, MAX_STR, WEIGHT_BUDGET, collect_records, load_run
from attnlab.saved.runs import named_runs
from attnlab.saved.safe_read import printable
from attnlab.saved.table import distribution, page_table
from attnlab.saved.verdict import read_verdicts

REPORT = "report.html"
TEMPLATE = Path(__file__).with_name("report_template.html")

class _PageTemplate(string.Template):
    delimiter = "@@"  # never used by the page's own JavaScript or CSS


def script_json(data: Any) -> str:
    r"""``data`` as JSON safe inside ``<script>``: ``< > &`` U+2028/9 as ``\uXXXX``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def cjk_font_face(text: str) -> str:
    """A CSS ``@font-face`` "attnlab CJK": the shipped CJK font cut to the characters of ``text`` it has
    (a few kB), so the page's Chinese shows without a CJK font; "" when ``text`` has none."""
    wide = {ch for ch in text if ord(ch) >= 0x2E80}
    if not wide:  # (fontTools is not even imported)
        return ""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(SHIPPED_FONT))
    chars = "".join(sorted(ch for ch in wide if ord(ch) in font.getBestCmap()))
    if not chars:
        return ""
    cutter = subset.Subsetter(subset.Options(layout_features=[], hinting=False, desubroutinize=True))
    cutter.populate(text=chars)
    cutter.subset(font)
    otf = io.BytesIO()
    font.save(otf)
    return ('@font-face { font-family: "attnlab CJK"; font-display: block; src: url(data:font/otf;base64,'
            + base64.b64encode(otf.getvalue()).decode("ascii") + '); }')


def page_messages(page: str) -> list[str]:
    """The English sentences the page shows, each ``tr("...")`` of its script (JSON string literals)."""
    return [json.loads(m) for m in re.findall(r'\btr\(("(?:[^"\\]|\\.)*")[,)]', page)]


def render(records: Sequence[dict[str, Any]]) -> str:
    """The page for ``records`` (one: detail view; more: comparison) as HTML text."""
    title = f"attnlab · {records[0]['name']}" if len(records) == 1 else f"attnlab · {len(records)} runs"
    sentences = list(dict.fromkeys(str(safe_read.select(r["config"], "sentence", "")) for r in records))
    keys = list(dict.fromkeys(k for r in records for k in r.get("differs_keys", ())))
    title += f" · {sentences[0]}" if len(sentences) == 1 and sentences[0] and len(records) > 1 else ""
    title += _(" · differ in {keys}").format(keys=", ".join(keys)) if keys else ""
    # attnlab-compare's printed table: its columns for these runs, each run's cells with its place in each order
    columns, tables = page_table([rec.get("table") or {} for rec in records])
    focus = [{"status": r["status"], "final_loss": r["final_loss"], "focus_token": f["token"],
              "snapshot_step": f["step"], "focus_weight": f["weight"],
              "focus_target": Uniform(f["target"]) if f["uniform"] else f["target"]}
             for r in records if (f := r.get("focus"))]  # the rows' focus cells, for the line under the table
    rows = [{**{c: cell["value"] for c, cell in (r.get("table") or {}).items()}, "config": r.get("config"),
             "override_list": r.get("overrides"), "loss_threshold": r.get("loss_threshold")} for r in records]
    page = TEMPLATE.read_text(encoding="utf-8")
    data = {"runs": [{**rec, "table": t} for rec, t in zip(records, tables)], "title": printable(title, MAX_STR),
            "lang": language(), "tr": translations(page_messages(page)),
            "table_columns": columns, "distribution": distribution(focus), "answer": answer(rows),
            "generator": {"attnlab": __version__, "weight_budget_bytes": WEIGHT_BUDGET,
                          "bytes_per_weight": BYTES_PER_WEIGHT, "decimals": DECIMALS, "uniform_spread": UNIFORM_SPREAD,
                          "focus_threshold": FOCUS_THRESHOLD}}
    template = _PageTemplate(page)
    page_data = script_json(data)  # every text the page shows: the runs' and the translations
    return template.substitute(title=html.escape(printable(title, MAX_STR)), data=page_data,
                               font=cjk_font_face(page_data))


def write_page(records: Sequence[dict[str, Any]], out: Path | str) -> Path:
    """Write :func:`render` to ``out`` atomically. RunDirError when its folder does not exist."""
    out = Path(out)
    if not out.parent.is_dir():
        raise RunDirError(f"{out}: folder {out.parent} does not exist")
    atomic_write_text(out, render(records))
    return out


def write_report(paths: Iterable[Path | str], out: Path | str) -> Path:
    """One page for the runs under ``paths`` written to ``out``. Raises RunDirError."""
    return write_page(collect_records(paths), out)


def write_run_report(run_dir: Path | str) -> Path:
    """``RUN_DIR/report.html``."""
    return write_page([load_run(run_dir)], Path(run_dir) / REPORT)


def write_sweep_report(sweep_dir: Path | str) -> Path:
    """``SWEEP_DIR/report.html`` over its runs."""
    return write_report([sweep_dir], Path(sweep_dir) / REPORT)


def main(argv: Sequence[str] | None = None) -> int:
    """``attnlab-report``: exit 0; 1 when a run has an unreadable file (page written, a warning per
    run); 2 with one line for a bad PATH or an output that cannot be written or is inside a run."""
    parser = argparse.ArgumentParser(
        prog="attnlab-report",
        description="One offline HTML page of attention over training: a run dir gives its detail view, "
                    "several runs or a sweep dir a comparison.")
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="run dir or sweep dir")
    parser.add_argument("-o", "--out", metavar="FILE", type=Path, default=Path(REPORT),
                        help=f"the page to write (default: ./{REPORT})")
    parser.add_argument("--force", action="store_true", help="replace a file attnlab did not write")
    parser.add_argument("--verdicts", metavar="CSV", type=Path,
                        help="attnlab-reproduce's --csv of these runs: a verdict column, runs sorted by student")
    args = parser.parse_args(argv)
    out = args.out / REPORT if args.out.is_dir() else args.out
    try:
        found = named_runs(args.paths)
        rule = {"key": "-o", "kind": "page", "force": args.force, "reads": [r for r, _, _ in found], "allow": (REPORT,)}
        if problem := destination.refusal(out, **rule):
            raise RunDirError(problem)
        verdicts = read_verdicts(args.verdicts) if args.verdicts is not None else None
        records = collect_records(args.paths, found=found, verdicts=verdicts)
        destination.write(out, render(records).encode("utf-8"), **rule)
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
    streams.install()
    sys.exit(main())


if __name__ == "__main__":
    cli()
