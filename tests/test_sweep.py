"""Sweeps: job folder names, the sweep summary (table + summary.csv), failing jobs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.commands.sweep import MAX_NAME_BYTES, job_dirname
from attnlab.saved import safe_read

from conftest import read_csv

FAST = ["train.steps=5", "train.snapshot_steps=[0,4]", "logging=off"]


@pytest.fixture
def cli(attnlab_here):
    """``attnlab ARGS`` in this process (conftest.run_here); the joblib sweep is test_job_prefix's."""
    return attnlab_here


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job folders (submitit_local also leaves a hidden .submitit/ there)."""
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: int(p.name.split("_")[0]))


def assert_csv_matches_jobs(sweep_dir: Path) -> list[dict]:
    """summary.csv has one row per job folder and each row repeats that job's summary.json."""
    rows = read_csv(sweep_dir / "summary.csv")
    dirs = job_dirs(sweep_dir)
    assert [r["job"] for r in rows] == [d.name for d in dirs]
    for row, d in zip(rows, dirs):
        summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        assert row["status"] == summary["status"]
        assert row["error"] == (summary.get("error") or "")
        for key in ("final_loss", "wall_time_s"):
            assert row[key] == ("" if summary.get(key) is None else repr(float(summary[key])))
        assert row["steps_to_threshold"] == ("" if summary.get("steps_to_threshold") is None
                                             else str(summary["steps_to_threshold"]))
        assert Path(row["path"]) == d
        overrides = (d / ".hydra" / "overrides.yaml").read_text()
        for item in row["overrides"].split(" "):
            assert item in overrides
    return rows


# ------------------------------------------------------------------------------ folder names
@pytest.mark.parametrize("num, overrides, expected", [
    (0, "model.d_model=6,model.init_std=0.02", "0_model.d_model=6,model.init_std=0.02"),
    (3, "", "3"),
    (1, 'sentence="a/b c"', "1_sentence=a_b_c"),
    (2, "sentence='x\\y\tz'", "2_sentence=x_y_z"),
    (4, 'sentence="你的旅程 🚶"', "4_sentence=你的旅程_🚶"),
    (5, r"sentence=one\ step,x=a\,b", "5_sentence=one_step,x=a,b"),  # Hydra's escapes of swept values
    (6, "model.d_k=${nope},sentence=costs_$5", "6_model.d_k=_{nope},sentence=costs_$5"),  # no interpolation
    # what NTFS forbids: : * ? " < > | and a trailing dot or space; Windows' device names
    (7, 'sentence="a:b*c?d<e>f|g"', "7_sentence=a_b_c_d_e_f_g"),
    (8, "sentence=end.", "8_sentence=end_"), (8, "sentence='end. '", "8_sentence=end._"),
    ("CON", "", "_CON"), ("nul.txt", "", "_nul.txt"), ("com1", "", "_com1"), ("LPT9.a.b", "", "_LPT9.a.b"),
    ("CONSOLE", "", "CONSOLE"), ("10-00-00.1", "", "10-00-00.1"),
])
def test_job_dirname_is_one_readable_safe_name(num, overrides, expected):
    assert job_dirname(num, overrides) == expected


def test_job_dirname_cuts_long_names_by_bytes_and_keeps_them_distinct():
    a = job_dirname(7, "sentence=" + "旅" * 200)
    b = job_dirname(7, "sentence=" + "旅" * 201)
    assert len(a.encode()) <= MAX_NAME_BYTES
    assert len(b.encode()) <= MAX_NAME_BYTES
    assert a != b
    assert a.startswith("7_sentence=旅")
    assert a[-9] == "~"
    assert "/" not in a


# ------------------------------------------------------------------------------ basic launcher
def test_sweep_keeps_going_past_failed_and_diverged_jobs(cli, tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("-m", "optimizer.lr=0.05,1e30", "model.d_model=6,0", *FAST, f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 1, proc.stderr  # some job did not complete
    names = [d.name for d in job_dirs(sweep)]
    assert names == [
        "0_model.d_model=6,optimizer.lr=0.05",  # the constant overrides (FAST) are left out
        "1_model.d_model=0,optimizer.lr=0.05",
        "2_model.d_model=6,optimizer.lr=1e+30",
        "3_model.d_model=0,optimizer.lr=1e+30",
    ]
    rows = assert_csv_matches_jobs(sweep)
    assert [r["status"] for r in rows] == ["completed", "failed", "diverged", "failed"]
    assert rows[1]["error"] == rows[3]["error"] == "model.d_model=0: must be a positive integer"
    assert rows[2]["error"] == "loss became nan at step 1 (optimizer.lr=1e+30); try a smaller optimizer.lr"
    assert f"{float(rows[2]['final_loss']):.4f}" == "2.3566"  # step 0 kept (the tutorial's printed loss)
    # the completed job has every artifact, and its row its focus at the last snapshot (step 4)
    done = job_dirs(sweep)[0]
    for name in ("metrics.csv", "attention.npz", "summary.json", ".hydra/config.yaml"):
        assert (done / name).is_file()
    att = safe_read.read_attention(done)
    w = att["weights"][-1, 0, 1]
    assert rows[0]["focus_token"] == " journey"
    assert rows[0]["snapshot_step"] == "4"
    assert rows[0]["focus_target"] == att["tokens"][int(np.argmax(w))]
    assert float(rows[0]["focus_weight"]) == pytest.approx(float(w.max()), rel=1e-6)
    # the table is printed, then the count, with a non-zero exit status
    out = proc.stdout
    assert out.index("0_model.d_model=6") < out.index("4 jobs, 1 completed, 3 not completed")
    assert "model.d_model=0: must be a positive integer" in out


def test_sentence_sweep_quoting_gives_flat_folders(cli, tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("-m", 'sentence="one, step","a/b 你好 🚶"', "task=walkthrough", "logging=off",
               f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in sweep.iterdir()) == [
        "0_sentence=one,_step", "1_sentence=a_b_你好_🚶",
        "multirun.yaml", "summary.csv"]
    rows = assert_csv_matches_jobs(sweep)
    from attnlab.core.tokenizer import encode

    assert [int(r["n_tokens"]) for r in rows] == [len(encode("one, step")), len(encode("a/b 你好 🚶"))] == [3, 11]
    # the same sweep again into that sweep dir: refused in one line, the finished sweep untouched
    before = {str(p.relative_to(sweep)): p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}
    again = cli("-m", 'sentence="one, step","a/b 你好 🚶"', "task=walkthrough", "logging=off", f"hydra.sweep.dir={sweep}")
    assert (again.returncode, again.stderr) == (2, f"error: hydra.sweep.dir='{sweep}': already holds a sweep (its "
                                                   "multirun.yaml and job folders); choose another hydra.sweep.dir "
                                                   "(runs are never overwritten; attnlab-compare reads the sweep)\n")
    assert {str(p.relative_to(sweep)): p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()} == before


# ------------------------------------------------------------------------------ issue 10
@pytest.mark.parametrize("args, line", [
    (("model.dmodel=6,16",), "error: model.dmodel=6,16: no such config key (`attnlab --help` lists every key); "
                              "did you mean model.d_model?"),
    (("optimizer=adam,sgdd",), "error: optimizer=sgdd: no such option; allowed: adam, adamw, sgd"),
    (("optimizer.lr=0.01,abc",), "error: optimizer.lr='abc': must be a number"),
])
def test_a_sweep_refused_while_composing_is_one_line_and_leaves_nothing(cli, tmp_path, args, line):
    sweep = tmp_path / "new" / "sweep"  # neither folder exists yet
    proc = cli("-m", f"hydra.sweep.dir={sweep}", *FAST, *args)
    assert proc.returncode == 2
    assert proc.stderr == line + "\n"
    assert list(tmp_path.iterdir()) == []  # not even the folders Hydra made for the sweep


def test_unquoted_chinese_sweeps_over_ascii_commas_and_keeps_the_text(cli, tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("-m", f"hydra.sweep.dir={sweep}", *FAST, "sentence=你的旅程,一步 开始")
    assert proc.returncode == 0, proc.stderr
    dirs = job_dirs(sweep)
    assert [d.name for d in dirs] == ["0_sentence=你的旅程", "1_sentence=一步_开始"]
    sentences = [json.loads((d / "summary.json").read_text(encoding="utf-8"))["config"]["sentence"] for d in dirs]
    assert sentences == ["你的旅程", "一步 开始"]


def test_an_unresolvable_sweep_member_is_a_failed_row_and_the_table_is_written(cli, tmp_path):
    """Hydra keeps each job's folder name in its config, where a ``${`` taken from an override
    would be read as an interpolation and end the sweep with a traceback; the name drops the $."""
    sweep = tmp_path / "sweep"
    proc = cli("-m", "logging=off", "train.steps=3", "model.d_k=4,${nope}", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = assert_csv_matches_jobs(sweep)
    assert [r["status"] for r in rows] == ["completed", "failed"]
    assert rows[1]["error"].startswith("model.d_k='${nope}': cannot be resolved")
    assert (sweep / "1_model.d_k=_{nope}").is_dir()


def test_runs_without_their_hydra_folder_are_still_summarized_and_compared(cli, tmp_path):
    import shutil

    from attnlab.commands.sweep import summarize
    from attnlab.saved import runs

    sweep = tmp_path / "sweep"
    proc = cli("-m", f"hydra.sweep.dir={sweep}", *FAST, "seed=1,2")
    assert proc.returncode == 0, proc.stderr
    dirs = job_dirs(sweep)
    for d in dirs:
        shutil.rmtree(d / ".hydra")
    assert summarize(sweep) == 0
    assert [sorted(p.name for p in d.iterdir()) for d in dirs] == [["attention.npz", "metrics.csv", "summary.json"]] * 2
    rows = read_csv(sweep / "summary.csv")
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert [r["overrides"] for r in rows] == [f"train.steps=5 train.snapshot_steps=[0,4] logging=off seed={s}"
                                             for s in (1, 2)]
    assert [r["job"] for r in runs.collect_rows([sweep])] == [d.name for d in dirs]
    for seed, d in zip((1, 2), dirs):
        summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        assert summary["config"]["seed"] == seed
        assert summary["overrides"] == ["train.steps=5", "train.snapshot_steps=[0,4]", "logging=off", f"seed={seed}"]


def test_summary_holds_the_resolved_config_the_run_used(cli, tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("ATTNLAB_TEST_DMODEL", "8")
    proc = cli(f"hydra.run.dir={run}", *FAST, "model.d_model=${oc.env:ATTNLAB_TEST_DMODEL}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["model"]["d_model"] == 8
    assert summary["config"]["model"]["d_v"] == 8  # ${model.d_model} resolved too
    assert summary["config"]["train"]["snapshot_steps"] == [0, 4]
    assert summary["overrides"][-1] == "model.d_model=${oc.env:ATTNLAB_TEST_DMODEL}"


@pytest.mark.parametrize("jobs, line", [(1, "1 job, 1 completed"), (2, "2 jobs, 2 completed")])
def test_the_sweep_line_counts_jobs_in_words(default_run, tmp_path, capsys, jobs, line):
    import shutil

    from attnlab.commands.sweep import summarize

    for k in range(jobs):
        shutil.copytree(default_run, tmp_path / "sweep" / f"{k}_seed={k}")
    assert summarize(tmp_path / "sweep") == 0
    assert f"\n{line}; summary: " in capsys.readouterr().out


def test_jobs_are_ordered_by_the_job_number_their_summary_records(report_sweep, tmp_path):
    """Each sweep job's summary.json records Hydra's ``hydra.job.num`` (``job_num``); the table and
    the report order jobs by it without parsing ``.hydra/hydra.yaml`` (~19 ms a job), and fall
    back to hydra.yaml for runs without it (made before it was recorded, or edited)."""
    import shutil

    from attnlab.saved import runs
    from attnlab.saved import safe_read as S

    sweep = tmp_path / "sweep"
    shutil.copytree(report_sweep, sweep)
    jobs = [sweep / "0_optimizer.lr=0.01", sweep / "1_optimizer.lr=0.05"]
    assert [json.loads((j / "summary.json").read_text())["job_num"] for j in jobs] == [0, 1]
    assert [S.read_job_num(j) for j in jobs] == [0, 1]
    S.reset_counters()
    assert [name for _, name, _ in runs.named_runs([sweep])] == [j.name for j in jobs]
    assert S.counters()["bytes_read"] == sum((j / "summary.json").stat().st_size for j in jobs)  # no hydra.yaml

    def set_job_num(job: Path, value) -> None:
        summary = json.loads((job / "summary.json").read_text())
        summary.pop("job_num", None)
        if value != "absent":
            summary["job_num"] = value
        (job / "summary.json").write_text(json.dumps(summary))

    set_job_num(jobs[0], 7)  # the summary's number decides
    assert [name for _, name, _ in runs.named_runs([sweep])] == [jobs[1].name, jobs[0].name]
    for value in ("absent", None, "7", True, 2.5):  # else hydra.yaml's (job 0 first again)
        set_job_num(jobs[0], value)
        assert [name for _, name, _ in runs.named_runs([sweep])] == [j.name for j in jobs], value


def test_a_single_run_records_no_job_number(default_run):
    assert "job_num" not in json.loads((default_run / "summary.json").read_text())


def test_a_jobs_end_reaches_the_command_as_hydra_hands_back_its_return_value():
    """A launcher's worker pickles the job's return value (callbacks.JobEnd); made again where it is
    unpickled, it gives the command's process the exit status the job asked for, the highest once."""
    import pickle

    from attnlab.commands import callbacks

    callbacks.exit_status()
    sent = [pickle.dumps(callbacks.JobEnd("completed")), pickle.dumps(callbacks.JobEnd("failed", 2)),
            pickle.dumps(callbacks.JobEnd("interrupted", 1))]
    assert callbacks.exit_status() == 2  # made here too (the basic launcher: in this process)
    received = [pickle.loads(data) for data in sent]  # what Hydra's sweeper gets from a joblib worker
    assert [(end.status, end.code) for end in received] == [("completed", 0), ("failed", 2), ("interrupted", 1)]
    assert callbacks.exit_status() == 2
    assert callbacks.exit_status() == 0  # read once
