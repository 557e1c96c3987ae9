"""The mini-GPT (model.n_layers >= 1): its blocks against torch's own pre-LayerNorm encoder layer
with a causal mask, and a restatement of nanoGPT's loop."""
import numpy as np
import pytest
import torch
from torch import nn

from attnlab.core.model import Block, ModelSpec, build_gpt, causal_mask


def _torch_layer(block: Block, n_heads: int) -> nn.TransformerEncoderLayer:
    """torch.nn.TransformerEncoderLayer holding ``block``'s weights (its attention biases 0 where ours has none)."""
    a, d_model = block.attention, block.ln_1.normalized_shape[0]
    layer = nn.TransformerEncoderLayer(d_model, n_heads, block.W_fc.out_features, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True).double()
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([a.W_query.weight, a.W_key.weight, a.W_value.weight]))
        biases = [lin.bias if lin.bias is not None else torch.zeros(d_model) for lin in (a.W_query, a.W_key, a.W_value)]
        layer.self_attn.in_proj_bias.copy_(torch.cat(biases))
        layer.self_attn.out_proj.weight.copy_(a.W_out.weight)
        layer.self_attn.out_proj.bias.zero_()
        for ours, theirs in ((block.ln_1, layer.norm1), (block.ln_2, layer.norm2), (block.W_fc, layer.linear1),
                             (block.W_proj, layer.linear2)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
    return layer.eval()


@pytest.mark.parametrize("n_heads,qkv_bias,attention", [(1, False, "explicit"), (4, True, "explicit"),
                                                         (2, False, "sdpa")])
def test_block_equals_torch_transformer_encoder_layer(n_heads, qkv_bias, attention):
    torch.manual_seed(0)
    d_model, T, B = 8, 7, 3
    spec = ModelSpec(d_model, d_model // n_heads, d_model // n_heads, 1.0, n_heads=n_heads, qkv_bias=qkv_bias,
                     attention=attention)
    block = Block(spec, 4 * d_model).double()
    with torch.no_grad():  # LayerNorm's weights away from 1 and 0, so a swapped norm shows
        for ln in (block.ln_1, block.ln_2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, T, d_model, dtype=torch.float64)
    ours, weights = block(x, need_weights=True)
    theirs = _torch_layer(block, n_heads)(x, src_mask=causal_mask(T), is_causal=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    assert weights.shape == (B, n_heads, T, T)
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, n_heads, T, dtype=torch.float64))


def test_gpt_stacks_blocks_with_a_final_layernorm():
    torch.manual_seed(1)
    spec = ModelSpec(8, 4, 4, 0.02, n_heads=2, n_layers=2)
    gpt = build_gpt(spec, vocab_size=50, context=6).double()
    ids = torch.randint(0, 50, (2, 6))
    logits, weights = gpt(ids, need_weights=True)
    x = gpt.embedding.token_embedding(ids) + gpt.embedding.position_embedding(torch.arange(6))
    layers = [_torch_layer(b, 2) for b in gpt.blocks]
    for layer in layers:
        x = layer(x, src_mask=causal_mask(6), is_causal=True)
    expected = gpt.next_token_head(nn.functional.layer_norm(x, (8,)))
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)
    assert [w.shape for w in weights] == [(2, 2, 6, 6)] * 2
    assert gpt.blocks[0].W_fc.out_features == 32  # d_ff: 4·d_model
    assert np.isclose(gpt.next_token_head.weight.std().item(), 0.02, rtol=0.1)
