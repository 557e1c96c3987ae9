"""The answer to a tutorial exercise (§8) in one paragraph, from its sweep's rows, in the learner's language
(:func:`answer`: the sweep's end, its report page, ``attnlab.exercise(n)``). Every number in it is a table
cell (:func:`attnlab.saved.table.cell_text`); every "because" is said only when the rows show it."""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from attnlab.core.focus import Uniform
from attnlab.core.i18n import _
from attnlab.saved.columns import BY_KEY, column
from attnlab.saved.safe_read import printable, select
from attnlab.saved.table import cell_text, columns_of

SAME_Z = 1e-5  # |ΔZ| below this is float32 rounding (~1e-7 for O(1) vectors): the same vectors
PIECE = re.compile(r"\((\d+)/(\d+)\)'")  # a token label that is one piece of a character: '你(1/2)'
Rows = Sequence[dict[str, Any]]


def exercise_of(rows: Rows) -> int | None:
    """N when every row's overrides hold ``experiment=exerciseN`` (the preset's sweep), else None."""
    found = {m.group(1) for r in rows for o in (r.get("override_list") or [])
             if isinstance(o, str) and (m := re.fullmatch(r"\+{0,2}experiment=exercise(\d)", o))}
    return int(found.pop()) if len(found) == 1 and all(r.get("override_list") for r in rows) else None


def table_columns(rows: Rows) -> list[str] | None:
    """The printed table's columns for an exercise's sweep: the job, its status, the columns that answer the
    exercise (:attr:`attnlab.saved.columns.Column.exercises`) and any error; None for another sweep."""
    if (n := exercise_of(rows)) is None:
        return None
    return [c for c in columns_of(rows, table=True) if c in ("job", "status", "error") or n in column(c).exercises]


def answer(rows: Rows, exercise: int | None = None) -> str | None:
    """Exercise ``exercise``'s (default :func:`exercise_of`) answer from the completed ``rows``;
    None when the rows do not answer it (not that exercise, or too few jobs completed)."""
    n = exercise if exercise is not None else exercise_of(rows)
    done = [r for r in rows if r.get("status") == "completed"]
    if n not in ANSWERS or not done:
        return None
    try:
        text = ANSWERS[n](done)
    except (KeyError, TypeError, ValueError, IndexError):  # a run that lacks what its exercise measures
        return None
    return _("Exercise {n}, answer: ").format(n=n) + text if text else None


def _then(first: str, second: str) -> str:
    """Two sentences, one after the other (a space between them in English, none in Chinese)."""
    return _("{first} {second}").format(first=first, second=second)


def _by(rows: Rows, key: str) -> list[tuple[str, dict[str, Any]]]:
    """``(value as typed, row)`` per row, in row order."""
    return [(printable(str(select(r.get("config"), key)), 60), r) for r in rows]


def _exercise1(rows: Rows) -> str | None:
    if len(rows) < 2:
        return None
    shapes = [dict(part.split("=", 1) for part in str(r["shapes"]).split()) for r in rows]
    changed = [k for k in shapes[0] if len({s[k] for s in shapes}) > 1]
    same = [k for k in shapes[0] if k not in changed]
    text = _("with d_model {values}: {changed} change; {same} stay.").format(
        values=" → ".join(v for v, _r in _by(rows, "model.d_model")),
        changed=_(", ").join(f"{k} {' → '.join(s[k] for s in shapes)}" for k in changed) or "-",
        same=_(", ").join(f"{k} {shapes[0][k]}" for k in same) or "-")
    if changed == ["X"]:
        text = _then(text, _("d_model is the length of each token's vector, so only X (token + position "
                             "embedding) gets longer; Q, K and V have d_k and d_v columns and there is one weight "
                             "per pair of tokens, whatever d_model is."))
    return text


def _exercise2(rows: Rows) -> str:
    parts, example = [], None
    for sentence, r in _by(rows, "sentence"):
        pieces = PIECE.findall(str(r.get("tokens") or ""))
        part = _("'{sentence}' is {n} tokens").format(sentence=sentence, n=cell_text("n_tokens", r["n_tokens"]))
        if pieces:
            part += _(" ({k} of them pieces of a character)").format(k=len(pieces))
            example = example or re.search(r"'([^']*)\(1/(\d)\)'", str(r["tokens"]))
        parts.append(part)
    text = _("; ").join(parts) + _(".")
    if example:
        char, total = example.group(1).strip(), int(example.group(2))
        text = _then(text, _("A token is a piece of text GPT-2 has seen often: a common English word is one token, "
                                   "a character it has not seen whole (Chinese, emoji) is cut into its UTF-8 bytes, "
                                   "e.g. {char} = {pieces}.").format(
            char=char, pieces=" + ".join(f"{char}({i}/{total})" for i in range(1, total + 1))))
    return text


def _exercise3(rows: Rows) -> str | None:
    parts = []
    for std, r in _by(rows, "model.init_std"):
        far = cell_text("max_abs_weight_minus_uniform", r["max_abs_weight_minus_uniform"])
        T = r["n_tokens"]
        if isinstance(r.get("focus_target"), Uniform):
            parts.append(_("with init std {std} every weight is within {far} of 1/{T} = {u}: still uniform").format(
                std=std, far=far, T=T, u=f"{1 / T:.3f}"))
        else:
            parts.append(_("with init std {std} a weight is up to {far} away from 1/{T} ({token} gives {target} "
                           "{weight}): no longer uniform").format(
                std=std, far=far, T=T, token=cell_text("focus_token", r["focus_token"]),
                target=cell_text("focus_target", r["focus_target"]),
                weight=cell_text("focus_weight", r["focus_weight"])))
    text = _("; ").join(parts) + _(".")
    if len({isinstance(r.get("focus_target"), Uniform) for r in rows}) == 2:  # some uniform, some spread
        text = _then(text, _("Small parameters give scores near 0, and softmax of equal scores is uniform; larger "
                             "ones spread the scores apart, so some keys get more weight."))
    return text


def _exercise4(rows: Rows) -> str | None:
    groups: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    for lr, r in _by(rows, "optimizer.lr"):
        groups.setdefault(select(r.get("config"), "train.steps"), []).append((lr, r))
    out = []
    for steps, jobs in sorted(groups.items()):
        clauses = []
        for lr, r in jobs:
            c = {k: cell_text(k, r.get(k)) for k in BY_KEY}
            loss = (_("loss below {thr} at step {step}, {loss} at the end").format(
                thr=c["loss_threshold"], step=c["steps_to_threshold"], loss=c["final_loss"])
                if r.get("steps_to_threshold") is not None else _("loss {loss}").format(loss=c["final_loss"]))
            if r.get("focus_step") is not None:
                focus = _("{token} passes 0.9 at step {step} (on {target})").format(
                    token=c["focus_token"], step=c["focus_step"], target=c["focus_target"])
            else:
                focus = _("{token} never passes 0.9 ({weight} on {target} at step {step})").format(
                    token=c["focus_token"], weight=c["focus_weight"], target=c["focus_target"], step=c["snapshot_step"])
            clauses.append(_("lr {lr}: {loss}; {focus}").format(lr=lr, loss=loss, focus=focus))
        out.append(_("in {steps} steps, {clauses}.").format(steps=steps, clauses=" · ".join(clauses)))
    steps, jobs = max(groups.items())  # what the longest runs show
    if len(jobs) < 2:
        return "\n".join(out)
    (low_lr, low), *_between, (high_lr, high) = sorted(jobs, key=lambda j: float(j[0]))
    best_lr, best = min(jobs, key=lambda j: j[1]["final_loss"])
    focused = [(r["focus_step"], lr) for lr, r in jobs if r.get("focus_step") is not None]
    out.append(_("In {steps} steps the lowest loss is lr {lr}'s.").format(steps=steps, lr=best_lr))
    if focused and min(focused)[1] == high_lr and high is not best:
        out[-1] = _then(out[-1], _("The largest lr, {lr}, focuses first but its loss stays at {loss}: steps that "
                                   "large overshoot.").format(
            lr=high_lr, loss=cell_text("final_loss", high["final_loss"])))
    if low.get("focus_step") is None and focused:
        out[-1] = _then(out[-1], _("The smallest, {lr}, is too slow to focus in {steps} steps.").format(
            lr=low_lr, steps=steps))
    return "\n".join(out)


def _exercise5(rows: Rows) -> str | None:
    same, differ = [], []
    for positional, r in _by(rows, "model.positional"):
        if r.get("perm_tokens_match") is not True:
            return None
        d = r["perm_z_max_abs_diff"]
        (same if d < SAME_Z else differ).append((positional, cell_text("perm_z_max_abs_diff", d)))
    parts = [_("with model.positional={p} the context vectors Z of the two orders are the same rows, reordered "
               "(largest difference {d}, float rounding): the model cannot tell 'one step' from 'step one'").format(
                 p=p, d=d) for p, d in same]
    parts += [_("with model.positional={p} they differ by up to {d}: the position embeddings tell the orders "
                "apart").format(p=p, d=d) for p, d in differ]
    text = _("; ").join(parts) + _(".")
    if same:
        text = _then(text, _("Self-attention mixes the same token vectors with the same weights whatever their order; "
                                   "only the position embedding added to X says where a token stands."))
    return text


ANSWERS: dict[int, Callable[[Rows], str | None]] = {1: _exercise1, 2: _exercise2, 3: _exercise3, 4: _exercise4,
                                                    5: _exercise5}
