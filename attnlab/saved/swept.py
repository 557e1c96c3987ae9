"""The swept keys (overrides whose values differ) with short names: the titles, legends and curve
styles of ``attnlab-compare --plot`` and the report."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from attnlab.saved.table import clip

MAX_VALUE_CHARS = 60  # display columns of a value (a longer one is cut, with "…")
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")  # matplotlib's default colours, as the report page draws them
LINESTYLES = ("-", "--", ":", "-.")  # matplotlib's; the report's dashes in this order


def swept(override_lists: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    """Per run ``{key: value}`` of the keys whose value differs between the runs or that some do not
    set (one run: all its overrides), in first-seen order; ``+optimizer.lr=0.05`` is key
    ``optimizer.lr``, value ``0.05`` (without ``=``: value "")."""
    parsed = [{key.lstrip("+~"): value for key, _, value in (o.partition("=") for o in overrides)}
              for overrides in override_lists]
    keys = [k for k in dict.fromkeys(k for p in parsed for k in p)
            if len(parsed) == 1 or len({p.get(k) for p in parsed}) > 1]
    return [{k: p[k] for k in keys if k in p} for p in parsed]


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key by its last part, or as many trailing parts as keep keys distinct."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != key and (o == tail or o.endswith("." + tail)) for o in keys):
                break
        out[key] = tail
    return out


def run_labels(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Each row's legend: a sweep job ``[folder/]N_overrides`` as ``[folder/]N`` (another run by its whole
    ``job``) and its swept keys, e.g. ``3: lr=0.05 steps=30``."""
    values = swept([r.get("override_list") or [] for r in rows])
    short = short_keys(list(dict.fromkeys(k for v in values for k in v)))
    labels = []
    for r, v in zip(rows, values):
        head, _, tail = r["job"].rpartition("/")
        num, sep, _ = tail.partition("_")
        name = (f"{head}/" if head else "") + num if sep and num.isdigit() else r["job"]
        swept_values = " ".join(f"{short[k]}={clip(x, MAX_VALUE_CHARS)}" for k, x in v.items())
        labels.append(f"{name}: {swept_values}" if swept_values else name)
    return labels


def wrap(text: str, width: int, max_lines: int, measure: Callable[[str], int] = len) -> list[str]:
    """``text`` in at most ``max_lines`` lines of at most ``width`` by ``measure``, broken at spaces,
    a long word between characters; a cut text ends with ``…``."""
    lines = [""]  # the last one is being filled
    for word in text.split():
        if measure(f"{lines[-1]} {word}".lstrip()) <= width:
            lines[-1] = f"{lines[-1]} {word}".lstrip()
            continue
        if lines[-1]:
            lines.append("")
        for ch in word:  # a word wider than a line: split it between characters
            if measure(lines[-1] + ch) > width and lines[-1]:
                lines.append("")
            lines[-1] += ch
    lines = [line for line in lines if line]
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and measure(last + "…") > width:
            last = last[:-1]
        lines = lines[:max_lines - 1] + [last + "…"]
    return lines


def run_styles(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]] | None:
    """Each row's curve style when two keys are swept (exercise 4's lr x steps): a colour per value of the
    key with more values, a line style per value of the other, so runs that share a prefix (the same seed,
    fewer steps) stay apart; None otherwise (a style per run)."""
    values = swept([r.get("override_list") or [] for r in rows])
    keys = list(dict.fromkeys(k for v in values for k in v))
    if len(keys) != 2 or any(len(v) != 2 for v in values) or len({tuple(v.items()) for v in values}) < len(values):
        return None  # not two swept keys, or runs with the same values (copies of a sweep): a style per run
    colour_key, style_key = sorted(keys, key=lambda k: -len({v[k] for v in values}))
    by_colour = list(dict.fromkeys(v[colour_key] for v in values))
    by_style = list(dict.fromkeys(v[style_key] for v in values))
    if len(by_colour) > len(PALETTE) or len(by_style) > len(LINESTYLES):
        return None
    return [{"color": PALETTE[by_colour.index(v[colour_key])], "linestyle": LINESTYLES[by_style.index(v[style_key])]}
            for v in values]
