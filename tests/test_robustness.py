"""Nothing lost: divergence, Ctrl-C / SIGTERM mid-run, never overwriting a finished run,
atomic files; and determinism (same config => bitwise-identical records, in one process or
another)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from attnlab.commands.job import run_job
from attnlab.core import interrupts
from attnlab.core.errors import RunDirError
from attnlab.core.records import Sink
from attnlab.core.training import train
from attnlab.outputs import artifacts
from attnlab.saved import safe_read

from conftest import JOBLIB, ROOT, compose_cfg, read_csv

SMALL = ("logging=off", "train.steps=40", "train.snapshot_steps=[0,10,39]")


def tree_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_consistent(run: Path, steps_run: int) -> None:
    """metrics.csv has exactly steps 0..steps_run-1; attention.npz is readable and holds only
    snapshots of recorded steps; no temporary or partial file is left behind."""
    steps, losses = safe_read.read_run_metrics(run)
    assert steps.tolist() == list(range(steps_run))
    assert np.isfinite(losses).all()
    att = safe_read.read_attention(run)
    assert att["weights"].shape[1:] == (1, 6, 6)
    assert att["weights"].shape[0] == len(att["steps"])
    assert all(0 <= s < steps_run for s in att["steps"].tolist())
    assert att["token_ids"].tolist() == [7120, 7002, 4940, 351, 530, 2239]
    leftovers = [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != ".hydra"]
    assert leftovers == []


# --- divergence ---------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, step, message", [
    # losses 2.36, 1.3e7, 6.3e14, 3.1e22, ... inf
    (("optimizer=sgd", "optimizer.lr=1000"), 5,
     "loss became inf at step 5 (optimizer.lr=1000.0); try a smaller optimizer.lr"),
    # Adam: the first step makes the weights nan
    (("optimizer.lr=1e30",), 1, "loss became nan at step 1 (optimizer.lr=1e+30); try a smaller optimizer.lr"),
    # the very first loss is nan: nothing recorded, and the cause is the initialisation, not the lr
    (("model.init_std=1e30",), 0, "loss became nan at step 0, before any update: the initial values overflow "
                                  "(model.init_std=1e+30); try a smaller model.init_std"),
    # torch refuses the update itself (lr beyond float32): recorded as a divergence, not a crash
    (("optimizer=sgd", "optimizer.lr=1e308"), 1,
     "the update after step 0 overflowed (value cannot be converted to type float without overflow; "
     "optimizer.lr=1e+308)"),
])
def test_divergence_stops_at_the_step_and_keeps_everything_before(tmp_path, overrides, step, message):
    cfg = compose_cfg(*SMALL, *overrides)
    assert run_job(cfg, tmp_path / "run").status == "diverged"
    summary = safe_read.read_summary(tmp_path / "run")
    assert summary["status"] == "diverged"
    assert summary["steps_run"] == step
    assert summary["error"] == message
    assert_consistent(tmp_path / "run", step)
    expected = train(cfg).losses
    assert safe_read.read_run_metrics(tmp_path / "run")[1].tolist() == expected.tolist()
    assert safe_read.read_attention(tmp_path / "run")["steps"].tolist() == ([0] if step else [])


# --- never overwrite ----------------------------------------------------------------------

def test_cli_diverged_exit_then_same_dir_is_refused_byte_identical(tmp_path, attnlab_here):
    """A run that diverged exits 1; the same folder again is refused (exit 2). In process: test_faults'
    two runs started together get exit 2 from the real command."""
    run = tmp_path / "run"
    first = attnlab_here(f"hydra.run.dir={run}", *SMALL, "optimizer=sgd", "optimizer.lr=1000")
    assert first.returncode == 1
    assert first.stderr.splitlines() == [
        f"diverged: loss became inf at step 5 (optimizer.lr=1000.0); try a smaller optimizer.lr; records kept in {run}"]
    before = tree_bytes(run)
    assert ".hydra/config.yaml" in before
    assert "metrics.csv" in before
    second = attnlab_here(f"hydra.run.dir={run}", *SMALL, "train.steps=20", "train.snapshot_steps=[0]")
    assert second.returncode == 2
    assert second.stderr == (f"error: hydra.run.dir={str(run)!r}: already holds a diverged run; choose another "
                             "hydra.run.dir (runs are never overwritten)\n")
    assert tree_bytes(run) == before  # .hydra/config.yaml too: refused before anything is written


def test_run_job_refuses_a_finished_run_dir_in_process(tmp_path):
    cfg = compose_cfg(*SMALL)
    assert run_job(cfg, tmp_path).status == "completed"
    before = tree_bytes(tmp_path)
    with pytest.raises(RunDirError, match="already holds a completed run"):
        run_job(cfg, tmp_path)
    assert tree_bytes(tmp_path) == before


# --- interrupts -----------------------------------------------------------------------------

class InterruptAt(Sink):
    """Raises KeyboardInterrupt (as Ctrl-C would) when the snapshot of ``step`` arrives."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_snapshot(self, snapshot) -> None:
        if snapshot.step == self.step:
            raise KeyboardInterrupt


def test_keyboard_interrupt_in_process_keeps_recorded_steps(tmp_path):
    cfg = compose_cfg(*SMALL)
    sinks = [artifacts.RunDirSink(tmp_path), InterruptAt(10)]
    result = train(cfg, sinks, run_dir=tmp_path)
    assert result.status == "interrupted"
    assert result.steps_run == 11
    assert_consistent(tmp_path, 11)
    assert safe_read.read_attention(tmp_path)["steps"].tolist() == [0, 10]


def test_interrupted_run_leaves_a_readable_tensorboard_file(tmp_path):
    tb = pytest.importorskip("attnlab.outputs.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = compose_cfg(*SMALL)
    result = train(cfg, [artifacts.RunDirSink(tmp_path), tb.TensorBoardSink(tmp_path, images=True), InterruptAt(10)],
                   run_dir=tmp_path)
    assert result.status == "interrupted"
    assert result.steps_run == 11
    (events,) = tmp_path.glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == list(range(11))
    assert [e.value for e in acc.Scalars("loss")] == pytest.approx(result.losses.tolist(), rel=1e-6)


def test_deferred_signals_are_recorded_then_a_second_one_raises_and_handlers_are_restored():
    previous = {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS}
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before kill returns
            assert interrupts.requested() == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGINT)  # the second signal: stop at once
            time.sleep(5)
    assert interrupts.requested() is None
    assert {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS} == previous


def _wait_for(pred, timeout: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.returncode} {proc.stderr.read()}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("timed out")


def test_signal_mid_run_records_interrupted_and_flushes_everything(tmp_path):
    """Ctrl-C to the real command mid-run, with TensorBoard's event file. SIGTERM and SIGHUP are
    recorded by the same handler (interrupts.SIGNALS, installed by cli.main): SIGHUP to the real
    command is test_sighup_to_a_joblib_sweep_..., SIGTERM mid-run test_faults' (in process)."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={run}", "train.steps=2000000",
                             "train.snapshot_steps=[0,20,50,100,200]", "logging=off", "logging.console=false",
                             "logging.tensorboard=true", "logging.images=true"],
                            cwd=ROOT, env={**env, "MPLBACKEND": "Agg"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    partial = run / ".metrics.csv.partial"
    # running, and past the last snapshot (200) and one flush of 256 steps
    _wait_for(lambda: partial.is_file() and partial.read_text().count("\n") > 300, 120, proc)
    assert safe_read.read_summary(run)["status"] == "running"  # written first, as running
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    summary = safe_read.read_summary(run)
    assert summary["status"] == "interrupted"
    n = summary["steps_run"]
    assert n >= 300
    assert summary["error"] == f"interrupted at step {n}; {n} steps recorded"
    assert stderr.splitlines()[-1] == f"{summary['error']}; records kept in {run}"
    assert_consistent(run, n)
    att = safe_read.read_attention(run)
    assert att["steps"].tolist() == [0, 20, 50, 100, 200]
    np.testing.assert_allclose(att["weights"].sum(-1), 1.0, rtol=1e-5)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = run.glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
    acc.Reload()
    assert len(acc.Scalars("loss")) == n


TRACKERS = """
import os, signal, sys
from pathlib import Path
sys.modules["joblib.externals.loky.backend.resource_tracker"] = None  # the module moved: ImportError
from attnlab.commands import callbacks
before = signal.getsignal(signal.SIGHUP)
callbacks.start_resource_trackers()
assert signal.getsignal(signal.SIGHUP) is before
import time
for _ in range(100):  # the tracker's command line is empty until its exec has happened: wait for it
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        fields = dict(line.split(":\\t", 1) for line in status.read_text().splitlines() if ":\\t" in line)
        if int(fields["PPid"]) == os.getpid():
            cmd = (status.parent / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
            found.append(f'{int(fields["SigIgn"], 16) >> (signal.SIGHUP - 1) & 1} {cmd}')
    if found and all(line.split(" ", 1)[1].strip() for line in found):
        break
    time.sleep(0.05)
print(*found, sep="\\n")
"""


def test_resource_trackers_start_ignoring_sighup_without_joblib_too():
    """The fallback when joblib's tracker module is not where it was: multiprocessing's tracker
    alone, started with SIGHUP ignored (bit 1 of its /proc SigIgn mask), the caller's handler back."""
    proc = subprocess.run([sys.executable, "-c", TRACKERS], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("1 ") and "multiprocessing.resource_tracker" in line, line


@JOBLIB
def test_sighup_to_a_joblib_sweep_interrupts_every_job_and_nothing_else(tmp_path):
    """A closed terminal (SIGHUP to the whole process group) during a joblib sweep: both running jobs
    say interrupted, also the slow one (~80 ms a step; the fast one ends first, and a job's SystemExit
    would make joblib kill the other worker mid-step), the third job never starts, the table of both
    is printed, and no helper process (joblib's resource trackers) dies with a traceback."""
    sweep, text = tmp_path / "sweep", tmp_path / "long.txt"
    text.write_text("Your journey starts with one step " * 170, encoding="utf-8")  # ~1,000 tokens
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", "-m", f"hydra.sweep.dir={sweep}",
                             f"text_file={text}", "model.d_model=8,768,16", "model.d_k=8", "train.steps=2000000",
                             "logging=off", "logging.console=false", "hydra/launcher=joblib",
                             "hydra.launcher.n_jobs=2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(lambda: len(list(sweep.glob("*/.metrics.csv.partial"))) == 2, 120, proc)  # both training
    os.killpg(proc.pid, signal.SIGHUP)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in err and "resource_tracker" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 2 and all(line.startswith("interrupted ") for line in lines), err
    assert [r["status"] for r in read_csv(sweep / "summary.csv")] == ["interrupted", "interrupted"]
    assert "2 jobs, 0 completed, 2 not completed (interrupted)" in out
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0_model.d_model=8", "1_model.d_model=768"]


@JOBLIB
def test_a_job_refused_in_a_joblib_worker_exits_2_and_the_other_job_completes(tmp_path):
    """Two jobs aimed at one folder under joblib: the one refused says so in one line and the command
    exits 2 (as with the basic launcher), while the other job runs to its end (not killed by joblib)."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", "-m", f"hydra.sweep.dir={sweep}",
                             "hydra.sweep.subdir=same", "seed=1,2", "train.steps=3000", "logging=off",
                             "logging.console=false", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], cwd=ROOT,
                            env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: hydra.sweep.subdir='{sweep / 'same'}': "), err
    assert [r["status"] for r in read_csv(sweep / "summary.csv")] == ["completed"]
    assert not list(Path(tempfile.gettempdir()).glob(f"attnlab-{proc.pid}-*"))  # the job's return value carried it


# --- determinism ----------------------------------------------------------------------------

def test_same_config_is_bitwise_identical_in_one_process():
    cfg = compose_cfg("logging=off")
    a, b = train(cfg), train(cfg)
    assert a.losses.tobytes() == b.losses.tobytes()
    assert [s.step for s in a.snapshots] == [0, 20, 50, 100, 200]
    for sa, sb in zip(a.snapshots, b.snapshots):
        assert sa.weights.tobytes() == sb.weights.tobytes()


def test_same_config_is_bitwise_identical_in_another_process(tmp_path, default_run):
    """The default run made by the real command (conftest's default_cli_run, its own process with
    every logging sink) and the same config run here write the same bytes."""
    assert run_job(compose_cfg("logging=off"), tmp_path / "here").status == "completed"
    for name in ("metrics.csv", "attention.npz"):
        assert (tmp_path / "here" / name).read_bytes() == (default_run / name).read_bytes(), name


# --- the loop's loss bookkeeping ------------------------------------------------------------

class CollectLosses(Sink):
    def __init__(self) -> None:
        self.batches: list[tuple[list[int], list[float]]] = []

    def on_losses(self, steps, losses) -> None:
        self.batches.append((steps.tolist(), losses.tolist()))


def test_loss_recorder_sends_batches_finds_the_threshold_and_stops_at_divergence():
    import torch

    from attnlab.core.training import LossRecorder

    sink = CollectLosses()
    recorder = LossRecorder([sink], threshold=0.1)
    values = [3.0, 2.0, 0.5, 0.05, 0.001, float("nan"), 1.0]
    for v in values[:3]:
        recorder.append(torch.tensor(v, dtype=torch.float32))
    assert recorder.flush()
    assert recorder.steps_to_threshold is None
    for v in values[3:]:
        recorder.append(torch.tensor(v, dtype=torch.float32))
    assert not recorder.flush()  # the nan at step 5: nothing from it on is sent
    assert sink.batches == [([0, 1, 2], [3.0, 2.0, 0.5]),
                            ([3, 4], [float(np.float32(0.05)), float(np.float32(0.001))])]
    assert recorder.recorded == 5
    assert recorder.steps_to_threshold == 3
    assert recorder.diverged_at == 5
    assert np.isnan(recorder.bad_value)
    assert recorder.final_loss == float(np.float32(0.001))
    assert recorder.losses.tolist() == [3.0, 2.0, 0.5, float(np.float32(0.05)), float(np.float32(0.001))]
    streaming = LossRecorder([], threshold=0.1, keep=False)  # the CLI's recorder keeps nothing
    streaming.append(torch.tensor(1.0))
    assert streaming.flush()
    assert streaming.losses.size == 0
    assert streaming.recorded == 1


# --- only attnlab writes in a run dir; tools never write over what they read; inputs ---------------

def test_a_sweep_whose_job_folders_collide_refuses_the_second_and_leaves_the_first_as_it_was(tmp_path, attnlab_here):
    """Hydra writes nothing into a job folder (attnlab saves .hydra/ once it holds the folder), so
    a second job aimed at a finished job's folder is refused with nothing of it written."""
    sweep = tmp_path / "sweep"
    proc = attnlab_here("-m", f"hydra.sweep.dir={sweep}", *SMALL, "seed=1", "model.d_model=6,8",
                        "hydra.sweep.subdir=seed${seed}")
    run = sweep / "seed1"
    assert (proc.returncode, proc.stderr) == (2, f"error: hydra.sweep.subdir='{run}': already holds a completed run; "
                                                 "choose another hydra.sweep.subdir (runs are never overwritten)\n")
    assert safe_read.read_summary(run)["config"]["model"]["d_model"] == 6
    assert (run / ".hydra" / "overrides.yaml").read_text() == "\n".join(
        ["- logging=off", "- train.steps=40", "- train.snapshot_steps=[0,10,39]", "- seed=1", "- model.d_model=6", ""])
    hydra = safe_read.read_yaml_data(run / ".hydra" / "hydra.yaml", root=run)["hydra"]
    assert (hydra["runtime"]["output_dir"], hydra["job"]["num"], hydra["output_subdir"]) == (str(run), 0, None)
    assert safe_read.read_yaml_data(run / ".hydra" / "config.yaml", root=run)["model"]["d_model"] == 6
    assert sorted(p.name for p in sweep.iterdir()) == ["multirun.yaml", "seed1"]


def test_a_tool_never_writes_over_a_run_it_reads(default_run, tmp_path, capsys):
    from attnlab.commands import compare
    from attnlab.commands import report as report_command

    before = tree_bytes(default_run)
    for main, args in [(compare.main, ["--csv", str(default_run / "metrics.csv")]),
                       (compare.main, ["--plot", str(default_run / ".hydra" / "new.png")]),
                       (report_command.main, ["-o", str(default_run / "summary.json")])]:
        assert main([str(default_run), *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f": inside the run dir {default_run.resolve()} it reads; choose a path" in err
    assert tree_bytes(default_run) == before


def test_text_file_is_read_bounded_without_its_bom(tmp_path, cfg_of):
    from attnlab.core.errors import ConfigError
    from attnlab.core.files import TEXT_FILE_LIMIT
    from attnlab.core.tokenizer import tokenize

    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfYour journey starts\n")
    (tmp_path / "big.txt").write_bytes(b"a " * (TEXT_FILE_LIMIT // 2 + 1))
    plain = tokenize(cfg_of("sentence=Your journey starts"))
    assert tokenize(cfg_of(f"text_file={tmp_path / 'bom.txt'}")).token_ids == plain.token_ids == [7120, 7002, 4940]
    with pytest.raises(ConfigError, match=rf"^text_file='{tmp_path}/big.txt': must be a readable UTF-8 file \(is "
                                          rf"{TEXT_FILE_LIMIT + 2} bytes, more than the limit of {TEXT_FILE_LIMIT} bytes\)$"):
        tokenize(cfg_of(f"text_file={tmp_path / 'big.txt'}"))


def test_a_fifo_text_file_is_refused_at_once_by_the_real_command(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it for reading would wait for a writer forever
    proc = subprocess.run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={tmp_path / 'run'}",
                           "logging=off", f"text_file={tmp_path / 'fifo'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr) == (2, f"error: text_file='{tmp_path / 'fifo'}': must be a readable UTF-8 "
                                                 "file (is a FIFO (named pipe), not a regular file (refused))\n")
    assert safe_read.read_summary(tmp_path / "run")["status"] == "failed"


def test_hydra_job_chdir_keeps_what_a_relative_text_file_means(tmp_path, attnlab_here):
    (tmp_path / "notes.txt").write_text("Your journey starts with one step\n", encoding="utf-8")
    proc = attnlab_here("hydra.job.chdir=true", "text_file=notes.txt", "hydra.run.dir=out", *SMALL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert safe_read.read_attention(tmp_path / "out")["token_ids"].tolist() == [7120, 7002, 4940, 351, 530, 2239]
