"""What tells compared runs apart: the swept keys (the overrides whose values differ between the
runs) with short key names, for the titles and legends of ``attnlab-compare --plot`` and the
report's run labels. The overrides are the rows' (:mod:`attnlab.saved.runs`: summary.json's, else
``.hydra/overrides.yaml``'s, read as data)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

MAX_VALUE_CHARS = 60  # a value longer than this is cut, with "…"


def split_override(override: str) -> tuple[str, str]:
    """``"optimizer.lr=0.05"`` -> ``("optimizer.lr", "0.05")``; a group override
    ``"optimizer=sgd"`` -> ``("optimizer", "sgd")``; the ``+``/``++``/``~`` of Hydra's add, force
    and delete overrides is dropped from the key. Without ``=``: ``(override, "")``."""
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def swept(override_lists: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    """For each run (one list of overrides per run), ``{key: value}`` of the keys that tell the
    runs apart: those whose value differs between the runs, or that some runs do not set. With
    one run, all its overrides. Keys keep the order they first appear in."""
    parsed = [dict(split_override(o) for o in overrides) for overrides in override_lists]
    keys: list[str] = []
    for p in parsed:
        keys.extend(k for k in p if k not in keys)
    if len(parsed) > 1:
        keys = [k for k in keys if len({p.get(k) for p in parsed}) > 1]
    return [{k: p[k] for k in keys if k in p} for p in parsed]


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key shortened to its last part (``optimizer.lr`` -> ``lr``,
    ``train.steps`` -> ``steps``) unless two keys would then look the same: those keep as many
    trailing parts as make them distinct (``optimizer.weight_decay``, ``other.weight_decay``)."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != key and (o == tail or o.endswith("." + tail)) for o in keys):
                break
        out[key] = tail
    return out


def clip_value(value: str, n: int = MAX_VALUE_CHARS) -> str:
    """``value`` on one line, at most ``n`` characters (``…`` marks a cut; 60 by default: about
    two lines of a heatmap title)."""
    value = " ".join(str(value).split())
    return value if len(value) <= n else value[: n - 1] + "…"


def run_labels(rows: Sequence[dict[str, Any]], names: dict[str, str]) -> list[tuple[str, str]]:
    """``(name, values)`` per row: ``name`` the job's short name (``names[row["job"]]``, e.g. the
    job number ``"3"``), ``values`` its swept keys with short names, e.g. ``"lr=0.05 steps=30"``
    (see :func:`swept`, :func:`short_keys`); ``""`` when the runs differ in no override."""
    values = swept([r.get("override_list") or [] for r in rows])
    short = short_keys(list(dict.fromkeys(k for v in values for k in v)))
    return [(names.get(r["job"], r["job"]), " ".join(f"{short[k]}={clip_value(x)}" for k, x in v.items()))
            for r, v in zip(rows, values)]


def wrap(text: str, width: int, max_lines: int, measure: Callable[[str], int] = len) -> list[str]:
    """``text`` in at most ``max_lines`` lines of at most ``width`` as ``measure`` counts
    (e.g. the length after :func:`attnlab.outputs.fonts.drawable` escapes what no font can draw), broken
    at spaces; a word longer than a line is split between characters, so an escape made per
    character later is never cut. A cut text ends with ``…``."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if measure(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = ""
        for ch in word:  # a word wider than a line: split it between characters
            if measure(line + ch) > width and line:
                lines.append(line)
                line = ""
            line += ch
    if line:
        lines.append(line)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and measure(last + "…") > width:
            last = last[:-1]
        lines = lines[:max_lines - 1] + [last + "…"]
    return lines


def short_names(jobs: Sequence[str]) -> dict[str, str]:
    """Legend/title names: a sweep job (``[folder/]N_overrides``) by its folder prefix and job
    number (``N``, ``sweep/N``; the swept values are added by :func:`attnlab.saved.swept.run_labels`),
    any other run by its whole name (``2026-11-29/12-00-00.123456``)."""
    out = {}
    for job in jobs:
        head, _, tail = job.rpartition("/")
        num, sep, _ = tail.partition("_")
        out[job] = (f"{head}/" if head else "") + num if sep and num.isdigit() else job
    return out
