"""The exercise observations of a job's summary.json (:mod:`attnlab.core.exercises`) as the table
cells the sweep table and attnlab-compare show: :func:`columns` (their headers and widths:
:mod:`attnlab.saved.columns`)."""
from __future__ import annotations

from typing import Any

from attnlab.core.config import select
from attnlab.core.tokenizer import show


def columns(summary: dict[str, Any]) -> dict[str, Any]:
    """The observations a job's ``summary.json`` holds, flattened into table cells (those of
    :data:`attnlab.saved.columns.OBSERVED` present); ``focus`` is :class:`attnlab.core.focus.FocusSink`'s
    (or None), never a summary's."""
    out: dict[str, Any] = {}
    focus = summary.get("focus")
    if focus:  # FocusSink's (training runs)
        out["focus_step"] = focus["mean"]["first_step_above"]
        if len(focus["heads"]) > 1:
            out["heads_focus"] = " ".join(f"{h}:{'uniform' if e.get('uniform') else show(e['token'].strip())}"
                                          f"={e['weight']:.2f}" for h, e in enumerate(focus["heads"]))
        if select(summary.get("config"), "model.causal") is True:
            out["upper_max"] = focus.get("upper_triangle_max")
    if summary.get("n_tokens") is not None:
        out["n_tokens"] = summary["n_tokens"]
    table = summary.get("token_table")
    if isinstance(table, list) and table:
        out["tokens"] = " ".join(show(str(t[1])) for t in table if isinstance(t, list) and len(t) == 2)
    shapes = summary.get("shapes")
    if isinstance(shapes, dict) and shapes:
        out["shapes"] = " ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in shapes.items()
                                 if k in ("X", "Q", "K", "V", "weights", "Z") and isinstance(v, list))
    if summary.get("max_abs_weight_minus_uniform") is not None:
        out["max_abs_weight_minus_uniform"] = summary["max_abs_weight_minus_uniform"]
    perm = summary.get("permutation_check")
    if isinstance(perm, dict):
        out["perm_tokens_match"] = perm.get("tokens_are_permutation")
        out["perm_z_max_abs_diff"] = perm.get("z_max_abs_diff")
    return out
