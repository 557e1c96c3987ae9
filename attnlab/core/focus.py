"""Focus metrics: how sharply attention settles on one key, as numpy functions of recorded
weights (..., H, T, T). In tutorial §5's run ' journey' ends with weight 0.99 on 'Your'."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from attnlab.core.records import RunInfo, Sink, Snapshot
from attnlab.core.tokenizer import show

# a row is uniform when max − min is below half the third decimal tables print: every key shows 1/T
UNIFORM_SPREAD = 5e-4
FOCUS_THRESHOLD = 0.9  # "focused": the focus token gives its strongest key more than this weight


class Focus(NamedTuple):
    """One query's strongest key per head: ``key`` (..., H) int64 (the first on a tie), ``weight`` float64."""

    key: np.ndarray
    weight: np.ndarray


def _as_weights(weights: np.ndarray, dtype: type | None = np.float64) -> np.ndarray:
    w = np.asarray(weights, dtype=dtype)
    if w.ndim < 2 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"attention weights must be (..., T, T), got shape {w.shape}")
    return w


def _query_row(weights: np.ndarray, query: int) -> np.ndarray:
    """Row ``query`` of ``weights`` (..., T, T) as float64 (..., T), converting only that row."""
    w = _as_weights(weights, dtype=None)
    if not 0 <= query < w.shape[-1]:
        raise ValueError(f"query={query}: must be a position in [0, {w.shape[-1]})")
    return np.asarray(w[..., query, :], dtype=np.float64)


def is_uniform(rows: np.ndarray) -> np.ndarray:
    """(..., T) → bool (...): each row's max − min below :data:`UNIFORM_SPREAD` (NaN: not uniform)."""
    return np.ptp(np.asarray(rows, dtype=np.float64), axis=-1) < UNIFORM_SPREAD


class Uniform(str):
    """The target of a uniform row: no key, the text ``uniform (1/T)``; shown unquoted."""


def target(row: np.ndarray, labels: Sequence[str]) -> tuple[str, float]:
    """Where one row (T,) attends most, ``(label, weight)``; ``(Uniform("uniform (1/T)"), max)`` when uniform."""
    j = int(np.argmax(row))
    return (Uniform(f"uniform (1/{len(labels)})") if is_uniform(row) else labels[j]), float(row[j])


def shown(label: str) -> str:
    """A target as printed: a token quoted (``' journey'``, :func:`show`), :class:`Uniform` as is."""
    return label if isinstance(label, Uniform) else show(label)


def focus(weights: np.ndarray, query: int) -> Focus:
    """Where ``query`` (``train.focus_token``) attends most: (..., H, T, T) → :class:`Focus` (..., H).
    Raises ValueError when ``weights`` is not (..., T, T) or ``query`` not in [0, T)."""
    row = _query_row(weights, query)  # (..., H, T)
    return Focus(row.argmax(axis=-1).astype(np.int64), row.max(axis=-1))


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """-Σ_j w_ij ln w_ij in nats (0 ln 0 = 0): (..., T, T) → (..., T); ln T for uniform rows. ValueError
    when ``weights`` is not (..., T, T)."""
    w = _as_weights(weights)
    return -(w * np.log(np.where(w > 0, w, 1.0))).sum(axis=-1)


def first_step_above(steps: Sequence[int], values: Sequence[float], threshold: float = FOCUS_THRESHOLD) -> int | None:
    """The first of ``steps`` (S,) whose ``values`` (S,) is > ``threshold``, or None (§5's run: 100).
    Raises ValueError unless both are 1-D of one length."""
    s, v = np.asarray(steps), np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or s.shape != v.shape:
        raise ValueError(f"steps {s.shape} and values {v.shape} must be two 1-D arrays of the same length")
    above = np.flatnonzero(v > threshold)
    return int(s[above[0]]) if above.size else None


def _with_mean(w: np.ndarray) -> np.ndarray:
    """(H, ...) → (H + 1, ...): the heads, then their mean."""
    return np.concatenate([w, w.mean(axis=0, keepdims=True)])


class FocusSink(Sink):
    """summary.json's focus metrics (:meth:`summary`), keeping H + 1 numbers per snapshot; with ``layer``:
    of that GPT block's weights (``Snapshot.layers[layer]``)."""

    def __init__(self, layer: int | None = None) -> None:
        self.layer = layer
        self.query = 0
        self.tokens: list[str] = []
        self.steps: list[int] = []
        self.series: list[np.ndarray] = []  # per snapshot (H + 1,): each head's focus weight, then the mean's
        self.last: np.ndarray | None = None

    def on_start(self, info: RunInfo) -> None:
        self.query, self.tokens = info.focus_token, list(info.tokens)

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Raises ValueError unless the weights are (H, T, T) with the focus token in [0, T)."""
        w = np.asarray(snapshot.weights if self.layer is None else snapshot.layers[self.layer])
        if w.ndim != 3:
            raise ValueError(f"snapshot weights must be (H, T, T), got shape {w.shape}")
        row = _query_row(w, self.query)  # (H, T): the focus token's row of each head
        self.series.append(_with_mean(row).max(axis=-1))  # (H + 1,)
        self.steps.append(snapshot.step)
        self.last = np.array(w)  # a copy: the summary is of the snapshot as taken, whatever its owner does later

    def summary(self) -> dict[str, Any]:
        """``{"focus": {query, token, threshold, step, heads: [{key, token, weight, uniform, first_step_above}],
        mean, entropy_nats (H, T), upper_triangle_max}}``; {} before the first snapshot."""
        if self.last is None:
            return {}
        heads_and_mean = _with_mean(_as_weights(self.last))  # (H + 1, T, T)
        last = focus(heads_and_mean, self.query)  # (H + 1,)
        series = np.stack(self.series)  # (S, H + 1)
        uniform = is_uniform(heads_and_mean[:, self.query])
        entries = [{"key": int(key), "token": self._label(int(key)), "weight": float(weight), "uniform": bool(flat),
                    "first_step_above": first_step_above(self.steps, series[:, h])}
                   for h, (key, weight, flat) in enumerate(zip(last.key, last.weight, uniform))]
        heads = heads_and_mean[:-1]
        above = np.triu(np.ones(heads.shape[-2:], dtype=bool), k=1)
        return {"focus": {
            "query": self.query, "token": self._label(self.query), "threshold": FOCUS_THRESHOLD,
            "step": self.steps[-1], "heads": entries[:-1], "mean": entries[-1],
            "entropy_nats": np.round(row_entropy(heads), 6).tolist(),
            "upper_triangle_max": float(heads[:, above].max()) if above.any() else 0.0,
        }}

    def _label(self, position: int) -> str:
        return self.tokens[position] if 0 <= position < len(self.tokens) else str(position)
