"""What a GPT is for (tutorial §0: "今天 天气 真 → 好"): continue a prompt one token at a time,
each new token the argmax of the next-token head (greedy, ``temperature`` 0) or drawn from
softmax(logits / temperature) over the ``top_k`` most probable, with a generator seeded by ``seed``."""
from __future__ import annotations

import codecs
from typing import Any

import torch

from attnlab.core import tokenizer
from attnlab.core.config import plain
from attnlab.core.model import GPT, AttentionModel


@torch.no_grad()
def generate(model: AttentionModel | GPT, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0) -> list[tuple[int, float]]:
    """``max_new_tokens`` new tokens after ``prompt_ids``, each ``(id, probability)``: the model's
    softmax probability of that token (temperature 1, every token), whatever picked it."""
    device, window = next(model.parameters()).device, model.embedding.position_embedding.num_embeddings
    generator = torch.Generator().manual_seed(seed)
    ids, new = list(prompt_ids), []
    for _ in range(max_new_tokens):
        x = torch.tensor(ids[-window:], device=device)  # (T,): the last tokens that fit the position table
        if isinstance(model, GPT):
            logits = model(x)[0][-1]  # (vocab_size,)
        else:
            logits = model.next_token_head(model.attention(model.embedding(x), need_weights=False).Z)[-1]
        logits = logits.double().cpu()
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
    """UTF-8 bytes of new tokens as ``(text, unfinished)``: the whole characters, and the bytes at the end of
    a character the tokens did not finish (GPT-2 cuts a 汉字's 3 bytes into 2 tokens). A byte that is no
    character is ``\\xNN`` (as :func:`attnlab.core.tokenizer.piece_labels` shows it), never U+FFFD."""
    decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
    text = decoder.decode(data, final=False)
    return text, len(decoder.getstate()[0])


def continuation(model: AttentionModel | GPT, cfg: Any) -> dict[str, Any]:
    """``analysis.prompt`` continued, as summary.json records it: ``prompt``, ``text`` and
    ``unfinished_bytes`` (:func:`whole_characters`), ``tokens`` [[id, label, probability], ...], the settings."""
    a, enc = cfg.analysis, cfg.tokenizer
    prompt_ids = tokenizer.encode(a.prompt, enc.encoding, plain(enc.special_tokens))
    model.eval()
    new = generate(model, prompt_ids, a.max_new_tokens, a.temperature, a.top_k, cfg.seed)
    ids = [t for t, _ in new]
    labels = tokenizer.token_labels(prompt_ids + ids, enc.encoding)[len(prompt_ids):]
    text, unfinished = whole_characters(tokenizer.get_encoding(enc.encoding).decode_bytes(ids))
    return {"prompt": a.prompt, "text": text, "unfinished_bytes": unfinished,
            "tokens": [[t, label, p] for (t, p), label in zip(new, labels)],
            "temperature": a.temperature, "top_k": a.top_k, "seed": cfg.seed}
