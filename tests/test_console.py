"""attnlab.outputs.console: the tutorial's section-5 lines exactly, the closing line, job prefixes,
and console output that never stops a run (attnlab.outputs.streams)."""
import io
import os

import numpy as np

from attnlab.commands.api import compose
from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.core.tokenizer import tokenize
from attnlab.outputs.console import ConsoleSink, snapshot_line
from attnlab.outputs.streams import SafeStream

from conftest import TUTORIAL_IDS

# tutorial section 5's printed lines, in the order the default run prints them
TUTORIAL_LINES = [
    "step   0  loss=2.3566  |  ' journey' attends: 'Your'=0.22 'journey'=0.12 'starts'=0.13 'with'=0.14 'one'=0.19 'step'=0.21",
    "step  20  loss=0.2104  |  ' journey' attends: 'Your'=0.57 'journey'=0.21 'starts'=0.07 'with'=0.14 'one'=0.01 'step'=0.00",
    "step  50  loss=0.0465  |  ' journey' attends: 'Your'=0.84 'journey'=0.09 'starts'=0.03 'with'=0.04 'one'=0.00 'step'=0.00",
    "step 100  loss=0.0005  |  ' journey' attends: 'Your'=0.99 'journey'=0.01 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00",
    "step 200  loss=0.0000  |  ' journey' attends: 'Your'=0.99 'journey'=0.00 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00",
]


def test_the_default_run_prints_the_tutorials_lines(default_cli_run):
    run_dir, proc = default_cli_run
    lines = proc.stdout.splitlines()
    assert lines[:5] == TUTORIAL_LINES
    assert lines[5].startswith("completed: 201 steps, final loss 4.940e-06, ")
    assert lines[5].endswith(f" s  ->  {run_dir}") or lines[5].endswith(f" s  ->  {run_dir.name}")
    assert len(lines) == 6


def test_sink_lines_with_heads_and_a_job_prefix():
    out = io.StringIO()
    sink = ConsoleSink(progress=False, file=out, prefix="[job 3] ")
    tokens = ["Your", " journey", " starts"]
    sink.on_start(RunInfo({}, [1, 2, 3], tokens, [0], 1, 1))
    heads = np.array([[[1, 0, 0], [0.7, 0.2, 0.1], [0, 0, 1]], [[1, 0, 0], [0.1, 0.3, 0.6], [0, 0, 1]]], np.float32)
    sink.on_snapshot(Snapshot(0, 2.35661, heads))
    sink.on_end(RunResult("diverged", 1, float("nan"), 0.5))
    assert out.getvalue().splitlines() == [
        "[job 3] step   0  loss=2.3566  |  ' journey' attends: 'Your'=0.40 'journey'=0.25 'starts'=0.35",
        "[job 3]           2 heads, strongest key each: 0→'Your'=0.70 1→'starts'=0.60",
        "[job 3] diverged: 1 step, final loss nan, 0.50 s",
    ]


def test_a_console_that_cannot_encode_or_is_gone_never_stops_a_run():
    raw = io.BytesIO()
    cp1252 = SafeStream(io.TextIOWrapper(raw, encoding="cp1252"))
    cp1252.write("你的 journey\n")
    cp1252.write("旅程 ok\n")
    cp1252.flush()
    assert raw.getvalue() == b"\\u4f60\\u7684 journey\n\\u65c5\\u7a0b ok\n"
    closed = io.StringIO()
    closed.close()
    gone = SafeStream(closed)
    assert gone.write("text") == 4  # a closed stream: silent, no exception
    gone.flush()
    assert gone.broken
    r, w = os.pipe()
    os.close(r)
    pipe = SafeStream(os.fdopen(w, "w"))
    pipe.write("x" * 100_000)  # EPIPE (SIGPIPE is ignored by Python)
    pipe.flush()
    assert pipe.broken
    pipe.write("more")  # silent after the pipe closed
    pipe.close()


def test_print_reaches_the_stream_as_whole_lines():
    """``print`` writes a line and its newline in two calls; the stream below gets whole lines in
    one write (two processes sharing a terminal never merge lines), the rest of a line at a flush."""
    class Calls(io.StringIO):
        calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return super().write(text)

    below = Calls()
    out = SafeStream(below)
    print("interrupted at step 7; records kept in run/0", file=out)
    print("a", "b", sep=" | ", end="", file=out)
    assert below.calls == ["interrupted at step 7; records kept in run/0\n"]
    print(" c\nd", file=out, flush=True)
    assert below.calls[1:] == ["a | b c\n", "d\n"]
    out.write("progress 50%\r")
    out.flush()  # what tqdm does after each bar update
    assert below.calls[3:] == ["progress 50%\r"] and below.getvalue().endswith("progress 50%\r")


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
    """A token the text holds more than once is named with its position, as attnlab-report's line."""
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
    """With the working folder deleted (Path.cwd() raises) a path is shown as given."""
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


def test_uniform_heads_are_named_uniform_not_by_a_tie(attnlab_here, tmp_path):
    """init std 0: every score is 0, so each head's weights are exactly 1/6 at step 0."""
    run = attnlab_here(f"hydra.run.dir={tmp_path}", "logging=off", "model.init_std=0", "model.n_heads=2",
                       "train.steps=1")
    assert run.returncode == 0, run.stderr
    assert "2 heads, strongest key each: 0→uniform (1/6)=0.17 1→uniform (1/6)=0.17" in run.stdout


def test_a_long_run_without_a_bar_says_once_how_long_it_has_to_go(monkeypatch):
    from attnlab.outputs import console

    clock = iter([100.0, 101.0, 102.5, 104.0, 106.0])  # on_start, then one reading per batch of losses
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    sink = ConsoleSink(progress=False, file=out)
    sink.on_start(RunInfo({}, [1, 2], ["a", " b"], [], 100_000, 1))
    for last in (999, 4999):  # 1 s, then 2.5 s of training: said at the second
        sink.on_losses(np.arange(last - 9, last + 1), np.ones(10))
    sink.on_losses(np.arange(5000, 6000), np.ones(1000))  # said once only
    assert out.getvalue().splitlines() == [
        "step 5000 of 100000 after 2 s: about 48 s to go (2000 steps/s; Ctrl-C stops it and keeps every step)"]
    short = ConsoleSink(progress=False, file=io.StringIO())  # less than 10 s to go: nothing said
    clock = iter([0.0, 3.0])
    short.on_start(RunInfo({}, [1, 2], ["a", " b"], [], 10_000, 1))
    short.on_losses(np.arange(5000), np.ones(5000))
    assert short.file.getvalue() == ""
    assert [console.duration(s) for s in (45.4, 200, 7500)] == ["45 s", "3 min 20 s", "2 h 5 min"]


def test_a_whitespace_token_is_named_one_way_as_focus_and_in_the_list():
    from attnlab.outputs.fonts import label

    line = snapshot_line(0, 1.0, np.array([0.5, 0.3, 0.2]), ["Hi", "\n", " there"], 1)
    assert line == "step   0  loss=1.0000  |  '\\n' attends: 'Hi'=0.50 '\\n'=0.30 'there'=0.20"
    assert label("\n") == "'\\n'"  # the figures' tick label
