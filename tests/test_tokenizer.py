import hashlib
from importlib import resources

import pytest
import tiktoken

from attnlab import tokenizer
from attnlab.errors import TokenizerError

from conftest import TUTORIAL_IDS


def test_packaged_ranks_are_the_r50k_file():
    data = (resources.files("attnlab.data") / "gpt2.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == tokenizer.GPT2_RANKS_SHA256
    notice = (resources.files("attnlab.data") / "README.md").read_text()
    assert "MIT" in notice


def test_tutorial_ids_offline():
    assert tokenizer.encode("Your journey starts with one step") == TUTORIAL_IDS
    assert tokenizer.token_labels(TUTORIAL_IDS) == ["Your", " journey", " starts", " with", " one", " step"]
    enc = tokenizer.get_encoding("gpt2")
    assert enc.n_vocab == 50257
    assert enc.eot_token == 50256
    assert tokenizer.get_encoding("r50k_base").encode("hello world") == [31373, 995]


def test_partial_utf8_tokens_show_their_bytes():
    ids = tokenizer.encode("你的旅程 🚀")
    labels = tokenizer.token_labels(ids)
    assert len(labels) == len(ids) == 11
    assert labels[0] == "\\xe4\\xbd"
    assert labels[2] == "的"
    assert tokenizer.show(labels[0]) == "'\\xe4\\xbd'"
    # the labels' bytes put back together are the text
    enc = tokenizer.get_encoding("gpt2")
    assert b"".join(enc.decode_single_token_bytes(t) for t in ids).decode() == "你的旅程 🚀"


def test_endoftext_special_or_text():
    assert tokenizer.encode("a<|endoftext|>", special_tokens="special") == [64, 50256]
    as_text = tokenizer.encode("a<|endoftext|>", special_tokens="text")
    assert 50256 not in as_text
    assert len(as_text) > 2


def test_unknown_encoding_is_one_line():
    with pytest.raises(TokenizerError, match=r"tokenizer.encoding='gpt5': unknown encoding; allowed: .*cl100k_base"):
        tokenizer.get_encoding("gpt5")


def test_download_failure_names_tiktoken_cache_dir(monkeypatch):
    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(TokenizerError) as err:
        tokenizer.get_encoding.__wrapped__("cl100k_base")
    assert "TIKTOKEN_CACHE_DIR" in str(err.value)
    assert "\n" not in str(err.value)
