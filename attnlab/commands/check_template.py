"""attnlab-check 练习：亲手写出教程 §1–4 的自注意力。 Tutorial §1–4, written by you.

把每个函数里的 `raise NotImplementedError` 换成你的代码（教程 §2–4 的那几行），然后运行：
Replace each `raise NotImplementedError` with your code (the lines of tutorial §2–4), then run:

    attnlab-check 这个文件.py      # attnlab-check THIS_FILE.py

每一步都会拿到教程的输入（seed 123，std 0.02），结果与教程的数字比较；它会告诉你第一个不对的
步骤、期望值与你的值，以及最可能的错误。Each function gets the tutorial's inputs (seed 123, std
0.02); attnlab-check names the first stage that differs, expected vs got, and the likely mistake.

形状 / shapes: seq_len = 6 个 token，d_model = 6，d_k = d_v = 4。所有张量都是 torch.Tensor。
"""
import torch
from torch import nn


def embed_tokens(token_ids: list[int], token_emb_layer: nn.Embedding) -> torch.Tensor:
    """§2 词嵌入 / token embedding.
    token_ids: 分词得到的 6 个整数 ID / the 6 token ids, [7120, 7002, 4940, 351, 530, 2239]
    token_emb_layer: nn.Embedding(50257, 6)，一张查找表 / a lookup table
    返回 / returns: token_embeddings (seq_len, d_model) = (6, 6)
    """
    raise NotImplementedError


def add_positions(token_embeddings: torch.Tensor, pos_emb_layer: nn.Embedding) -> torch.Tensor:
    """§3 位置嵌入 / positional embedding.
    token_embeddings: (seq_len, d_model) = (6, 6)
    pos_emb_layer: nn.Embedding(6, 6)，第 i 行是位置 i 的向量 / row i is position i's vector
    返回 / returns: X (seq_len, d_model) = (6, 6)，词含义 + 位置 / token + position
    """
    raise NotImplementedError


def project_qkv(X: torch.Tensor, W_query: nn.Linear, W_key: nn.Linear,
                W_value: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """§4.1 用三个线性层生成 Q / K / V / three linear layers make Q, K, V.
    X: (seq_len, d_model) = (6, 6)；W_query, W_key, W_value: nn.Linear(6, 4, bias=False)
    返回 / returns: Q, K, V，每个 (seq_len, d_k) = (6, 4)
    """
    raise NotImplementedError


def attention_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """§4.2 缩放后的注意力分数 / scaled attention scores.
    Q, K: (seq_len, d_k) = (6, 4)
    返回 / returns: attn_scores_scaled (seq_len, seq_len) = (6, 6)；第 i 行第 j 列：第 i 个词对第 j 个词
    """
    raise NotImplementedError


def attention_weights(attn_scores_scaled: torch.Tensor) -> torch.Tensor:
    """§4.3 Softmax：分数变成注意力权重 / scores become attention weights.
    attn_scores_scaled: (seq_len, seq_len) = (6, 6)
    返回 / returns: attn_weights (6, 6)，每一行加起来等于 1 / each row sums to 1
    """
    raise NotImplementedError


def context_vectors(attn_weights: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """§4.4 加权求和得到上下文向量 Z / the weighted sum of V: context vectors Z.
    attn_weights: (seq_len, seq_len) = (6, 6)；V: (seq_len, d_v) = (6, 4)
    返回 / returns: Z (seq_len, d_v) = (6, 4)
    """
    raise NotImplementedError
