"""Nothing a shared file says makes attnlab open a connection: the tokenizer loads only the GPT-2
vocabulary it ships, wherever a config is read (the command line, a GPT run's config for
attnlab-generate, a saved config for attnlab-reproduce). The network is blocked in every test here."""
from __future__ import annotations

import json
import shutil
import socket

import pytest

from attnlab.commands import generate, reproduce
from attnlab.core import tokenizer
from attnlab.core.errors import TokenizerError

from conftest import run_here

OTHERS = ["cl100k_base", "o200k_base", "p50k_base", "https://example.com/x.tiktoken", "gpt5"]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError(f"a connection was opened: {args}")

    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr(socket, "getaddrinfo", refused)


@pytest.mark.parametrize("name", OTHERS)
def test_another_encoding_is_one_line_and_nothing_is_downloaded(name):
    with pytest.raises(TokenizerError) as err:
        tokenizer.get_encoding.__wrapped__(name)
    assert str(err.value).startswith(f"tokenizer.encoding='{name}': must be gpt2") and "\n" not in str(err.value)
    assert tokenizer.get_encoding.__wrapped__("r50k_base").n_vocab == 50257  # the shipped file, offline


@pytest.mark.parametrize("name", OTHERS[:2])
def test_the_command_refuses_another_encoding_before_a_run_starts(name, tmp_path):
    done = run_here(f"tokenizer.encoding={name}", f"hydra.run.dir={tmp_path}/run", "logging=off")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert f"tokenizer.encoding='{name}': must be gpt2" in line


@pytest.mark.parametrize("name", OTHERS[:3])
def test_a_gpt_run_naming_another_encoding_generates_nothing(gpt_run, tmp_path, capsys, name):
    shared = tmp_path / "shared"
    shutil.copytree(gpt_run, shared)
    config = shared / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("encoding: gpt2", f"encoding: {name}"))
    assert generate.main([str(shared), "今天"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"tokenizer.encoding='{name}': must be gpt2" in err


@pytest.mark.parametrize("name", OTHERS[:3])
def test_a_saved_config_naming_another_encoding_is_not_reproduced(gpt_run, tmp_path, capsys, name):
    shared = tmp_path / "shared"
    shutil.copytree(gpt_run, shared)
    summary = json.loads((shared / "summary.json").read_text())
    summary["config"]["tokenizer"]["encoding"] = name
    (shared / "summary.json").write_text(json.dumps(summary))
    text = summary["config"]["text_file"]  # the preset's text: named by the user, as a shared config cannot
    assert reproduce.main([str(shared), "--out", str(tmp_path / "repro"), "--text-file", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"tokenizer.encoding='{name}': must be gpt2" in err
    assert not (tmp_path / "repro").exists()
