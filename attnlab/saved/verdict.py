"""``attnlab-reproduce``'s verdict: a run and its reproduction compared quantity by quantity (every
step's loss, every snapshot, every value summary.json claims); whether differences are rounding."""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from attnlab.core.i18n import _
from attnlab.saved import safe_read
from attnlab.saved.safe_read import printable

NOTE_LIMIT = 120  # characters of a note in the verdict table
MAX_ROWS = 20  # differences listed in the verdict table (the header counts them all)
RECORD_ONLY = ("started_at", "wall_time_s", "versions", "config", "overrides", "job_num", "reproduced_from")
ROUNDING_MARGIN = 10  # a difference is rounding when at most this times the one between two kernel paths here


@dataclass
class Difference:
    """One quantity that differs: first differing ``step``, ``max_abs_diff`` over shared steps, ``note``;
    ``rounding``: whether two kernel paths here explain it (None: not measured)."""

    quantity: str
    step: int | None = None
    max_abs_diff: float | None = None
    note: str = ""
    rounding: bool | None = None


def environment_differences(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """A warning line per key of the recorded ``versions`` that differs from ``current``."""
    if not recorded:
        return ["warning: summary.json records no environment (versions); cannot check it matches"]
    return [f"warning: {printable(key, 60)} differs: {printable(recorded.get(key), 100)} when the run was made, "
            f"{printable(current.get(key), 100)} now"
            for key in sorted(set(recorded) | set(current), key=str) if recorded.get(key) != current.get(key)]


def _compare(name: str, a: np.ndarray, b: np.ndarray, steps: np.ndarray | None = None) -> Difference | None:
    """``a`` (original) against ``b`` along axis 0 (labelled by ``steps``): None when bitwise equal."""
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.shape[1:] != b.shape[1:]:
        return Difference(name, note=f"shape {a.shape} vs {b.shape}")
    n = min(len(a), len(b))
    x, y = a[:n], b[:n]
    same = (x == y) | (np.isnan(x) & np.isnan(y)) if x.dtype.kind == y.dtype.kind == "f" else x == y
    bad = np.flatnonzero(~np.asarray(same).all(axis=tuple(range(1, x.ndim))))
    label = (lambda i: int(steps[i]) if i < len(steps) else None) if steps is not None else (lambda i: None)
    if bad.size and {x.dtype.kind, y.dtype.kind} <= set("iuf"):
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        return Difference(name, label(bad[0]), float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf)
    if bad.size:
        return Difference(name, label(bad[0]), note=f"{printable(x.tolist()[:8], NOTE_LIMIT // 2)} vs "
                                                    f"{printable(y.tolist()[:8], NOTE_LIMIT // 2)}")
    return Difference(name, label(n), note=f"{len(a)} vs {len(b)} rows") if len(a) != len(b) else None


def _leaves(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted name, value)`` of every value in a summary: dicts and lists holding dicts are entered."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{name}[{i}]")
    else:
        yield name, value


def _as_array(value: Any) -> np.ndarray | None:
    """A number, or nested lists of numbers, as an array; None for anything else (ragged lists too)."""
    with contextlib.suppress(ValueError, OverflowError):
        return a if (a := np.asarray(value)).dtype.kind in "iuf" else None


def _claims(original: dict[str, Any], reproduction: dict[str, Any]) -> list[Difference]:
    """Every value ``original``'s summary.json records (not :data:`RECORD_ONLY`) against the reproduction's."""
    ours = dict(_leaves({k: v for k, v in reproduction.items() if k not in RECORD_ONLY}))
    diffs = []
    for name, claimed in _leaves({k: v for k, v in original.items() if k not in RECORD_ONLY}):
        shown = printable(name, 60)
        if name not in ours:
            diffs.append(Difference(shown, note="recorded, but not a value attnlab computes"))
        elif (a := _as_array(claimed)) is not None and (b := _as_array(ours[name])) is not None:
            diffs.append(_compare(shown, a, b))
        elif claimed != ours[name]:
            diffs.append(Difference(shown, note=f"recorded {printable(claimed, 50)}, reproduced "
                                                f"{printable(ours[name], 50)}"))
    return [d for d in diffs if d is not None]


def compare_runs(original: Path, reproduction: Path) -> list[Difference]:
    """What differs between two run dirs (metrics, snapshots or walkthrough arrays, then every value
    summary.json records); empty when bitwise identical. An interrupted ``original`` is compared
    over its own steps (its records only). Raises RunDirError."""
    s_a, s_b = safe_read.read_summary(original), safe_read.read_summary(reproduction)
    prefix_only = s_a.get("status") == "interrupted"
    quantities: list[tuple[str, Any, Any, Any]] = []  # (name, original's, reproduction's, steps of axis 0)
    if s_a.get("task") == "walkthrough" or os.path.lexists(Path(original) / safe_read.WALKTHROUGH):
        fa, fb = safe_read.read_walkthrough(original), safe_read.read_walkthrough(reproduction)
        quantities += [(key, fa.get(key, np.zeros(0)), fb.get(key, np.zeros(0)), None)
                       for key in safe_read.WALKTHROUGH_MEMBERS if key in fa or key in fb]
    else:
        (steps_a, loss_a), (steps_b, loss_b) = map(safe_read.read_run_metrics, (original, reproduction))
        att_a, att_b = safe_read.read_attention(original), safe_read.read_attention(reproduction)
        s, w = len(steps_a) if prefix_only else None, len(att_a["steps"]) if prefix_only else None
        quantities += [("step", steps_a, steps_b[:s], None),
                       ("loss", loss_a, loss_b[:s], max(steps_a, steps_b, key=len)),
                       ("token_ids", att_a["token_ids"], att_b["token_ids"], None),
                       ("tokens", att_a["tokens"], att_b["tokens"], None),
                       ("snapshot steps", att_a["steps"], att_b["steps"][:w], None),
                       ("attention weights", att_a["weights"], att_b["weights"][:w], att_a["steps"])]
    diffs = [d for name, a, b, steps in quantities if (d := _compare(name, a, b, steps)) is not None]
    return diffs + ([] if prefix_only else _claims(s_a, s_b))


def within_rounding(diffs: list[Difference], original: Path, native: Path, other: Path, made: Any, here: str,
                    path: str) -> str | None:
    """Why ``diffs`` (``original`` vs ``native``, made with ``here`` kernels) are rounding, or None: ``original``
    is identical to ``other`` (made with ``path`` kernels), or each difference is at most
    :data:`ROUNDING_MARGIN` times the one between ``other`` and ``native`` (the notes show it)."""
    kernels = _("made with {made} kernels, here {here}").format(made=printable(made, 40) if made else _("unrecorded"),
                                                                 here=here)
    if not compare_runs(original, other):
        return _("{kernels}; identical with {path} kernels here").format(kernels=kernels, path=path)
    envelope = {d.quantity: d.max_abs_diff for d in compare_runs(other, native)}
    for d in diffs:
        d.note = d.note or f"{envelope.get(d.quantity) or 0:.3g} between {path} and {here} here"
        d.rounding = d.max_abs_diff is not None and d.max_abs_diff <= ROUNDING_MARGIN * (envelope.get(d.quantity) or 0)
    if not all(d.rounding for d in diffs):
        return None
    return _("{kernels}; each difference is at most {margin}x the one between two kernel paths here").format(
        kernels=kernels, margin=ROUNDING_MARGIN)


def format_verdict(diffs: list[Difference], rounding: str | None = None) -> str:
    """``reproduced exactly``; else a header line (``reproduced within floating-point rounding: WHY`` or
    ``not reproduced``) and a table of the differences, those rounding does not explain first."""
    if not diffs:
        return _("reproduced exactly")
    beyond = [d for d in diffs if d.rounding is False]
    diffs = beyond + [d for d in diffs if d.rounding is not False]
    rows = [("quantity", "first differing step", "max abs diff", "note")]
    for d in diffs[:MAX_ROWS]:
        rows.append((d.quantity, "-" if d.step is None else str(d.step),
                     "-" if d.max_abs_diff is None else f"{d.max_abs_diff:.6g}",
                     f"beyond rounding ({d.note})" if d.rounding is False else d.note))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    n = len(diffs)
    differ = (_("1 quantity differs") if n == 1 else _("{n} quantities differ")).format(n=n)
    if beyond and len(beyond) < n:
        differ = _("{beyond} of {n} quantities differ beyond floating-point rounding").format(beyond=len(beyond), n=n)
    lines = [_("reproduced within floating-point rounding: {why}").format(why=rounding) if rounding
             else _("not reproduced: {differ}").format(differ=differ)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)
