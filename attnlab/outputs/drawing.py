"""Figures drawn beside the run (tutorial §5's figures, TensorBoard's heatmaps): a
``concurrent.futures.ProcessPoolExecutor`` of :data:`WORKERS` spawned process(es) that import
matplotlib while the run imports torch, and draw on the other core while it trains and writes.

The workers run the same functions the run would (:class:`Drawing`), so the bytes and pixels
are the same; the run writes every file itself. When the pool cannot start, is not started
(:func:`start`, by a job) or a worker dies, the run draws in its own process.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from attnlab.core.config import Task

WORKERS = 1  # a second one draws ~0.5 s sooner on a quiet machine, later on a busy one (its start costs ~1 CPU s)
_pool = None  # the ProcessPoolExecutor of this process, or None


def _prepare_worker() -> None:
    """A worker's start: Ctrl-C is the run's (it stops the run); matplotlib loaded and a first
    heatmap drawn (fonts, glyph caches); at its end no interpreter teardown (its results are sent)."""
    import atexit
    import signal

    import numpy as np

    from attnlab.outputs import plots

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    atexit.register(os._exit, 0)
    with plots.style():
        fig = plots.new_figure(1, 1)
        plots.draw_heatmap(fig.add_subplot(), np.eye(2), ["a", "b"], "a")
        fig.canvas.draw()


def _nothing() -> None:
    """A task that makes the pool start its next worker now rather than at the first drawing."""


def start(cfg: Any) -> None:
    """Start the workers when job ``cfg`` (typed) draws figures or TensorBoard heatmaps; idempotent.
    A pool that cannot start (no processes, no working semaphores) leaves the drawing here."""
    global _pool
    logging = cfg.logging
    if _pool is not None or cfg.task != Task.train or (os.cpu_count() or 1) < 2 or not (
            logging.figures or (logging.tensorboard and logging.images)):
        return
    import concurrent.futures
    import multiprocessing

    try:
        _pool = concurrent.futures.ProcessPoolExecutor(WORKERS, multiprocessing.get_context("spawn"),
                                                       initializer=_prepare_worker)
        for _ in range(WORKERS):
            _pool.submit(_nothing)
    except (OSError, ImportError, NotImplementedError, RuntimeError):
        _pool = None


def shutdown() -> None:
    """End the workers (after their current drawing); the next :func:`start` makes new ones."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


class Drawing:
    """``function(*args)`` (a module-level function, picklable arguments): submitted to a worker
    when the pool runs; :meth:`result` its value, computed here when there was no worker or
    the worker died. Exceptions of ``function`` itself are raised by :meth:`result`."""

    def __init__(self, function: Callable, *args: Any) -> None:
        self.function, self.args, self.future = function, args, None
        if _pool is not None:
            import concurrent.futures

            try:
                self.future = _pool.submit(function, *args)
            except (concurrent.futures.BrokenExecutor, RuntimeError):  # a dead or shut-down pool
                pass

    def done(self) -> bool:
        """True when :meth:`result` will not wait for a worker."""
        return self.future is None or self.future.done()

    def result(self) -> Any:
        if self.future is not None:
            import concurrent.futures

            try:
                return self.future.result()
            except concurrent.futures.BrokenExecutor:  # a worker died: draw here, a new pool next job
                shutdown()
        return self.function(*self.args)
