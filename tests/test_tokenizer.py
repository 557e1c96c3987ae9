import hashlib
from importlib import resources

import pytest

from attnlab.core import tokenizer
from attnlab.core.errors import ConfigError
from attnlab.core.tokenizer import tokenize

from conftest import TUTORIAL_IDS, compose_cfg


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


def test_partial_utf8_tokens_name_their_character():
    ids = tokenizer.encode("你的旅程 🚀")
    assert ids == [19526, 254, 21410, 33768, 227, 163, 101, 233, 12520, 248, 222]
    # 你 e4 bd a0 | 的 e7 9a 84 | 旅 e6 97 85 | 程 e7 a8 8b | ' ' 20 | 🚀 f0 9f 9a 80, split as
    # [e4 bd][a0][e7 9a 84][e6 97][85][e7][a8][8b][20 f0 9f][9a][80]
    assert tokenizer.token_labels(ids) == ["你(1/2)", "你(2/2)", "的", "旅(1/2)", "旅(2/2)", "程(1/3)", "程(2/3)",
                                           "程(3/3)", " 🚀(1/3)", "🚀(2/3)", "🚀(3/3)"]
    assert tokenizer.show("旅(1/2)") == "'旅(1/2)'"
    # the labels' bytes put back together are the text
    enc = tokenizer.get_encoding("gpt2")
    assert b"".join(enc.decode_single_token_bytes(t) for t in ids).decode() == "你的旅程 🚀"


def test_labels_of_the_tutorials_chinese_sentence():
    # 你的旅程从一步开始 (Your journey starts with one step): 9 characters of 3 bytes each in 17 tokens;
    # the bytes of each token id (GPT-2 ranks file) and which character they belong to:
    ids = [19526, 254, 21410, 33768, 227, 163, 101, 233, 20015, 236, 31660, 29826, 98, 28156, 222, 34650, 233]
    # 19526 e4 bd, 254 a0 (你 e4 bd a0); 21410 e7 9a 84 (的); 33768 e6 97, 227 85 (旅); 163 e7, 101 a8,
    # 233 8b (程 e7 a8 8b); 20015 e4 bb, 236 8e (从); 31660 e4 b8 80 (一); 29826 e6 ad, 98 a5 (步);
    # 28156 e5 bc, 222 80 (开); 34650 e5 a7, 233 8b (始)
    assert tokenizer.encode("你的旅程从一步开始") == ids
    assert tokenizer.token_labels(ids) == [
        "你(1/2)", "你(2/2)", "的", "旅(1/2)", "旅(2/2)", "程(1/3)", "程(2/3)", "程(3/3)", "从(1/2)", "从(2/2)",
        "一", "步(1/2)", "步(2/2)", "开(1/2)", "开(2/2)", "始(1/2)", "始(2/2)"]


def test_emoji_in_three_tokens():
    # 🚶 is f0 9f 9a b6: token 12520 is ' ' + f0 9f, 248 is 9a, 114 is b6
    ids = tokenizer.encode("One small step 🚶 at a time")
    assert ids == [3198, 1402, 2239, 12520, 248, 114, 379, 257, 640]
    assert tokenizer.token_labels(ids) == ["One", " small", " step", " 🚶(1/3)", "🚶(2/3)", "🚶(3/3)",
                                           " at", " a", " time"]


def test_a_token_across_two_characters_names_both():
    # 究 e7 a9 b6, 怀 e6 80 80: tokens [e7][a9 b6 e6][80][80] (47490 is the three bytes a9 b6 e6)
    assert tokenizer.encode("究怀") == [163, 47490, 222, 222]
    assert tokenizer.token_labels([163, 47490, 222, 222]) == ["究(1/2)", "究(2/2)怀(1/3)", "怀(2/3)", "怀(3/3)"]
    # 極 e6 a5 b5 wholly inside token 47703 (a9 b6 e6 a5 b5): shown as itself
    assert tokenizer.token_labels(tokenizer.encode("究極")) == ["究(1/2)", "究(2/2)極"]


def test_bytes_that_are_no_character_stay_escaped():
    # a lone continuation byte (a0) or a lead byte without its tail: no character to name
    assert tokenizer.token_labels([254]) == ["\\xa0"]
    assert tokenizer.token_labels([254, 19526]) == ["\\xa0", "\\xe4\\xbd"]
    assert tokenizer.show("\\xa0") == "'\\xa0'"
    assert tokenizer.piece_labels([b"a\xff", b"\xe4\xbd", b"\xa0!"]) == ["a\\xff", "你(1/2)", "你(2/2)!"]
    assert tokenizer.token_labels(tokenizer.encode("a<|endoftext|>")) == ["a", "<|endoftext|>"]


def test_endoftext_special_or_text():
    assert tokenizer.encode("a<|endoftext|>", special_tokens="special") == [64, 50256]
    as_text = tokenizer.encode("a<|endoftext|>", special_tokens="text")
    assert 50256 not in as_text
    assert len(as_text) > 2


@pytest.mark.parametrize("sentence, spec, position, label", [
    ("Your journey starts with one step", None, 1, " journey"),  # the second word
    ("你的旅程从一步开始", None, 2, "的"),  # the second character: 你 is two tokens
    ("今天天气真好，我们去公园散步。", None, 2, "天"),  # never a byte inside a character
    ("Your journey starts with one step", "journey", 1, " journey"),
    ("Your journey starts with one step", " journey", 1, " journey"),
    ("你的旅程从一步开始", "旅", 3, "旅(1/2)"),  # the first token of that text
    ("你的旅程从一步开始", "一步", 10, "一"),
    ("Your journey starts with one step", 4, 4, " one"),
])
def test_focus_token_by_position_text_or_default(sentence, spec, position, label):
    cfg = compose_cfg(f"sentence={sentence}")
    cfg.train.focus_token = spec
    tokens = tokenize(cfg)
    assert (tokens.focus, tokens.labels[tokens.focus]) == (position, label)


@pytest.mark.parametrize("spec, message", [
    ("旅", "train.focus_token='旅': is not in the text; its tokens: 0 'Your', 1 ' journey', 2 ' starts'"),
    ("o", "train.focus_token='o': is in the text 3 times, at tokens 0 'Your', 1 ' journey', 4 ' one': give the position"),
])
def test_focus_text_absent_or_ambiguous_names_the_candidates(spec, message):
    cfg = compose_cfg()
    cfg.train.focus_token = spec
    with pytest.raises(ConfigError) as err:
        tokenize(cfg)
    assert str(err.value).startswith(message)
