"""The one spec of the runs table's columns (the sweep's end table, ``attnlab-compare``, summary.csv,
the report's runs table), and the exercises' observations as its cells (:func:`observed_cells`).
CSV order is :data:`SPEC`'s; the printed table puts ``error`` last."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.core.config import select
from attnlab.core.i18n import N_
from attnlab.core.tokenizer import show

MAX_CELL = 48  # display columns of a printed cell (the CSV keeps everything)


@dataclass(frozen=True)
class Column:
    key: str  # the row's key and the CSV header
    header: str  # what a beginner reads (English N_(), translated where shown)
    width: int = MAX_CELL  # display columns of a printed cell
    fmt: str | None = None  # a float's format (None: 4 decimals, or .2e below 1e-3 and from 1e5)
    hide: str = "empty"  # never; empty: printed when some row has a value; same: when their values differ; csv
    observed: bool = False  # an exercise's observation: in the CSV only when some row has it
    exercises: tuple[int, ...] = ()  # the exercises (§8) it answers: their sweep's table shows only these


SPEC: tuple[Column, ...] = (
    Column("job", N_("job"), width=100, hide="never"),
    Column("name", N_("name")),
    Column("differs", N_("what differs"), width=100),
    Column("overrides", N_("overrides"), hide="csv"),  # the job name shows them
    Column("status", N_("status"), hide="never"),
    Column("final_loss", N_("final loss"), exercises=(4,)),
    Column("steps_run", N_("steps run"), hide="csv"),
    Column("steps_to_threshold", N_("loss<thr at step"), exercises=(4,)),
    Column("loss_threshold", N_("loss threshold"), fmt="g", hide="csv"),
    Column("focus_token", N_("token"), exercises=(3, 4)),
    Column("focus_target", N_("→ attends most to"), exercises=(3, 4)),
    Column("focus_weight", N_("weight"), fmt=".3f", exercises=(3, 4)),
    Column("snapshot_step", N_("at step"), exercises=(4,)),
    Column("wall_time_s", N_("seconds"), fmt=".2f"),
    Column("notes", N_("notes")),
    Column("error", N_("error")),
    # the exercises' observations (observed_cells)
    Column("focus_step", N_("first >0.9 at step"), observed=True, exercises=(4,)),
    Column("heads_focus", N_("each head looks at"), width=100, observed=True),
    Column("upper_max", N_("largest weight above diagonal"), observed=True),
    Column("n_tokens", N_("number of tokens"), hide="same", observed=True, exercises=(2,)),
    Column("tokens", N_("tokens"), width=100, hide="same", observed=True, exercises=(2,)),
    Column("shapes", N_("shapes"), hide="same", observed=True, exercises=(1,)),
    Column("max_abs_weight_minus_uniform", N_("farthest from 1/T"), observed=True, exercises=(3,)),
    Column("perm_tokens_match", N_("same tokens reordered"), observed=True, exercises=(5,)),
    Column("perm_z_max_abs_diff", N_("max |ΔZ| when reordered"), observed=True, exercises=(5,)),
    Column("path", N_("path"), hide="csv"),
    # attnlab-reproduce's table
    Column("verdict", N_("verdict"), hide="never"),
)
BY_KEY = {c.key: c for c in SPEC}
ROW_KEYS = [c.key for c in SPEC if not c.observed and c.key not in ("path", "verdict")]  # every row has these
OBSERVED = [c.key for c in SPEC if c.observed]


def column(key: str) -> Column:
    """The spec of ``key`` (an unknown key: a text column headed by the key itself)."""
    return BY_KEY.get(key) or Column(key, key)


def observed_cells(summary: dict[str, Any]) -> dict[str, Any]:
    """The observations a job's ``summary.json`` holds as table cells (those of :data:`OBSERVED` present);
    ``focus`` is :class:`attnlab.core.focus.FocusSink`'s (or None), never a summary's."""
    out: dict[str, Any] = {}
    if focus := summary.get("focus"):  # FocusSink's (training runs)
        out["focus_step"] = focus["mean"]["first_step_above"]
        if len(focus["heads"]) > 1:
            out["heads_focus"] = " ".join(f"{h}:{'uniform' if e.get('uniform') else show(e['token'].strip())}"
                                          f"={e['weight']:.2f}" for h, e in enumerate(focus["heads"]))
        if select(summary.get("config"), "model.causal") is True:
            out["upper_max"] = focus.get("upper_triangle_max")
    out.update({k: summary[k] for k in ("n_tokens", "max_abs_weight_minus_uniform") if summary.get(k) is not None})
    if table := summary.get("token_table"):  # the fields' types: read_summary's
        out["tokens"] = " ".join(show(str(t[1])) for t in table if isinstance(t, list) and len(t) == 2)
    if shapes := summary.get("shapes"):
        out["shapes"] = " ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in shapes.items()
                                 if k in ("X", "Q", "K", "V", "weights", "Z") and isinstance(v, list))
    if (perm := summary.get("permutation_check")) is not None:
        out.update(perm_tokens_match=perm.get("tokens_are_permutation"), perm_z_max_abs_diff=perm.get("z_max_abs_diff"))
    return out
