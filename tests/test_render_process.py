"""attnlab.render_process: what the render child draws is what this process draws (pixel for
pixel), an error while drawing comes back as the same exception, a lost, stopped or foreign
child means drawing here, the child writes no file, and it neither outlives its run nor
reacts to Ctrl-C (from its first instant); a forked copy of the run has a child of its own."""
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
from attnlab.tensorboard import HeatmapRenderer, encode_image

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
    child.submit("prepare", list(tokens), [s.step for s in snaps], (1, t, t), True, True, "loss (MSE)")
    (tmp_path / "evo.png").write_bytes(child.call("evolution", snaps, list(tokens), None, plots.MAX_PANELS, 5))
    (tmp_path / "loss.png").write_bytes(child.call("loss", LOSSES))
    want = fresh_evolution_png(snaps, tokens, tmp_path / "ref.png", plots.default_title())
    assert np.array_equal(read_png(tmp_path / "evo.png"), want)
    assert np.array_equal(read_png(tmp_path / "loss.png"), fresh_loss_png(LOSSES, tmp_path / "lref.png", "loss"))
    here = HeatmapRenderer(tokens)
    for snap in snaps:
        got = child.call("heatmap", tuple(tokens), snap.weights, f"step={snap.step}  loss={snap.loss:.4f}")
        assert got.png.startswith(b"\x89PNG") and (got.height, got.width, got.colorspace) == (400, 460, 3)
        assert got == encode_image(here(snap.weights, f"step={snap.step}  loss={snap.loss:.4f}"))
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


def _weights(n: int, t: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [rng.dirichlet(np.ones(t), size=t).astype(np.float32) for _ in range(n)]


def test_many_drawings_asked_at_once_come_back_in_order(shared_child):
    """More requests than MAX_PENDING, each answered with a ~26–31 KB PNG (together several times
    the 64 KB the pipe holds): the run takes replies in while it asks, so neither side waits on
    the other, and each result is its own drawing."""
    n = render_process.MAX_PENDING + 4
    ws = _weights(n)
    asked = [shared_child.request("heatmap", tuple(TOKENS), w, f"image {i}") for i, w in enumerate(ws)]
    here = HeatmapRenderer(tuple(TOKENS))
    for i, (pending, w) in enumerate(zip(asked, ws)):
        got = pending.result()
        assert len(got.png) > 8_000 and got == encode_image(here(w, f"image {i}")), i
    assert shared_child.alive


def test_drawings_asked_of_a_child_that_dies_are_drawn_here(child):
    ws = _weights(3)
    asked = [child.request("heatmap", tuple(TOKENS), w, f"image {i}") for i, w in enumerate(ws)]
    child.proc.kill()
    here = HeatmapRenderer(tuple(TOKENS))
    assert all(p.result() == encode_image(here(w, f"image {i}")) for i, (p, w) in enumerate(zip(asked, ws)))
    assert not child.alive


def test_an_error_while_drawing_comes_back_as_the_same_exception(shared_child):
    child = shared_child
    bad = np.zeros((2, 3, 4, 5), dtype=np.float32)  # not (H, T, T)
    with pytest.raises(Exception) as here:
        HeatmapRenderer(tuple(TOKENS))(bad, "t")
    with pytest.raises(Exception) as there:
        child.call("heatmap", tuple(TOKENS), bad, "t")
    assert (type(there.value), str(there.value)) == (type(here.value), str(here.value)) == \
        (TypeError, "Invalid shape (2, 3, 4, 5) for image data")
    assert child.alive  # bad data is the run's failure, not the child's


def _loss_here(tmp_path) -> bytes:
    fresh_loss_png(LOSSES, tmp_path / "ref.png", "loss")
    return plots.loss_png(LOSSES)


def test_a_lost_child_means_drawing_here(child, tmp_path):
    child.proc.kill()
    child.proc.wait()
    got = child.call("loss", LOSSES)
    assert not child.alive and got == _loss_here(tmp_path)


def test_a_stopped_child_means_drawing_here_after_the_stall_limit(child, tmp_path, monkeypatch):
    """``kill -STOP`` on the child (or a child that hangs): the run does not wait for ever; it
    draws the figure itself once the child has not run for STALL_S seconds."""
    monkeypatch.setattr(render_process, "STALL_S", 1.0)
    assert child.call("loss", LOSSES) == _loss_here(tmp_path)  # up and serving
    proc = child.proc
    os.kill(proc.pid, signal.SIGSTOP)
    start = time.monotonic()
    got = child.call("loss", LOSSES)
    waited = time.monotonic() - start
    assert not child.alive and proc.returncode == -signal.SIGKILL  # ended, not left stopped
    assert got == _loss_here(tmp_path)
    assert 1.0 <= waited < 30, waited


def test_ctrl_c_is_left_to_the_run_and_closing_ends_the_child(child, tmp_path):
    before = child.call("loss", LOSSES)  # the child is up and serving
    os.kill(child.proc.pid, signal.SIGINT)
    assert child.call("loss", LOSSES) == before and child.alive
    proc = child.proc
    child.close()
    assert proc.returncode == 0


def test_ctrl_c_while_the_child_starts_is_ignored_too():
    """A Ctrl-C reaches the whole foreground process group, the child too, also while its
    Python starts (before it could install a handler): no traceback, it still draws."""
    code = ("import os, signal, sys, time\n"
            "import numpy as np\n"
            "from attnlab import render_process\n"
            "for delay in (0, 0.001, 0.01, 0.03, 0.1, 0.2, 0.4):\n"
            "    render = render_process.RenderProcess()\n"
            "    time.sleep(delay)\n"
            "    os.kill(render.proc.pid, signal.SIGINT)\n"
            "    pid = render.proc.pid\n"
            "    render.call('loss', np.ones(3))\n"
            "    print(delay, render.alive and render.proc.pid == pid, flush=True)\n"
            "    render.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stderr) == (0, "")
    assert [line.split()[1] for line in out.stdout.splitlines()] == ["True"] * 7


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
        got = render.call("loss", LOSSES)
        assert render.alive and not canary.exists()
    finally:
        render.close()
    assert got == _loss_here(tmp_path)


def test_the_childs_import_path_keeps_pythonpath_with_pythonsafepath(tmp_path):
    """``PYTHONSAFEPATH=1`` (no working directory on the path): the child takes off nothing
    else, so it imports what the run imports (PYTHONPATH's first entry stays first)."""
    prefix = render_process.CHILD.split("import attnlab")[0]
    for safe in ("1", ""):
        env = {**os.environ, "PYTHONSAFEPATH": safe, "PYTHONPATH": str(tmp_path)}
        out = subprocess.run([sys.executable, "-c", prefix + "print(sys.path[0], '' in sys.path)"], env=env,
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.stdout.split() == [str(tmp_path), "False"], (safe, out.stderr)


def test_a_child_that_finds_another_attnlab_exits_and_the_run_draws_here(tmp_path, monkeypatch):
    """The child checks that it imported the run's attnlab (PYTHONPATH changed, a different
    install): when not, it exits at once and the run draws in-process."""
    (tmp_path / "attnlab").mkdir()
    (tmp_path / "attnlab" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    render = render_process.RenderProcess()
    try:
        got = render.call("loss", LOSSES)
        assert not render.alive
    finally:
        render.close()
    assert got == _loss_here(tmp_path)


def test_a_forked_copy_of_the_run_starts_its_own_child(tmp_path):
    """A process forked after its render child started (a fork-based pool after a run) never
    talks to the parent's child: both get their own figures, whatever they draw at once."""
    first = render_process.shared()
    assert first is not None and first.call("loss", LOSSES) == _loss_here(tmp_path)
    small = plots.loss_png(np.ones(3))
    pid = os.fork()
    if pid == 0:  # the copy: its own child, the right answers
        code = 1
        try:
            mine = render_process.shared()
            theirs = {child.proc.pid for child in first.children if child.proc is not None}
            ok = mine is not first and mine.children[0].proc.pid not in theirs and all(
                mine.call("loss", np.ones(3)) == small for _ in range(5))
            mine.close()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    results = [first.call("loss", LOSSES) for _ in range(5)]  # at the same time, in the parent
    assert os.waitpid(pid, 0)[1] == 0
    assert first.alive and results == [_loss_here(tmp_path)] * 5


def test_a_pool_of_two_shares_the_drawings_and_keeps_going_with_one(tmp_path):
    """A sweep's pool: the evolution figure drawn by the first child, the rest by the last,
    both at once (each child writes its replies from a thread, so one whose reply the run has
    not read yet goes on drawing); the same bytes as here; a child that dies leaves the other
    to draw everything, and with none left the run draws."""
    pool = render_process.RenderPool()
    pool.grow(2)
    try:
        first, last = pool.children
        snaps = snapshots(2, seed=5)
        evolution = pool.request("evolution", snaps, TOKENS, None, plots.MAX_PANELS, 2)
        images = [pool.request("heatmap", tuple(TOKENS), w, f"image {i}") for i, w in enumerate(_weights(4))]
        loss = pool.request("loss", LOSSES)
        assert evolution.render is first and {p.render for p in [*images, loss]} == {last}
        assert evolution.result() == plots.evolution_png(snaps, TOKENS, None, plots.MAX_PANELS, 2)
        here = HeatmapRenderer(tuple(TOKENS))
        assert all(p.result() == encode_image(here(w, f"image {i}")) for i, (p, w) in enumerate(zip(images, _weights(4))))
        assert loss.result() == _loss_here(tmp_path)
        last.proc.kill()
        last.proc.wait()
        assert pool.call("loss", LOSSES) == _loss_here(tmp_path) and pool.alive and not last.alive
        first.proc.kill()
        first.proc.wait()
        assert pool.call("loss", LOSSES) == _loss_here(tmp_path) and not pool.alive
    finally:
        pool.close()


def test_shared_grows_to_the_asked_children_and_never_shrinks(monkeypatch):
    monkeypatch.setattr(render_process, "_shared", None)
    monkeypatch.setattr(render_process, "cores", lambda: 2)
    try:
        pool = render_process.shared(children=5)  # at most one per core and MAX_CHILDREN
        assert len(pool.children) == 2 and all(child.alive for child in pool.children)
        assert render_process.shared() is pool and len(pool.children) == 2  # a job asking for one
        pool.children[1].proc.kill()
        pool.children[1].proc.wait()
        pool.children[1]._lost()
        assert render_process.shared() is pool and len(pool.children) == 2 and pool.children[1].alive  # started again
    finally:
        if render_process._shared is not None:
            render_process._shared.close()


def test_a_child_started_from_a_thread_outlives_the_thread():
    import threading

    started = []
    thread = threading.Thread(target=lambda: started.append(render_process.RenderProcess()))
    thread.start()
    thread.join()
    render = started[0]
    try:
        time.sleep(0.5)
        assert _running(render.proc.pid) and render.call("loss", np.ones(3)) == plots.loss_png(np.ones(3))
        assert render.alive
    finally:
        render.close()


class _TwoArgumentError(Exception):
    def __init__(self, what, why):
        super().__init__(f"{what}: {why}")


def test_an_exception_that_cannot_be_rebuilt_comes_back_as_its_type_and_text():
    import pickle

    data = render_process._reply_bytes(("error", _TwoArgumentError("loss.png", "no ink")))
    status, err = pickle.loads(data[render_process.HEADER.size:])
    assert status == "error" and type(err) is RuntimeError and str(err) == "_TwoArgumentError: loss.png: no ink"
    data = render_process._reply_bytes(("error", FileNotFoundError(2, "No such file or directory", "/x/loss.png")))
    status, err = pickle.loads(data[render_process.HEADER.size:])
    assert type(err) is FileNotFoundError and (err.errno, err.filename) == (2, "/x/loss.png")
    assert render_process.HEADER.unpack_from(data)[0] == len(data) - render_process.HEADER.size


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


def test_the_child_writes_no_file(tmp_path):
    """The child returns the figure's bytes and the run writes them (its disk reserve, its
    temporary files): under a 10 KB file-size limit of its own it still returns loss.png's
    ~40 KB, and the working directory stays empty."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, hard))  # inherited by the child only:
    try:
        render = render_process.RenderProcess()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # this process gets it back at once
    try:
        got = render.call("loss", LOSSES)
        assert render.alive and len(got) > 10_000
    finally:
        render.close()
    assert got == _loss_here(tmp_path)


def test_closing_with_replies_not_taken_in_ends_the_child_at_once():
    """Images asked and never collected (a run that stopped early): closing does not wait for
    the child to deliver them."""
    render = _started()
    for i, w in enumerate(_weights(6)):
        render.request("heatmap", tuple(TOKENS), w, f"image {i}")
    time.sleep(1.0)  # replies written into the pipe, none read
    proc = render.proc
    start = time.monotonic()
    render.close()
    assert proc.returncode is not None and time.monotonic() - start < 5


def test_a_stopped_child_does_not_outlive_its_run():
    """``kill -STOP`` on the child after its last drawing: it cannot watch for its run's end, so
    the run ends it when it exits, and Linux kills it when the run is killed (PR_SET_PDEATHSIG,
    the child having been started by the run's main thread)."""
    for ending in ("exit", "kill"):
        code = ("import os, signal, sys, numpy as np\n"
                "from attnlab import render_process\n"
                "pool = render_process.shared()\n"
                "pool.call('loss', np.ones(3))\n"
                "pid = pool.children[0].proc.pid\n"
                "os.kill(pid, signal.SIGSTOP)\n"
                "print(pid, flush=True)\n"
                f"os.kill(os.getpid(), signal.SIGKILL) if {ending == 'kill'} else sys.exit(0)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        pid = int(out.stdout)
        deadline = time.monotonic() + 30
        while _running(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"a stopped render child outlived its run ({ending})")
            time.sleep(0.05)


def test_the_child_runs_what_a_normal_exit_runs(tmp_path):
    """matplotlib removes the temporary config folder it makes when MPLCONFIGDIR is unusable
    at exit (atexit); the child ends without interpreter teardown but runs those."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    env = {**os.environ, "MPLCONFIGDIR": str(blocker / "x"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    code = ("import numpy as np\n"
            "from attnlab import render_process\n"
            "r = render_process.RenderProcess()\n"
            "assert r.call('loss', np.ones(3)) and r.alive\n"
            "r.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
