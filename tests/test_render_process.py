"""attnlab.render_process: what the render child draws is what this process draws (pixel for
pixel), an error while drawing comes back as the same exception, a lost child means drawing
here, and the child neither outlives its run nor reacts to Ctrl-C."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_plots import TOKENS, ZH_TOKENS, fresh_evolution_png, fresh_loss_png, read_png, snapshots

from attnlab import plots, render_process
from attnlab.records import Snapshot
from attnlab.tensorboard import HeatmapRenderer

LOSSES = np.exp(-np.linspace(0, 8, 201)) * 2.3


def _started() -> render_process.RenderProcess:
    render = render_process.RenderProcess()
    assert render.alive
    return render


@pytest.fixture(scope="module")
def shared_child():
    """One child for the tests that leave it running (starting one costs ~1 s of imports)."""
    render = _started()
    yield render
    render.close()


@pytest.fixture
def child():
    """A child of its own, for a test that kills or closes it."""
    render = _started()
    yield render
    render.close()


@pytest.mark.parametrize("tokens", [TOKENS, ZH_TOKENS], ids=["en", "zh"])
def test_the_child_draws_the_pixels_drawn_here(shared_child, tmp_path, tokens):
    child = shared_child
    t = len(tokens)
    snaps = snapshots(5, t=t, seed=3)
    # laid out first with placeholder data, as a run has it done while torch loads
    child.submit("prepare", list(tokens), [s.step for s in snaps], (1, t, t), True, True)
    child.call("evolution", snaps, list(tokens), str(tmp_path / "evo.png"), 5)
    child.call("loss", LOSSES, str(tmp_path / "loss.png"))
    want = fresh_evolution_png(snaps, tokens, tmp_path / "ref.png", plots.default_title())
    assert np.array_equal(read_png(tmp_path / "evo.png"), want)
    assert np.array_equal(read_png(tmp_path / "loss.png"), fresh_loss_png(LOSSES, tmp_path / "lref.png", "loss"))
    here = HeatmapRenderer(tokens)
    for snap in snaps:
        got = child.call("heatmap", tuple(tokens), snap.weights, f"step={snap.step}  loss={snap.loss:.4f}")
        assert got.dtype == np.uint8 and got.ndim == 3
        assert np.array_equal(got, here(snap.weights, f"step={snap.step}  loss={snap.loss:.4f}"))
    assert child.alive  # drawn there, not here after losing the child


def test_a_runs_figures_are_those_drawn_here_from_its_own_data(default_run, tmp_path):
    """The default run (its figures drawn by its render child) against the same figures drawn
    in this process from the run's attention.npz and metrics.csv."""
    npz = np.load(default_run / "attention.npz")
    losses = np.loadtxt(default_run / "metrics.csv", delimiter=",", skiprows=1)[:, 1]
    tokens = [str(t) for t in npz["tokens"]]
    snaps = [Snapshot(int(s), float(losses[s]), w) for s, w in zip(npz["steps"], npz["weights"])]
    assert len(snaps) == 5 and losses.size == 201
    plots.attention_evolution(snaps, tokens, tmp_path / "evo.png")
    plots.loss_curve(losses, tmp_path / "loss.png")
    assert np.array_equal(read_png(default_run / "attention_evolution.png"), read_png(tmp_path / "evo.png"))
    assert np.array_equal(read_png(default_run / "loss.png"), read_png(tmp_path / "loss.png"))


def test_an_error_while_drawing_comes_back_as_the_same_exception(shared_child, tmp_path):
    child = shared_child
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OSError) as here:
        plots.loss_curve(LOSSES, blocker / "loss.png")
    with pytest.raises(OSError) as there:
        child.call("loss", LOSSES, str(blocker / "loss.png"))
    assert type(there.value) is type(here.value)
    assert (there.value.errno, there.value.filename) == (here.value.errno, here.value.filename)
    assert child.alive  # a file that cannot be written is the run's failure, not the child's


def test_a_lost_child_means_drawing_here(child, tmp_path):
    child.proc.kill()
    child.proc.wait()
    child.call("loss", LOSSES, str(tmp_path / "loss.png"))
    assert not child.alive
    assert np.array_equal(read_png(tmp_path / "loss.png"), fresh_loss_png(LOSSES, tmp_path / "ref.png", "loss"))


def test_ctrl_c_is_left_to_the_run_and_closing_ends_the_child(child, tmp_path):
    child.call("loss", LOSSES, str(tmp_path / "before.png"))  # the child is up and serving
    os.kill(child.proc.pid, signal.SIGINT)
    child.call("loss", LOSSES, str(tmp_path / "after.png"))
    assert child.alive and (tmp_path / "after.png").read_bytes() == (tmp_path / "before.png").read_bytes()
    proc = child.proc
    child.close()
    assert proc.returncode == 0


def test_the_child_ends_with_a_run_killed_with_sigkill():
    code = ("import os, signal\n"
            "from attnlab import render_process\n"
            "render = render_process.RenderProcess()\n"
            "print(render.proc.pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL
    pid = int(out.stdout)
    deadline = time.monotonic() + 60
    while _running(pid):  # its input closed with the run: it exits by itself
        assert time.monotonic() < deadline, f"render child {pid} outlived its run"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] not in "ZX"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_one_core_draws_in_this_process(monkeypatch):
    monkeypatch.setattr(render_process, "cores", lambda: 1)
    assert render_process.shared() is None


def test_a_module_in_the_working_directory_is_never_imported_by_the_child(tmp_path, monkeypatch):
    """A run started from a folder holding ``matplotlib.py`` (someone else's files) draws with
    the real matplotlib: the child's import path does not start with the working directory."""
    canary = tmp_path / "imported"
    (tmp_path / "matplotlib.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    render = _started()
    try:
        render.call("loss", LOSSES, str(tmp_path / "loss.png"))
        assert render.alive and not canary.exists()
    finally:
        render.close()
    assert np.array_equal(read_png(tmp_path / "loss.png"), fresh_loss_png(LOSSES, tmp_path / "ref.png", "loss"))


class _TwoArgumentError(Exception):
    def __init__(self, what, why):
        super().__init__(f"{what}: {why}")


def test_an_exception_that_cannot_be_rebuilt_comes_back_as_its_type_and_text():
    import io
    import pickle

    out = io.BytesIO()
    render_process._answer(out, ("error", _TwoArgumentError("loss.png", "no ink")))
    status, err = pickle.loads(out.getvalue())
    assert status == "error" and type(err) is RuntimeError and str(err) == "_TwoArgumentError: loss.png: no ink"
    out = io.BytesIO()
    render_process._answer(out, ("error", FileNotFoundError(2, "No such file or directory", "/x/loss.png")))
    status, err = pickle.loads(out.getvalue())
    assert type(err) is FileNotFoundError and (err.errno, err.filename) == (2, "/x/loss.png")


def test_attnlabs_errors_go_through_a_pickle_whole():
    """What drawing raises comes back from the child by pickle: attnlab's errors keep their
    type, their one line and their parts."""
    import pickle

    from attnlab.errors import ConfigError, RunDirError, TokenizerError, WriteError

    for err in (WriteError("loss.png", "file too large", None, 27), WriteError("metrics.csv", "no space", 57, 28),
                ConfigError("model.d_model", 0, "must be a positive integer"), TokenizerError("offline"),
                RunDirError("a run is there")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)
        assert getattr(back, "errno", None) == getattr(err, "errno", None)


def test_a_file_too_large_for_the_limit_is_the_runs_one_line(tmp_path):
    """The child inherits the run's file-size limit: writing loss.png over it fails there with
    the WriteError the run reports when it draws in-process (``file too large while writing
    loss.png``), not another exception."""
    import errno
    import resource

    from attnlab.errors import WriteError

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, hard))  # inherited by the child only:
    try:
        render = render_process.RenderProcess()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # this process gets it back at once
    try:
        with pytest.raises(WriteError) as there:
            render.call("loss", LOSSES, str(tmp_path / "loss.png"))
        assert str(there.value) == "file too large while writing loss.png"
        assert (there.value.errno, there.value.file) == (errno.EFBIG, "loss.png") and render.alive
    finally:
        render.close()
    assert not (tmp_path / "loss.png").exists()
