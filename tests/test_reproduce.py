"""attnlab-reproduce: a fresh run, an edited run, sweep job folders, environment warnings,
saved configs as data (``_target_: os.system`` refused), and plain-Hydra reproduction."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab import artifacts
from attnlab.reproduce import compare_runs, environment_differences, main

from conftest import run_cli

SMALL = ("logging=off", "train.steps=40", "train.snapshot_steps=[0,10,39]")


def tree_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> Path:
    """One run made by the CLI (so .hydra/ is Hydra's own)."""
    run = tmp_path_factory.mktemp("fresh") / "run"
    proc = run_cli(f"hydra.run.dir={run}", *SMALL)
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A three-job sweep: job 0 diverges (SGD lr 1000), job 1 completes, job 2 is refused (lr < 0)."""
    sweep = tmp_path_factory.mktemp("sweep") / "sw"
    proc = run_cli("-m", f"hydra.sweep.dir={sweep}", "optimizer=sgd", "optimizer.lr=1000,0.05,-1", *SMALL)
    return sweep, proc


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_fresh_run_reproduces_exactly(fresh_run, tmp_path, capsys):
    before = tree_bytes(fresh_run)
    out = tmp_path / "repro"
    assert main([str(fresh_run), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[0] == "reproduced exactly"
    assert tree_bytes(fresh_run) == before  # RUN_DIR untouched
    assert artifacts.is_run_dir(out)
    summary = artifacts.read_summary(out)
    assert summary["status"] == "completed"
    assert summary["steps_run"] == 40
    assert summary["reproduced_from"] == str(fresh_run.resolve())
    assert (out / "metrics.csv").read_bytes() == (fresh_run / "metrics.csv").read_bytes()
    assert (out / ".hydra" / "config.yaml").read_bytes() == (fresh_run / ".hydra" / "config.yaml").read_bytes()


def test_default_out_is_a_sibling_and_the_repro_is_itself_reproducible(fresh_run, tmp_path, capsys):
    run = copy_run(fresh_run, tmp_path / "run")
    assert main([str(run)]) == 0
    siblings = [p for p in tmp_path.iterdir() if p.name.startswith("run-repro-")]
    assert len(siblings) == 1
    capsys.readouterr()
    assert main([str(siblings[0]), "--out", str(tmp_path / "again")]) == 0


def test_edited_loss_is_reported_with_its_step(fresh_run, tmp_path, capsys):
    run = copy_run(fresh_run, tmp_path / "edited")
    lines = (run / "metrics.csv").read_text().splitlines()
    step, loss = lines[18].split(",")  # row of step 17
    assert step == "17"
    lines[18] = f"17,{float(loss) + 0.001!r}"
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "not reproduced: 1 quantity differs"
    assert out[1].split() == ["quantity", "first", "differing", "step", "max", "abs", "diff", "note"]
    row = out[2].split()
    assert row[0] == "loss"
    assert row[1] == "17"
    assert abs(float(row[2]) - 0.001) < 1e-9


def test_edited_snapshot_and_row_count_are_reported(fresh_run, tmp_path):
    run = copy_run(fresh_run, tmp_path / "edited")
    att = artifacts.read_attention(run)
    att["weights"][1, 0, 2, 3] += 0.25
    np.savez(run / "attention.npz", **att)
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:-1]) + "\n")  # the last step lost
    repro = tmp_path / "repro"
    assert main([str(run), "--out", str(repro)]) == 1
    diffs = {d.quantity: d for d in compare_runs(run, repro)}
    assert diffs["attention weights"].step == 10
    assert abs(diffs["attention weights"].max_abs_diff - 0.25) < 1e-6
    assert diffs["steps_run"].note == "39 vs 40 rows"
    assert "loss" not in diffs  # the 39 common losses are identical


def test_sweep_jobs_reproduce_and_a_diverged_job_leaves_the_others(sweep_dir, tmp_path, capsys):
    sweep, proc = sweep_dir
    assert proc.returncode == 1, proc.stderr  # the sweep ran every job, then says one failed
    assert "3 jobs, 1 completed, 2 not completed (diverged, failed)" in proc.stdout
    assert "error: optimizer.lr=-1.0: must be a positive finite number" in proc.stderr
    jobs = {p.name.split("_")[0]: p for p in sweep.iterdir() if p.is_dir()}  # 0_..., 1_... (or 0, 1)
    assert sorted(jobs) == ["0", "1", "2"]
    assert artifacts.read_summary(jobs["2"])["status"] == "failed"
    s0, s1 = artifacts.read_summary(jobs["0"]), artifacts.read_summary(jobs["1"])
    assert s0["status"] == "diverged"
    assert s0["steps_run"] == 5
    assert s1["status"] == "completed"
    assert s1["steps_run"] == 40
    assert "optimizer.lr=1000" in (jobs["0"] / ".hydra" / "overrides.yaml").read_text()
    assert main([str(jobs["0"]), "--out", str(tmp_path / "repro0")]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    assert artifacts.read_summary(tmp_path / "repro0")["status"] == "diverged"
    # without --out a job's reproduction goes beside the sweep, not into it
    assert main([str(jobs["1"])]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == sorted(p.name for p in jobs.values())
    [beside] = [p for p in sweep.parent.iterdir() if p.name.startswith(f"{sweep.name}-repro-")]
    assert artifacts.read_summary(beside / jobs["1"].name)["status"] == "completed"


def test_environment_differences_are_warned_before_running(fresh_run, tmp_path, capsys):
    run = copy_run(fresh_run, tmp_path / "old")
    summary = artifacts.read_summary(run)
    summary["versions"]["torch"] = "1.0.0"
    summary["versions"]["torch_threads"] = 64
    (run / "summary.json").write_text(json.dumps(summary))
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("warning: torch differs: 1.0.0 when the run was made, ") for line in err)
    assert any(line.startswith("warning: torch_threads differs: 64 when the run was made, ") for line in err)


def test_environment_differences_unit():
    assert environment_differences({"torch": "2.1", "python": "3.11"}, {"torch": "2.1", "python": "3.12"}) == [
        "warning: python differs: 3.11 when the run was made, 3.12 now"]
    assert environment_differences(None, {"torch": "2"})[0].startswith("warning: summary.json records no environment")


def write_config(run: Path, text: str, status: str = "completed") -> Path:
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(text)
    (run / "summary.json").write_text(json.dumps({"status": status}))
    return run


@pytest.mark.parametrize("edit, key", [
    (("_target_: torch.optim.Adam", "_target_: os.system"), "optimizer._target_='os.system'"),
    (("_target_: torch.optim.Adam", "_target_: builtins.eval"), "optimizer._target_='builtins.eval'"),
    (("  d_k: 4", "  d_k: 4\n  _target_: os.system"), "model._target_='os.system'"),
    (("task: train", "hydra:\n  callbacks:\n    x:\n      _target_: os.system\ntask: train"), "hydra="),
])
def test_saved_config_targets_are_refused_before_anything_runs(fresh_run, tmp_path, capsys, monkeypatch, edit, key):
    import hydra.utils

    def no_instantiate(*a, **k):
        raise AssertionError("instantiate called")

    monkeypatch.setattr(hydra.utils, "instantiate", no_instantiate)
    run = copy_run(fresh_run, tmp_path / "shared")
    cfg = (run / ".hydra" / "config.yaml").read_text()
    assert edit[0] in cfg
    (run / ".hydra" / "config.yaml").write_text(cfg.replace(edit[0], edit[1], 1))
    out = tmp_path / "repro"
    assert main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {key}")
    assert not out.exists()


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "missing", "not a directory"),
    (lambda d: d, ".hydra/config.yaml: missing"),
    (lambda d: write_config(d / "r", "model: [unclosed\n"), "config.yaml: unreadable (ParserError"),
    (lambda d: write_config(d / "r", "- a list\n"), "config.yaml: not a config"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\nmodel:\n  n_heads: 2\n"),
     "model.n_heads=2: is not a key of attnlab's config schema"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\ntrain:\n  steps: many\n"),
     "train.steps='many': Value 'many' of type 'str' could not be converted to Integer"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\n", status="running"),
     "summary.json: says running"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\n", status="failed"),
     "summary.json: says failed"),
])
def test_not_a_reproducible_run_exits_2_with_one_line(tmp_path, capsys, make, expected):
    run = make(tmp_path)
    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("error: ")
    assert expected in err
    assert not [p for p in tmp_path.iterdir() if "-repro-" in p.name]


def test_out_inside_run_dir_or_over_a_finished_run_is_refused(fresh_run, tmp_path, capsys):
    before = tree_bytes(fresh_run)
    assert main([str(fresh_run), "--out", str(fresh_run)]) == 2
    assert main([str(fresh_run), "--out", str(fresh_run / "sub")]) == 2
    other = copy_run(fresh_run, tmp_path / "other")
    assert main([str(fresh_run), "--out", str(other)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "a reproduction never writes into the run it checks" in err[0]
    assert "already holds a completed run" in err[2]
    assert tree_bytes(fresh_run) == before


def test_console_script_and_full_error(tmp_path):
    exe = Path(sys.executable).with_name("attnlab-reproduce")
    proc = subprocess.run([str(exe), str(tmp_path / "nope")], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"})
    assert proc.returncode == 2
    assert proc.stderr == f"error: {tmp_path / 'nope'}: not a directory\n"
    full = subprocess.run([sys.executable, "-m", "attnlab.reproduce", str(tmp_path / "nope")], capture_output=True,
                          text=True, env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert full.returncode != 0
    assert "Traceback (most recent call last)" in full.stderr


def test_plain_hydra_rerun_matches_and_never_writes_into_run_dir(fresh_run, tmp_path):
    """`attnlab --config-path RUN_DIR/.hydra --config-name config` (documented in the README):
    the saved config carries no defaults list and no hydra section, so the run goes to Hydra's
    default outputs/DATE/TIME under the working directory; the schema still applies."""
    before = tree_bytes(fresh_run)
    proc = run_cli("--config-path", str(fresh_run / ".hydra"), "--config-name", "config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (new,) = [p.parent for p in (tmp_path / "outputs").rglob("summary.json")]
    assert (new / "metrics.csv").read_bytes() == (fresh_run / "metrics.csv").read_bytes()
    assert compare_runs(fresh_run, new) == []
    assert tree_bytes(fresh_run) == before
    bad = run_cli("--config-path", str(fresh_run / ".hydra"), "--config-name", "config",
                  f"hydra.run.dir={tmp_path / 'bad'}", "model.init_std=big", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr == "error: model.init_std='big': Value 'big' of type 'str' could not be converted to Float\n"
    assert artifacts.read_summary(tmp_path / "bad")["status"] == "failed"


def test_walkthrough_run_reproduces_and_an_edited_array_is_named(tmp_path, capsys):
    """A run made in-process with the config saved as Hydra would (OmegaConf.save of the
    composed config, interpolations kept)."""
    from omegaconf import OmegaConf

    from attnlab.job import run_job

    from conftest import compose_cfg

    cfg = compose_cfg("experiment=tutorial_walkthrough", "logging.console=false")
    run = tmp_path / "wt"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    assert run_job(cfg, run).status == "completed"
    capsys.readouterr()
    assert main([str(run), "--out", str(tmp_path / "r1")]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == "reproduced exactly"  # after the narration
    with np.load(run / "walkthrough.npz") as f:
        arrays = {k: f[k] for k in f.files}
    arrays["scores"] = arrays["scores"] + 1e-3
    np.savez(run / "walkthrough.npz", **arrays)
    assert main([str(run), "--out", str(tmp_path / "r2")]) == 1
    out = capsys.readouterr().out.splitlines()
    out = out[out.index("not reproduced: 1 quantity differs"):]
    assert out[2].split()[0] == "scores"
    assert abs(float(out[2].split()[2]) - 1e-3) < 1e-6
