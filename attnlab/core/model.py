"""The tutorial's model: §2–3 :class:`InputEmbedding`, §4 :class:`MultiHeadSelfAttention` (one
head, switches off: §4's code bit for bit), §5's :func:`mse` or GPT's :func:`next_token_cross_entropy`,
built in the tutorial's random-number orders. Shapes: T tokens, d_model embedding size, H heads,
d_k query/key and d_v value size per head."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.checks import resolve_out_proj


@dataclass(frozen=True)
class ModelSpec:
    """The ``model.*`` keys as plain values (``out_proj`` "auto" | True | False)."""

    d_model: int
    d_k: int
    d_v: int
    init_std: float
    positional: bool = True
    n_heads: int = 1
    causal: bool = False
    dropout: float = 0.0
    qkv_bias: bool = False
    attention: str = "explicit"
    out_proj: bool | str = "auto"
    n_layers: int = 0
    d_ff: int | None = None  # None: 4·d_model


class InputEmbedding(nn.Module):
    """X = token_embedding(ids) + position_embedding(0..T-1), (T, d_model) (tutorial §2–3). Tables
    (vocab_size, d_model) and (rows, d_model), both N(0, init_std²): made, then drawn (§5); with
    ``text_order`` each drawn when made, as §2–3's text runs. ``positional=False`` leaves the position
    table out of the sum (exercise 5), not out of the model: what is drawn after it does not change."""

    def __init__(self, spec: ModelSpec, vocab_size: int, rows: int, text_order: bool = False) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, spec.d_model)
        if text_order:
            nn.init.normal_(self.token_embedding.weight, mean=0.0, std=spec.init_std)
        self.position_embedding = nn.Embedding(rows, spec.d_model)
        for table in (self.position_embedding,) if text_order else (self.token_embedding, self.position_embedding):
            nn.init.normal_(table.weight, mean=0.0, std=spec.init_std)
        self.positional = spec.positional

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``token_ids`` (..., T) int64 → X (..., T, d_model)."""
        X = self.token_embedding(token_ids)  # (T, d_model)
        if self.positional:
            X = X + self.position_embedding(torch.arange(token_ids.shape[-1], device=token_ids.device))
        return X


class AttentionOutput(NamedTuple):
    """One forward, named as in §4: ``Q``, ``K`` (H, T, d_k); ``V`` (H, T, d_v); ``scores`` (H, T, T)
    = Q Kᵀ / √d_k (-inf above the diagonal when causal); ``weights`` = softmax(scores) without
    dropout (both None with ``need_weights=False``); ``Z`` (T, H·d_v), or (T, d_model) after W_out."""

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    scores: torch.Tensor | None
    weights: torch.Tensor | None
    Z: torch.Tensor


def scaled_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q kᵀ / √d_k (tutorial §4.2): q, k (..., T, d_k) → (..., T, T); -inf where ``mask`` is True."""
    scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5  # (..., T, T)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores


class MultiHeadSelfAttention(nn.Module):
    """H heads of scaled dot-product self-attention (tutorial §4; Vaswani et al. 2017, §3.2.2). Per head:
    Q_h = X W_qhᵀ, K_h = X W_khᵀ, V_h = X W_vhᵀ; weights_h = softmax(Q_h K_hᵀ / √d_k); head_h = dropout(weights_h) V_h;
    Z = [head_1 … head_H] (T, H·d_v), then Z W_outᵀ with ``out_proj``. Made in this order (it decides the
    random numbers): W_query, W_key (d_model → H·d_k), W_value (d_model → H·d_v), bias-free; with ``qkv_bias``
    their biases U(±1/√d_model); W_out (H·d_v → d_model). ``attention="explicit"``: §4's 2-D matmuls one head
    at a time; ``"sdpa"``: F.scaled_dot_product_attention, weights recomputed without gradient when asked."""

    def __init__(self, d_model: int, d_k: int, d_v: int, n_heads: int = 1, *, causal: bool = False,
                 dropout: float = 0.0, qkv_bias: bool = False, attention: str = "explicit",
                 out_proj: bool = False) -> None:
        super().__init__()
        self.d_model, self.d_k, self.d_v, self.n_heads = d_model, d_k, d_v, n_heads
        self.causal, self.dropout, self.attention = causal, float(dropout), attention
        self.W_query = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.W_key = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.W_value = nn.Linear(d_model, n_heads * d_v, bias=False)
        if qkv_bias:  # drawn like nn.Linear's own bias, U(-1/√d_model, 1/√d_model)
            for linear in (self.W_query, self.W_key, self.W_value):
                linear.bias = nn.Parameter(torch.empty(linear.out_features))
                nn.init.uniform_(linear.bias, -1 / math.sqrt(d_model), 1 / math.sqrt(d_model))
        self.W_out = nn.Linear(n_heads * d_v, d_model, bias=False) if out_proj else None

    def forward(self, X: torch.Tensor, need_weights: bool = True) -> AttentionOutput:
        """X (T, d_model) → :class:`AttentionOutput`; a batch X (B, T, d_model) puts B first in each."""
        Q_all, K_all, V_all = self.W_query(X), self.W_key(X), self.W_value(X)  # (T, H·d_k), (T, H·d_k), (T, H·d_v)
        # (T, H·d) → (H, T, d), views: head h is columns h·d … (h+1)·d - 1
        Q, K, V = (t.unflatten(-1, (self.n_heads, -1)).transpose(-3, -2) for t in (Q_all, K_all, V_all))
        T = X.shape[-2]  # causal: (T, T) True above the diagonal, the keys j > i query i must not see
        mask = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(diagonal=1) if self.causal else None
        scores = weights = None
        if self.attention == "explicit":
            all_scores, all_weights, heads = [], [], []
            # head h is tutorial §4.2–4.4 on its own columns h·d_k … (h+1)·d_k - 1 of Q and K
            per_head = [(Q_all, K_all, V_all)] if self.n_heads == 1 else zip(Q.unbind(-3), K.unbind(-3), V.unbind(-3))
            for q, k, v in per_head:
                s = scaled_scores(q, k, mask)  # (T, T)
                w = torch.softmax(s, dim=-1)  # (T, T), rows sum to 1
                heads.append(F.dropout(w, self.dropout, self.training) @ v)  # (T, d_v); dropout in training
                all_scores.append(s)
                all_weights.append(w)
            Z = torch.cat(heads, dim=-1) if len(heads) > 1 else heads[0]  # (T, H·d_v); one head: no copy
            if need_weights:
                scores, weights = torch.stack(all_scores, -3), torch.stack(all_weights, -3)  # (H, T, T)
        else:
            heads = F.scaled_dot_product_attention(Q, K, V, dropout_p=self.dropout if self.training else 0.0,
                                                   is_causal=self.causal)  # (H, T, d_v)
            Z = heads.transpose(-3, -2).flatten(-2)  # (T, H·d_v): the heads side by side
            if need_weights:  # the records only, no gradient
                with torch.no_grad():
                    scores = scaled_scores(Q, K, mask)  # (H, T, T)
                    weights = torch.softmax(scores, dim=-1)
        if self.W_out is not None:
            Z = self.W_out(Z)  # (T, d_model)
        return AttentionOutput(Q, K, V, scores, weights, Z)


class AttentionModel(nn.Module):
    """The tutorial's model: ``embedding`` (§2–3, seq_len positions), ``attention`` (§4), with ``next_token_head``
    Linear(d_model, vocab_size) drawn last (else None). ``order="training"``: §5's (the tables made, then drawn;
    Z in d_model for the loss); ``"walkthrough"``: §2–4's text order (each table drawn when made; no loss:
    "auto" gives W_out for H > 1)."""

    def __init__(self, spec: ModelSpec, vocab_size: int, seq_len: int, order: str = "training",
                 next_token_head: bool = False) -> None:
        super().__init__()
        walkthrough = order == "walkthrough"
        self.embedding = InputEmbedding(spec, vocab_size, seq_len, text_order=walkthrough)
        out_proj = resolve_out_proj(spec.out_proj, spec.n_heads, spec.d_v, spec.d_model, z_in_d_model=not walkthrough)
        self.attention = MultiHeadSelfAttention(spec.d_model, spec.d_k, spec.d_v, spec.n_heads, causal=spec.causal,
                                                dropout=spec.dropout, qkv_bias=spec.qkv_bias,
                                                attention=spec.attention, out_proj=out_proj)
        self.next_token_head = _next_token_head(spec, vocab_size) if next_token_head else None

    def trained_parameters(self) -> list[nn.Parameter]:
        """What §5 trains, in creation order (the embeddings are not: X is computed once)."""
        return [*self.attention.parameters(), *(self.next_token_head.parameters() if self.next_token_head else ())]


def _next_token_head(spec: ModelSpec, vocab_size: int) -> nn.Linear:
    """Linear(d_model, vocab_size), bias-free, N(0, 0.02²) (GPT-2's, as nanoGPT's _init_weights)."""
    head = nn.Linear(spec.d_model, vocab_size, bias=False)
    nn.init.normal_(head.weight, mean=0.0, std=0.02)
    return head


class Block(nn.Module):
    """One GPT block, pre-LayerNorm (GPT-2; nanoGPT's Block): x + attention(ln_1(x)), then
    x + W_proj(GELU(W_fc(ln_2(x)))); x (..., T, d_model). The attention is §4's, causal, with W_out.
    Made in this order, PyTorch's default init: ln_1, attention, ln_2, W_fc (d_model → d_ff), W_proj."""

    def __init__(self, spec: ModelSpec, d_ff: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(spec.d_model)
        self.attention = MultiHeadSelfAttention(spec.d_model, spec.d_k, spec.d_v, spec.n_heads, causal=True,
                                                dropout=spec.dropout, qkv_bias=spec.qkv_bias,
                                                attention=spec.attention, out_proj=True)
        self.ln_2 = nn.LayerNorm(spec.d_model)
        self.W_fc = nn.Linear(spec.d_model, d_ff)
        self.W_proj = nn.Linear(d_ff, spec.d_model)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (..., T, d_model) → (x (..., T, d_model), weights (..., H, T, T) or None)."""
        out = self.attention(self.ln_1(x), need_weights=need_weights)
        x = x + out.Z  # residual around the attention
        x = x + self.W_proj(F.gelu(self.W_fc(self.ln_2(x))))  # residual around the MLP
        return x, out.weights


class GPT(nn.Module):
    """A mini-GPT, made in this order: ``embedding`` (§5's tables, ``context`` positions, trained here),
    ``blocks`` (:class:`Block` × n_layers), ``ln_f`` (a final LayerNorm), ``next_token_head``
    Linear(d_model, vocab_size)."""

    def __init__(self, spec: ModelSpec, vocab_size: int, context: int) -> None:
        super().__init__()
        self.embedding = InputEmbedding(spec, vocab_size, context)
        self.blocks = nn.ModuleList(Block(spec, spec.d_ff or 4 * spec.d_model) for _ in range(spec.n_layers))
        self.ln_f = nn.LayerNorm(spec.d_model)
        self.next_token_head = _next_token_head(spec, vocab_size)

    def forward(self, token_ids: torch.Tensor, need_weights: bool = False,
                head: bool = True) -> tuple[torch.Tensor | None, list]:
        """``token_ids`` (..., T) → (logits (..., T, vocab_size), or None without ``head``: the weights
        alone skip the vocab_size-wide matmul; each block's weights (..., H, T, T) with ``need_weights``, else [])."""
        x = self.embedding(token_ids)  # (..., T, d_model)
        weights = []
        for block in self.blocks:
            x, w = block(x, need_weights)
            weights.append(w)
        return (self.next_token_head(self.ln_f(x)) if head else None), weights if need_weights else []

    def trained_parameters(self) -> list[nn.Parameter]:
        """Every parameter, the embeddings too (GPT learns them), in creation order."""
        return list(self.parameters())

    def stacked_state(self) -> dict[str, torch.Tensor]:
        """``state_dict`` with each block tensor stacked over the blocks: ``blocks.W_fc.weight``
        (n_layers, d_ff, d_model) for ``blocks.0.W_fc.weight`` … (model.npz: 16 arrays at most)."""
        state = self.state_dict()
        stacked = {k: v for k, v in state.items() if not k.startswith("blocks.")}
        for k in self.blocks[0].state_dict():
            stacked[f"blocks.{k}"] = torch.stack([state[f"blocks.{i}.{k}"] for i in range(len(self.blocks))])
        return stacked

    def load_stacked(self, stacked: dict[str, torch.Tensor]) -> None:
        """The inverse of :meth:`stacked_state`; RuntimeError for a missing name or another shape."""
        state = {k: v for k, v in stacked.items() if not k.startswith("blocks.")}
        for k, v in stacked.items():
            if k.startswith("blocks."):
                state.update({f"blocks.{i}.{k.removeprefix('blocks.')}": t for i, t in enumerate(v)})
        self.load_state_dict(state)


def next_token_targets(X: torch.Tensor) -> torch.Tensor:
    """The tutorial §5 target (T, d_model): row i is X[i+1]; the last row is X[-1] itself."""
    return torch.cat([X[1:], X[-1:]])


def mse(Z: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Tutorial §5's loss: mean squared error ((Z - target)²).mean(), a scalar; Z and target (T, d)."""
    return ((Z - target) ** 2).mean()


def next_token_cross_entropy(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """GPT's objective in nats: mean over i < T-1 of -log softmax(logits[i])[token_ids[i+1]];
    ``logits`` (..., T, vocab_size), ``token_ids`` (..., T) (a batch: the mean over every window's
    predictions). Raises ValueError for T < 2."""
    if token_ids.shape[-1] < 2:
        raise ValueError(f"next_token_cross_entropy needs at least 2 tokens, got {token_ids.shape[-1]}")
    targets = F.pad(token_ids[..., 1:], (0, 1), value=-1)  # (..., T): the last position has no next token
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=-1)  # logits as they are, no copy
