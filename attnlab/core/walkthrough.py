"""Tutorial sections 1–4 as a narrated run (``task=walkthrough``), parameters made in the text's
order (§2 token table, §3 position table, §4.1 W_query, W_key, W_value); with the
tutorial_walkthrough preset (seed 123, std 0.02) it prints the tutorial's numbers."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from omegaconf import DictConfig

from attnlab.core import checks
from attnlab.core.i18n import _
from attnlab.core.tokenizer import Tokens, show
from attnlab.core.training import build_model, one_at_a_time


@one_at_a_time
def walkthrough(cfg: DictConfig, print_line: Callable[[str], object] = print,
                tokens: Tokens | None = None) -> dict[str, np.ndarray]:
    """Print sections 1–4 through ``print_line(str)``; return head 0's intermediates: ``token_ids``
    (T,), ``token_embeddings``, ``pos_embeddings``, ``X`` (T, d_model), ``Q``, ``K`` (T, d_k), ``V``
    (T, d_v), ``scores``, ``weights`` (T, T), ``Z`` (T, d_v). Writes nothing. ``tokens``: the caller's
    :func:`checks.validated_tokens` of ``cfg`` (None: made here). ConfigError / TokenizerError on bad input."""

    def p(*args: object) -> None:
        for line in " ".join(str(a) for a in args).split("\n"):
            print_line(line)

    prepared = tokens or checks.validated_tokens(cfg)  # §1
    model = build_model(cfg, prepared, order="walkthrough")  # §2–4's order
    model.eval()  # §4 shows the weights themselves: no dropout
    embedding, attention = model.embedding, model.attention
    ids, tokens = prepared.token_ids, prepared.labels

    p(_("== 1. Tokenization =="))
    p(_("text:"), cfg.sentence if not cfg.get("text_file") else cfg.text_file)
    p("token_ids:", ids)
    for tid, tok in zip(ids, tokens):
        p(f"  {tid:>6} -> {show(tok)}")

    with torch.no_grad(), np.printoptions(precision=4, suppress=True):  # tutorial §0's print options
        device = next(attention.parameters()).device
        id_tensor = torch.tensor(ids, device=device)
        tok_emb = embedding.token_embedding(id_tensor)
        p("\n" + _("== 2. Token embedding =="))
        p("shape:", tuple(tok_emb.shape))
        p(tok_emb.cpu().numpy())
        p(_("lookup == Embedding call?"), torch.equal(embedding.token_embedding.weight[id_tensor], tok_emb))
        p(_("embedding table shape:"), tuple(embedding.token_embedding.weight.shape))
        p(_("input dtype:"), id_tensor.dtype, " shape:", tuple(id_tensor.shape))

        pos_emb = embedding.position_embedding(torch.arange(len(ids), device=device))
        X = embedding(id_tensor)
        p("\n" + _("== 3. Positional embedding =="))
        p("shape:", tuple(pos_emb.shape), *([] if embedding.positional else [_(" (left out: model.positional=none)")]))
        p("X shape:", tuple(X.shape))
        if embedding.positional:  # each claim printed only for the config it holds in
            p(_("X[0] == token_embeddings[0] + pos_embeddings[0]?"), torch.equal(X[0], tok_emb[0] + pos_emb[0]))
        else:
            p(_("no positions: X == token_embeddings?"), torch.equal(X, tok_emb))

        att = attention(X)  # the tutorial's one head: head 0 of Q, K, V, scores, weights
        Z, weights, parts = att.Z, att.weights[0], {k: getattr(att, k)[0] for k in ("Q", "K", "V", "scores")}
        p("\n" + _("== 4. Self-attention ==") + (_("  (head 0 of model.n_heads={H})").format(H=attention.n_heads)
                                                 if attention.n_heads > 1 else ""))
        p("Q shape:", tuple(parts["Q"].shape), " K shape:", tuple(parts["K"].shape),
          " V shape:", tuple(parts["V"].shape))
        p("scores shape:", tuple(parts["scores"].shape),
          _(" (scaled by 1/sqrt(d_k), d_k={d_k})").format(d_k=attention.d_k))
        w = weights.cpu().numpy()
        width = max(10, max(len(show(t)) for t in tokens) + 1)
        p(" " * (width + 2) + "  ".join(f"{show(t):>{width}}" for t in tokens))
        for i, row in enumerate(w):
            p(f"{show(tokens[i]):>{width}}: " + "  ".join(f"{v:>{width}.3f}" for v in row))
        p(_("row sums:"), w.sum(axis=-1))
        p("Z shape:", tuple(Z.shape))
        f = prepared.focus
        p("\n" + _("focus token: {token}").format(token=show(tokens[f])))
        p(f"q = {parts['Q'][f].cpu().numpy()}")
        p(_("attention weights:"))
        for t, v in zip(tokens, w[f]):
            p(_("  -> {token}: {weight:.4f}").format(token=f"{show(t):>{width}}", weight=v))
        p(f"z = {Z[f].cpu().numpy()}")

    return {"token_ids": np.asarray(ids, dtype=np.int64), "token_embeddings": tok_emb.cpu().numpy(),
            "pos_embeddings": pos_emb.cpu().numpy(), "X": X.cpu().numpy(),
            **{k: v.cpu().numpy() for k, v in parts.items()}, "weights": w, "Z": Z.cpu().numpy()}
