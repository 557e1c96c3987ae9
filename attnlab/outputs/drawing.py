"""Figures drawn beside the run (tutorial §5's figures, TensorBoard's heatmaps): a spawned
``ProcessPoolExecutor`` worker imports matplotlib while the run imports torch, then draws on the other
core. At the run's end the two draw side by side: the worker in the order sent, the run the newest
drawings the worker has not started. Same functions, same bytes, and the run writes every file.
Without a worker (not started, one core) or when it dies, the run draws them itself."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

from attnlab.core.config import Task
from attnlab.core.i18n import language, set_language

WORKERS = 1  # a second would draw beside it with a free core; under load it made the default run slower
_pool = None  # this process's ProcessPoolExecutor, or None
_sent: list["Drawing"] = []  # sent to the worker, their result not asked for yet


def end_with_parent() -> None:
    """In a process multiprocessing started: end it (``os._exit``) as soon as the process that started
    it has ended, however it ended (``kill -9`` too): a thread waits on the parent's sentinel
    (``multiprocessing.parent_process``; a pipe on POSIX, the process handle on Windows)."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        with contextlib.suppress(OSError, ValueError):
            wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="attnlab-end-with-parent", daemon=True).start()


def _prepare_worker(warm_up: Callable[[], None] | None) -> None:
    """Ctrl-C is the run's; the worker ends with the run (:func:`end_with_parent`); ``warm_up()``
    (:func:`attnlab.outputs.plots.warm_up`); no interpreter teardown at the worker's end (its results
    are sent by then)."""
    import atexit
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    atexit.register(os._exit, 0)
    if warm_up is not None:
        warm_up()


def start(cfg: Any, warm_up: Callable[[], None] | None = None) -> None:
    """Start the worker now when job ``cfg`` draws figures or heatmaps, ``warm_up`` its first call."""
    global _pool
    log = cfg.logging
    if _pool is not None or cfg.task != Task.train or (os.cpu_count() or 1) < 2 or not (
            log.figures or (log.tensorboard and log.images)):
        return
    import concurrent.futures
    import multiprocessing

    try:
        _pool = concurrent.futures.ProcessPoolExecutor(WORKERS, multiprocessing.get_context("spawn"),
                                                       initializer=_prepare_worker,
                                                       initargs=(warm_up,))
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


def _in_language(lang: str, function: Callable, *args: Any) -> Any:
    """``function(*args)`` in the worker, its titles and axes in the run's language ``lang``."""
    set_language(lang)
    return function(*args)


class Drawing:
    """``function(*args)`` (module-level, picklable), sent to the worker when there is one; :meth:`result`
    its value (or its exception), computed here without a worker or when it died."""

    def __init__(self, function: Callable, *args: Any) -> None:
        self.function, self.args, self.future = function, args, None
        if _pool is not None:
            with contextlib.suppress(RuntimeError):  # a broken (BrokenProcessPool) or shut-down pool
                self.future = _pool.submit(_in_language, language(), function, *args)
                _sent.append(self)

    def done(self) -> bool:
        """True when :meth:`result` will not wait for the worker."""
        return self.future is None or self.future.done()

    def result(self) -> Any:
        """The value. What the worker has not started is drawn here; while the run waits for the
        worker, it draws the newest drawings the worker has not started (their values kept)."""
        from concurrent.futures import BrokenExecutor, Future

        with contextlib.suppress(ValueError):
            _sent.remove(self)
        while self.future is not None and not self.future.done():
            if self.future.cancel():  # not started by the worker
                self.future = None
                break
            other = next((d for d in reversed(_sent) if d.future.cancel()), None)
            if other is None:
                break
            _sent.remove(other)
            drawn = Future()  # set before it replaces other's cancelled one (an interrupt leaves that)
            try:
                drawn.set_result(other.function(*other.args))
            except Exception as err:  # raised by other.result()
                drawn.set_exception(err)
            other.future = drawn
        if self.future is not None:
            try:
                return self.future.result()
            except BrokenExecutor:  # the worker died: drawn here, a new pool at the next job
                shutdown()
        return self.function(*self.args)
