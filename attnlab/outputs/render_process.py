"""A run's figures drawn by a second process, on the second core, while the run trains.

A default run draws three matplotlib figures (TensorBoard's heatmap images,
``attention_evolution.png``, ``loss.png``). Importing matplotlib and laying those figures out
took ~2 s of a 7.6-s run on the 2-core machines of docs/benchmarks.md, all of it on the one
core the training uses, while the other core idled. Here a child process
(``python -c`` :data:`CHILD`, started when the job's config is checked, before torch is
imported) imports matplotlib and the fonts meanwhile, and lays the figures out while the run
trains; the run's sinks send it the data, wait for the drawing (image arrays, PNG bytes) and
write the files themselves, so every file is written (or has failed) by the run's process when
its sink's call returns, as before: the run dir's disk reserve, its temporary files and its
status stay the run's. The child runs the same functions (:mod:`attnlab.outputs.plots`,
:class:`attnlab.outputs.tensorboard.HeatmapRenderer`) on the same data, so the pixels are those drawn
in-process (tests/test_render_process.py compares the bytes).

The child is started only when at least two cores are available to this process, is one per
process (the jobs of a sweep share it; a forked copy starts its own), starts with Ctrl-C
blocked and then ignores it (the run decides what to finish), and exits when the run's process
closes its end of the pipe or is gone (a ``kill -9`` of the run included). Data goes both ways
as pickles over the pipe between the two processes of one run (nothing read from a run dir).
When the child cannot be started, is gone, or stops answering (stopped, or hung: see
:class:`RenderProcess`), everything is drawn in-process, as without it; an error raised while
drawing comes back as the same exception.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from attnlab.core.records import Snapshot

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from attnlab.outputs.tensorboard import EncodedImage

MIN_CORES = 2  # fewer: the child would take turns with the training on one core
# the child's command, run as ``python -c CHILD <the run's attnlab folder>``: the working
# directory ('' on the import path of ``python -c``; nothing with PYTHONSAFEPATH) is taken off
# the import path first, so a file such as ``numpy.py`` in the folder a run starts from is never
# imported (the ``attnlab`` command does not import from there either); a child that finds
# another attnlab than the run's exits at once (the run then draws in-process)
CHILD = ("import os, sys\n"
         "sys.path[:] = [p for p in sys.path if p != '']\n"
         "import attnlab\n"
         "if os.path.realpath(os.path.dirname(attnlab.__file__)) != os.path.realpath(sys.argv[1]):\n"
         "    os._exit(3)\n"
         "from attnlab.outputs.render_process import main\n"
         "main()\n")


# ----------------------------------------------------------------------- what is drawn
def _heatmap(tokens: tuple[str, ...], weights: np.ndarray, title: str) -> "EncodedImage":
    from attnlab.outputs.tensorboard import heatmap_image

    return heatmap_image(tokens, weights, title)


def _evolution(snapshots: list[Snapshot], tokens: list[str], title: str | None, max_panels: int,
               total: int | None) -> bytes:
    from attnlab.outputs.plots import evolution_png

    return evolution_png(snapshots, tokens, title, max_panels, total)


def _loss(losses: np.ndarray, ylabel: str | None = None) -> bytes | None:
    from attnlab.outputs.plots import MSE_LABEL, loss_png

    return loss_png(losses, ylabel=ylabel or MSE_LABEL)


_prepared: dict[tuple, None] = {}  # the runs _prepare drew for, oldest first


def _prepare(labels: list[str], steps: list[int], shape: tuple[int, int, int], figures: bool, heatmaps: bool,
             loss_label: str) -> None:
    """Lay out, with placeholder data, the figures of a run of ``labels`` whose snapshots at
    ``steps`` have weights of ``shape`` (H, T, T): TensorBoard's heatmap (``heatmaps``; drawn
    once, which saves its unchanging background), the evolution figure and the loss curve
    (``figures``, its y axis labelled ``loss_label``). The figures are kept per process
    (:func:`attnlab.outputs.plots._cached_layout`, :func:`attnlab.outputs.tensorboard.shared_renderer`), and a
    kept figure draws the pixels of a new one, so the run's own draws only change data. No more
    work than the run's process would do at its first draw: when the child is behind (a busy
    machine), the run waits no longer."""
    import matplotlib

    from attnlab.outputs.fonts import rc
    from attnlab.outputs.plots import MAX_LAYOUTS, _loss_layout, evolution_figure

    if (key := (tuple(labels), tuple(steps), tuple(shape), figures, heatmaps, loss_label)) in _prepared:
        return  # a sweep's next job over the same text: its figures are ready
    _prepared[key] = None
    while len(_prepared) > MAX_LAYOUTS:  # as many as attnlab.outputs.plots keeps
        _prepared.pop(next(iter(_prepared)))
    blank = np.full(shape, 1.0 / shape[-1], dtype=np.float32)
    if heatmaps:
        _heatmap(tuple(labels), blank, "step=0  loss=0.0000" + ("  (mean of heads)" if shape[0] > 1 else ""))
    if figures:  # laid out only: what drawing in the run's process would do too, no more
        with matplotlib.rc_context(rc()):
            evolution_figure([Snapshot(s, 0.0, blank) for s in steps], labels, total=len(steps), reuse=True)
            _loss_layout(loss_label)


def prepare(render: "RenderPool | RenderProcess", cfg: "DictConfig", labels: list[str]) -> None:
    """Have ``render`` lay out the figures of ``cfg``'s run of tokens ``labels`` now
    (:func:`_prepare`), while this process imports torch and builds the model."""
    from attnlab.core.config import loss_axis_label, snapshot_steps

    t = len(labels)
    render.submit("prepare", list(labels), snapshot_steps(cfg.train), (int(cfg.model.n_heads), t, t),
                  bool(cfg.logging.figures), bool(cfg.logging.tensorboard and cfg.logging.images),
                  loss_axis_label([cfg.train.objective]))


def _warm() -> None:
    """What every figure needs, done before the first request: matplotlib's Agg canvas, the
    font list and the glyphs the fonts have."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    from attnlab.outputs import fonts

    fonts.rc()
    fonts.drawable("warm")


HANDLERS: dict[str, Callable[..., Any]] = {"heatmap": _heatmap, "evolution": _evolution, "loss": _loss,
                                           "prepare": _prepare}


# ----------------------------------------------------------------------- the pipe
HEADER = struct.Struct("<Q")  # each message: its length, then a pickle of (kind, args) or (status, value)
POLL_S = 0.25  # how often a waiting run looks at the child
STALL_S = 5.0  # a child that is not running (stopped, or asleep with a request pending) this long is lost
WALL_S = 600.0  # without /proc: a reply that takes this long means a lost child
MAX_PENDING = 16  # requests unanswered at once (each holds its data until the child has read it)


def _frame(message: tuple) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def _proc_state(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and CPU time used (clock ticks) from ``/proc``; None when it is
    gone or there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[11]) + int(fields[12])  # state, utime + stime


class Lost(Exception):
    """The render child stopped answering (gone, stopped, or hung)."""


class Pending:
    """A drawing asked of the render child (:meth:`RenderProcess.request`); :meth:`result`
    waits for it and returns it, or raises what drawing raised. When the child is gone before
    it answered, :meth:`result` draws it in this process."""

    __slots__ = ("render", "kind", "args", "done", "status", "value")

    def __init__(self, render: "RenderProcess | None", kind: str, args: tuple) -> None:
        self.render, self.kind, self.args = render, kind, args
        self.done, self.status, self.value = False, "", None

    def _set(self, status: str, value: Any) -> None:
        self.done, self.status, self.value, self.args = True, status, value, ()

    def ready(self) -> bool:
        """True when :meth:`result` would not wait for the child (never blocks)."""
        if not self.done and self.render is not None:
            self.render._poll()
        return self.done or self.render is None or self.render.proc is None

    def result(self) -> Any:
        if not self.done and self.render is not None:
            self.render._wait_for(self)
        if not self.done:  # no child, or it was lost before answering: drawn here
            return HANDLERS[self.kind](*self.args)
        if self.status == "error":
            raise self.value
        return self.value


def request(render: "RenderProcess | None", kind: str, *args: Any) -> Pending:
    """``kind(*args)`` asked of ``render`` (drawn when :meth:`Pending.result` is called, in
    this process, when ``render`` is None)."""
    return render.request(kind, *args) if render is not None else Pending(None, kind, args)


# ----------------------------------------------------------------------- the run's side
class RenderProcess:
    """The run's handle on the child: :meth:`request` asks for a drawing and returns at once
    (:class:`Pending`; the child draws while the run goes on, in the order asked), :meth:`call`
    asks and waits, :meth:`submit` asks for work whose result nobody waits for (preparation).
    Thread-safe; at most :data:`MAX_PENDING` requests are unanswered (a further one waits for
    the oldest), so the memory they hold stays bounded. Falls back to drawing in this process
    for good once the child is gone or stops answering: a child that is stopped (``kill
    -STOP``) or asleep with a request pending for :data:`STALL_S` seconds (read from
    ``/proc``; a child that waits for a busy core is not stalled), or that has not answered in
    :data:`WALL_S` seconds where there is no ``/proc``. Only the process that started the child
    talks to it (a forked copy of this process starts its own)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._queue: deque[Pending] = deque()  # asked, not answered yet, oldest first
        self._inbox = bytearray()  # the replies' bytes read and not yet taken apart
        self.owner = os.getpid()
        self.proc: subprocess.Popen | None = None
        import attnlab

        # the child starts with Ctrl-C blocked (the mask is inherited through exec) and ignores it
        # before unblocking it: a Ctrl-C while it starts never reaches its Python as a traceback
        started_by = "main" if threading.current_thread() is threading.main_thread() else "thread"
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(Path(attnlab.__file__).parent),
                                          str(self.owner), started_by],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
            os.set_blocking(self.proc.stdin.fileno(), False)  # writes wait in poll(), never in write()
        except OSError:
            self.proc = None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    @property
    def alive(self) -> bool:
        return self.proc is not None

    def _wait(self, write: bool) -> None:
        """Return when a reply can be read (or, with ``write``, a request written): replies are
        always taken in while waiting, so the child never waits on a full pipe. Raises
        :class:`Lost` when the child stops answering first."""
        poller = select.poll()
        rfd, wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
        poller.register(rfd, select.POLLIN)
        if write:
            poller.register(wfd, select.POLLOUT)
        pid, since, used = self.proc.pid, time.monotonic(), None
        while True:
            events = poller.poll(int(POLL_S * 1000))
            if events:
                if any(fd == rfd for fd, _ in events):
                    self._take_in()
                return
            now, state = time.monotonic(), _proc_state(pid)
            if state is None:
                if os.path.isdir("/proc/self") or now - since > WALL_S:
                    raise Lost("the render child is gone or not answering")
                continue
            if state[0] in "ZX":
                raise Lost("the render child is gone")
            if state[0] == "R" or state[1] != used:  # drawing, or waiting for a core
                since, used = now, state[1]
            elif now - since > STALL_S:
                raise Lost(f"the render child is not drawing (state {state[0]})")

    def _take_in(self) -> None:
        """Read what the child has written (without waiting) and hand each whole reply to the
        oldest pending request."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            raise Lost("the render child is gone")
        self._inbox += chunk
        while len(self._inbox) >= HEADER.size:
            (n,) = HEADER.unpack_from(self._inbox)
            if len(self._inbox) < HEADER.size + n:
                return
            status, value = pickle.loads(self._inbox[HEADER.size:HEADER.size + n])
            del self._inbox[:HEADER.size + n]
            if not self._queue:
                raise Lost("the render child answered what was not asked")
            self._queue.popleft()._set(status, value)

    def _send(self, kind: str, args: tuple) -> None:
        data, fd = memoryview(_frame((kind, args))), self.proc.stdin.fileno()
        while data:
            self._wait(write=True)
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:
                continue

    def _lost(self) -> None:
        """The child stopped answering (or an exchange was interrupted half-way): end it; what
        it was asked is drawn in this process (:meth:`Pending.result`), as is everything from
        now on."""
        proc, self.proc = self.proc, None
        self._queue.clear()
        self._inbox.clear()
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass

    def _exchange(self, step: Callable[[], None]) -> None:
        """``step()`` with the child; a failed exchange loses the child (a Ctrl-C too, which
        is raised again: the run handles it)."""
        try:
            step()
        except BaseException as err:
            self._lost()
            if not isinstance(err, (OSError, Lost, pickle.UnpicklingError, EOFError, ValueError)):
                raise

    def request(self, kind: str, *args: Any) -> Pending:
        """Ask the child for ``kind(*args)`` and return at once (after the oldest request
        when :data:`MAX_PENDING` are unanswered)."""
        pending = Pending(self, kind, args)
        with self._lock:
            if self.proc is not None:
                def ask() -> None:
                    while len(self._queue) >= MAX_PENDING:
                        self._wait(write=False)
                    self._send(kind, args)
                    self._queue.append(pending)

                self._exchange(ask)
        return pending

    def _wait_for(self, pending: Pending) -> None:
        with self._lock:
            if self.proc is not None and not pending.done and pending in self._queue:
                def wait() -> None:
                    while not pending.done:
                        self._wait(write=False)

                self._exchange(wait)

    def _poll(self) -> None:
        """Take in the replies already written, without waiting."""
        with self._lock:
            if self.proc is not None and self._queue:
                def peek() -> None:
                    if select.select([self.proc.stdout], [], [], 0)[0]:
                        self._take_in()

                self._exchange(peek)

    def submit(self, kind: str, *args: Any) -> None:
        """Ask the child for ``kind(*args)``, whose result nobody waits for (its reply is
        taken in and dropped; nothing when the child is gone)."""
        if self.proc is not None:
            self.request(kind, *args)

    def call(self, kind: str, *args: Any) -> Any:
        """``kind(*args)`` drawn in the child (in this process when the child is gone or stops
        answering); raises what drawing raised."""
        return self.request(kind, *args).result()

    def close(self) -> None:
        """End the child and reap it: replies not taken in yet are dropped (its reply writer
        then stops at once), and it exits when its input closes."""
        with self._lock:
            proc, self.proc = self.proc, None
            self._queue.clear()
        if proc is not None:
            try:
                proc.stdout.close()
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


class RenderPool:
    """This process's render children (:class:`RenderProcess`), with the same interface: one
    for a run; for the jobs of a sweep run in this process, one per core (at most
    :data:`MAX_CHILDREN`), since the run's process mostly waits for the drawings at the end of
    each job: the heatmaps and ``loss.png`` are then drawn beside the evolution figure instead
    of after it. The evolution figure (the largest drawing, asked at the end) goes to the first
    live child, everything else to the last (drawn while the run trains); every child draws
    the same pixels. Preparation goes to all of them. Children that are gone are left out;
    with none left, everything is drawn in this process."""

    def __init__(self) -> None:
        self.children: list[RenderProcess] = []
        self.owner = os.getpid()

    def grow(self, n: int) -> None:
        """Have ``n`` live children (start the missing ones; never ends one)."""
        self.children = [child for child in self.children if child.alive]
        while len(self.children) < n:
            child = RenderProcess()
            if not child.alive:
                return
            self.children.append(child)

    @property
    def alive(self) -> bool:
        return any(child.alive for child in self.children)

    def _pick(self, kind: str) -> RenderProcess | None:
        live = [child for child in self.children if child.alive]
        if not live:
            return None
        return live[0] if kind in FIRST_CHILD else live[-1]

    def request(self, kind: str, *args: Any) -> Pending:
        return request(self._pick(kind), kind, *args)

    def submit(self, kind: str, *args: Any) -> None:
        for child in self.children:
            child.submit(kind, *args)

    def call(self, kind: str, *args: Any) -> Any:
        return self.request(kind, *args).result()

    def close(self) -> None:
        for child in self.children:
            child.close()


MAX_CHILDREN = 2
FIRST_CHILD = frozenset({"evolution"})  # drawn by a pool's first child, the rest by its last
_shared: RenderPool | None = None
_shared_lock = threading.Lock()
_inherited: list[RenderProcess] = []  # a forked copy's handles on its parent's children: kept, never used


def _after_fork() -> None:
    """In a forked copy of this process: the parent's children are the parent's (their pipes
    are closed here, they are neither used nor killed); the copy starts its own when it draws."""
    global _shared, _shared_lock
    _shared_lock = threading.Lock()
    pool, _shared = _shared, None
    for old in pool.children if pool is not None else []:
        old._lock = threading.RLock()
        old._queue.clear()
        proc, old.proc = old.proc, None
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            proc.returncode = 0  # not this process's child: never waited for here
        _inherited.append(old)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _end_children() -> None:
    """At this process's exit: end its children at once. A child ends by itself when the run
    is gone (its watcher thread, the end of its input), but not while it is stopped (``kill
    -STOP``): SIGKILL ends it in any state. A ``kill -9`` of the run skips this; a child stopped
    then stays until it is continued, and then ends."""
    pool = _shared
    if pool is None or pool.owner != os.getpid():
        return
    for child in pool.children:
        proc = child.proc
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass


atexit.register(_end_children)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def shared(children: int = 1) -> RenderPool | None:
    """This process's render children, started at the first call (``children`` of them, at
    most one per core and :data:`MAX_CHILDREN`; a pool never shrinks, and a child that was
    lost is started again); None with fewer than :data:`MIN_CORES` cores or when none can be
    started (then figures are drawn in-process)."""
    global _shared
    if cores() < MIN_CORES:
        return None
    with _shared_lock:
        if _shared is None or _shared.owner != os.getpid():
            _shared = RenderPool()
        _shared.grow(max(1, min(children, cores(), MAX_CHILDREN), len(_shared.children)))
        return _shared if _shared.alive else None


# ----------------------------------------------------------------------- the child
def _reply_bytes(reply: tuple[str, Any]) -> bytes:
    """``reply`` framed for the pipe; an exception that does not go through a pickle (its
    class cannot be rebuilt from its arguments) as ``RuntimeError("Type: text")``."""
    try:
        data = _frame(reply)
        if reply[0] == "error":
            pickle.loads(data[HEADER.size:])
    except Exception:
        err = reply[1]
        data = _frame(("error", RuntimeError(f"{type(err).__name__}: {err}")))
    return data


def _read_exactly(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data


def serve(requests, replies) -> None:
    """The child's loop: one reply per request, in order, until the input closes. A thread
    writes the replies, so the child draws the next request while the run has not read the
    last reply yet (a run waiting for another child reads this one's replies later)."""
    import queue

    outbox: queue.SimpleQueue = queue.SimpleQueue()

    def write() -> None:
        while (data := outbox.get()) is not None:
            try:
                replies.write(data)
                replies.flush()
            except OSError:  # the run is gone
                os._exit(0)

    writer = threading.Thread(target=write, name="attnlab-render-replies", daemon=True)
    writer.start()
    try:
        while True:
            try:
                (n,) = HEADER.unpack(_read_exactly(requests, HEADER.size))
                kind, args = pickle.loads(_read_exactly(requests, n))
            except EOFError:
                return
            try:
                reply = ("ok", HANDLERS[kind](*args))
            except Exception as err:
                reply = ("error", err)
            outbox.put(_reply_bytes(reply))
    finally:
        outbox.put(None)
        writer.join()


def _die_with_parent(parent: int, from_main_thread: bool) -> None:
    """End this process as soon as the run's process ``parent`` is gone, however it ends
    (a ``kill -9`` included), even in the middle of a drawing: a thread looks every 0.1 s
    (the end of the input only shows between requests). When the run started it from its main
    thread, Linux kills it too when that thread ends (``PR_SET_PDEATHSIG``; it acts on the
    thread that started the child, so not for a child started by another thread), which also
    ends a child that is stopped (``kill -STOP``) when its run is killed."""
    if from_main_thread:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(0)

    threading.Thread(target=watch, name="attnlab-render-parent", daemon=True).start()


def main() -> None:
    """The child (see :data:`CHILD`; ``sys.argv[2]`` the run's process id, ``sys.argv[3]``
    ``main`` when the run's main thread started it): serve the run's requests until its input
    closes or the run's process is gone."""
    parent = int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run decides what to finish at a Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the run while it started this
    _die_with_parent(parent, sys.argv[3:4] == ["main"])
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to the console, never into the replies
    _warm()
    try:
        serve(requests, replies)
    except BrokenPipeError:  # the run is gone
        pass
    getattr(atexit, "_run_exitfuncs", lambda: None)()  # what a normal exit runs (matplotlib's temp config dir)
    sys.stderr.flush()
    os._exit(0)  # the run has ended: no interpreter teardown (matplotlib's modules: ~0.5 s)


if __name__ == "__main__":
    main()
