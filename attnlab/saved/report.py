"""One offline HTML page (``attnlab-report``) that shows attention learning: one run's heatmap over the steps
(tutorial §4.3, §5), loss and focus, or several runs' table (attnlab-compare's), small multiples and losses.
Plain JavaScript (``report_template.html``), no network; the data is embedded as ``<script
type="application/json" id="attnlab-data">``, escaped so no run text ends it, and put in as text only."""
from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import string
from pathlib import Path
from typing import Any, Iterable, Sequence

from attnlab import __version__
from attnlab.core.files import PAGE_BYTES_PER_WEIGHT
from attnlab.core.focus import FOCUS_THRESHOLD, UNIFORM_SPREAD
from attnlab.core.i18n import _, language, translations
from attnlab.outputs.artifacts import atomic_write
from attnlab.outputs.fonts import SHIPPED_FONT
from attnlab.saved import safe_read
from attnlab.saved.answers import answer
from attnlab.saved.report_data import DECIMALS, MAX_STR, WEIGHT_BUDGET, collect_records, load_run
from attnlab.saved.safe_read import printable
from attnlab.saved.table import distribution, page_table

REPORT = "report.html"
TEMPLATE = Path(__file__).with_name("report_template.html")


class _PageTemplate(string.Template):
    delimiter = "@@"  # never used by the page's own JavaScript or CSS


def script_json(data: Any) -> str:
    r"""``data`` as JSON safe inside ``<script>``: ``< > &`` U+2028/9 as ``\uXXXX``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch in "<>&\u2028\u2029":  # (str.translate: 1.1 s for 20 MB of weights with one 汉字, replace 0.1 s)
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


def cjk_font_face(text: str) -> str:
    """A CSS ``@font-face`` "attnlab CJK": the shipped CJK font cut to the characters of ``text`` it has
    (a few kB), so the page's Chinese shows without a CJK font; "" when ``text`` has none."""
    wide = set(re.findall("[\u2e80-\U0010ffff]", text))  # the characters from U+2E80 (CJK) on
    if not wide:  # (fontTools is not even imported)
        return ""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(SHIPPED_FONT), recalcTimestamp=False)  # the same page at any time
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


def text_of(config: Any) -> str:
    """What a run read: its ``text_file``'s name, else its ``sentence``."""
    text_file = safe_read.select(config, "text_file")
    return Path(str(text_file)).name if text_file else str(safe_read.select(config, "sentence", "") or "")


def shareable(text: str, run_dirs: Sequence[Path]) -> str:
    """:func:`script_json` ``text`` with every absolute path of this machine made relative: below the runs'
    common folder (a run dir becomes its name), attnlab's own folder (``attnlab/data/...``), the working folder,
    else the home folder (``~/...``); a page a learner shares names no folder of the author's machine."""
    runs = [str(p.absolute()) for p in run_dirs]
    common = os.path.commonpath(runs) if len(runs) > 1 else str(Path(runs[0]).parent)
    roots = [(common, ""), (str(Path(__file__).resolve().parent.parent.parent), ""), (str(Path.cwd()), ""),
             (str(Path.home()), "~")]
    for root, short in sorted({r for r in roots if r[0] not in ("", os.sep)}, key=lambda r: -len(r[0])):
        quoted = script_json(root)[1:-1]  # as the text holds it
        text = text.replace(script_json(root + os.sep)[1:-1], script_json(short + os.sep)[1:-1] if short else "")
        text = text.replace(f'"{quoted}"', f'"{short or "."}"')
    return text


def render(records: Sequence[dict[str, Any]]) -> str:
    """The page for ``records`` (one: detail view; more: comparison) as HTML text."""
    title = f"attnlab · {records[0]['name']}" if len(records) == 1 else "attnlab · " + _("{n} runs").format(
        n=len(records))
    sentences = list(dict.fromkeys(text_of(r["config"]) for r in records))
    keys = list(dict.fromkeys(k for r in records for k in r.get("differs_keys", ())))
    title += f" · {sentences[0]}" if len(sentences) == 1 and sentences[0] and len(records) > 1 else ""
    title += _(" · differ in {keys}").format(keys=", ".join(keys)) if keys else ""
    # attnlab-compare's printed table: its columns for these runs, each run's cells with its place in each order
    columns, tables = page_table([rec["table"] for rec in records])
    rows = [{**{c: cell["value"] for c, cell in r["table"].items()}, "config": r["config"],
             "override_list": r["overrides"], "loss_threshold": r["loss_threshold"]} for r in records]
    page = TEMPLATE.read_text(encoding="utf-8")
    data = {"runs": [{**rec, "table": t} for rec, t in zip(records, tables)], "title": printable(title, MAX_STR),
            "lang": language(), "tr": translations(page_messages(page)),
            "table_columns": columns, "distribution": distribution(rows), "answer": answer(rows),
            "generator": {"attnlab": __version__, "weight_budget_bytes": WEIGHT_BUDGET,
                          "bytes_per_weight": PAGE_BYTES_PER_WEIGHT, "decimals": DECIMALS,
                          "uniform_spread": UNIFORM_SPREAD, "focus_threshold": FOCUS_THRESHOLD}}
    # every text the page shows: the runs' and the translations
    page_data = shareable(script_json(data), [Path(str(r["run_dir"])) for r in records])
    return _PageTemplate(page).substitute(title=html.escape(printable(title, MAX_STR)), data=page_data,
                                          font=cjk_font_face(page_data))


def write_page(records: Sequence[dict[str, Any]], out: Path | str) -> Path:
    """Write :func:`render` to ``out`` atomically; raises WriteError."""
    atomic_write(Path(out), render(records))
    return Path(out)


def write_report(paths: Iterable[Path | str], out: Path | str) -> Path:
    """One page for the runs under ``paths`` written to ``out``. Raises RunDirError."""
    return write_page(collect_records(paths), out)


def write_run_report(run_dir: Path | str) -> Path:
    """``RUN_DIR/report.html``."""
    return write_page([load_run(run_dir)], Path(run_dir) / REPORT)


def write_sweep_report(sweep_dir: Path | str) -> Path:
    """``SWEEP_DIR/report.html`` over its runs."""
    return write_report([sweep_dir], Path(sweep_dir) / REPORT)
