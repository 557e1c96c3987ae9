"""attnlab.outputs.artifacts and rundir in-process: the files a run dir holds (exact content and
format), what a killed run leaves readable, the size refusal, and the claim's refusals (one per kind)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from filelock import lock_descriptor

from attnlab.core.errors import ConfigError, RunDirError
from attnlab.core.files import NPZ_LIMIT
from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.outputs import artifacts, rundir

TOKENS = ["Your", " journey", " starts"]
IDS = [7120, 7002, 4940]


def info(run_dir, snapshot_steps=(0, 2, 4), heads=1, steps=5):
    return RunInfo({"model": {"n_heads": heads}}, IDS, TOKENS, list(snapshot_steps), steps, 1, run_dir)


def frames(n, heads=1, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(3), size=(n, heads, 3)).astype(np.float32)  # (n, H, T, T)


def feed(sink, run_dir, losses, snapshot_steps=(0, 2, 4), heads=1, status="completed"):
    sink.on_start(info(run_dir, snapshot_steps, heads, len(losses)))
    weights = frames(len(snapshot_steps), heads)
    for step, loss in enumerate(losses):
        sink.on_losses(np.array([step]), np.array([loss]))
        if step in snapshot_steps:
            sink.on_snapshot(Snapshot(step, loss, weights[list(snapshot_steps).index(step)]))
    sink.on_end(RunResult(status, len(losses), losses[-1], 0.25))
    sink.close()
    return weights


def test_the_run_dir_files_hold_exactly_the_records(tmp_path):
    losses = [2.356612, 1.0 / 3, 0.1, 1e-300, 0.0]
    sink = artifacts.RunDirSink(tmp_path)
    weights = feed(sink, tmp_path, losses, heads=2)
    assert (tmp_path / "metrics.csv").read_text() == "step,loss\n" + "".join(f"{i},{x!r}\n" for i, x in enumerate(losses))
    with np.load(tmp_path / "attention.npz", allow_pickle=False) as npz:
        assert npz.files == ["weights", "steps", "tokens", "token_ids"]
        assert (npz["weights"].dtype, npz["steps"].dtype, npz["token_ids"].dtype) == (np.float32, np.int64, np.int64)
        np.testing.assert_array_equal(npz["weights"], weights)  # (S, H, T, T)
        assert npz["steps"].tolist() == [0, 2, 4]
        assert npz["tokens"].tolist() == TOKENS
        assert npz["token_ids"].tolist() == IDS
    assert (sink.summary["status"], sink.summary["steps_run"], sink.summary["final_loss"]) == ("completed", 5, 0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.npz", "metrics.csv"]


def test_a_run_stopped_early_keeps_the_snapshots_of_its_steps(tmp_path):
    sink = artifacts.RunDirSink(tmp_path)
    sink.on_start(info(tmp_path, (0, 2, 4)))
    sink.on_losses(np.arange(2), np.array([3.0, 2.0]))
    weights = frames(1)
    sink.on_snapshot(Snapshot(0, 3.0, weights[0]))
    sink.on_losses(np.array([2]), np.array([1.0]))
    # what kill -9 leaves now: the rows and the snapshots, readable with the standard readers
    assert (tmp_path / ".metrics.csv.partial").read_text() == "step,loss\n0,3.0\n1,2.0\n2,1.0\n"
    np.testing.assert_array_equal(np.load(tmp_path / ".attention.npy.partial", allow_pickle=False)[0], weights[0])
    sink.on_end(RunResult("failed", 2, 2.0, 0.1, error="boom"))  # a later sink failed on the last batch
    sink.close()
    assert (tmp_path / "metrics.csv").read_text() == "step,loss\n0,3.0\n1,2.0\n"
    with np.load(tmp_path / "attention.npz", allow_pickle=False) as npz:
        assert npz["steps"].tolist() == [0] and npz["weights"].shape == (1, 1, 3, 3)
    assert (sink.summary["status"], sink.summary["steps_run"], sink.summary["final_loss"]) == ("failed", 2, 2.0)
    assert not list(tmp_path.glob(".*"))  # no partial or temporary file left


def test_a_run_whose_files_its_readers_would_refuse_is_refused_before_the_first_step(tmp_path, cfg_of):
    """One estimate (core.checks.resources) against the readers' limits (core.files), per file;
    the estimate is an upper bound of what a real run writes."""
    from omegaconf import OmegaConf

    from attnlab.core import checks

    s = int(NPZ_LIMIT // (4 * 256 * 256)) + 1  # frames of (1, 256, 256) float32 past the limit
    for frames_, steps, refused in [(s, s, "attention.npz"), (s // 2, s, None), (2, 2_100_000, "metrics.csv"),
                                    (2, 1_900_000, None)]:
        cfg = cfg_of("logging=off", f"train.steps={steps}")
        OmegaConf.update(cfg, "train.snapshot_steps", list(range(frames_)))
        if refused is None:
            checks.resources(cfg, 256, 50257, tmp_path)
            continue
        limit = {"attention.npz": "1.0 GiB", "metrics.csv": "64.0 MiB"}[refused]
        with pytest.raises(ConfigError, match=rf"the run's {refused} would be about .*, more than the {limit} "
                                              "attnlab's readers accept$"):
            checks.resources(cfg, 256, 50257, tmp_path)
    assert list(tmp_path.iterdir()) == []
    from attnlab.commands.job import run_job

    cfg = cfg_of("logging=off", "train.steps=300")
    assert run_job(cfg, tmp_path / "run").status == "completed"
    estimate = checks.disk_estimate(cfg, 6)
    for file in ("metrics.csv", "attention.npz"):
        assert 0 < (tmp_path / "run" / file).stat().st_size <= estimate[file], file


def test_jobs_of_a_dead_launcher_worker_say_failed_and_lose_their_lock(tmp_path):
    """What ``attnlab -m`` does when a launcher loses a worker (the OOM killer): every job folder
    of the sweep whose process died mid-run; a live or finished job is left as it is."""
    sweep = rundir.claim(tmp_path / "sweep", key="hydra.sweep.dir").path
    try:
        for name, status, live in [("0_dead", "running", False), ("1_done", "completed", False),
                                   ("2_live", "running", True)]:
            (sweep / name).mkdir()
            artifacts.update_summary(sweep / name, status=status)
            (sweep / name / rundir.LOCK).write_text("1\n")
        held = os.open(sweep / "2_live" / rundir.LOCK, os.O_RDONLY)
        lock_descriptor(held)
        assert artifacts.close_orphans("its process ended before the run did (X)") == [sweep / "0_dead"]
        os.close(held)
    finally:
        rundir.release(sweep)
    assert json.loads((sweep / "0_dead" / "summary.json").read_text()) == {
        "status": "failed", "error": "its process ended before the run did (X)"}
    assert not (sweep / "0_dead" / rundir.LOCK).exists()
    assert json.loads((sweep / "1_done" / "summary.json").read_text())["status"] == "completed"
    assert (sweep / "2_live" / rundir.LOCK).exists()


def test_atomic_write_of_arrays_is_what_np_savez_writes(tmp_path):
    a, b = np.arange(6, dtype=np.int64).reshape(2, 3), np.array(["x", "yz"])
    artifacts.atomic_write(tmp_path / "mine.npz", {"a": a, "b": b})
    np.savez(tmp_path / "numpy.npz", a=a, b=b)
    for name in ("mine.npz", "numpy.npz"):
        with np.load(tmp_path / name, allow_pickle=False) as npz:
            assert npz.files == ["a", "b"]
            np.testing.assert_array_equal(npz["a"], a)
            np.testing.assert_array_equal(npz["b"], b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.npz", "numpy.npz"]


def test_a_write_the_filesystem_refuses_names_the_file_and_leaves_nothing(tmp_path):
    with pytest.raises(OSError, match="summary.json"):
        artifacts.atomic_write(tmp_path / "missing" / "summary.json", "{}")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------- the claim
@pytest.fixture
def claim(tmp_path):
    """rundir.claim, with every claim this test made released afterwards."""
    yield rundir.claim
    for held in rundir.claims():
        rundir.release(held.path)


def test_a_claim_locks_reserves_and_is_released(tmp_path, claim):
    run = tmp_path / "a" / "run"
    held = claim(run)
    assert claim(run) is held  # this process already holds it
    assert rundir.run_is_live(run)
    assert (run / rundir.LOCK).read_bytes() == f"\n{os.getpid()}\n".encode() + bytes(rundir.RESERVE_BYTES)
    rundir.release_reserve(run)
    assert (run / rundir.LOCK).read_text() == f"\n{os.getpid()}\n"
    rundir.abandon(run)  # nothing started: the folders made for it are removed again
    assert not (tmp_path / "a").exists()
    assert not rundir.run_is_live(run)


@pytest.mark.parametrize("kind, expected", [
    ("finished", r"already holds a completed run; choose another hydra.run.dir \(runs are never overwritten\)"),
    ("killed", r"holds a run that was killed \(its summary.json says running"),
    ("others", r"holds files attnlab did not write \(metrics.csv, notes.txt\); a run dir must be new or empty"),
    ("live", r"another attnlab process is writing a run there"),
    ("stale_lock", r"holds a run that was killed before it wrote summary.json"),
])
def test_a_claim_refuses_what_is_not_new_or_empty_and_names_it(tmp_path, claim, kind, expected):
    run = tmp_path / "run"
    run.mkdir()
    if kind in ("finished", "killed"):
        (run / "summary.json").write_text(json.dumps({"status": "completed" if kind == "finished" else "running"}))
    elif kind == "others":
        (run / "metrics.csv").write_text("mine\n")
        (run / "notes.txt").write_text("mine\n")
    else:
        fd = os.open(run / rundir.LOCK, os.O_CREAT | os.O_RDWR)
        if kind == "live":
            lock_descriptor(fd)  # another open file: the claim sees it held
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(RunDirError, match=f"^hydra.run.dir='{run}': {expected}"):
        claim(run)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written, nothing removed
    if kind in ("live", "stale_lock"):
        os.close(fd)


def test_run_is_live_opens_only_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / rundir.LOCK)  # opening a FIFO for reading would block
    assert not rundir.run_is_live(tmp_path)
    os.unlink(tmp_path / rundir.LOCK)
    os.symlink("/dev/zero", tmp_path / rundir.LOCK)
    assert not rundir.run_is_live(tmp_path)
    assert not rundir.run_is_live(tmp_path / "missing")


def test_an_archive_too_large_for_the_disk_keeps_the_snapshots_that_fit(tmp_path, monkeypatch):
    import errno

    from attnlab.core.errors import WriteError, as_write_error

    real = artifacts.atomic_write
    frame = 4 * 3 * 3

    def disk(path, data):  # a disk with room for two frames and the rest of the archive
        if isinstance(data, dict) and data["weights"].nbytes > 2 * frame:
            raise as_write_error(OSError(errno.ENOSPC, "No space left on device"), file=path.name)
        real(path, data)

    monkeypatch.setattr(artifacts, "atomic_write", disk)
    monkeypatch.setattr(artifacts, "_room", lambda folder: 4096 + 8 * 3 + 64 * 3 + 2 * frame)
    sink = artifacts.RunDirSink(tmp_path)
    with pytest.raises(WriteError, match="no space left on device while writing attention.npz"):
        feed(sink, tmp_path, [3.0, 2.0, 1.0, 0.5, 0.25])
    with np.load(tmp_path / "attention.npz", allow_pickle=False) as npz:
        assert npz["steps"].tolist() == [0, 2]
    assert (sink.summary["status"], sink.summary["error"]) == ("failed",
                                                               "no space left on device while writing attention.npz")
    assert sink.summary["steps_run"] == 5  # metrics.csv holds every step


def test_a_sink_failing_to_start_still_ends_the_run_dir(tmp_path, monkeypatch, attnlab_here):
    """TensorBoard's sink starts after RunDirSink; its failure leaves finished files, not .partial ones."""
    import errno

    from attnlab.outputs import tensorboard

    def full_disk(self, info):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tensorboard.TensorBoardSink, "on_start", full_disk)
    run = tmp_path / "run"
    result = attnlab_here("logging.figures=false", "logging.console=false", f"hydra.run.dir={run}")
    assert result.returncode == 1
    assert "no space left on device" in result.stderr
    names = sorted(p.name for p in run.iterdir())
    assert not [n for n in names if n.endswith(".partial")], names
    assert {"metrics.csv", "attention.npz", "summary.json"} <= set(names)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["steps_run"]) == ("failed", 0)
    assert not (run / rundir.LOCK).exists()


@pytest.mark.parametrize("overrides, status", [
    ((), "completed"),  # §5's training
    (("experiment=exercise5", "model.positional=none"), "completed"),  # the walkthrough with exercise 5's check
    (("model.d_model=0",), "failed"),  # refused
], ids=["train", "exercise5", "refused"])
def test_a_job_writes_summary_json_twice_and_checks_and_tokenizes_once(tmp_path, monkeypatch, overrides, status):
    """summary.json: ``running`` first, the end (status and everything measured) last; the config
    checked and the text tokenized once per job, exercise 5's second sentence aside."""
    from attnlab.commands.job import run_job
    from attnlab.core import checks, tokenizer

    from conftest import compose_cfg

    written, calls = [], {"validate": 0, "tokenize": 0}
    real_write, real_validate, real_tokenize = artifacts.write_summary, checks.validate, tokenizer.tokenize
    monkeypatch.setattr(artifacts, "write_summary", lambda run_dir, summary: (
        written.append(dict(summary)), real_write(run_dir, summary))[1])
    monkeypatch.setattr(checks, "validate", lambda cfg: (calls.update(validate=calls["validate"] + 1),
                                                         real_validate(cfg))[1])
    monkeypatch.setattr(tokenizer, "tokenize", lambda cfg: (calls.update(tokenize=calls["tokenize"] + 1),
                                                            real_tokenize(cfg))[1])
    monkeypatch.setattr(checks, "tokenize", tokenizer.tokenize)
    cfg = compose_cfg("logging=off", "logging.console=false", "train.steps=3", "train.snapshot_steps=[0,2]", *overrides)
    result = run_job(cfg, tmp_path / "run")
    assert result.status == status
    assert [s["status"] for s in written] == ["running", status]
    assert calls == {"validate": 1, "tokenize": 0 if status == "failed" else 1}
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert on_disk == written[-1] and written[0]["config"] is None
    if status == "completed":
        assert on_disk["config"]["model"]["d_model"] == 6 and on_disk["versions"]["torch_threads"] >= 1
        assert on_disk["steps_run"] == (0 if overrides else 3)
        if overrides:
            assert on_disk["permutation_check"]["tokens_are_permutation"] is True
