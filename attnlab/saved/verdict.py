"""Bit-for-bit comparison of a run and its reproduction (``attnlab-reproduce``'s verdict), both read
through :mod:`attnlab.saved.safe_read`."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.saved import safe_read
from attnlab.saved.safe_read import printable

NOTE_LIMIT = 120  # characters of a note in the verdict table


@dataclass
class Difference:
    """One quantity that differs: first differing ``step``, ``max_abs_diff`` over shared steps, ``note``."""

    quantity: str
    step: int | None = None
    max_abs_diff: float | None = None
    note: str = ""


def environment_differences(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """One warning line per key whose recorded ``versions`` differ from ``current``."""
    if not recorded:
        return ["warning: summary.json records no environment (versions); cannot check it matches"]
    return [f"warning: {printable(key, 60)} differs: {printable(recorded.get(key), 100)} when the run was made, "
            f"{printable(current.get(key), 100)} now"
            for key in sorted(set(recorded) | set(current), key=str) if recorded.get(key) != current.get(key)]


def _first_and_max(a: np.ndarray, b: np.ndarray, steps: np.ndarray) -> tuple[int | None, float | None]:
    """First step where ``a`` and ``b`` differ bitwise (axis 0) and the largest |a-b|."""
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    same = (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b
    bad = np.flatnonzero(~same.reshape(n, -1).all(axis=1))
    if not bad.size:
        return None, None
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return int(steps[bad[0]]), float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf


def _compare_walkthrough(original: Path, reproduction: Path) -> list[Difference]:
    fa, fb = safe_read.read_walkthrough(original), safe_read.read_walkthrough(reproduction)
    diffs = []
    for key in safe_read.WALKTHROUGH_MEMBERS:
        if (key in fa) != (key in fb):
            diffs.append(Difference(key, note="only in one run"))
        elif key in fa and (fa[key].shape != fb[key].shape or not np.array_equal(fa[key], fb[key])):
            d = (float(np.max(np.abs(fa[key].astype(np.float64) - fb[key].astype(np.float64))))
                 if fa[key].shape == fb[key].shape and fa[key].size else None)
            diffs.append(Difference(key, max_abs_diff=d, note="differs" if d is not None else
                                    f"shape {fa[key].shape} vs {fb[key].shape}"))
    return diffs


def compare_runs(original: Path, reproduction: Path) -> list[Difference]:
    """What differs between two run dirs (status, metrics, snapshots, walkthrough arrays); empty when
    bitwise identical. An interrupted ``original`` is compared over its own steps. Raises RunDirError."""
    s_a, s_b = safe_read.read_summary(original), safe_read.read_summary(reproduction)
    diffs: list[Difference] = []
    prefix_only = s_a.get("status") == "interrupted"
    if s_a.get("status") != s_b.get("status") and not prefix_only:
        diffs.append(Difference("status", note=f"{printable(s_a.get('status'), 40)} vs "
                                               f"{printable(s_b.get('status'), 40)}"))
    if s_a.get("task") == "walkthrough" or os.path.lexists(Path(original) / safe_read.WALKTHROUGH):
        return diffs + _compare_walkthrough(original, reproduction)

    steps_a, loss_a = safe_read.read_run_metrics(original)
    steps_b, loss_b = safe_read.read_run_metrics(reproduction)
    n = len(steps_a) if prefix_only else max(len(steps_a), len(steps_b))
    if len(steps_b) < n or (len(steps_a) != len(steps_b) and not prefix_only):
        diffs.append(Difference("steps_run", step=min(len(steps_a), len(steps_b)),
                                note=f"{len(steps_a)} vs {len(steps_b)} rows"))
    m = min(len(steps_a), len(steps_b))
    if not np.array_equal(steps_a[:m], steps_b[:m]):
        first, _ = _first_and_max(steps_a[:m], steps_b[:m], np.arange(m))
        diffs.append(Difference("step", step=first, note="step column differs (row index shown)"))
    first, worst = _first_and_max(loss_a[:m], loss_b[:m], steps_a[:m])
    if first is not None:
        diffs.append(Difference("loss", step=first, max_abs_diff=worst))

    att_a, att_b = safe_read.read_attention(original), safe_read.read_attention(reproduction)
    for key in ("token_ids", "tokens"):
        if not np.array_equal(att_a[key], att_b[key]):
            diffs.append(Difference(key, note=f"{printable(att_a[key].tolist()[:8], NOTE_LIMIT // 2)} vs "
                                              f"{printable(att_b[key].tolist()[:8], NOTE_LIMIT // 2)}"))
    sa, sb = att_a["steps"], att_b["steps"]
    if prefix_only:
        sb = sb[: len(sa)]
    if not np.array_equal(sa, sb):
        diffs.append(Difference("snapshot steps", note=f"{printable(sa.tolist(), NOTE_LIMIT // 2)} vs "
                                                       f"{printable(sb.tolist(), NOTE_LIMIT // 2)}"))
    wa, wb = att_a["weights"], att_b["weights"]
    k = min(len(sa), len(sb))
    if wa.shape[1:] != wb.shape[1:]:
        diffs.append(Difference("attention weights", note=f"shape {wa.shape} vs {wb.shape}"))
    else:
        first, worst = _first_and_max(wa[:k], wb[:k], sa[:k])
        if first is not None:
            diffs.append(Difference("attention weights", step=first, max_abs_diff=worst))
    return diffs


def format_verdict(diffs: list[Difference]) -> str:
    """``reproduced exactly``, or a header line and a table of the differences."""
    if not diffs:
        return "reproduced exactly"
    rows = [("quantity", "first differing step", "max abs diff", "note")]
    for d in diffs:
        rows.append((d.quantity, "-" if d.step is None else str(d.step),
                     "-" if d.max_abs_diff is None else f"{d.max_abs_diff:.6g}", d.note))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"not reproduced: {len(diffs)} quantit{'y differs' if len(diffs) == 1 else 'ies differ'}"]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)
