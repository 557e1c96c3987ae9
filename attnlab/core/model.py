"""The tutorial's model, one small module per concept, and the order its parameters are created in.

- §2–3 :class:`InputEmbedding`: X = token_embedding(ids) + position_embedding(0..T-1).
- §4 :class:`MultiHeadSelfAttention`: Q, K, V, scores, weights, Z; with one head and the
  switches off it is the tutorial's §4 code line for line (and bit for bit).
- §5 the objectives: :func:`mse` against :func:`next_token_targets` (the tutorial's) and
  :func:`next_token_cross_entropy` through a next-token head (GPT's).
- :func:`build_section5` / :func:`build_walkthrough`: the tutorial's two random-number orders,
  each written out in one place.

Shapes: T = seq_len tokens, d_model embedding size, H = n_heads, d_k the query/key size and d_v
the value size of one head, vocab_size the tokenizer's vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.config import resolve_out_proj
from attnlab.core.errors import ConfigError

GPT2_VOCAB_SIZE = 50257  # tutorial §2
ATTENTION_PATHS = ("explicit", "sdpa")
NEXT_TOKEN_HEAD_STD = 0.02  # GPT-2's init std for its weights (as nanoGPT's _init_weights)


class InputEmbedding(nn.Module):
    """X = token_embedding(ids) + position_embedding(0..T-1), both ``(T, d_model)`` (tutorial §2–3).

    Takes the two tables already created: the order in which they are created and initialised
    decides the random numbers drawn, and that order belongs to :func:`build_section5` /
    :func:`build_walkthrough`. ``positional=False`` leaves the position table out of the sum
    (exercise 5); the table still exists, so the random numbers drawn after it do not depend on
    ``positional``.
    """

    def __init__(self, token_embedding: nn.Embedding, position_embedding: nn.Embedding,
                 positional: bool = True) -> None:
        super().__init__()
        if token_embedding.embedding_dim != position_embedding.embedding_dim:
            raise ValueError(f"token and position tables must have the same width, got "
                             f"{token_embedding.embedding_dim} and {position_embedding.embedding_dim}")
        self.token_embedding = token_embedding  # (vocab_size, d_model)
        self.position_embedding = position_embedding  # (seq_len, d_model)
        self.positional = positional

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``token_ids`` (T,) int64 → X (T, d_model)."""
        X = self.token_embedding(token_ids)  # (T, d_model)
        if self.positional:
            X = X + self.position_embedding(torch.arange(token_ids.shape[0], device=token_ids.device))
        return X


class AttentionOutput(NamedTuple):
    """Everything one forward of :class:`MultiHeadSelfAttention` computes, named as in the
    tutorial (§4) and in the order of TransformerLens's hook points (q, k, v, attn_scores,
    pattern, then the output). Head h is index h of the head axis.

    - ``Q``, ``K`` (H, T, d_k): queries and keys of each head.
    - ``V`` (H, T, d_v): values of each head.
    - ``scores`` (H, T, T): Q Kᵀ / √d_k; with ``causal``, -inf above the diagonal (masked
      before the softmax). None when the forward was asked ``need_weights=False``.
    - ``weights`` (H, T, T): softmax(scores) row-wise; every row sums to 1; exactly 0 above the
      diagonal with ``causal``. Always the weights *without* dropout (the ones snapshots
      record), even when dropout was applied to compute Z. None with ``need_weights=False``.
    - ``Z`` (T, d_out): the context vectors; the heads' weights @ V side by side (T, H·d_v),
      then W_out (T, d_model) when the module has one.
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    scores: torch.Tensor | None
    weights: torch.Tensor | None
    Z: torch.Tensor


def causal_mask(T: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True above the diagonal: the keys j > i that query i must not see. The
    diagonal stays visible, so no row is all masked (query i always sees key i)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(diagonal=1)


def scaled_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """One head's attention scores q kᵀ / √d_k (tutorial §4.2): q, k (T, d_k) → (T, T); where
    ``mask`` (T, T) is True the score is -inf, so its softmax weight is exactly 0."""
    scores = q @ k.T / k.shape[-1] ** 0.5  # (T, T)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores


class MultiHeadSelfAttention(nn.Module):
    """H heads of scaled dot-product self-attention side by side (tutorial §4; Vaswani et al.
    2017, eq. 1 per head and §3.2.2 for the heads).

    Per head h: Q_h = X W_qhᵀ, K_h = X W_khᵀ, V_h = X W_vhᵀ; scores_h = Q_h K_hᵀ / √d_k (-inf above
    the diagonal when ``causal``); weights_h = softmax(scores_h) row-wise;
    head_h = dropout(weights_h) V_h. Z = [head_1 … head_H] (T, H·d_v), then Z W_outᵀ (T, d_model)
    when ``out_proj``.

    Parameters, created in this order (it decides the random numbers drawn):

    1. ``W_query`` = Linear(d_model, H·d_k), ``W_key`` = Linear(d_model, H·d_k),
       ``W_value`` = Linear(d_model, H·d_v), bias-free, nn.Linear's own init; rows
       h·d_k … (h+1)·d_k - 1 of W_query / W_key (h·d_v … of W_value) are head h. With H = 1 these
       are the tutorial's three layers, same shapes, same numbers.
    2. with ``qkv_bias``: their biases, (H·d_k,), (H·d_k,), (H·d_v,), drawn U(-1/√d_model,
       1/√d_model) like nn.Linear's own, *after* all three weights, so switching the bias on
       leaves the weights as they were.
    3. with ``out_proj``: ``W_out`` = Linear(H·d_v, d_model), bias-free (Vaswani's W^O), nn.Linear's
       own init. Whether a configuration gets one is decided by :func:`resolve_out_proj`.

    ``attention``: ``"explicit"`` computes each head with the tutorial's matmul-softmax-matmul,
    one head at a time with 2-D matmuls, so H = 1 is the tutorial's arithmetic to the bit (a
    batched (H, T, T) matmul rounds differently: 183 of the default run's 201 losses would move
    by up to 1.2e-7); ``"sdpa"`` computes all
    heads at once with ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels, no
    weights): the weights are then computed the explicit way, without gradient, only when the
    forward is asked ``need_weights=True`` (snapshot steps).

    ``dropout`` (p): in training mode (``.train()``), each weight is zeroed with probability p
    and the rest scaled by 1/(1-p) before weights @ V (Srivastava et al. 2014; as GPT-2); the
    random numbers come from torch's generator, so the same seed gives the same masks. The
    explicit and sdpa paths draw different masks. No dropout in eval mode or with p = 0 (no
    random numbers drawn then). The returned ``weights`` are always without dropout.

    Raises ConfigError (key = the argument's name) for a size that is not a positive integer,
    ``dropout`` outside [0, 1), ``attention`` not in :data:`ATTENTION_PATHS`, ``out_proj`` not a bool.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, n_heads: int = 1, *, causal: bool = False,
                 dropout: float = 0.0, qkv_bias: bool = False, attention: str = "explicit",
                 out_proj: bool = False) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v), ("n_heads", n_heads)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(name, value, "must be a positive integer")
        if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
            raise ConfigError("dropout", dropout, "must be in [0, 1)")
        if attention not in ATTENTION_PATHS:
            raise ConfigError("attention", attention, f"must be one of {', '.join(ATTENTION_PATHS)}")
        if not isinstance(out_proj, bool):
            raise ConfigError("out_proj", out_proj, "must be true or false here (resolve 'auto' with resolve_out_proj)")
        self.d_model, self.d_k, self.d_v, self.n_heads = d_model, d_k, d_v, n_heads
        self.causal, self.dropout, self.attention = causal, float(dropout), attention
        self.W_query = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.W_key = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.W_value = nn.Linear(d_model, n_heads * d_v, bias=False)
        if qkv_bias:
            for linear in (self.W_query, self.W_key, self.W_value):
                _add_bias(linear)
        self.W_out = nn.Linear(n_heads * d_v, d_model, bias=False) if out_proj else None

    @property
    def d_out(self) -> int:
        """The width of Z: d_model with W_out, else H·d_v."""
        return self.d_model if self.W_out is not None else self.n_heads * self.d_v

    def forward(self, X: torch.Tensor, need_weights: bool = True) -> AttentionOutput:
        """X (T, d_model) → :class:`AttentionOutput` (Q, K, V, scores, weights, Z; shapes there).
        ``need_weights=False`` returns scores and weights as None on both paths (on the sdpa
        path it saves computing them)."""
        T = X.shape[0]
        Q_all, K_all, V_all = self.W_query(X), self.W_key(X), self.W_value(X)  # (T, H·d_k), (T, H·d_k), (T, H·d_v)
        mask = causal_mask(T, X.device) if self.causal else None
        scores = weights = None
        if self.attention == "explicit":
            all_scores, all_weights, heads = [], [], []
            # head h is tutorial §4.2–4.4 on its own columns h·d_k … (h+1)·d_k - 1 of Q and K (one
            # head: the whole of them, not split: the same numbers, fewer ops a step)
            per_head = (zip(Q_all.split(self.d_k, -1), K_all.split(self.d_k, -1), V_all.split(self.d_v, -1))
                        if self.n_heads > 1 else ((Q_all, K_all, V_all),))
            for q, k, v in per_head:
                s = scaled_scores(q, k, mask)  # (T, T)
                w = torch.softmax(s, dim=-1)  # (T, T), rows sum to 1
                heads.append(self._drop(w) @ v)  # (T, d_v)
                all_scores.append(s)
                all_weights.append(w)
            Z = torch.cat(heads, dim=-1) if len(heads) > 1 else heads[0]  # (T, H·d_v); one head: no copy
            if need_weights:
                scores, weights = torch.stack(all_scores), torch.stack(all_weights)  # (H, T, T)
        else:
            p = self.dropout if self.training else 0.0
            heads = F.scaled_dot_product_attention(split_heads(Q_all, self.n_heads), split_heads(K_all, self.n_heads),
                                                   split_heads(V_all, self.n_heads), dropout_p=p,
                                                   is_causal=self.causal)  # (H, T, d_v)
            Z = merge_heads(heads)  # (T, H·d_v)
            if need_weights:  # the records only: computed as the explicit path does, no gradient
                with torch.no_grad():
                    scores = torch.stack([scaled_scores(q, k, mask) for q, k in
                                          zip(Q_all.split(self.d_k, -1), K_all.split(self.d_k, -1))])
                    weights = torch.softmax(scores, dim=-1)  # (H, T, T)
        Q, K, V = (split_heads(t, self.n_heads) for t in (Q_all, K_all, V_all))  # (H, T, d_k), …, (H, T, d_v)
        if self.W_out is not None:
            Z = self.W_out(Z)  # (T, d_model)
        return AttentionOutput(Q, K, V, scores, weights, Z)

    def _drop(self, weights: torch.Tensor) -> torch.Tensor:
        """Dropout on one head's weights in training mode; the weights themselves otherwise."""
        if self.training and self.dropout > 0:
            return F.dropout(weights, self.dropout)
        return weights


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(T, H·d) → (H, T, d), a view: head h is columns h·d … (h+1)·d - 1."""
    if n_heads == 1:
        return x.unsqueeze(0)  # the same view in one op
    T = x.shape[0]
    return x.view(T, n_heads, -1).transpose(0, 1)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(H, T, d) → (T, H·d): the heads side by side, head h in columns h·d … (h+1)·d - 1."""
    H, T, d = x.shape
    return x.transpose(0, 1).reshape(T, H * d)


def _add_bias(linear: nn.Linear) -> None:
    """Give a bias-free ``linear`` a bias drawn like nn.Linear's own, U(-1/√in, 1/√in)."""
    bound = 1 / math.sqrt(linear.in_features)
    linear.bias = nn.Parameter(torch.empty(linear.out_features))
    nn.init.uniform_(linear.bias, -bound, bound)


@dataclass(frozen=True)
class ModelSpec:
    """The model's sizes and switches as plain values (the ``model.*`` config keys; no Hydra).

    ``init_std``: std of both embedding tables; ``positional``: add the position table (learned)
    or not; the rest as in :class:`MultiHeadSelfAttention`, with ``out_proj`` ``"auto"`` | True |
    False resolved by :func:`resolve_out_proj`. The switches' defaults are the tutorial's
    (all off).
    """

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


class AttentionModel(nn.Module):
    """The built model: ``embedding`` (§2–3), ``attention`` (§4) and, for the next-token
    objective, ``next_token_head`` (Linear(d_model, vocab_size), bias-free; else None)."""

    def __init__(self, embedding: InputEmbedding, attention: MultiHeadSelfAttention,
                 next_token_head: nn.Linear | None = None) -> None:
        super().__init__()
        self.embedding = embedding
        self.attention = attention
        self.next_token_head = next_token_head

    def trained_parameters(self) -> list[nn.Parameter]:
        """What §5 trains, in creation order: the attention's parameters, then the head's. The
        embeddings are not trained (X is computed once and detached)."""
        params = list(self.attention.parameters())
        if self.next_token_head is not None:
            params += list(self.next_token_head.parameters())
        return params


def _attention(spec: ModelSpec, z_in_d_model: bool) -> MultiHeadSelfAttention:
    out_proj = resolve_out_proj(spec.out_proj, spec.n_heads, spec.d_v, spec.d_model, z_in_d_model=z_in_d_model)
    return MultiHeadSelfAttention(spec.d_model, spec.d_k, spec.d_v, spec.n_heads, causal=spec.causal,
                                  dropout=spec.dropout, qkv_bias=spec.qkv_bias, attention=spec.attention,
                                  out_proj=out_proj)


def build_section5(spec: ModelSpec, vocab_size: int, seq_len: int, next_token_head: bool = False) -> AttentionModel:
    """The model of tutorial §5, its parameters created in §5's order from torch's default
    generator (seed it first; create on the CPU, move afterwards):

    1. token table nn.Embedding(vocab_size, d_model) (draws nn.Embedding's own N(0, 1) init),
    2. position table nn.Embedding(seq_len, d_model),
    3. token table re-drawn N(0, init_std²), 4. position table re-drawn N(0, init_std²),
    5. the attention: W_query, W_key, W_value, [their biases], [W_out]
       (:class:`MultiHeadSelfAttention`; W_out per :func:`resolve_out_proj` with Z in d_model),
    6. with ``next_token_head`` (``train.objective=next_token``): Linear(d_model, vocab_size),
       bias-free, re-drawn N(0, 0.02²) (GPT-2's init).

    Every parameter a switch adds is created after all of the tutorial's, so the defaults draw
    the tutorial's random numbers (its golden numbers, bit for bit) and a switch leaves the
    parameters created before it unchanged. Raises ConfigError as :func:`resolve_out_proj` and
    :class:`MultiHeadSelfAttention` do.
    """
    token_embedding = nn.Embedding(vocab_size, spec.d_model)
    position_embedding = nn.Embedding(seq_len, spec.d_model)
    nn.init.normal_(token_embedding.weight, mean=0.0, std=spec.init_std)
    nn.init.normal_(position_embedding.weight, mean=0.0, std=spec.init_std)
    embedding = InputEmbedding(token_embedding, position_embedding, spec.positional)
    attention = _attention(spec, z_in_d_model=True)
    head = None
    if next_token_head:
        head = nn.Linear(spec.d_model, vocab_size, bias=False)
        nn.init.normal_(head.weight, mean=0.0, std=NEXT_TOKEN_HEAD_STD)
    return AttentionModel(embedding, attention, head)


def build_walkthrough(spec: ModelSpec, vocab_size: int, seq_len: int) -> AttentionModel:
    """The model of tutorial §2–4, its parameters created in the order the tutorial's text runs
    (seed first; the only order that prints the tutorial's §2 numbers):

    1. token table nn.Embedding(vocab_size, d_model), re-drawn N(0, init_std²) at once (§2),
    2. position table nn.Embedding(seq_len, d_model), re-drawn N(0, init_std²) (§3),
    3. the attention: W_query, W_key, W_value, [their biases], [W_out] (§4.1); the walkthrough has
       no loss, so ``"auto"`` gives a W_out only for H > 1 and Z stays (T, d_v) for one head.

    No next-token head (nothing is trained). Raises ConfigError as :func:`build_section5`.
    """
    token_embedding = nn.Embedding(vocab_size, spec.d_model)
    nn.init.normal_(token_embedding.weight, mean=0.0, std=spec.init_std)
    position_embedding = nn.Embedding(seq_len, spec.d_model)
    nn.init.normal_(position_embedding.weight, mean=0.0, std=spec.init_std)
    embedding = InputEmbedding(token_embedding, position_embedding, spec.positional)
    return AttentionModel(embedding, _attention(spec, z_in_d_model=False))


def next_token_targets(X: torch.Tensor) -> torch.Tensor:
    """The tutorial §5 target (T, d_model): row i is X[i+1]; the last row is X[-1] itself."""
    target = torch.zeros_like(X)
    target[:-1] = X[1:]
    target[-1] = X[-1]
    return target


def mse(Z: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Tutorial §5's loss: mean squared error ((Z - target)²).mean(), a scalar; Z and target (T, d)."""
    return ((Z - target) ** 2).mean()


def next_token_cross_entropy(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """GPT's objective: mean over positions i = 0 … T-2 of -log softmax(logits[i])[token_ids[i+1]],
    in nats (a scalar). ``logits`` (T, vocab_size) = next_token_head(Z); ``token_ids`` (T,).

    The last position has no next token in the text, so it is left out (GPT's training takes the
    target from the text after the window; here there is none). Unlike §5's MSE target, which
    uses X[-1] itself for the last row. Raises ValueError for T < 2 (nothing to predict).
    """
    if token_ids.shape[0] < 2:
        raise ValueError(f"next_token_cross_entropy needs at least 2 tokens, got {token_ids.shape[0]}")
    return F.cross_entropy(logits[:-1], token_ids[1:])
