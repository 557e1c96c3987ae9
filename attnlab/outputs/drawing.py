"""Figures drawn beside the run (tutorial §5's figures, TensorBoard's heatmaps) by one spawned
``ProcessPoolExecutor`` worker: it imports matplotlib while the run imports torch, and at the run's end
both draw (docs/benchmarks.md: the default run's gain). Same functions, same bytes; the run writes
every file, and draws them itself without a worker (not started, one core) or when it died."""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import threading
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import Any, Callable

from attnlab.core.config import Task
from attnlab.core.i18n import language, set_language

_pool = None  # this process's ProcessPoolExecutor, or None
_sent: list["Drawing"] = []  # sent to the worker, their result not asked for yet


def end_with_parent() -> None:
    """In a process multiprocessing started: ``os._exit`` as soon as the process that started it has
    ended, however (``kill -9`` too), seen by a thread waiting on the parent's sentinel."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        with contextlib.suppress(OSError, ValueError):
            parent.join()  # (its sentinel: ends however the parent ended)
        os._exit(0)

    threading.Thread(target=watch, name="attnlab-end-with-parent", daemon=True).start()


def _prepare_worker(lang: str, warm_up: Callable[[], None] | None) -> None:
    """The worker's start: the run's language, Ctrl-C is the run's, it ends with the run, no interpreter teardown."""
    set_language(lang)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    atexit.register(os._exit, 0)
    if warm_up is not None:
        warm_up()


def start(cfg: Any, warm_up: Callable[[], None] | None = None) -> None:
    """Start the worker now when job ``cfg`` draws figures or heatmaps, in the job's language (set by now),
    ``warm_up`` its first call."""
    global _pool
    log = cfg.logging
    if _pool is not None or cfg.task != Task.train or (os.cpu_count() or 1) < 2 or not (
            log.figures or (log.tensorboard and log.images)):
        return
    try:  # one worker: a second drew beside it with a free core, but under load made the default run slower
        _pool = ProcessPoolExecutor(1, multiprocessing.get_context("spawn"), initializer=_prepare_worker,
                                    initargs=(language(), warm_up))
        _pool.submit(int)  # a worker starts at a submit
    except (OSError, ImportError, NotImplementedError, RuntimeError):  # no processes, no working semaphores
        _pool = None


def shutdown() -> None:
    """End the worker (after its current drawing); the next :func:`start` makes a new one."""
    global _pool
    pool, _pool = _pool, None
    _sent.clear()
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


class Drawing:
    """``function(*args)`` (module-level, picklable), sent to the worker when there is one."""

    def __init__(self, function: Callable, *args: Any) -> None:
        self.function, self.args, self.future = function, args, None
        if _pool is not None:
            with contextlib.suppress(RuntimeError):  # a broken (BrokenProcessPool) or shut-down pool
                self.future = _pool.submit(function, *args)
                _sent.append(self)

    def done(self) -> bool:
        """True when :meth:`result` will not wait for the worker."""
        return self.future is None or self.future.done()

    def result(self) -> Any:
        """The value (or its exception). While the worker draws this one, the run draws the newest
        drawings the worker has not started; without a worker, or when it died, the run draws it."""
        with contextlib.suppress(ValueError):
            _sent.remove(self)
        while not self.done():  # this one, else the newest the worker has not started, drawn here
            if not (self._take_back() or any(d._take_back() for d in reversed(_sent))):
                break
        if self.future is not None:
            try:
                return self.future.result()
            except BrokenExecutor:  # the worker died: drawn here, a new pool at the next job
                shutdown()
        return self.function(*self.args)

    def _take_back(self) -> bool:
        """Draw it here when the worker has not started it (False when it has); its value or exception kept."""
        if not self.future.cancel():
            return False
        drawn = Future()  # set before it replaces the cancelled one (an interrupt leaves that)
        try:
            drawn.set_result(self.function(*self.args))
        except Exception as err:  # raised by result()
            drawn.set_exception(err)
        self.future = drawn
        return True
