"""Measured answers to the tutorial's exercises (§8) for summary.json: :func:`observe`. Exercise 4
(lr x steps) reads ``final_loss`` and ``steps_to_threshold``; :func:`attnlab.saved.columns.observed_cells`
turns them into table cells."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from omegaconf import DictConfig

from attnlab.core.config import Task, plain
from attnlab.core.tokenizer import Tokens, encode, tokenize

MAX_TABLE = 256  # token_table rows kept in summary.json (n_tokens is always exact)


def max_abs_weight_minus_uniform(weights: np.ndarray) -> float:
    """``max |weights - 1/T|`` over (..., T, T): how far attention is from uniform."""
    w = np.asarray(weights, dtype=np.float64)
    return float(np.max(np.abs(w - 1.0 / w.shape[-1])))


def row_matching(ids_a: Sequence[int], ids_b: Sequence[int]) -> list[int] | None:
    """``perm`` with ``ids_b[i] == ids_a[perm[i]]`` (repeated ids matched in order), or None when ``ids_b``
    is not a reordering of ``ids_a``."""
    if sorted(ids_a) != sorted(ids_b):
        return None
    perm = np.empty(len(ids_a), dtype=np.int64)
    perm[np.argsort(ids_b, kind="stable")] = np.argsort(ids_a, kind="stable")  # k-th of an id in B → k-th in A
    return perm.tolist()


def permutation_check(cfg: DictConfig, tokens: Tokens | None = None) -> dict[str, Any]:
    """Exercise 5: the job's initial parameters on ``sentence`` (A, its ``tokens``) and
    ``analysis.compare_sentence`` (B): row i of Z_B is row ``permutation[i]`` of Z_A?
    ``z_max_abs_diff`` = max |Z_B - Z_A[permutation]| (~1e-7 without positions: self-attention is
    permutation-equivariant), ``x_max_abs_diff`` the same for X; None when B does not reorder A's ids."""
    import torch

    from attnlab.core.training import build_model

    other = cfg.analysis.compare_sentence
    prepared = tokens or tokenize(cfg)
    ids_a = prepared.token_ids
    ids_b = encode(other, cfg.tokenizer.encoding, plain(cfg.tokenizer.special_tokens))
    perm = row_matching(ids_a, ids_b)
    out: dict[str, Any] = {"compare_sentence": other, "token_ids_a": list(ids_a), "token_ids_b": list(ids_b),
                           "tokens_are_permutation": perm is not None, "permutation": perm,
                           "positional": plain(cfg.model.positional), "z_max_abs_diff": None,
                           "x_max_abs_diff": None}
    if perm is None:
        return out
    model = build_model(cfg, prepared, order="walkthrough" if cfg.task == Task.walkthrough else "training")
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        X_a, X_b = (model.embedding(torch.tensor(ids, device=device)) for ids in (ids_a, ids_b))  # (T, d_model) each
        Z_a, Z_b = model.attention(X_a).Z, model.attention(X_b).Z  # (T, d_v) each, the same parameters
        idx = torch.tensor(perm, device=device)
        out["z_max_abs_diff"] = float((Z_b - Z_a[idx]).abs().max())
        out["x_max_abs_diff"] = float((X_b - X_a[idx]).abs().max())
    return out


def observe(cfg: DictConfig, token_ids: Sequence[int], labels: Sequence[str],
            arrays: dict[str, np.ndarray] | None = None, tokens: Tokens | None = None) -> dict[str, Any]:
    """For a job on ``token_ids`` (T,): ``n_tokens``, ``token_table`` ``[[id, label], ...]`` of the first
    :data:`MAX_TABLE` (exercise 2); with the walkthrough's ``arrays`` ``shapes`` (exercise 1) and
    ``max_abs_weight_minus_uniform`` (exercise 3, 0 = uniform); with ``analysis.compare_sentence``
    ``permutation_check`` (exercise 5) on the job's ``tokens``."""
    table = [[int(i), str(t)] for i, t in list(zip(token_ids, labels))[:MAX_TABLE]]
    out: dict[str, Any] = {"n_tokens": len(token_ids), "token_table": table}
    if arrays is not None:
        out["shapes"] = {k: list(v.shape) for k, v in arrays.items() if k != "token_ids"}
        out["max_abs_weight_minus_uniform"] = max_abs_weight_minus_uniform(arrays["weights"])
    if cfg.analysis.compare_sentence is not None:
        out["permutation_check"] = permutation_check(cfg, tokens)
    return out
