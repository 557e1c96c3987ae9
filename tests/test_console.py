import numpy as np

from attnlab.commands.api import compose
from attnlab.core.tokenizer import tokenize
from attnlab.outputs.console import snapshot_line

from conftest import TUTORIAL_IDS


def test_long_rows_show_the_12_strongest_and_say_so():
    tokens = [f" t{i}" for i in range(17)]
    row = np.arange(17, dtype=np.float32) / np.arange(17).sum()
    line = snapshot_line(20, 0.21041, row, tokens, focus=3)
    assert line.startswith("step  20  loss=0.2104  |  ' t3' attends: 't5'=0.04 ")
    assert line.endswith("'t16'=0.12  (12 strongest of 17)")
    assert "'t4'=" not in line
    assert line.count("=") == 13  # loss= plus 12 targets


def test_text_file_final_line_break_is_not_a_token(tmp_path):
    path = tmp_path / "sentence.txt"
    path.write_text("Your journey starts with one step\n", encoding="utf-8")
    assert tokenize(compose(f"text_file={path}")).token_ids == TUTORIAL_IDS
    path.write_text("Your journey starts with one step\n\n", encoding="utf-8")  # a blank line is text
    assert tokenize(compose(f"text_file={path}")).token_ids[-1] == 198


def test_a_repeated_token_is_named_with_its_position():
    """(newcomer, seventh session) A long text's line listed `'turns'=0.00` eleven times: a
    token the text holds more than once is named with its position, as attnlab-report's line."""
    tokens = ["the", " cat", " saw", " the", " cat"] + [f" t{i}" for i in range(10)]
    row = np.full(15, 0.01, dtype=np.float32)
    row[[0, 1, 3, 4]] = [0.3, 0.2, 0.25, 0.1]
    line = snapshot_line(5, 1.0, row, tokens, focus=2)
    assert line.startswith("step   5  loss=1.0000  |  ' saw' attends: 'the'=0.30 'cat'@1=0.20 'saw'=0.01 "
                           "'the'=0.25 'cat'@4=0.10 ")
    assert line.endswith("  (12 strongest of 15)")
    short = snapshot_line(0, 1.0, np.full(3, 1 / 3, np.float32), ["a", " b", " b"], focus=0)
    assert short == "step   0  loss=1.0000  |  'a' attends: 'a'=0.33 'b'@1=0.33 'b'@2=0.33"  # " b" twice, "a" once


def test_display_path_when_the_working_folder_is_gone(tmp_path, monkeypatch):
    """(adversary, seventh session) attnlab-reproduce printed "reproduced exactly" and then a
    FileNotFoundError traceback with exit 1 when its working folder was deleted meanwhile:
    Path.cwd() raises. The path is shown as given (absolute stays absolute)."""
    from attnlab.outputs.console import display_path

    gone = tmp_path / "gone"
    gone.mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(gone)
    assert display_path(tmp_path / "run") == str(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    assert display_path(tmp_path / "run") == "run"
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert display_path(tmp_path / "run") == str(tmp_path / "run")
    assert display_path("run") == "run"
