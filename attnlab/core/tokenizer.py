"""Tutorial §1, text → token ids with readable labels. ``gpt2`` (alias ``r50k_base``) is built with
tiktoken's public API from the shipped, sha256-checked ``attnlab/data/gpt2.tiktoken`` (MIT, OpenAI); no
other encoding is loaded: tiktoken would download it, and no config may make attnlab open a connection."""
from __future__ import annotations

import bisect
import functools
import itertools
from dataclasses import dataclass
from importlib import resources

import tiktoken
from omegaconf import DictConfig

from attnlab.core.config import plain
from attnlab.core.errors import ConfigError, TokenizerError
from attnlab.core.files import RunFileError, printable, read_own_file
from attnlab.core.i18n import N_, _

GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_VOCAB_SIZE = 50257  # tutorial §2: rows of the token-embedding table
SHIPPED_ENCODINGS = ("gpt2", "r50k_base")  # the only encodings attnlab loads: offline, from its own file
ALLOWED_ENCODINGS = N_("must be gpt2 (or its other name r50k_base), the vocabulary attnlab ships; another "
                       "encoding would be downloaded, and attnlab opens no connection")


@dataclass(frozen=True)
class Tokens:
    """``token_ids`` (T,), one label per token, ``vocab_size`` (rows of the embedding table, ≥ 50,257),
    ``focus`` the position ``train.focus_token`` names (:func:`focus_position`)."""

    token_ids: list[int]
    labels: list[str]
    vocab_size: int
    focus: int = 0

    @property
    def seq_len(self) -> int:  # T
        return len(self.token_ids)


@functools.lru_cache(maxsize=None)
def get_encoding(name: str = "gpt2") -> tiktoken.Encoding:
    """The tiktoken ``Encoding`` ``name`` (:data:`SHIPPED_ENCODINGS`), once per process. TokenizerError
    (one line) for another name (nothing is downloaded) or a corrupted packaged file."""
    if name not in SHIPPED_ENCODINGS:
        raise TokenizerError(f"tokenizer.encoding={printable(repr(name), 120)}: {_(ALLOWED_ENCODINGS)}")
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str

    path = resources.files("attnlab.data") / "gpt2.tiktoken"
    try:
        ranks = load_tiktoken_bpe(str(path), expected_hash=GPT2_RANKS_SHA256)
    except ValueError as err:  # tiktoken's hash mismatch
        raise TokenizerError(_("tokenizer.encoding={name!r}: packaged ranks file {path} is corrupted ({reason}); "
                               "reinstall attnlab").format(name=name, path=path, reason=err)) from err
    return tiktoken.Encoding(name=name, pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=GPT2_VOCAB_SIZE)


def encode(text: str, name: str = "gpt2", special_tokens: str = "special") -> list[int]:
    """Token ids ``(T,)`` of ``text``; ``special_tokens="special"``: ``<|endoftext|>`` is 50256."""
    enc = get_encoding(name)
    return enc.encode(text, allowed_special="all") if special_tokens == "special" else enc.encode_ordinary(text)


def token_labels(token_ids: list[int], name: str = "gpt2") -> list[str]:
    """One readable label per token id (T,), e.g. ``' journey'`` (:func:`piece_labels`)."""
    return piece_labels(get_encoding(name).decode_tokens_bytes(token_ids))


def piece_labels(pieces: list[bytes]) -> list[str]:
    """One label per token's bytes in ``pieces``: the text decoded once as UTF-8, each character in every
    piece its bytes overlap, whole (``的``) or ``ch(k/n)`` in the k-th of n (``旅(1/2)``, ``旅(2/2)``; a tail
    and a head: ``你(2/2)的(1/2)``). Bytes that are no character even in context: ``\\xNN``."""
    text = b"".join(pieces).decode("utf-8", errors="surrogateescape")
    owner = [i for i, piece in enumerate(pieces) for _ in piece]  # the piece each byte of the text is in
    labels = [""] * len(pieces)
    start = 0  # byte offset of the character
    for ch in text:
        raw = ch.encode("utf-8", errors="surrogateescape")  # an undecodable byte: itself, shown as \xNN
        shown = raw.decode("utf-8", errors="backslashreplace")
        spanned = range(owner[start], owner[start + len(raw) - 1] + 1)  # with any empty piece between
        for k, i in enumerate(spanned):
            labels[i] += shown if len(spanned) == 1 else f"{shown}({k + 1}/{len(spanned)})"
        start += len(raw)
    return labels


def show(label: str) -> str:
    """``repr`` of a label as the tutorial prints tokens (``' journey'``, ``'旅(1/2)'``), keeping
    the ``\\xNN`` of bytes that are no UTF-8 character single-escaped."""
    return repr(label).replace("\\\\x", "\\x")


def read_text(cfg: DictConfig) -> str:
    """``text_file`` when set (UTF-8, without a leading BOM and its final line break), else ``sentence``.
    ConfigError unless a regular UTF-8 file of at most :data:`attnlab.core.files.TEXT_FILE_LIMIT` bytes."""
    if not cfg.get("text_file"):
        return cfg.sentence
    try:
        text = read_own_file(cfg.text_file)
    except RunFileError as err:
        allowed = _("must be a readable UTF-8 file ({reason})").format(reason=err.reason)
        raise ConfigError("text_file", cfg.text_file, allowed) from None
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def tokenize(cfg: DictConfig) -> Tokens:
    """Tutorial §1: read, encode, label. TokenizerError, or ConfigError for an empty text, more
    than ``tokenizer.max_tokens``, one token for training, or ``train.focus_token`` not in [0, T)."""
    name, text = cfg.tokenizer.encoding, read_text(cfg)
    ids = encode(text, name, plain(cfg.tokenizer.special_tokens))
    key = "text_file" if cfg.get("text_file") else "sentence"
    shown, n_tokens = cfg[key], len(ids)
    if n_tokens == 0:
        raise ConfigError(key, shown, N_("is empty: give at least 2 tokens of text"))
    if n_tokens > cfg.tokenizer.max_tokens:
        short = shown if len(shown) <= 40 else shown[:40] + "…"
        raise ConfigError(key, short, _("has {n} tokens, more than tokenizer.max_tokens={max} (raise it to allow "
                          "longer text)").format(n=n_tokens, max=cfg.tokenizer.max_tokens))
    if plain(cfg.task) == "train" and n_tokens < 2:
        raise ConfigError(key, shown, N_("has 1 token: training predicts the next token, give at least 2"))
    focus = cfg.train.focus_token
    if isinstance(focus, int) and not 0 <= focus < n_tokens:
        raise ConfigError("train.focus_token", focus, _("must be a token position in [0, {T}) (the text has {T} "
                                                        "tokens), or a text in it").format(T=n_tokens))
    pieces = get_encoding(name).decode_tokens_bytes(ids)
    labels = piece_labels(pieces)
    return Tokens(ids, labels, GPT2_VOCAB_SIZE, focus_position(cfg.train.focus_token, text, pieces, labels))


def focus_position(spec: int | str | None, text: str, pieces: list[bytes], labels: list[str]) -> int:
    """The token position ``train.focus_token`` names in ``text`` (tokens ``pieces``): a position as given;
    a text (``旅``, ``' journey'``): the token its first byte is in; None: the token where the second word,
    or without spaces the second character, starts (``' journey'``; ``的`` in 你的旅程从一步开始).
    ConfigError for a text absent or in more than one token, naming the candidates."""
    if isinstance(spec, int):
        return spec
    starts = [0, *itertools.accumulate(len(piece) for piece in pieces)]  # byte offset of each token, then the end

    def token_at(char: int) -> int:  # the token holding the first byte of text[char]
        return bisect.bisect_right(starts, len(text[:char].encode("utf-8"))) - 1

    if spec is None:
        words = text.split()
        char = text.index(words[1], text.index(words[0]) + len(words[0])) if len(words) > 1 else 1
        return token_at(min(char, len(text) - 1))
    found = sorted({token_at(i) for i in range(len(text)) if text.startswith(spec, i)})
    listed = ", ".join(f"{i} {show(labels[i])}" for i in (found or range(len(labels)))[:20])
    if not found:
        raise ConfigError("train.focus_token", spec,
                          _("is not in the text; its tokens: {tokens}").format(tokens=listed))
    if len(found) > 1:
        raise ConfigError("train.focus_token", spec, _("is in the text {n} times, at tokens {tokens}: give the "
                                                       "position").format(n=len(found), tokens=listed))
    return found[0]
