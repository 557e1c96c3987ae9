"""The one spec of the runs table's columns (the sweep's end table, ``attnlab-compare``, summary.csv,
the report's runs table): per column its key (the row's and the CSV header's), the header a beginner
reads (an English ``N_()`` message, its Chinese in the catalog), the printed width, a number's format,
and when the printed table hides it. CSV order is :data:`SPEC`'s; the printed table puts ``error`` last."""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.i18n import N_

MAX_CELL = 48  # display columns of a printed cell (the CSV keeps everything)


@dataclass(frozen=True)
class Column:
    """``key``: the row's key and the CSV header; ``header``: what the printed table and the report show
    (English, translated where shown); ``width``: display columns of a printed cell; ``fmt``: a float's
    format (None: 4 decimals, or ``.2e`` below 1e-3 and from 1e5); ``hide``: ``never`` (always printed),
    ``empty`` (printed when some row has a value), ``same`` (printed when the rows' values differ),
    ``csv`` (CSV only); ``observed``: in the CSV only when some row has it (an exercise's observation)."""

    key: str
    header: str
    width: int = MAX_CELL
    fmt: str | None = None
    hide: str = "empty"
    observed: bool = False


SPEC: tuple[Column, ...] = (
    Column("job", N_("job"), width=100, hide="never"),
    Column("name", N_("name")),
    Column("differs", N_("what differs"), width=100),
    Column("overrides", N_("overrides"), hide="csv"),  # the job name shows them
    Column("status", N_("status"), hide="never"),
    Column("final_loss", N_("final loss")),
    Column("steps_run", N_("steps run"), hide="csv"),
    Column("steps_to_threshold", N_("loss<thr at step")),
    Column("loss_threshold", N_("loss threshold"), fmt="g", hide="csv"),
    Column("focus_token", N_("token")),
    Column("focus_target", N_("→ attends most to")),
    Column("focus_weight", N_("weight"), fmt=".3f"),
    Column("snapshot_step", N_("at step")),
    Column("wall_time_s", N_("seconds"), fmt=".2f"),
    Column("notes", N_("notes")),
    Column("error", N_("error")),
    # the exercises' observations (attnlab.saved.exercise_columns)
    Column("focus_step", N_("first >0.9 at step"), observed=True),
    Column("heads_focus", N_("each head looks at"), width=100, observed=True),
    Column("upper_max", N_("largest weight above diagonal"), observed=True),
    Column("n_tokens", N_("number of tokens"), hide="same", observed=True),
    Column("tokens", N_("tokens"), width=100, hide="same", observed=True),
    Column("shapes", N_("shapes"), hide="same", observed=True),
    Column("max_abs_weight_minus_uniform", N_("farthest from 1/T"), observed=True),
    Column("perm_tokens_match", N_("same tokens reordered"), observed=True),
    Column("perm_z_max_abs_diff", N_("max |ΔZ| when reordered"), observed=True),
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
