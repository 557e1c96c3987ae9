"""A run's figures drawn by a second process, on the second core, while the run trains.

A default run draws three matplotlib figures (TensorBoard's heatmap images,
``attention_evolution.png``, ``loss.png``). Importing matplotlib and laying those figures out
took ~2 s of a 7.6-s run on the 2-core machines of docs/benchmarks.md, all of it on the one
core the training uses, while the other core idled. Here a child process
(``python -c`` :data:`CHILD`, started when the job's config is checked, before torch is
imported) imports matplotlib and the fonts meanwhile, and lays the figures out while the run
trains; the run's sinks send it the data and wait for the result, so every file is written
(or has failed) when its sink's call returns, as before. The child runs the same functions
(:mod:`attnlab.plots`, :class:`attnlab.tensorboard.HeatmapRenderer`) on the same data, so the
pixels are those drawn in-process (tests/test_render_process.py compares the bytes).

The child is started only when at least two cores are available to this process, is one per
process (the jobs of a sweep share it), ignores Ctrl-C (the run decides what to finish) and
exits when the run's process closes its end of the pipe, a ``kill -9`` of the run included.
Data goes both ways as pickles over the pipe between the two processes of one run (nothing
read from a run dir). When the child cannot be started or stops answering, everything is drawn
in-process, as without it; an error raised while drawing (a file that cannot be written) comes
back as the same exception.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attnlab.records import Snapshot

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

MIN_CORES = 2  # fewer: the child would take turns with the training on one core
# the child's command: the working directory (sys.path[0] of ``python -c``) is taken off the
# import path first, so a file such as ``numpy.py`` in the folder a run starts from is never
# imported (the ``attnlab`` command does not import from there either)
CHILD = "import sys; del sys.path[0]; from attnlab.render_process import main; main()"


# ----------------------------------------------------------------------- what is drawn
def _heatmap(tokens: tuple[str, ...], weights: np.ndarray, title: str) -> np.ndarray:
    from attnlab.tensorboard import shared_renderer

    return shared_renderer(tokens)(weights, title)


def _evolution(snapshots: list[Snapshot], tokens: list[str], path: str, total: int | None) -> None:
    from attnlab.plots import attention_evolution

    attention_evolution(snapshots, tokens, Path(path), total=total)


def _loss(losses: np.ndarray, path: str) -> None:
    from attnlab.plots import loss_curve

    loss_curve(losses, Path(path))


_prepared: dict[tuple, None] = {}  # the runs _prepare drew for, oldest first


def _prepare(labels: list[str], steps: list[int], shape: tuple[int, int, int], figures: bool, heatmaps: bool) -> None:
    """Lay out, with placeholder data, the figures of a run of ``labels`` whose snapshots at
    ``steps`` have weights of ``shape`` (H, T, T): TensorBoard's heatmap (``heatmaps``; drawn
    once, which saves its unchanging background), the evolution figure and the loss curve
    (``figures``). The figures are kept per process (:func:`attnlab.plots._cached_layout`,
    :func:`attnlab.tensorboard.shared_renderer`), and a kept figure draws the pixels of a new
    one, so the run's own draws only change data. No more work than the run's process would do
    at its first draw: when the child is behind (a busy machine), the run waits no longer."""
    import matplotlib

    from attnlab.fonts import rc
    from attnlab.plots import MAX_LAYOUTS, LossLayout, _cached_layout, evolution_figure

    if (key := (tuple(labels), tuple(steps), tuple(shape), figures, heatmaps)) in _prepared:
        return  # a sweep's next job over the same text: its figures are ready
    _prepared[key] = None
    while len(_prepared) > MAX_LAYOUTS:  # as many as attnlab.plots keeps
        _prepared.pop(next(iter(_prepared)))
    blank = np.full(shape, 1.0 / shape[-1], dtype=np.float32)
    if heatmaps:
        _heatmap(tuple(labels), blank, "step=0  loss=0.0000" + ("  (mean of heads)" if shape[0] > 1 else ""))
    if figures:  # laid out only: what drawing in the run's process would do too, no more
        with matplotlib.rc_context(rc()):
            evolution_figure([Snapshot(s, 0.0, blank) for s in steps], labels, total=len(steps), reuse=True)
            _cached_layout(("loss",), LossLayout)


def prepare(render: "RenderProcess", cfg: "DictConfig", labels: list[str]) -> None:
    """Have ``render`` lay out the figures of ``cfg``'s run of tokens ``labels`` now
    (:func:`_prepare`), while this process imports torch and builds the model."""
    from attnlab.config import snapshot_steps

    t = len(labels)
    render.submit("prepare", list(labels), snapshot_steps(cfg.train), (int(cfg.model.n_heads), t, t),
                  bool(cfg.logging.figures), bool(cfg.logging.tensorboard and cfg.logging.images))


def _warm() -> None:
    """What every figure needs, done before the first request: matplotlib's Agg canvas, the
    font list and the glyphs the fonts have."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    from attnlab import fonts

    fonts.rc()
    fonts.drawable("warm")


HANDLERS: dict[str, Callable[..., Any]] = {"heatmap": _heatmap, "evolution": _evolution, "loss": _loss,
                                           "prepare": _prepare}


# ----------------------------------------------------------------------- the run's side
class RenderProcess:
    """The run's handle on the child: :meth:`call` draws in the child and returns the result
    (or raises the child's exception); :meth:`submit` sends work whose result nobody waits for
    (preparation). Thread-safe (one exchange at a time); falls back to drawing in this process
    for good once the child is gone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unanswered = 0  # submitted requests whose replies were not read yet
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, close_fds=True)
        except OSError:
            self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None

    def _send(self, kind: str, args: tuple) -> None:
        self.proc.stdin.write(pickle.dumps((kind, args), protocol=pickle.HIGHEST_PROTOCOL))
        self.proc.stdin.flush()

    def _reply(self) -> tuple[str, Any]:
        return pickle.load(self.proc.stdout)

    def _lost(self) -> None:
        """The child stopped answering (or an exchange was interrupted half-way): end it and
        draw in this process from now on."""
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def submit(self, kind: str, *args: Any) -> None:
        """Send ``kind(*args)`` to the child without waiting (nothing when it is gone)."""
        with self._lock:
            if self.proc is None:
                return
            try:
                self._send(kind, args)
                self._unanswered += 1
            except BaseException:
                self._lost()

    def call(self, kind: str, *args: Any) -> Any:
        """``kind(*args)`` drawn in the child (in this process when the child is gone); raises
        what drawing raised."""
        with self._lock:
            if self.proc is not None:
                try:
                    self._send(kind, args)
                    while self._unanswered:  # preparation: its errors show again where they matter
                        self._reply()
                        self._unanswered -= 1
                    status, value = self._reply()
                except BaseException as err:
                    self._lost()
                    if not isinstance(err, (OSError, EOFError, pickle.UnpicklingError)):
                        raise  # a Ctrl-C while waiting: the run handles it
                else:
                    if status == "error":
                        raise value
                    return value
        return HANDLERS[kind](*args)

    def close(self) -> None:
        """End the child (it exits when its input closes) and reap it."""
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()


_shared: RenderProcess | None = None
_shared_lock = threading.Lock()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def shared() -> RenderProcess | None:
    """This process's render child, started at the first call; None with fewer than
    :data:`MIN_CORES` cores or when it cannot be started (then figures are drawn in-process)."""
    global _shared
    if cores() < MIN_CORES:
        return None
    with _shared_lock:
        if _shared is None or not _shared.alive:
            _shared = RenderProcess()
        return _shared if _shared.alive else None


# ----------------------------------------------------------------------- the child
def _answer(out, reply: tuple[str, Any]) -> None:
    try:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        if reply[0] == "error":
            pickle.loads(data)  # an exception class that cannot be rebuilt from its arguments
    except Exception:  # an exception that does not go through a pickle: its type and text
        err = reply[1]
        data = pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}")))
    out.write(data)
    out.flush()


def serve(requests, replies) -> None:
    """The child's loop: one reply per request, in order, until the input closes."""
    while True:
        try:
            kind, args = pickle.load(requests)
        except EOFError:
            return
        try:
            reply = ("ok", HANDLERS[kind](*args))
        except Exception as err:
            reply = ("error", err)
        _answer(replies, reply)


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when the run's process ends, however it ends
    (``PR_SET_PDEATHSIG``), so a killed run's child stops drawing at once; elsewhere the child
    ends when its input closes."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the run ended before the signal was asked for
        os._exit(0)


def main(argv: Sequence[str] | None = None) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run decides what to finish at a Ctrl-C
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to the console, never into the replies
    _warm()
    try:
        serve(requests, replies)
    except BrokenPipeError:  # the run is gone
        pass
    sys.stderr.flush()
    os._exit(0)  # the run has ended: no interpreter teardown (matplotlib's modules: ~0.5 s)


if __name__ == "__main__":
    main()
