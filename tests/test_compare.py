"""attnlab-compare: the table from saved runs (same rows as the sweep's summary.csv), sorting,
the figure, and one-line errors."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from attnlab.commands import compare
from attnlab.commands.job import run_job
from attnlab.outputs import artifacts
from attnlab.saved import runs, safe_read, table

from conftest import ROOT, run_here


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A finished 2-job sweep: lr 0.05 (learns) and lr 0.5 (stalls), 30 steps."""
    out = tmp_path_factory.mktemp("cmp") / "sweep"
    proc = run_here("-m", "optimizer.lr=0.05,0.5", "train.steps=30", "train.snapshot_steps=[0,29]", "logging=off",
                   f"hydra.sweep.dir={out}")
    assert proc.returncode == 0, proc.stderr
    return out


def job(sweep: Path, n: int) -> Path:
    return next(p for p in sweep.iterdir() if p.name.startswith(f"{n}_"))


def test_rows_are_the_runs_own_numbers_and_match_summary_csv(sweep):
    rows = runs.collect_rows([sweep])
    assert [r["job"] for r in rows] == ["0_optimizer.lr=0.05", "1_optimizer.lr=0.5"]
    for n, row in enumerate(rows):
        d = job(sweep, n)
        summary = json.loads((d / "summary.json").read_text())
        _, losses = safe_read.read_run_metrics(d)
        assert row["status"] == "completed"
        assert row["final_loss"] == summary["final_loss"] == losses[-1]
        att = safe_read.read_attention(d)
        assert row["snapshot_step"] == 29
        assert row["focus_weight"] == pytest.approx(float(att["weights"][-1, 0, 1].max()), rel=1e-6)
        assert row["overrides"] == f"optimizer.lr={['0.05', '0.5'][n]} train.steps=30 train.snapshot_steps=[0,29] logging=off"
    assert rows[0]["final_loss"] < rows[1]["final_loss"]
    # the sweep callback's summary.csv is the same table
    assert (sweep / "summary.csv").read_text(encoding="utf-8") == table.csv_text(rows)


def test_columns_are_the_data_files_not_summary_json_claims(sweep, tmp_path):
    """summary.json edited to claim a better run (final_loss, steps_run, steps_to_threshold, the
    focus): attnlab-compare's row is the same, read from metrics.csv and attention.npz."""
    run = shutil.copytree(job(sweep, 0), tmp_path / "claims")
    (before,) = runs.collect_rows([run])
    summary = json.loads((run / "summary.json").read_text())
    summary.update(final_loss=1e-9, steps_run=3, steps_to_threshold=3)
    summary["focus"]["mean"].update(first_step_above=1, weight=1.0)
    summary["focus"]["heads"] = [{"key": 0, "token": "Your", "weight": 1.0}] * 2
    (run / "summary.json").write_text(json.dumps(summary))
    (after,) = runs.collect_rows([run])
    _, losses = safe_read.read_run_metrics(run)
    assert (after["final_loss"], after["steps_run"], after["steps_to_threshold"]) == (losses[-1], 30, None)
    assert {k: after.get(k) for k in ("focus_step", "heads_focus", "focus_weight")} == \
        {k: before.get(k) for k in ("focus_step", "heads_focus", "focus_weight")}
    assert before["final_loss"] == losses[-1] and "heads_focus" not in after


def test_sort_by_column_numbers_numerically_empty_last(sweep):
    rows = runs.collect_rows([sweep])
    by_loss = table.sort_rows(rows, "final_loss", reverse=True)
    assert [r["job"][0] for r in by_loss] == ["1", "0"]
    fake = [dict(rows[0], final_loss=None, job="x"), *rows]
    assert [r["job"][0] for r in table.sort_rows(fake, "final_loss")] == ["0", "1", "x"]
    with pytest.raises(KeyError, match="unknown column; one of job, name, differs, overrides, status, final_loss"):
        table.sort_rows(rows, "lossy")


def test_cli_prints_table_sorted_and_writes_figure(sweep, tmp_path, capsys):
    fig = tmp_path / "cmp.png"
    assert compare.main([str(sweep), "--sort", "final_loss", "--reverse", "--plot", str(fig)]) == 0
    out = capsys.readouterr().out.splitlines()
    # no job reached the 1e-3 threshold in 30 steps, so that empty column is left out; the focus
    # passed 0.9 at a snapshot step in some job, so "first >0.9 at step" is shown
    assert re.split(" {2,}", out[0].strip()) == ["job", "what differs", "status", "final loss", "token",
                                                 "→ attends most to", "weight", "at step", "seconds",
                                                 "first >0.9 at step"]
    assert out[2].split()[:2] == ["1_optimizer.lr=0.5", "optimizer.lr=0.5"]  # the swept key: what differs
    assert out[3].split()[:2] == ["0_optimizer.lr=0.05", "optimizer.lr=0.05"]
    assert out[-1] == f"figure: {fig}"
    png = fig.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    # 9 x 8.69 in at 100 dpi: loss panel and heading (4.6 in) + the key's one row (0.25 in) + one row of 2
    # heatmaps with 2-line titles (3.84 in)
    assert (width, height) == (900, 869)


def test_run_dirs_and_a_walkthrough_together(sweep, tmp_path, cfg_of, capsys):
    walk = tmp_path / "walk"  # a walkthrough run dir, made in this process (as the CLI would)
    cfg = cfg_of("experiment=tutorial_walkthrough")
    assert run_job(cfg, walk).status == "completed"
    (walk / ".hydra").mkdir()
    OmegaConf.save(cfg, walk / ".hydra" / "config.yaml")
    rows = runs.collect_rows([job(sweep, 0), walk])
    # jobs are named by their path below the PATHs' common parent
    assert rows[0]["job"].endswith(f"/{sweep.name}/{job(sweep, 0).name}")
    assert rows[1]["job"].endswith("/walk")
    assert not rows[0]["job"].startswith("/")
    w = rows[1]
    assert w["status"] == "completed"
    assert w["final_loss"] is None
    assert w["snapshot_step"] is None
    assert w["focus_token"] == " journey"
    assert w["focus_weight"] == pytest.approx(1 / 6, abs=1e-3)
    assert w["n_tokens"] == 6
    assert w["max_abs_weight_minus_uniform"] < 1e-3
    assert compare.main([str(job(sweep, 0)), str(walk), "--plot", str(tmp_path / "two.png")]) == 0
    assert (tmp_path / "two.png").stat().st_size > 10_000


def test_table_aligns_chinese_and_emoji():
    rows = [{"job": "0_sentence=你好", "status": "completed", "path": "a"},
            {"job": "1_sentence=ab🚶", "status": "failed", "error": "x", "path": "b"}]
    lines = table.format_table(rows).splitlines()
    assert [table._width(line.split("  ")[0]) for line in lines[2:]] == [15, 15]
    assert lines[0].split() == ["job", "status", "error"]


def test_one_line_errors_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert compare.main([str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == (f"attnlab-compare: error: {tmp_path / 'empty'}: not a run dir or sweep dir "
                                       "(no .hydra/config.yaml in it or below it)\n")
    assert compare.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip().endswith("nope: no such file or directory")


def test_console_script_is_installed(sweep):
    exe = shutil.which("attnlab-compare") or str(Path(sys.executable).parent / "attnlab-compare")
    proc = subprocess.run([exe, str(sweep), "--sort", "nonsense"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("attnlab-compare: error: --sort 'nonsense': unknown column; one of job,")
    assert len(proc.stderr.splitlines()) == 1


def test_compare_and_report_of_saved_runs_load_neither_torch_nor_hydra(sweep, tmp_path):
    """The tables and the page are made from the run dirs alone: torch and Hydra (~1.3 s) only with --against."""
    code = ("import sys; from attnlab.commands import compare, report; "
            f"print(compare.main([{str(sweep)!r}]), report.main([{str(sweep)!r}, '--out', {str(tmp_path / 'r.html')!r}]),"
            " [m for m in ('torch', 'hydra', 'matplotlib') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 0 []"


@pytest.mark.parametrize("command", ["check", "generate"])
def test_help_of_commands_that_need_torch_does_not_load_it(command):
    """``attnlab-check --help`` and ``attnlab-generate --help`` answer before torch (~1.5 s) loads."""
    code = (f"import sys; from attnlab.commands import {command}\ntry:\n    {command}.main(['--help'])\n"
            "except SystemExit:\n    print([m for m in ('torch', 'hydra') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_last_snapshot_is_the_last_frame(tmp_path):
    from attnlab.core.records import RunInfo, RunResult, Snapshot

    rng = np.random.default_rng(0)
    frames = rng.random((7, 1, 5, 5)).astype(np.float32)
    sink = artifacts.RunDirSink(tmp_path)
    sink.on_start(RunInfo(config={}, token_ids=[1, 2, 3, 4, 5], tokens=list("abcde"),
                          snapshot_steps=list(range(0, 70, 10)), steps=70, focus_token=1, run_dir=tmp_path))
    sink.on_losses(np.arange(70), np.full(70, 0.5))
    for i, w in enumerate(frames):
        sink.on_snapshot(Snapshot(10 * i, 0.5, w))
    sink.on_end(RunResult("completed", 70, 0.5, 0.1))
    step, last = safe_read.read_last_snapshot(tmp_path)
    assert step == 60
    assert last.shape == (1, 5, 5)
    np.testing.assert_array_equal(last, frames[-1])
    np.testing.assert_array_equal(last, safe_read.read_attention(tmp_path)["weights"][-1])
    empty = tmp_path / "empty"
    empty.mkdir()
    sink = artifacts.RunDirSink(empty)
    sink.on_start(RunInfo(config={}, token_ids=[1, 2], tokens=["a", "b"], snapshot_steps=[], steps=3,
                          focus_token=0, run_dir=empty))
    sink.on_end(RunResult("completed", 3, 0.5, 0.1))
    assert safe_read.read_last_snapshot(empty) is None
