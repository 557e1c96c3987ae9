"""attnlab-reproduce: a fresh run, an edited run (its data or any value summary.json claims), runs
made with other CPU kernels (within rounding; tampered ones not), sweep job folders, environment warnings,
saved configs as data (``_target_`` anywhere, interpolations, text_file refused), every hostile or
damaged original of tests/hostile_runs.py refused with one line before anything runs,
``attnlab-reproduce .``, and plain-Hydra reproduction."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hostile_runs as H
import numpy as np
import pytest
import yaml

from attnlab.commands import job
from attnlab.commands.reproduce import main
from attnlab.saved import safe_read
from attnlab.saved.verdict import compare_runs, environment_differences

from conftest import run_here

SMALL = ("logging=off", "train.steps=40", "train.snapshot_steps=[0,10,39]")


def tree_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> Path:
    """One run made by the command (so .hydra/ is Hydra's own)."""
    run = tmp_path_factory.mktemp("fresh") / "run"
    proc = run_here(f"hydra.run.dir={run}", *SMALL)
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A three-job sweep: job 0 diverges (SGD lr 1000), job 1 completes, job 2 is refused (lr < 0)."""
    sweep = tmp_path_factory.mktemp("sweep") / "sw"
    proc = run_here("-m", f"hydra.sweep.dir={sweep}", "optimizer=sgd", "optimizer.lr=1000,0.05,-1", *SMALL)
    return sweep, proc


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def ran(repro: Path) -> dict:
    """The reproduction's .hydra/config.yaml, which is its summary.json's config, with the original's
    thread count and views (``threads``, ``logging``) put back: the config the original recorded."""
    saved = yaml.safe_load((repro / ".hydra" / "config.yaml").read_text(encoding="utf-8"))
    recorded = safe_read.read_summary(repro)["config"]
    assert saved["logging"]["console"] is False and {**recorded, "train": saved["train"]} == saved
    original = safe_read.read_summary(Path(safe_read.read_summary(repro)["reproduced_from"]))["config"]
    return {**saved, "threads": original["threads"], "logging": original["logging"]}


def assert_refused(run: Path, tmp_path: Path, capsys, start: str) -> None:
    """attnlab-reproduce RUN_DIR exits 2 with one stderr line starting ``start`` and runs nothing."""
    out = tmp_path / "repro"
    assert main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(start), err
    assert not out.exists()


def test_fresh_run_reproduces_exactly(fresh_run, tmp_path, capsys):
    before = tree_bytes(fresh_run)
    out = tmp_path / "repro"
    assert main([str(fresh_run), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[0] == "reproduced exactly"
    assert tree_bytes(fresh_run) == before  # RUN_DIR untouched
    assert (out / ".hydra" / "config.yaml").is_file()
    summary = safe_read.read_summary(out)
    assert summary["status"] == "completed"
    assert summary["steps_run"] == 40
    assert summary["reproduced_from"] == str(fresh_run.resolve())
    assert (out / "metrics.csv").read_bytes() == (fresh_run / "metrics.csv").read_bytes()
    assert ran(out) == safe_read.read_summary(fresh_run)["config"]  # the config that ran
    assert safe_read.read_summary(out)["config"]["threads"] == 1  # the thread count the run recorded


@pytest.mark.parametrize("snapshots", [("train.snapshot_every=10",), ()], ids=["snapshot_every", "automatic"])
def test_runs_with_snapshot_rules_reproduce_exactly(tmp_path, capsys, snapshots):
    """``train.snapshot_every`` is recorded as typed (its steps are its rule's); automatic steps are
    recorded as the steps taken. Either way the saved config reruns the same snapshots."""
    run = tmp_path / "run"
    assert run_here(f"hydra.run.dir={run}", "logging=off", "train.steps=30", *snapshots).returncode == 0
    train = safe_read.read_summary(run)["config"]["train"]
    assert (train["snapshot_every"], train["snapshot_steps"]) == ((10, None) if snapshots else (None, [0, 3, 7, 15, 20, 29]))
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "reproduced exactly"
    assert safe_read.read_attention(tmp_path / "repro")["steps"].tolist() == ([0, 10, 20, 29] if snapshots
                                                                              else [0, 3, 7, 15, 20, 29])


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
    att = safe_read.read_attention(run)
    att["weights"][1, 0, 2, 3] += 0.25
    np.savez(run / "attention.npz", **att)
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:-1]) + "\n")  # the last step lost
    repro = tmp_path / "repro"
    assert main([str(run), "--out", str(repro)]) == 1
    diffs = {d.quantity: d for d in compare_runs(run, repro)}
    assert diffs["attention weights"].step == 10
    assert abs(diffs["attention weights"].max_abs_diff - 0.25) < 1e-6
    assert (diffs["loss"].step, diffs["loss"].note) == (39, "39 vs 40 rows")  # the 39 common losses are identical


def test_an_interrupted_original_is_compared_over_its_own_rows(fresh_run, tmp_path):
    """Stopped after its first snapshot (fewer snapshots than tokens): the whole run reproduces its rows."""
    run = copy_run(fresh_run, tmp_path / "stopped")
    summary = safe_read.read_summary(run)
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}), encoding="utf-8")
    att = safe_read.read_attention(run)
    np.savez(run / "attention.npz", **{**att, "steps": att["steps"][:1], "weights": att["weights"][:1]})
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:3]) + "\n")
    assert compare_runs(run, fresh_run) == []


def test_sweep_jobs_reproduce_and_a_diverged_job_leaves_the_others(sweep_dir, tmp_path, capsys):
    sweep, proc = sweep_dir
    assert proc.returncode == 1, proc.stderr  # the sweep ran every job, then says one failed
    assert "3 jobs, 1 completed, 2 not completed (diverged, failed)" in proc.stdout
    assert "error: optimizer.lr=-1.0: must be a positive finite number" in proc.stderr
    jobs = {p.name.split("_")[0]: p for p in sweep.iterdir() if p.is_dir()}  # 0_..., 1_... (or 0, 1)
    assert sorted(jobs) == ["0", "1", "2"]
    assert safe_read.read_summary(jobs["2"])["status"] == "failed"
    s0, s1 = safe_read.read_summary(jobs["0"]), safe_read.read_summary(jobs["1"])
    assert s0["status"] == "diverged"
    assert s0["steps_run"] == 5
    assert s1["status"] == "completed"
    assert s1["steps_run"] == 40
    assert "optimizer.lr=1000" in (jobs["0"] / ".hydra" / "overrides.yaml").read_text()
    assert main([str(jobs["0"]), "--out", str(tmp_path / "repro0")]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    assert safe_read.read_summary(tmp_path / "repro0")["status"] == "diverged"
    # without --out a job's reproduction goes beside the sweep, not into it
    assert main([str(jobs["1"])]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == sorted(p.name for p in jobs.values())
    [beside] = [p for p in sweep.parent.iterdir() if p.name.startswith(f"{sweep.name}-repro-")]
    assert safe_read.read_summary(beside / jobs["1"].name)["status"] == "completed"


def test_environment_differences_are_warned_before_running(fresh_run, tmp_path, capsys):
    run = copy_run(fresh_run, tmp_path / "old")
    summary = safe_read.read_summary(run)
    summary["versions"]["torch"] = "1.0.0"
    summary["versions"]["torch_threads"] = 3
    (run / "summary.json").write_text(json.dumps(summary))
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("warning: torch differs: 1.0.0 when the run was made, ") for line in err)
    # the reproduction runs with the thread count the run recorded, so that is no difference
    assert not any(line.startswith("warning: torch_threads differs") for line in err)
    assert safe_read.read_summary(tmp_path / "repro")["versions"]["torch_threads"] == 3
    del summary["versions"]["torch_threads"]
    (run / "summary.json").write_text(json.dumps(summary))
    assert main([str(run), "--out", str(tmp_path / "repro2")]) == 0
    assert ("warning: summary.json records no torch_threads; running with threads=auto (losses may differ in the "
            "last bits)") in capsys.readouterr().err.splitlines()


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
    (("task: train", "hydra:\n  callbacks:\n    x:\n      _target_: os.system\ntask: train"),
     "hydra.callbacks.x._target_='os.system'"),
])
def test_saved_config_targets_are_refused_before_anything_runs(fresh_run, tmp_path, capsys, monkeypatch, edit, key):
    import hydra.utils

    def no_instantiate(*a, **k):
        raise AssertionError("instantiate called")

    monkeypatch.setattr(hydra.utils, "instantiate", no_instantiate)
    run = copy_run(fresh_run, tmp_path / "shared")
    summary = json.loads((run / "summary.json").read_text())
    del summary["config"]  # a run of an older attnlab: the config is only in .hydra/config.yaml
    (run / "summary.json").write_text(json.dumps(summary))
    cfg = (run / ".hydra" / "config.yaml").read_text()
    assert edit[0] in cfg
    (run / ".hydra" / "config.yaml").write_text(cfg.replace(edit[0], edit[1], 1))
    assert_refused(run, tmp_path, capsys, f"error: {key}")


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["optimizer"].update(_target_="os.system"), "optimizer._target_='os.system'"),
    (lambda c: c["model"].update(_target_="os.system"), "model._target_='os.system'"),
    (lambda c: c["optimizer"].update(betas=[{"_target_": "builtins.open", "_args_": ["victim.txt", "w"]}, 0.9]),
     "optimizer.betas[0]._target_='builtins.open'"),
    (lambda c: c.update(hydra={"callbacks": {"x": {"_target_": "os.system"}}}), "hydra.callbacks.x._target_='os.system'"),
])
def test_recorded_config_targets_are_refused_too(fresh_run, tmp_path, capsys, edit, key):
    """The resolved config attnlab records in summary.json, which reproduce prefers, is checked
    the same way as .hydra/config.yaml."""
    run = copy_run(fresh_run, tmp_path / "shared")
    summary = json.loads((run / "summary.json").read_text())
    edit(summary["config"])
    (run / "summary.json").write_text(json.dumps(summary))
    assert_refused(run, tmp_path, capsys, f"error: {key}")
    assert not (tmp_path / "victim.txt").exists()


def test_a_run_made_with_an_environment_variable_reproduces_after_it_changes(tmp_path, capsys, monkeypatch):
    """The run recorded the values it used: reproduction neither needs the variable nor picks up
    its new value, and the text of a ${...} in a sentence stays text."""
    from attnlab.commands.job import run_job

    from conftest import compose_cfg

    monkeypatch.setenv("ATTNLAB_TEST_LR", "0.01")
    cfg = compose_cfg("logging=off", "train.steps=30", "optimizer.lr=${oc.env:ATTNLAB_TEST_LR}",
                      'sentence="costs ${price} today"')
    run = tmp_path / "run"
    assert run_job(cfg, run).status == "completed"
    assert json.loads((run / "summary.json").read_text())["config"]["optimizer"]["lr"] == 0.01
    monkeypatch.delenv("ATTNLAB_TEST_LR")
    assert main([str(run), "--out", str(tmp_path / "unset")]) == 0
    monkeypatch.setenv("ATTNLAB_TEST_LR", "0.5")
    assert main([str(run), "--out", str(tmp_path / "changed")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.count("reproduced exactly") == 2
    summary = json.loads((tmp_path / "changed" / "summary.json").read_text())
    assert summary["config"]["optimizer"]["lr"] == 0.01
    assert summary["config"]["sentence"] == "costs ${price} today"


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "missing", "not a directory"),
    (lambda d: d, "not a run dir or sweep dir (no .hydra/config.yaml in it or below it)"),
    (lambda d: write_config(d / "r", "model: [unclosed\n"), ("config.yaml: not valid YAML (line 2: ", "expected ',' or ']'")),  # libyaml: "did not find expected"
    (lambda d: write_config(d / "r", "- a list\n"), "config.yaml: not a config"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\nmodel:\n  n_experts: 2\n"),
     "model.n_experts=2: is not a key of attnlab's config schema"),
    (lambda d: write_config(d / "r", "optimizer:\n  _target_: torch.optim.Adam\ntrain:\n  steps: many\n"),
     "train.steps='many': must be an integer"),
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
    for part in expected if isinstance(expected, tuple) else (expected,):
        assert part in err
    assert not [p for p in tmp_path.iterdir() if "-repro-" in p.name]


def test_out_inside_run_dir_or_over_a_finished_run_is_refused(fresh_run, tmp_path, capsys):
    before = tree_bytes(fresh_run)
    assert main([str(fresh_run), "--out", str(fresh_run)]) == 2
    assert main([str(fresh_run), "--out", str(fresh_run / "sub")]) == 2
    other = copy_run(fresh_run, tmp_path / "other")
    assert main([str(fresh_run), "--out", str(other)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "it reads; choose a path outside it" in err[0]
    assert "already holds a completed run" in err[2]
    assert tree_bytes(fresh_run) == before


def test_console_script_and_full_error(tmp_path, monkeypatch):
    from attnlab.core.errors import RunDirError

    exe = Path(sys.executable).with_name("attnlab-reproduce")
    proc = subprocess.run([str(exe), str(tmp_path / "nope")], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"})
    assert (proc.returncode, proc.stderr) == (2, f"error: {tmp_path / 'nope'}: not a directory\n")
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # the exception itself, for its traceback
    with pytest.raises(RunDirError, match="not a directory"):
        main([str(tmp_path / "nope")])


def test_plain_hydra_rerun_matches_and_never_writes_into_run_dir(fresh_run, tmp_path):
    """`attnlab --config-path RUN_DIR/.hydra --config-name config` (documented in the README):
    the saved config carries no defaults list and no hydra section, so the run goes to Hydra's
    default outputs/DATE/TIME under the working directory; the schema still applies."""
    before = tree_bytes(fresh_run)
    proc = run_here("--config-path", str(fresh_run / ".hydra"), "--config-name", "config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (new,) = [p.parent for p in (tmp_path / "outputs").rglob("summary.json")]
    assert (new / "metrics.csv").read_bytes() == (fresh_run / "metrics.csv").read_bytes()
    assert compare_runs(fresh_run, new) == []
    assert tree_bytes(fresh_run) == before
    bad = run_here("--config-path", str(fresh_run / ".hydra"), "--config-name", "config",
                  f"hydra.run.dir={tmp_path / 'bad'}", "model.init_std=big", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr == "error: model.init_std='big': must be a number\n"
    assert safe_read.read_summary(tmp_path / "bad")["status"] == "failed"


@pytest.mark.parametrize("section, option", [("logging", "off"), ("optimizer", "sgd"), ("model", "tiny")])
def test_a_group_option_on_a_saved_config_says_to_set_keys(fresh_run, section, option):
    """A saved .hydra/config.yaml has no config groups: `attnlab --config-path RUN/.hydra ...
    logging=off` puts a word where a section goes; one line says so, naming the key."""

    from attnlab.core.config import GROUP_HINT, apply_schema
    from attnlab.core.errors import ConfigError

    data = yaml.safe_load((fresh_run / ".hydra" / "config.yaml").read_text())
    data[section] = option
    with pytest.raises(ConfigError) as err:
        apply_schema(data)
    assert str(err.value) == f"{section}={option!r}: {GROUP_HINT}"


def test_walkthrough_run_reproduces_and_an_edited_array_is_named(tmp_path, capsys):
    """A run made in-process with the config saved as Hydra would (OmegaConf.save of the
    composed config, interpolations kept)."""
    from omegaconf import OmegaConf

    from attnlab.commands.job import run_job

    from conftest import compose_cfg

    cfg = compose_cfg("experiment=tutorial_walkthrough", "logging.console=false")
    run = tmp_path / "wt"
    assert run_job(cfg, run).status == "completed"
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
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


# ----------------------------------------------------------------------------- hostile originals
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): (os.readlink(p).encode() if p.is_symlink() else p.read_bytes() if p.is_file() else b"")
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("case", [c for c in H.CASES if c.reproduce], ids=[c.name for c in H.CASES if c.reproduce])
def test_hostile_or_damaged_original_exits_2_before_anything_runs(case, healthy, outside, tmp_path, capsys, monkeypatch):
    """Each case of the corpus that touches a file reproduce reads: exit 2, one line naming the
    problem, nothing run or instantiated, no folder made, nothing outside read or written, the
    secret of the environment and the canary's content nowhere."""
    import hydra.utils

    def never(*a, **k):
        raise AssertionError("must not be called for a refused original")

    secret = H.session_secret()
    monkeypatch.setenv(H.SECRET_ENV, secret)
    monkeypatch.setattr(hydra.utils, "instantiate", never)
    monkeypatch.setattr(job, "run_job", never)
    try:
        run = H.build_case(case, healthy, tmp_path / "run", outside)
    except H.Unsupported as err:
        pytest.skip(str(err))
    before = _snapshot(outside)
    out = tmp_path / "repro"
    assert main([str(run), "--out", str(out)]) == 2
    seen = capsys.readouterr()
    assert seen.out == ""
    lines = seen.err.splitlines()
    assert len(lines) == 1, seen.err
    assert lines[0].startswith("error: "), seen.err
    assert case.reproduce in lines[0], seen.err
    assert "\x1b" not in seen.err
    assert "\x07" not in seen.err
    assert secret not in seen.err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if "-repro-" in p.name]
    assert _snapshot(outside) == before
    assert not (outside / H.PWNED).exists()


def test_reproduce_dot_from_inside_the_run_dir(fresh_run, tmp_path, capsys, monkeypatch):
    """`cd RUN_DIR && attnlab-reproduce .`: the output goes beside RUN_DIR, named after it."""
    run = copy_run(fresh_run, tmp_path / "myrun")
    monkeypatch.chdir(run)
    assert main(["."]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0] == "reproduced exactly"
    [beside] = [p for p in tmp_path.iterdir() if p.name.startswith("myrun-repro-")]
    assert stdout[1] == f"reproduction: {beside}"  # not below the working folder: absolute
    monkeypatch.chdir(tmp_path)  # the reproduction lies below the working folder: named relative, as docs/reproduce.md shows it
    assert main(["myrun"]) == 0
    again = capsys.readouterr().out.splitlines()[1]
    assert again.startswith("reproduction: myrun-repro-") and (tmp_path / again.split(": ", 1)[1]).is_dir()
    assert safe_read.read_summary(beside)["reproduced_from"] == str(run)
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in fresh_run.iterdir())


def test_a_sweep_folder_and_hostile_job_names_give_one_verdict_table(sweep_dir, tmp_path, capsys):
    """The sweep's diverged and completed jobs reproduce exactly, its refused job cannot be reproduced;
    job folders named with a terminal escape are rows, their names escaped."""
    sweep, _ = sweep_dir
    many = tmp_path / "many"
    for i in range(3):
        (many / f"{i}_x=\x1b[2J" / ".hydra").mkdir(parents=True)
        (many / f"{i}_x=\x1b[2J" / ".hydra" / "config.yaml").write_text("task: train\n")
    assert main([str(sweep), str(many), "--out", str(tmp_path / "r"), "-j", "1"]) == 1
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out
    rows = [re.split(r"  +", line) for line in out.splitlines()[2:-1]]
    jobs = sorted((p.name for p in sweep.iterdir() if (p / ".hydra").is_dir()), key=lambda n: int(n.split("_")[0]))
    names = [f"sw/{j}" for j in jobs] + [f"many/{i}_x=\\x1b[2J" for i in range(3)]
    assert len(rows) == len(names) and all(row[0].endswith(name) for row, name in zip(rows, names)), rows
    assert [row[1] for row in rows] == ["reproduced exactly"] * 2 + ["cannot be reproduced"] * 4
    assert rows[2][2].startswith(f"{sweep / jobs[2] / 'summary.json'}: says failed")
    assert out.splitlines()[-1] == f"6 runs: 2 reproduced exactly, 4 cannot be reproduced; reproductions in {tmp_path / 'r'}"


def test_recorded_text_is_printed_escaped(fresh_run, tmp_path, capsys):
    """Escape sequences in summary.json's versions reach the terminal escaped."""
    run = copy_run(fresh_run, tmp_path / "esc")
    summary = json.loads((run / "summary.json").read_text())
    summary["versions"]["torch"] = "\x1b]0;pwned\x07\x1b[2J"
    summary["versions"]["\x1b[31mkey"] = "x"
    (run / "summary.json").write_text(json.dumps(summary))
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\x07" not in err
    assert "warning: torch differs: \\x1b]0;pwned\\x07\\x1b[2J when the run was made, " in err
    assert "warning: \\x1b[31mkey differs: x when the run was made, None now" in err


def test_text_file_is_read_only_when_the_user_names_it(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("Your journey starts with one step\n")
    run = H.make_healthy_run(tmp_path / "tf", (*SMALL, f"text_file={text}"))
    assert main([str(run), "--out", str(tmp_path / "r0")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: text_file='{text}': a shared config does not choose which file of this machine "
                          "is read; pass --text-file FILE")
    assert not (tmp_path / "r0").exists()
    assert main([str(run), "--out", str(tmp_path / "r1"), "--text-file", str(text)]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    other = tmp_path / "other.txt"
    other.write_text("Your journey starts with two steps\n")
    assert main([str(run), "--out", str(tmp_path / "r2"), "--text-file", str(other)]) == 1
    out = capsys.readouterr().out
    assert "token_ids" in out
    assert "tokens" in out
    assert main([str(H.make_healthy_run(tmp_path / "plain")), "--out", str(tmp_path / "r3"),
                 "--text-file", str(text)]) == 2
    assert "--text-file=" in capsys.readouterr().err


@pytest.mark.parametrize("edit, named", [
    (lambda text: text.replace("seed: 42\n", "seed: 7\n"), "says seed=7; summary.json records seed=42"),
    (lambda text: text + "seed: 42\x07\n", "cannot be read: "),  # not valid YAML
    (lambda text: text.replace("  d_k: 4\n", "  d_k: ${attnlab.per_head:4,${model.n_heads}}\n"), None),  # a resolver
], ids=["edited", "unreadable", "resolver"])
def test_the_recorded_config_runs_and_hydras_copy_must_tell_the_same(fresh_run, tmp_path, capsys, edit, named):
    """summary.json's recorded config (the resolved values the run used) is what runs and what the
    reproduction saves as its .hydra/config.yaml; the run's own .hydra/config.yaml (what
    ``--config-path`` would re-run) that says something else is named in the verdict; a value Hydra
    left to a resolver is the recorded one."""
    run = copy_run(fresh_run, tmp_path / "run")
    path = run / ".hydra" / "config.yaml"
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    out = tmp_path / "repro"
    assert main([str(run), "--out", str(out)]) == (1 if named else 0)
    seen = capsys.readouterr()
    if named:
        assert seen.out.splitlines()[0] == "not reproduced: 1 quantity differs", seen.out
        row = seen.out.splitlines()[2]
        assert row.startswith(".hydra/config.yaml  -  ") and named in row, row
    else:
        assert seen.out.splitlines()[0] == "reproduced exactly" and "warning: " not in seen.err, seen.err
    recorded = json.loads((run / "summary.json").read_text())["config"]
    assert ran(out) == recorded
    assert recorded["seed"] == 42
    assert not compare_runs(run, out)  # the files themselves are the recorded config's


def test_a_sentence_with_a_dollar_brace_reproduces_from_hydras_escaped_text(tmp_path, capsys):
    """``attnlab 'sentence=costs ${price} today'``: Hydra saves ``costs \\${price} today``
    (OmegaConf's escape) and summary.json records the text. Both are text: the run reproduces from
    the recorded config, and from Hydra's file when summary.json records no config."""
    run = tmp_path / "run"
    proc = run_here(f"hydra.run.dir={run}", *SMALL, "sentence=costs ${price} today")
    assert proc.returncode == 0, proc.stderr
    assert "sentence: costs \\${price} today\n" in (run / ".hydra" / "config.yaml").read_text(encoding="utf-8")
    assert main([str(run), "--out", str(tmp_path / "a")]) == 0
    seen = capsys.readouterr()
    assert seen.out.splitlines()[0] == "reproduced exactly" and "warning: " not in seen.err
    assert yaml.safe_load((tmp_path / "a" / ".hydra" / "config.yaml").read_text())["sentence"] == "costs ${price} today"
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["sentence"] == "costs ${price} today"
    del summary["config"]  # as an older attnlab wrote it
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert main([str(run), "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "reproduced exactly"


@pytest.mark.parametrize("key, value", [("final_loss", 1e-9), ("steps_to_threshold", 3), ("focus.heads[0].token", " step"),
                                        ("accuracy", 1.0)])
def test_every_value_summary_json_claims_is_checked(fresh_run, tmp_path, capsys, key, value):
    run = copy_run(fresh_run, tmp_path / "edited")
    summary = safe_read.read_summary(run)
    *parents, last = key.replace("[0]", ".0").split(".")
    target = summary
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    assert target.get(last) != value
    target[last] = value
    (run / "summary.json").write_text(json.dumps(summary))
    assert main([str(run), "--out", str(tmp_path / "repro")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "not reproduced: 1 quantity differs"
    assert out[2].split()[0] == key
