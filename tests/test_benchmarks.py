"""The benchmark harness (``benchmarks/``): its baseline is the tutorial, its inputs are what
they claim, its report keeps hand-written notes. Nothing here is timed.

The end-to-end smoke run (``python -m benchmarks.run --quick``, about a minute on 2 busy
cores) runs only with ``ATTNLAB_BENCH_SMOKE=1``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from attnlab.core import tokenizer

from conftest import GOLDEN_SECTION5, ROOT, TUTORIAL_IDS

sys.path.insert(0, str(ROOT))  # benchmarks/ is not an installed package
from benchmarks import child, plain_tutorial, run, threads_grid  # noqa: E402


def test_plain_script_is_the_tutorial(capsys):
    plain_tutorial.main([])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(GOLDEN_SECTION5)
    for line, (step, (loss, row)) in zip(lines, GOLDEN_SECTION5.items()):
        assert line.startswith(f"step {step:3d}  loss={loss:.4f}  |")
        assert [float(x) for x in re.findall(r"=(\d\.\d\d)", line.split("|")[1])] == row


def test_plain_script_tokenizes_like_attnlab():
    enc = plain_tutorial.gpt2_encoding()
    assert enc.encode(plain_tutorial.SENTENCE) == TUTORIAL_IDS
    text = run.text_with_tokens(100)
    assert enc.encode(text) == tokenizer.encode(text)


@pytest.mark.parametrize("n", [2, 6, 64, 1024])
def test_generated_text_has_exactly_n_tokens(n):
    assert len(tokenizer.encode(run.text_with_tokens(n))) == n


def test_threads_grid_trains_the_tutorial_step_bit_for_bit_across_thread_counts():
    """benchmarks/threads_grid.py (the measurement behind threads=auto) trains attnlab's own model
    (it broke silently once when the model class was renamed): the same losses with 1 and 2
    threads at a size where auto picks one thread, and a loss that falls."""
    _, one = threads_grid.timed_steps(6, 6, threads=1, steps=30)
    _, two = threads_grid.timed_steps(6, 6, threads=2, steps=30)
    assert one == two
    import numpy as np

    losses = np.frombuffer(one, dtype=np.float32)
    assert losses.shape == (30,) and losses[-1] < losses[0]


def test_snapshot_steps():
    assert child.snapshot_steps(201, "5") == [0, 50, 100, 150, 200]
    assert child.snapshot_steps(3, "all") == [0, 1, 2]
    assert child.snapshot_steps(2, "5") == [0, 1]
    assert child.snapshot_steps(10, "1") == [0]


def test_results_replace_only_the_marked_block(tmp_path):
    out = tmp_path / "bench.md"
    run.write_out(out, f"{run.BEGIN}\nold table\n{run.END}")
    text = out.read_text(encoding="utf-8")
    out.write_text("# notes before\n\n" + text + "\n## analysis after\n", encoding="utf-8")
    run.write_out(out, f"{run.BEGIN}\nnew table\n{run.END}")
    text = out.read_text(encoding="utf-8")
    assert "new table" in text
    assert "old table" not in text
    assert text.startswith("# notes before")
    assert text.rstrip().endswith("## analysis after")


@pytest.mark.skipif(os.environ.get("ATTNLAB_BENCH_SMOKE") != "1",
                    reason="about a minute; set ATTNLAB_BENCH_SMOKE=1 to run the quick benchmark end to end")
def test_quick_benchmark_writes_its_tables(tmp_path):
    out = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    for heading in ("### Single run", "### Sweep", "### Scaling", "### Snapshots", "### Targets"):
        assert heading in text
    assert (tmp_path / "bench.json").is_file()
