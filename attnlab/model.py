"""The toy model of the tutorial: input embedding (§2–3) and scaled dot-product self-attention (§4).

Shapes: T = seq_len tokens, d_model embedding size, d_k query/key size, d_v value size.
"""
from __future__ import annotations

import torch
from torch import nn

GPT2_VOCAB_SIZE = 50257  # tutorial §2


class InputEmbedding(nn.Module):
    """X = token_embedding(ids) + position_embedding(0..T-1), both ``(T, d_model)`` (tutorial §2–3).

    Parameters are created and initialised N(0, init_std²) in one of the tutorial's two orders,
    which decides the random numbers drawn:

    - ``order="training"`` (§5): create token, create position, then initialise both;
    - ``order="walkthrough"`` (§2–3): create and initialise token, then create and initialise
      position.

    The position table is always created (so the random stream does not depend on
    ``positional``); ``positional=False`` only leaves it out of the sum (exercise 5).
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, init_std: float,
                 positional: bool = True, order: str = "training") -> None:
        super().__init__()
        if order not in ("training", "walkthrough"):
            raise ValueError(f"order={order!r}: must be 'training' or 'walkthrough'")
        self.positional = positional
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if order == "walkthrough":
            nn.init.normal_(self.token_embedding.weight, mean=0.0, std=init_std)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        if order == "training":
            nn.init.normal_(self.token_embedding.weight, mean=0.0, std=init_std)
        nn.init.normal_(self.position_embedding.weight, mean=0.0, std=init_std)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``token_ids`` (T,) int64 → X (T, d_model)."""
        x = self.token_embedding(token_ids)  # (T, d_model)
        if self.positional:
            x = x + self.position_embedding(torch.arange(token_ids.shape[0], device=token_ids.device))
        return x


class SelfAttention(nn.Module):
    """One head of scaled dot-product self-attention (tutorial §4; Vaswani et al. 2017, eq. 1).

    Q = X W_qᵀ, K = X W_kᵀ, V = X W_vᵀ with bias-free linear layers created in that order;
    scores = Q Kᵀ / √d_k, weights = softmax(scores) row-wise, Z = weights V.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int) -> None:
        super().__init__()
        self.d_k = d_k
        self.W_query = nn.Linear(d_model, d_k, bias=False)
        self.W_key = nn.Linear(d_model, d_k, bias=False)
        self.W_value = nn.Linear(d_model, d_v, bias=False)

    def forward(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """X (T, d_model) → (Z (T, d_v), weights (T, T))."""
        Z, weights, _ = self.forward_all(X)
        return Z, weights

    def forward_all(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Like ``forward``, also returning the intermediates Q, K (T, d_k), V (T, d_v) and
        the scaled ``scores`` (T, T) for the walkthrough."""
        Q = self.W_query(X)  # (T, d_k)
        K = self.W_key(X)  # (T, d_k)
        V = self.W_value(X)  # (T, d_v)
        scores = Q @ K.T / self.d_k ** 0.5  # (T, T)
        weights = torch.softmax(scores, dim=-1)  # (T, T), rows sum to 1
        Z = weights @ V  # (T, d_v)
        return Z, weights, {"Q": Q, "K": K, "V": V, "scores": scores}


def next_token_targets(X: torch.Tensor) -> torch.Tensor:
    """The tutorial §5 target (T, d_model): row i is X[i+1]; the last row is X[-1] itself."""
    target = torch.zeros_like(X)
    target[:-1] = X[1:]
    target[-1] = X[-1]
    return target


def mse(Z: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error ((Z - target)²).mean(), a scalar; Z and target are (T, d)."""
    return ((Z - target) ** 2).mean()
