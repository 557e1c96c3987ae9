import numpy as np

from attnlab.api import compose
from attnlab.console import snapshot_line
from attnlab.tokenizer import tokenize

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
