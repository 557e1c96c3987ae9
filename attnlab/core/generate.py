"""What a GPT is for (tutorial §0: "今天 天气 真 → 好"): continue a prompt one token at a time,
each new token the argmax of the next-token head (greedy, ``temperature`` 0) or drawn from
softmax(logits / temperature) over the ``top_k`` most probable, with a generator seeded by ``seed``.
"""
from __future__ import annotations

import codecs
from typing import Any

import torch

from attnlab.core import tokenizer
from attnlab.core.config import plain
from attnlab.core.model import GPT, AttentionModel


def next_token_logits(model: AttentionModel | GPT, token_ids: torch.Tensor) -> torch.Tensor:
    """(vocab_size,) logits of the token after ``token_ids`` (T,), of which the last ones that fit
    the position table are read (a GPT's context; the tutorial model's sentence length)."""
    ids = token_ids[-model.embedding.position_embedding.num_embeddings:]
    if isinstance(model, GPT):
        return model(ids)[0][-1]
    return model.next_token_head(model.attention(model.embedding(ids), need_weights=False).Z)[-1]


@torch.no_grad()
def generate(model: AttentionModel | GPT, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0) -> list[tuple[int, float]]:
    """``max_new_tokens`` new tokens after ``prompt_ids``, each ``(id, probability)``: the model's
    softmax probability of that token (temperature 1, every token), whatever picked it."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    ids, new = list(prompt_ids), []
    for _ in range(max_new_tokens):
        logits = next_token_logits(model, torch.tensor(ids, device=device)).double().cpu()  # (vocab_size,)
        if temperature == 0:
            token = int(logits.argmax())
        else:
            scaled = logits / temperature
            if top_k is not None and top_k < scaled.shape[0]:
                scaled[scaled < scaled.topk(top_k).values[-1]] = float("-inf")
            token = int(torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator))
        new.append((token, float(torch.softmax(logits, -1)[token])))
        ids.append(token)
    return new


def whole_characters(data: bytes) -> tuple[str, int]:
    """``data`` (UTF-8 bytes of new tokens) as ``(text, unfinished)``: its whole characters, and how many
    bytes at its end begin a character the tokens did not finish (GPT-2's byte-level tokens cut a 汉字's
    3 bytes into 2 tokens: one token alone is half a character). A byte that is no character anywhere
    is ``\\xNN``, as :func:`attnlab.core.tokenizer.piece_labels` shows it; never U+FFFD."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    text = decoder.decode(data, final=False)
    unfinished = len(decoder.getstate()[0])
    return "".join(f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else ch for ch in text), unfinished


def continuation(model: AttentionModel | GPT, cfg: Any) -> dict[str, Any]:
    """``analysis.prompt`` continued as ``analysis`` says, as summary.json records it: ``prompt``,
    ``text`` (the new tokens' whole characters, :func:`whole_characters`), ``unfinished_bytes`` (of a
    character the last tokens began, 0: none), ``tokens`` [[id, label, probability], ...], the settings."""
    a, enc = cfg.analysis, cfg.tokenizer
    prompt_ids = tokenizer.encode(a.prompt, enc.encoding, plain(enc.special_tokens))
    model.eval()
    new = generate(model, prompt_ids, a.max_new_tokens, a.temperature, a.top_k, cfg.seed)
    ids = [t for t, _ in new]
    labels = tokenizer.token_labels(prompt_ids + ids, enc.encoding)[len(prompt_ids):]
    text, unfinished = whole_characters(b"".join(tokenizer.get_encoding(enc.encoding).decode_single_token_bytes(t)
                                                 for t in ids))
    return {"prompt": a.prompt, "text": text, "unfinished_bytes": unfinished,
            "tokens": [[t, label, p] for (t, p), label in zip(new, labels)],
            "temperature": a.temperature, "top_k": a.top_k, "seed": cfg.seed}
