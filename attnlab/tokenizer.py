"""GPT-2 tokenization that works offline, and readable token labels (tutorial §1).

``gpt2`` (alias ``r50k_base``) is built with tiktoken's public API from the ranks file shipped in
``attnlab/data/gpt2.tiktoken`` (MIT, OpenAI; provenance in ``attnlab/data/README.md``), its
sha256 checked at load. Other encodings load through ``tiktoken.get_encoding`` as usual, which
downloads once and caches in ``TIKTOKEN_CACHE_DIR``.
"""
from __future__ import annotations

import functools
from importlib import resources

import tiktoken

from attnlab.errors import TokenizerError

GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
ENDOFTEXT = "<|endoftext|>"
_PACKAGED = {"gpt2", "r50k_base"}


@functools.lru_cache(maxsize=None)
def get_encoding(name: str = "gpt2") -> tiktoken.Encoding:
    """The tiktoken ``Encoding`` called ``name``; loaded once per process.

    ``gpt2``/``r50k_base`` come from the packaged ranks (no network). Raises TokenizerError
    with one line when the packaged file fails its hash, when ``name`` is unknown to tiktoken,
    or when tiktoken cannot download it (offline: says to fill ``TIKTOKEN_CACHE_DIR``).
    """
    if name in _PACKAGED:
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str

        path = resources.files("attnlab.data") / "gpt2.tiktoken"
        try:
            ranks = load_tiktoken_bpe(str(path), expected_hash=GPT2_RANKS_SHA256)
        except ValueError as err:  # tiktoken's hash mismatch
            raise TokenizerError(f"tokenizer.encoding={name!r}: packaged ranks file {path} is corrupted "
                                 f"({err}); reinstall attnlab") from err
        return tiktoken.Encoding(name=name, pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={ENDOFTEXT: 50256}, explicit_n_vocab=50257)
    if name not in tiktoken.list_encoding_names():
        raise TokenizerError(f"tokenizer.encoding={name!r}: unknown encoding; allowed: "
                             f"{', '.join(sorted(set(tiktoken.list_encoding_names()) | _PACKAGED))}")
    try:
        return tiktoken.get_encoding(name)
    except Exception as err:  # network errors come in many types (requests, urllib3, OSError)
        raise TokenizerError(
            f"tokenizer.encoding={name!r}: tiktoken could not download its vocabulary "
            f"({type(err).__name__}); on a machine with network run "
            f"`python -c \"import tiktoken; tiktoken.get_encoding('{name}')\"` with "
            f"TIKTOKEN_CACHE_DIR=DIR set, copy DIR here and set TIKTOKEN_CACHE_DIR=DIR") from err


def encode(text: str, name: str = "gpt2", special_tokens: str = "special") -> list[int]:
    """Token ids ``(T,)`` of ``text``. With ``special_tokens="special"`` a literal
    ``<|endoftext|>`` becomes its special token (50256 in GPT-2); with ``"text"`` it is
    encoded as ordinary text (several tokens)."""
    enc = get_encoding(name)
    if special_tokens == "special":
        return enc.encode(text, allowed_special="all")
    return enc.encode_ordinary(text)


def token_labels(token_ids: list[int], name: str = "gpt2") -> list[str]:
    """One readable label per token id: its text, e.g. ``' journey'``.

    A token that is only part of a UTF-8 character (Chinese, emoji) has no text of its own;
    its label shows the bytes instead (``'\\xe4\\xbd'``), decoded with ``backslashreplace``.
    """
    enc = get_encoding(name)
    return [enc.decode_single_token_bytes(t).decode("utf-8", errors="backslashreplace") for t in token_ids]


def show(label: str) -> str:
    """``repr`` of a label as the tutorial prints tokens (``' journey'``), keeping the
    ``\\xNN`` of partial UTF-8 bytes single-escaped."""
    return repr(label).replace("\\\\x", "\\x")
