"""attnlab.core.model with its defaults is the tutorial's code bit for bit; builders' orders; the switches' parameters.

The restatements below are the tutorial's own lines (§2–4 with seed 123, §5 with seed 42), written
here from the tutorial's text, not from attnlab.core.model.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from test_differential import plain_section5

from attnlab.core import checks
from attnlab.core.errors import ConfigError
from attnlab.core.model import (
    AttentionModel,
    AttentionOutput,
    ModelSpec,
    MultiHeadSelfAttention,
    mse,
    next_token_cross_entropy,
    next_token_targets,
    resolve_out_proj,
)
from attnlab.core.tokenizer import GPT2_VOCAB_SIZE
from attnlab.core.training import train

from conftest import GOLDEN_EMBEDDING_ROWS, GOLDEN_SECTION5, TUTORIAL_IDS, compose_cfg

SECTION5 = ModelSpec(d_model=6, d_k=4, d_v=6, init_std=1.0)
WALKTHROUGH = ModelSpec(d_model=6, d_k=4, d_v=4, init_std=0.02)


def section5_tutorial_code():
    """Tutorial §5's set-up and first forward, line by line (seed 42, std 1.0, d_out 4)."""
    torch.manual_seed(42)
    tok_emb = nn.Embedding(50257, 6)
    pos_emb = nn.Embedding(6, 6)
    nn.init.normal_(tok_emb.weight, std=1.0)
    nn.init.normal_(pos_emb.weight, std=1.0)
    X = (tok_emb(torch.tensor(TUTORIAL_IDS)) + pos_emb(torch.arange(6))).detach()
    Wq = nn.Linear(6, 4, bias=False)
    Wk = nn.Linear(6, 4, bias=False)
    Wv = nn.Linear(6, 6, bias=False)
    Q = Wq(X); K = Wk(X); V = Wv(X)
    scores = Q @ K.T / 4 ** 0.5
    weights = torch.softmax(scores, dim=-1)
    Z = weights @ V
    return dict(tok=tok_emb.weight, pos=pos_emb.weight, X=X, Wq=Wq.weight, Wk=Wk.weight, Wv=Wv.weight,
                Q=Q, K=K, V=V, scores=scores, weights=weights, Z=Z)


def test_default_training_is_the_plain_tutorial_code_bit_for_bit(cfg_of):
    result = train(cfg_of())
    assert f"{result.losses[0]:.4f}" == "2.3566"  # as §5 prints it
    for snap in result.snapshots:
        loss, row = GOLDEN_SECTION5[snap.step]
        assert f"{snap.loss:.4f}" == f"{loss:.4f}"
        assert [f"{v:.2f}" for v in snap.weights[0, 1]] == [f"{v:.2f}" for v in row]
    expected, _ = plain_section5("Your journey starts with one step", 42, 6, 4, 1.0, 201, [],
                                 lambda p: torch.optim.Adam(p, lr=0.05))
    np.testing.assert_array_equal(result.losses, expected)  # all 201 losses, to the last bit


def test_section5_builder_and_forward_equal_the_tutorial_code():
    expected = section5_tutorial_code()
    torch.manual_seed(42)
    model = AttentionModel(SECTION5, GPT2_VOCAB_SIZE, 6)
    att = model.attention
    assert att.W_out is None
    assert model.next_token_head is None
    X = model.embedding(torch.tensor(TUTORIAL_IDS)).detach()
    out = att(X)
    got = dict(tok=model.embedding.token_embedding.weight, pos=model.embedding.position_embedding.weight, X=X,
               Wq=att.W_query.weight, Wk=att.W_key.weight, Wv=att.W_value.weight, Q=out.Q[0], K=out.K[0],
               V=out.V[0], scores=out.scores[0], weights=out.weights[0], Z=out.Z)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    assert out.weights.shape == (1, 6, 6)
    assert out.Z.shape == (6, 6)
    assert f"{mse(out.Z, next_token_targets(X)).item():.4f}" == "2.3566"


def test_walkthrough_builder_equals_the_tutorial_sections_2_to_4():
    torch.manual_seed(123)  # tutorial §0, then §2, §3, §4.1–4.4 as printed
    token_emb_layer = nn.Embedding(50257, 6)
    nn.init.normal_(token_emb_layer.weight, mean=0.0, std=0.02)
    token_embeddings = token_emb_layer(torch.tensor(TUTORIAL_IDS))
    pos_emb_layer = nn.Embedding(6, 6)
    nn.init.normal_(pos_emb_layer.weight, mean=0.0, std=0.02)
    X = token_embeddings + pos_emb_layer(torch.arange(6))
    W_query, W_key, W_value = (nn.Linear(6, 4, bias=False) for _ in range(3))
    Q, K, V = W_query(X), W_key(X), W_value(X)
    attn_weights = torch.softmax(Q @ K.T / K.shape[-1] ** 0.5, dim=-1)
    Z = attn_weights @ V

    torch.manual_seed(123)
    model = AttentionModel(WALKTHROUGH, GPT2_VOCAB_SIZE, 6, order="walkthrough")
    ours_X = model.embedding(torch.tensor(TUTORIAL_IDS))
    out = model.attention(ours_X)
    assert model.attention.W_out is None  # §4 stops at Z (T, d_v)
    assert torch.equal(ours_X, X)
    for ours, theirs in ((out.Q[0], Q), (out.K[0], K), (out.V[0], V), (out.weights[0], attn_weights), (out.Z, Z)):
        assert torch.equal(ours, theirs)
    rows = model.embedding.token_embedding(torch.tensor(TUTORIAL_IDS[:3])).detach().numpy()
    assert [[f"{v:.4f}" for v in r] for r in rows] == [[f"{v:.4f}" for v in r] for r in GOLDEN_EMBEDDING_ROWS]
    assert out.Z.shape == (6, 4)


def test_attention_output_is_named_with_the_head_axis():
    assert AttentionOutput._fields == ("Q", "K", "V", "scores", "weights", "Z")
    torch.manual_seed(0)
    X = torch.randn(7, 6)
    for path in ("explicit", "sdpa"):
        torch.manual_seed(1)
        att = MultiHeadSelfAttention(6, 2, 5, n_heads=3, attention=path, out_proj=True)
        out = att(X)
        assert out.Q.shape == out.K.shape == (3, 7, 2)
        assert out.V.shape == (3, 7, 5)
        assert out.scores.shape == out.weights.shape == (3, 7, 7)
        assert out.Z.shape == (7, 6)
        # head h is the h-th slice of W_query's rows
        torch.testing.assert_close(out.Q[1], X @ att.W_query.weight[2:4].T, rtol=0, atol=1e-6)
        lean = att(X, need_weights=False)
        assert lean.scores is None
        assert lean.weights is None
        assert torch.equal(lean.Z, out.Z)
    no_proj = MultiHeadSelfAttention(6, 2, 5, n_heads=3)
    assert no_proj(X).Z.shape == (7, 15)


@pytest.mark.parametrize("change", [dict(qkv_bias=True), dict(out_proj=True), dict(causal=True),
                                    dict(dropout=0.3), dict(attention="sdpa"), "next_token_head"],
                         ids=["qkv_bias", "out_proj", "causal", "dropout", "sdpa", "next_token_head"])
def test_a_switch_leaves_the_parameters_created_before_it_unchanged(change):
    torch.manual_seed(42)
    base = dict(AttentionModel(SECTION5, GPT2_VOCAB_SIZE, 6).named_parameters())
    torch.manual_seed(42)
    if change == "next_token_head":
        model = AttentionModel(SECTION5, GPT2_VOCAB_SIZE, 6, next_token_head=True)
    else:
        model = AttentionModel(ModelSpec(**{**SECTION5.__dict__, **change}), GPT2_VOCAB_SIZE, 6)
    params = dict(model.named_parameters())
    for name, value in base.items():
        assert torch.equal(params[name], value), name
    added = {name: tuple(p.shape) for name, p in params.items() if name not in base}
    expected = {
        "qkv_bias": {"attention.W_query.bias": (4,), "attention.W_key.bias": (4,), "attention.W_value.bias": (6,)},
        "out_proj": {"attention.W_out.weight": (6, 6)},
        "next_token_head": {"next_token_head.weight": (GPT2_VOCAB_SIZE, 6)},
    }
    key = change if isinstance(change, str) else next(iter(change))
    assert added == expected.get(key, {})
    if key == "qkv_bias":  # drawn like nn.Linear's own bias: U(-1/sqrt(d_model), 1/sqrt(d_model))
        b = torch.cat([model.attention.W_query.bias, model.attention.W_key.bias, model.attention.W_value.bias])
        assert b.abs().max().item() <= 1 / math.sqrt(6)
        assert len(set(b.tolist())) == 14


def test_parameter_creation_order_is_the_documented_one():
    """W_query, W_key, W_value, then the biases, then W_out, then the head: redraw each from the
    same generator state in that order and get the same numbers."""
    torch.manual_seed(5)
    model = AttentionModel(ModelSpec(6, 2, 3, 1.0, n_heads=2, qkv_bias=True), 50, 6, next_token_head=True)
    torch.manual_seed(5)
    tok, pos = nn.Embedding(50, 6), nn.Embedding(6, 6)
    nn.init.normal_(tok.weight, std=1.0)
    nn.init.normal_(pos.weight, std=1.0)
    wq, wk, wv = nn.Linear(6, 4, bias=False), nn.Linear(6, 4, bias=False), nn.Linear(6, 6, bias=False)
    biases = [torch.empty(n).uniform_(-1 / math.sqrt(6), 1 / math.sqrt(6)) for n in (4, 4, 6)]
    w_out = nn.Linear(6, 6, bias=False)
    head = nn.Linear(6, 50, bias=False)
    nn.init.normal_(head.weight, std=0.02)
    att = model.attention
    expected = [tok.weight, pos.weight, wq.weight, wk.weight, wv.weight, *biases, w_out.weight, head.weight]
    got = [model.embedding.token_embedding.weight, model.embedding.position_embedding.weight, att.W_query.weight,
           att.W_key.weight, att.W_value.weight, att.W_query.bias, att.W_key.bias, att.W_value.bias,
           att.W_out.weight, model.next_token_head.weight]
    for i, (g, e) in enumerate(zip(got, expected)):
        assert torch.equal(g, e), i
    assert model.trained_parameters() == [att.W_query.weight, att.W_query.bias, att.W_key.weight, att.W_key.bias,
                                          att.W_value.weight, att.W_value.bias, att.W_out.weight,
                                          model.next_token_head.weight]


@pytest.mark.parametrize("out_proj,n_heads,d_v,d_model,z_in_d_model,expected", [
    ("auto", 1, 6, 6, True, False),   # tutorial §5
    ("auto", 1, 4, 6, False, False),  # tutorial §4 walkthrough: Z (T, d_v)
    ("auto", 1, 4, 6, True, True),    # §5 with d_v != d_model: W_out brings Z back to d_model
    ("auto", 2, 3, 6, True, True),    # two heads are mixed by W_out
    ("auto", 2, 3, 6, False, True),
    (True, 1, 6, 6, True, True),
    (False, 2, 3, 6, True, False),    # concatenated heads already d_model wide
    (False, 1, 4, 6, False, False),
])
def test_out_proj_rule(out_proj, n_heads, d_v, d_model, z_in_d_model, expected):
    assert resolve_out_proj(out_proj, n_heads, d_v, d_model, z_in_d_model=z_in_d_model) is expected


def test_out_proj_false_is_refused_where_the_loss_needs_z_in_d_model_columns():
    """One row of the rules table (core.checks.RULES), not the model: training refuses, the walkthrough has no loss."""
    with pytest.raises(ConfigError) as err:
        checks.validate(compose_cfg("model.n_heads=2", "model.d_v=4", "model.out_proj=false"))
    assert str(err.value) == ("model.out_proj=False: Z has n_heads·d_v = 2·4 = 8 columns but the loss needs d_model = "
                              "6; use out_proj=auto or true (a W_out brings Z to d_model), or make n_heads·d_v = d_model")
    checks.validate(compose_cfg("task=walkthrough", "model.n_heads=2", "model.d_v=4", "model.out_proj=false"))
    with pytest.raises(ConfigError, match=r"^model\.out_proj='yes': must be auto, true or false$"):
        checks.validate(compose_cfg("model.out_proj=yes"))


def test_builders_apply_the_rule():
    torch.manual_seed(0)
    five = AttentionModel(ModelSpec(6, 4, 4, 1.0), 50, 5)
    walk = AttentionModel(ModelSpec(6, 4, 4, 1.0), 50, 5, order="walkthrough")
    walk2 = AttentionModel(ModelSpec(6, 4, 4, 1.0, n_heads=2), 50, 5, order="walkthrough")
    X = torch.randn(5, 6)
    assert five.attention(X).Z.shape == (5, 6)
    assert walk.attention(X).Z.shape == (5, 4)
    assert walk2.attention(X).Z.shape == (5, 6)


def test_next_token_head_init_and_cross_entropy():
    torch.manual_seed(42)
    model = AttentionModel(SECTION5, GPT2_VOCAB_SIZE, 6, next_token_head=True)
    head = model.next_token_head
    assert head.bias is None
    assert head.weight.shape == (GPT2_VOCAB_SIZE, 6)
    assert abs(head.weight.std().item() - 0.02) < 2e-4  # N(0, 0.02²): 301,542 draws
    assert abs(head.weight.mean().item()) < 2e-4
    ids = torch.tensor(TUTORIAL_IDS)
    X = model.embedding(ids).detach()
    logits = head(model.attention(X).Z)  # (T, vocab)
    loss = next_token_cross_entropy(logits, ids)
    # independent: average over positions 0..T-2 of -log p(next id)
    log_p = logits.double() - torch.logsumexp(logits.double(), dim=-1, keepdim=True)
    expected = -sum(log_p[i, TUTORIAL_IDS[i + 1]] for i in range(5)) / 5
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)
    # small init: close to the uniform guess over the vocabulary, ln 50257 = 10.825 nats
    assert abs(loss.item() - math.log(GPT2_VOCAB_SIZE)) < 0.05
    with pytest.raises(ValueError, match="at least 2 tokens"):
        next_token_cross_entropy(logits[:1], ids[:1])


def test_next_token_objective_learns_the_sentence():
    """20 Adam steps on the tutorial's sentence: the next-token loss falls well below ln(vocab)."""
    torch.manual_seed(42)
    model = AttentionModel(SECTION5, GPT2_VOCAB_SIZE, 6, next_token_head=True)
    ids = torch.tensor(TUTORIAL_IDS)
    X = model.embedding(ids).detach()
    opt = torch.optim.Adam(model.trained_parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        loss = next_token_cross_entropy(model.next_token_head(model.attention(X).Z), ids)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 10.7
    assert losses[-1] < 3.0
