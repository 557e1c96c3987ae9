"""Faults leave a run dir that tells the truth, each fault made real: a file-size limit
(RLIMIT_FSIZE), a full disk (a small tmpfs filled while the run goes), a read-only folder (a
read-only tmpfs or bind mount), a signal at each phase, someone else's files, a console that
cannot encode Chinese. These run ``attnlab`` in the test process (conftest's ``attnlab_here``);
the fault happens at a phase of the run (:func:`at_phase`, through the run's
``interrupts.pause_point`` calls). What needs a process of its own runs the real command:
SIGKILL, two runs started together, a closed pipe and closed standard streams.

Mounting needs root with CAP_SYS_ADMIN (this machine and CI); without it those tests skip.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.core.training import FLUSH_EVERY, train
from attnlab.outputs import rundir
from attnlab.saved import runs, safe_read

from conftest import ROOT, compose_cfg, read_csv

QUIET = ("logging=off",)
CONTRACT = {"metrics.csv", "attention.npz", "summary.json"}


# ----------------------------------------------------------------------------- helpers
def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return {**env, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", **extra}


def started(*args: str, env: dict | None = None, stdout=subprocess.PIPE):
    """``attnlab ARGS`` started in a process of its own, text pipes."""
    return subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", *args], cwd=ROOT, env=env or child_env(),
                            stdout=stdout, stderr=subprocess.PIPE, text=True)


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text(encoding="utf-8"))


def files(run: Path) -> set[str]:
    """Every file of ``run``, relative, hidden ones included."""
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}


def hydra_files() -> set[str]:
    """What attnlab saves in .hydra/ once it holds the run dir (Hydra itself writes nothing there)."""
    return {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"}


def tree_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_agrees(run: Path, steps_run: int, snapshot_steps: list[int]) -> None:
    """Every contract file agrees on steps_run: metrics.csv has steps 0..steps_run-1, the
    attention snapshots are exactly ``snapshot_steps`` (all < steps_run), and nothing hidden
    (partial, temporary, lock) is left."""
    assert summary(run)["steps_run"] == steps_run
    steps, losses = safe_read.read_run_metrics(run)
    assert steps.tolist() == list(range(steps_run))
    att = safe_read.read_attention(run)
    assert att["steps"].tolist() == snapshot_steps
    assert all(s < steps_run for s in snapshot_steps)
    assert att["weights"].shape[0] == len(snapshot_steps)
    assert [f for f in files(run) if Path(f).name.startswith(".")] == []


def poll(pred, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    """Wait (polling, with a deadline) until ``pred()``; fail if ``proc`` ends first."""
    end = time.monotonic() + timeout
    while not pred():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"attnlab ended early ({proc.returncode}): {err}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("timed out")
        time.sleep(0.05)


def at_phase(monkeypatch, phase: str, action) -> None:
    """Make ``action()`` happen when the run reaches ``phase`` (the run's
    :func:`attnlab.core.interrupts.pause_point` calls: before_training, model_built,
    first_snapshot, finishing, drawing, sweep_end)."""
    from attnlab.core import interrupts

    monkeypatch.setattr(interrupts, "pause_point", lambda at: action() if at == phase else None)


def send(*sigs: int):
    """An action that sends ``sigs`` to this process; each handler runs before the next is sent."""
    return lambda: [signal.raise_signal(sig) for sig in sigs]


@contextlib.contextmanager
def file_size_limit(limit: int):
    """No file of this process may grow beyond ``limit`` bytes (EFBIG) inside the block (POSIX)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def mount(target: Path, *options: str, bind: Path | None = None) -> None:
    cmd = (["mount", "--bind", str(bind), str(target)] if bind else
           ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount here ({proc.stderr.strip()}): needs root with CAP_SYS_ADMIN")


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "1m", read_only: bool = False):
    """A real filesystem of ``size`` bytes at ``path`` (read-only when asked), unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    mount(path, f"size={size}", "mode=0755", *(("ro",) if read_only else ()))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def read_only_view(path: Path):
    """``path`` made read-only in place (a read-only bind mount of itself), until the block ends."""
    mount(path, bind=path)
    try:
        proc = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> None:
    """Fill the filesystem of ``folder`` to the last byte (another program taking the disk)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 4096, 256, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"x" * size)
    finally:
        os.close(fd)


def tensorboard(run: Path) -> tuple[list[int], str, int]:
    """(steps of the ``loss`` points, the hparams ``status`` value, session-end status 1
    success / 2 failure) of the run's one event file."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    (events,) = run.glob("events.out.tfevents.*")
    ea = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    content = ea.PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    return [e.step for e in ea.Scalars("loss")], start.hparams["status"].string_value, end.status


def batches(snapshot_steps: list[int], steps: int) -> list[tuple[int, int]]:
    """The loss batches the training loop sends (training.LossRecorder): [first, last] steps,
    ending at each snapshot step and every FLUSH_EVERY steps."""
    ends = sorted({s for s in snapshot_steps} | {s for s in range(steps) if (s + 1) % FLUSH_EVERY == 0}
                  | {steps - 1})
    out, first = [], 0
    for end in ends:
        out.append((first, end))
        first = end + 1
    return out


# ----------------------------------------------------------------------------- disk full, size limits
def test_file_size_limit_stops_at_the_batch_and_every_file_agrees(tmp_path, attnlab_here):
    limit, snaps, steps = 20_000, [0, 100, 500, 999], 1000  # metrics.csv reaches the limit at about step 770
    run = tmp_path / "run"
    losses = train(compose_cfg(*QUIET, f"train.steps={steps}", f"train.snapshot_steps={snaps}")).losses.tolist()
    with file_size_limit(limit):
        proc = attnlab_here(f"hydra.run.dir={run}", *QUIET, f"train.steps={steps}", f"train.snapshot_steps={snaps}")
    # the first batch of rows that would take metrics.csv past the limit is the step it stops at
    size = len("step,loss\n")
    for first, last in batches(snaps, steps):
        size += sum(len(f"{s},{losses[s]!r}\n") for s in range(first, last + 1))
        if size > limit:
            break
    assert proc.returncode == 1
    assert proc.stderr == f"failed: file too large while writing metrics.csv at step {first}; records kept in {run}\n"
    s = summary(run)
    assert (s["status"], s["error"]) == ("failed", f"file too large while writing metrics.csv at step {first}")
    assert_agrees(run, first, [x for x in snaps if x < first])
    assert safe_read.read_run_metrics(run)[1].tolist() == losses[:first]  # every recorded loss, exactly
    assert s["final_loss"] == losses[first - 1]
    assert files(run) == CONTRACT | hydra_files()


def test_tensorboard_that_cannot_write_fails_the_run_at_that_step(tmp_path, attnlab_here):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    # TensorBoard's event file grows ~2x faster than metrics.csv: it reaches the limit first
    with file_size_limit(20_000):
        proc = attnlab_here(f"hydra.run.dir={run}", "logging.images=false", "logging.figures=false",
                            "logging.report=false", "logging.console=false", "train.steps=2000",
                            "train.snapshot_steps=[0]")
    assert proc.returncode == 1
    n = summary(run)["steps_run"]
    assert 0 < n < 2000
    error = f"file too large while writing the TensorBoard event file at step {n}"
    assert proc.stderr == f"failed: {error}; records kept in {run}\n"  # one line: the writer thread's traceback is kept quiet
    assert (summary(run)["status"], summary(run)["error"]) == ("failed", error)
    assert_agrees(run, n, [0])
    (events,) = run.glob("events.out.tfevents.*")
    points = [e.step for e in EventAccumulator(str(events), size_guidance={"scalars": 0}).Reload().Scalars("loss")]
    assert points == list(range(len(points))) and len(points) <= n  # what it could write, never more


@pytest.mark.parametrize("limit, args, expected_stderr, left", [
    # the walkthrough's archive (~100 KB) does not fit; no temporary archive is left
    (20_000, ("experiment=tutorial_walkthrough", "model.d_model=200",
              "sentence=" + " ".join(["Your journey starts with one step"] * 5)),
     "failed: file too large while writing walkthrough.npz; records kept in {run}\n", {"summary.json"} | hydra_files()),
    # not even the first summary.json ("running") fits: nothing says how the run ended, and attnlab says so
    (100, (), "error: file too large while writing summary.json; nothing recorded in {run}\n",
     set()),
    # .hydra/config.yaml (~700 bytes) does not fit; the short failed summary does
    (300, (), "failed: file too large while writing config.yaml; records kept in {run}\n", {"summary.json"}),
], ids=["walkthrough_archive", "no_summary_at_all", "summary_with_config"])
def test_a_file_that_cannot_be_written_is_said_on_stderr(tmp_path, attnlab_here, limit, args, expected_stderr, left):
    run = tmp_path / "run"
    with file_size_limit(limit):
        proc = attnlab_here(f"hydra.run.dir={run}", *QUIET, "train.steps=5", *args)
    assert (proc.returncode, proc.stderr) == (1, expected_stderr.format(run=run))
    assert files(run) == left
    if "summary.json" in left:
        assert summary(run)["status"] == "failed" and summary(run)["error"] in proc.stderr


def test_disk_full_mid_run_promotes_the_records_and_tensorboard_agrees(tmp_path, attnlab_here, monkeypatch):
    with tmpfs(tmp_path / "disk", size="1m") as d:
        run = d / "run"
        snaps = [0, 1000, 1999]
        at_phase(monkeypatch, "first_snapshot", lambda: fill(d))  # another program takes the disk after step 0
        proc = attnlab_here(f"hydra.run.dir={run}", *QUIET, "logging.tensorboard=true", "logging.console=true",
                            "logging.progress=false", "logging.images=false", "train.steps=2000",
                            f"train.snapshot_steps={snaps}")
        assert proc.returncode == 1
        # the next batch of losses (steps 1..255) no longer fits; the lock file's reserve gives room to say so
        assert proc.stderr == (f"failed: no space left on device while writing metrics.csv at step 1; "
                               f"records kept in {run}\n")
        s = summary(run)
        assert (s["status"], s["error"]) == ("failed", "no space left on device while writing metrics.csv at step 1")
        assert_agrees(run, 1, [0])
        assert proc.stdout.splitlines()[-1].startswith(f"failed: 1 step, final loss {s['final_loss']:#.4g}")
        assert tensorboard(run) == ([0], "failed", 2)


@pytest.mark.parametrize("phase, args, left, expected", [
    # the run dir's reserve (1 MB in its lock file) still holds the figures, TensorBoard's file and the summary
    ("finishing", (), 12 * 1024, {"attention_evolution.png", "loss.png"}),
    # TensorBoard's last images and hparams as the only large writes: the run gives the reserve back first
    ("finishing", ("logging.figures=false", "logging.report=false"), 12 * 1024, set()),
], ids=["figures", "tensorboard_only"])
def test_disk_full_at_the_end_the_runs_reserve_holds_the_last_writes(tmp_path, attnlab_here, monkeypatch,
                                                                     phase, args, left, expected):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def take_the_disk() -> None:  # another program takes all but ``left`` bytes
        fill(d)
        os.truncate(d / "filler", (d / "filler").stat().st_size - left)

    with tmpfs(tmp_path / "disk", size="4m") as d:
        run = d / "run"
        at_phase(monkeypatch, phase, take_the_disk)
        proc = attnlab_here(f"hydra.run.dir={run}", "logging.console=false", *args)
        assert (proc.returncode, proc.stderr) == (0, "")
        assert summary(run)["status"] == "completed"
        assert expected <= files(run)
        assert_agrees(run, 201, [0, 20, 50, 100, 200])
        (events,) = run.glob("events.out.tfevents.*")
        acc = EventAccumulator(str(events), size_guidance={"images": 0, "scalars": 0}).Reload()
        assert [e.step for e in acc.Images("attention/weights")] == [0, 20, 50, 100, 200]
        assert acc.Scalars("hparam/final_loss")[0].step == 200


def test_read_only_folder_is_refused_in_one_line(tmp_path, finished_run, attnlab_here, capsys):
    from attnlab.commands import reproduce

    with tmpfs(tmp_path / "ro", size="64k", read_only=True) as ro:
        run = attnlab_here(f"hydra.run.dir={ro / 'run'}", *QUIET)
        assert (run.returncode, run.stderr) == (2, f"error: hydra.run.dir='{ro / 'run'}': cannot write there "
                                                   "(read-only file system); choose another hydra.run.dir\n")
        zh = attnlab_here("lang=zh", f"hydra.run.dir={ro / 'run'}", *QUIET)
        assert (zh.returncode, zh.stderr) == (2, f"错误: hydra.run.dir='{ro / 'run'}': 无法写入那里（只读文件系统）；"
                                                 "请换一个 hydra.run.dir\n")
        sweep = attnlab_here("-m", f"hydra.sweep.dir={ro / 'sweep'}", *QUIET, "seed=1,2")
        assert (sweep.returncode, sweep.stderr) == (2, f"error: hydra.sweep.dir='{ro / 'sweep'}': cannot write "
                                                       "there (read-only file system); choose another hydra.sweep.dir\n")
        assert reproduce.main([str(finished_run), "--out", str(ro / "repro")]) == 2
        assert capsys.readouterr().err == (f"error: --out='{ro / 'repro'}': cannot write there "
                                           "(read-only file system); choose another --out\n")
        assert list(ro.iterdir()) == []


# ----------------------------------------------------------------------------- kill -9, two at once, not ours
@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    from attnlab.commands.job import run_job

    run = tmp_path_factory.mktemp("faults") / "finished"
    assert run_job(compose_cfg(*QUIET, "train.steps=20", "train.snapshot_steps=[0,19]"), run).status == "completed"
    return run


def test_summary_says_running_until_the_last_figure_is_written(tmp_path, attnlab_here, monkeypatch):
    """summary.json says how the run ended only once every file is written: a run killed after
    its records, while its figures are drawn, reads as killed (not completed without figures), and
    its row has the 30 steps its records hold."""
    run, seen = tmp_path / "run", []
    at_phase(monkeypatch, "drawing", lambda: seen.append(
        (summary(run)["status"], runs.job_row(run)["steps_run"], (run / "metrics.csv").is_file(),
         (run / "attention_evolution.png").exists())))
    assert attnlab_here(f"hydra.run.dir={run}", "logging.console=false", "train.steps=30",
                        "train.snapshot_steps=[0,29]").returncode == 0
    assert seen == [("running", 30, True, False)]


def test_kill_9_leaves_a_killed_run_that_keeps_its_snapshots_and_is_refused(tmp_path, attnlab_here):
    run = tmp_path / "run"
    snaps = [0, 20, 50, 100, 200]
    proc = started(f"hydra.run.dir={run}", *QUIET, "logging.console=false", "train.steps=2000000",
                   f"train.snapshot_steps={snaps}")
    partial = run / ".metrics.csv.partial"
    poll(lambda: partial.is_file() and partial.read_bytes().count(b"\n") > 300, proc)
    assert rundir.run_is_live(run)
    assert runs.job_row(run)["status"] == "running"  # attnlab-compare, the sweep table and the report agree
    assert (run / rundir.LOCK).read_bytes().split(b"\n")[1] == str(proc.pid).encode()
    hydra_before = {f: (run / f).read_bytes() for f in hydra_files()}
    second = attnlab_here(f"hydra.run.dir={run}", *QUIET)  # a second run into the live run's folder
    assert (second.returncode, second.stderr) == (2, f"error: hydra.run.dir='{run}': another attnlab process "
                                                     f"(pid {proc.pid}) is writing a run there; choose another hydra.run.dir\n")
    assert {f: (run / f).read_bytes() for f in hydra_files()} == hydra_before
    proc.kill()
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    assert not rundir.run_is_live(run)
    assert summary(run)["status"] == "running"  # with the lock free: killed
    row = runs.job_row(run)
    assert (row["status"], row["error"]) == ("killed", runs.DIED)
    # what it recorded reached the disk: whole rows, and the losses as whole rows (the partial archive's layout is the outputs layer's)
    reference = train(compose_cfg(*QUIET, "train.steps=201", f"train.snapshot_steps={snaps}"))
    text = partial.read_text()
    assert text.endswith("\n")
    rows = text.splitlines()[1:]
    assert [r.split(",")[1] for r in rows[:201]] == [repr(x) for x in reference.losses.tolist()]
    before = tree_bytes(run)
    third = attnlab_here(f"hydra.run.dir={run}", *QUIET)
    assert (third.returncode, third.stderr) == (2, f"error: hydra.run.dir='{run}': holds a run that was killed (its "
                                                   "summary.json says running and no process holds its lock); choose "
                                                   "another hydra.run.dir (runs are never overwritten)\n")
    assert tree_bytes(run) == before


def test_two_runs_started_together_one_runs_the_other_is_refused(tmp_path):
    run = tmp_path / "run"
    args = [f"hydra.run.dir={run}", "logging.images=false", "logging.figures=false", "logging.report=false",
            "logging.console=false", "train.steps=300"]
    procs = [started(*args) for _ in range(2)]
    results = sorted((p.communicate(timeout=300)[1], p.returncode) for p in procs)
    codes = sorted(rc for _, rc in results)
    assert codes == [0, 2], results
    (refusal,) = [err for err, rc in results if rc == 2]
    assert refusal.startswith(f"error: hydra.run.dir='{run}': ") and refusal.count("\n") == 1
    assert refusal.endswith("choose another hydra.run.dir\n") or refusal.endswith("(runs are never overwritten)\n")
    s = summary(run)
    assert (s["status"], s["steps_run"], s["error"]) == ("completed", 300, None)
    assert_agrees(run, 300, [0, 20, 30, 50, 75, 100, 150, 299])
    points, status, sessions = tensorboard(run)  # one event file, each step once
    assert (points, status, sessions) == (list(range(300)), "completed", 1)


def test_a_folder_with_someone_elses_files_is_refused_before_anything_is_written(tmp_path, attnlab_here):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("my own numbers\n")
    (mine / "notes.txt").write_text("keep\n")
    before = tree_bytes(mine)
    proc = attnlab_here("hydra.run.dir=", *QUIET, cwd=mine)  # '' is the current folder
    assert (proc.returncode, proc.stderr) == (2, "error: hydra.run.dir='': holds files attnlab did not write "
                                                 "(metrics.csv, notes.txt); a run dir must be new or empty; "
                                                 "choose another hydra.run.dir\n")
    sweep = attnlab_here("-m", f"hydra.sweep.dir={mine}", *QUIET, "seed=1,2")
    assert (sweep.returncode, sweep.stderr) == (2, f"error: hydra.sweep.dir='{mine}': holds files attnlab did not "
                                                   "write (metrics.csv, notes.txt); a run dir must be new or empty; "
                                                   "choose another hydra.sweep.dir\n")
    assert tree_bytes(mine) == before and sorted(p.name for p in mine.iterdir()) == ["metrics.csv", "notes.txt"]


# ----------------------------------------------------------------------------- signals at each phase
@pytest.mark.parametrize("phase", ["before_training", "model_built"])
def test_ctrl_c_before_the_first_step_records_interrupted(tmp_path, attnlab_here, monkeypatch, phase):
    """At the job's start (.hydra/ and summary.json written, the config not yet checked) or once
    torch is loaded and the model built. The second Ctrl-C is recorded too: the job is shielded."""
    run = tmp_path / "run"
    at_phase(monkeypatch, phase, send(signal.SIGINT, signal.SIGINT))
    proc = attnlab_here(f"hydra.run.dir={run}", *QUIET)
    assert (proc.returncode, proc.stderr) == (1, f"interrupted before the training steps; records kept in {run}\n")
    s = summary(run)
    assert (s["status"], s["error"], s["steps_run"]) == ("interrupted", "interrupted before the training steps", 0)
    assert files(run) == {"summary.json"} | hydra_files()


def test_sigterm_mid_run_every_artifact_says_interrupted(tmp_path, attnlab_here, monkeypatch):
    run = tmp_path / "run"
    at_phase(monkeypatch, "first_snapshot", send(signal.SIGTERM))
    proc = attnlab_here(f"hydra.run.dir={run}", "logging.images=false", "logging.report=false",
                        "logging.progress=false", "train.steps=300")
    assert (proc.returncode, proc.stderr) == (1, f"interrupted at step 1; 1 step recorded; records kept in {run}\n")
    assert proc.stdout.splitlines()[-1].startswith("interrupted: 1 step, final loss 2.357")
    assert (summary(run)["status"], summary(run)["error"]) == ("interrupted", "interrupted at step 1; 1 step recorded")
    assert_agrees(run, 1, [0])
    assert tensorboard(run) == ([0], "interrupted", 2)
    assert {"loss.png", "attention_evolution.png"} <= files(run)


def test_ctrl_c_twice_after_the_last_step_keeps_the_run_completed(tmp_path, attnlab_here, monkeypatch):
    run = tmp_path / "run"
    at_phase(monkeypatch, "finishing", send(signal.SIGINT, signal.SIGINT))  # while the last files are written
    proc = attnlab_here(f"hydra.run.dir={run}", "logging.images=false", "logging.progress=false", "train.steps=300")
    assert (proc.returncode, proc.stderr) == (0, f"note: interrupt received after the last step; the run completed ({run})\n")
    assert (summary(run)["status"], summary(run)["error"]) == ("completed", None)
    assert_agrees(run, 300, [0, 20, 30, 50, 75, 100, 150, 299])
    assert tensorboard(run) == (list(range(300)), "completed", 1)
    assert {"loss.png", "attention_evolution.png", "report.html"} <= files(run)
    assert proc.stdout.splitlines()[-1].startswith("completed: 300 steps")


# ----------------------------------------------------------------------------- console and sweep
def test_closed_pipe_silences_the_console_and_the_run_completes(tmp_path):
    run = tmp_path / "run"
    snaps = list(range(0, 400, 10))
    proc = started(f"hydra.run.dir={run}", *QUIET, "train.steps=400", f"train.snapshot_steps={snaps}")
    lines = [proc.stdout.readline(), proc.stdout.readline()]  # `attnlab ... | head -2`
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert lines[0].startswith("step   0  loss=2.3566")
    assert (proc.returncode, err) == (0, "")  # no BrokenPipeError, not even at exit
    assert (summary(run)["status"], summary(run)["steps_run"]) == ("completed", 400)
    assert_agrees(run, 400, snaps)


def test_closed_standard_streams_the_run_completes_and_its_files_stay_its_own(tmp_path):
    """``attnlab <&- >&- 2>&-``: the run completes with every file and default logging, nothing
    of the console lands in a run file (a closed descriptor is reopened on /dev/null before the
    run opens its files)."""
    def close() -> None:
        for fd in (0, 1, 2):
            os.close(fd)

    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={run}", "train.steps=30",
                           "train.snapshot_steps=[0,29]"], cwd=ROOT, env=child_env(), preexec_fn=close,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0
    assert summary(run)["status"] == "completed"
    assert_agrees(run, 30, [0, 29])
    assert {"attention_evolution.png", "loss.png", "report.html"} <= files(run)
    for f in run.rglob("*"):
        if f.is_file():
            assert b"step   0  loss=" not in f.read_bytes() and b"completed: 30 steps" not in f.read_bytes(), f


def test_a_console_that_cannot_encode_chinese_gets_escapes(tmp_path, attnlab_here):
    run, raw = tmp_path / "run", io.BytesIO()
    console = io.TextIOWrapper(raw, encoding="cp1252")  # PYTHONIOENCODING=cp1252
    proc = attnlab_here(f"hydra.run.dir={run}", *QUIET, "sentence=你的旅程从一步开始", "train.steps=30", stdout=console)
    console.flush()
    out = raw.getvalue().decode("cp1252")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "'\\u7684' attends:" in out  # 的: the default focus, the second character
    assert out.count("\n") == 7  # six snapshot lines (0, 3, 7, 15, 20, 29) and the closing line
    assert (summary(run)["status"], summary(run)["steps_run"]) == ("completed", 30)


def test_a_sweep_with_a_failed_job_exits_1_even_when_its_table_cannot_be_written(tmp_path, attnlab_here, monkeypatch):
    sweep = tmp_path / "sweep"
    views = []

    def read_only() -> None:  # the sweep folder becomes read-only before its summary.csv is written
        views.append(read_only_view(sweep))
        views[-1].__enter__()

    at_phase(monkeypatch, "sweep_end", read_only)
    try:
        proc = attnlab_here("-m", f"hydra.sweep.dir={sweep}", *QUIET, "train.steps=5", "model.d_model=6,0")
    finally:
        for view in views:
            view.__exit__(None, None, None)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: model.d_model=0: must be a positive integer",
                                        "error: the sweep summary was not written: read-only file system while "
                                        "writing summary.csv"]
    assert not (sweep / "summary.csv").exists()
    statuses = sorted(summary(job)["status"] for job in sweep.iterdir() if job.is_dir())
    assert statuses == ["completed", "failed"]


def test_ctrl_c_in_a_sweep_still_prints_the_table_of_the_jobs_that_ran(tmp_path, attnlab_here, monkeypatch):
    """Ctrl-C in job 0 of three stops the sweep (Hydra never ends it): the table, summary.csv and
    the report are those of the one job that ran, interrupted; exit 1; no lock left anywhere."""
    sweep = tmp_path / "sweep"
    at_phase(monkeypatch, "first_snapshot", send(signal.SIGINT))
    proc = attnlab_here("-m", f"hydra.sweep.dir={sweep}", *QUIET, "logging.report=true", "train.steps=5",
                        "seed=1,2,3")
    (job,) = [p for p in sweep.iterdir() if p.is_dir()]  # job 0 only: 1 and 2 never started
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"interrupted at step 1; 1 step recorded; records kept in {job}"]
    assert proc.stdout.splitlines()[-2] == (f"1 job, 0 completed, 1 not completed (interrupted); "
                                            f"summary: {sweep / 'summary.csv'}")
    assert [(r["job"], r["status"]) for r in runs.collect_rows([sweep])] == [(job.name, "interrupted")]
    assert [r["job"] for r in read_csv(sweep / "summary.csv")] == [job.name]
    assert sorted(p.name for p in sweep.iterdir()) == [job.name, "multirun.yaml", "report.html", "summary.csv"]
    assert not list(sweep.rglob(rundir.LOCK))


# ----------------------------------------------------------------------------- the pieces, in process
def test_claim_refuses_what_is_not_new_or_empty_and_names_it(tmp_path, finished_run):
    with pytest.raises(Exception, match=r"already holds a completed run; choose another hydra.run.dir"):
        rundir.claim(finished_run)
    (tmp_path / "lone").mkdir()
    (tmp_path / "lone" / ".hydra").mkdir()
    (tmp_path / "lone" / ".hydra" / "config.yaml").write_text("seed: 1\n")
    with pytest.raises(Exception, match=r"holds files attnlab did not write \(.hydra\)"):
        rundir.claim(tmp_path / "lone")  # Hydra's files of another run
    empty = tmp_path / "empty"
    empty.mkdir()
    held = rundir.claim(empty)
    try:
        assert rundir.run_is_live(empty)
        assert rundir.claim(empty) is held  # this process holds it already
    finally:
        rundir.release(empty)
    assert not (empty / rundir.LOCK).exists() and not rundir.run_is_live(empty)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(7):
        (many / f"f{i}").write_text("x")
    with pytest.raises(Exception, match=r"\(f0, f1, f2, f3 and 3 more\)"):
        rundir.claim(many)
    assert sorted(p.name for p in many.iterdir()) == [f"f{i}" for i in range(7)]


def test_run_is_live_never_follows_or_opens_anything_but_a_regular_file(tmp_path):
    for name, make in [("fifo", lambda p: os.mkfifo(p)), ("link", lambda p: p.symlink_to("/dev/zero")),
                       ("dir", lambda p: p.mkdir())]:
        d = tmp_path / name
        d.mkdir()
        make(d / rundir.LOCK)
        assert rundir.run_is_live(d) is False  # returns at once: the FIFO is never opened for reading
    assert rundir.run_is_live(tmp_path / "missing") is False
