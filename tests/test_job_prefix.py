"""Console lines of sweep jobs that a parallel launcher runs side by side start with ``[job N]``,
N the number the job's folder starts with; a single run and a sequential sweep have no prefix."""
from __future__ import annotations

import re

import numpy as np

from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.core.training import train as train_in_process
from attnlab.outputs.console import ConsoleSink, prefixed
from attnlab.saved import safe_read

from conftest import JOBLIB, read_csv

SHORT = ["train.steps=21", "train.snapshot_steps=[0,20]", "logging=off"]
PREFIX = re.compile(r"^\[job (\d+)\](?: (.*))?$")  # a blank line is "[job N]" alone


def job_lines(stdout: str) -> dict[int, list[str]]:
    """``{N: [line without its prefix, ...]}`` for every ``[job N]`` line."""
    out: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        match = PREFIX.match(line)
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2) or "")
    return out


@JOBLIB
def test_joblib_sweep_lines_carry_the_job_number(cli, cfg_of, tmp_path):
    """The real command with the joblib launcher: each job's lines carry its number, and its
    folder, summary.csv row and numbers are those of the basic launcher."""
    # one training job (ConsoleSink) and one walkthrough job (its narration), side by side
    sweep = tmp_path / "sweep"
    proc = cli("-m", "task=train,walkthrough", *SHORT, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
               f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    folders = {int(p.name.split("_", 1)[0]): p for p in sweep.iterdir() if p.is_dir()}
    assert [p.name for p in sorted(folders.values())] == [
        "0_task=train", "1_task=walkthrough"]
    assert [(r["job"], r["status"]) for r in read_csv(sweep / "summary.csv")] == [
        (folders[0].name, "completed"), (folders[1].name, "completed")]
    reference = train_in_process(cfg_of("task=train", *SHORT))  # the same numbers as the job run in this process
    assert safe_read.read_run_metrics(folders[0])[1].tolist() == reference.losses.tolist()
    lines = job_lines(proc.stdout)
    assert sorted(lines) == [0, 1]
    train, walk = lines[0], lines[1]
    # the tutorial's step-0 and step-20 lines, then the closing line naming job 0's own folder
    assert [line[:22] for line in train] == ["step   0  loss=2.3566 ", "step  20  loss=0.2104 ", "completed: 21 steps, f"]
    assert train[-1].endswith(str(folders[0])), train[-1]
    assert walk[0] == "== 1. Tokenization =="
    assert "token_ids: [7120, 7002, 4940, 351, 530, 2239]" in walk
    assert "== 4. Self-attention ==" in walk
    assert walk[walk.index("== 2. Token embedding ==") - 1] == ""  # blank lines keep the prefix: "[job 1]"
    # no snapshot, closing or walkthrough line is left unmarked (Hydra's log lines and the table aside);
    # job.py's own closing line of a walkthrough ("completed: walkthrough  ->  ...") is not a sink's
    unmarked = [ln for ln in proc.stdout.splitlines() if ln.startswith(("step ", "completed:", "== ", "token_ids:"))]
    assert [ln for ln in unmarked if not ln.startswith("completed: walkthrough")] == []


def test_sequential_sweep_and_single_run_have_no_prefix(attnlab_here, tmp_path):
    proc = attnlab_here("-m", "optimizer.lr=0.05,0.1", *SHORT, f"hydra.sweep.dir={tmp_path / 'seq'}")
    assert proc.returncode == 0, proc.stderr
    assert "[job" not in proc.stdout
    assert len([ln for ln in proc.stdout.splitlines() if ln.startswith("step  20")]) == 2


def test_console_sink_prefixes_every_line(capsys):
    sink = ConsoleSink(progress=False, prefix="[job 3] ")
    tokens = ["Your", " journey"]
    sink.on_start(RunInfo(config={}, token_ids=[7120, 7002], tokens=tokens, snapshot_steps=[0], steps=1,
                          focus_token=1))
    sink.on_snapshot(Snapshot(step=0, loss=2.5, weights=np.array([[[1.0, 0.0], [0.25, 0.75]]], dtype=np.float32)))
    sink.on_end(RunResult(status="completed", steps_run=1, final_loss=2.5, wall_time_s=0.5))
    assert capsys.readouterr().out.splitlines() == [
        "[job 3] step   0  loss=2.5000  |  ' journey' attends: 'Your'=0.25 'journey'=0.75",
        "[job 3] completed: 1 step, final loss 2.500, 0.50 s",
    ]
    assert prefixed("a\n\nb", "[job 3] ") == "[job 3] a\n[job 3]\n[job 3] b"
    assert prefixed("a\nb", "") == "a\nb"
