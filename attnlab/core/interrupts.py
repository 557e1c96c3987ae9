"""The one interrupt mechanism: Ctrl-C (SIGINT) and SIGTERM are deferred to a safe point.

While :func:`deferred` is active, the first signal is only recorded; the training loop checks
:func:`requested` between steps and the job checks it before and after training, so a signal
never lands halfway through a write and every artifact of a run agrees on one status. A second
signal raises ``KeyboardInterrupt`` at once (for a step that is stuck).

``attnlab`` defers signals for the whole process, from before its heavy imports
(:func:`install`, called first by :mod:`attnlab.commands.launch`); ``training.train`` and
``job.run_job`` defer them too when called from Python (nested use shares the outer block).
Handlers can only be set in the main thread; elsewhere :func:`deferred` changes nothing.

Where a second signal may raise is explicit: inside :func:`shielded` (a whole job of
``job.run_job``, and the sinks' last writes) even a second signal is only recorded, so every
file of a run ends with the same status; inside :func:`interruptible` (the training loop, which
records an interrupt itself) it raises again. The innermost block decides.

:func:`pause_point` is a test hook: with ``ATTNLAB_TEST_PAUSE_AT=<phase>`` and
``ATTNLAB_TEST_PAUSE_FILE=<path>`` in the environment the process creates the file at that
phase and waits (at most :data:`PAUSE_LIMIT_S`) until the file is deleted or a signal
arrives, so a test can send a real signal (or make a real fault) at that exact moment.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] | None = None  # signals seen while deferring; None when not deferring
_modes: list[bool] = []  # stack of shielded() (True) / interruptible() (False) blocks
PAUSE_LIMIT_S = 120.0


def _handler(signum, frame) -> None:
    if _received and not (_modes and _modes[-1]):  # the second signal: stop now
        raise KeyboardInterrupt(f"signal {signum}")
    if _received is not None:
        _received.append(signum)


def install() -> None:
    """Defer SIGINT/SIGTERM for the rest of the process (the ``attnlab`` command: called
    before anything heavy is imported, so a Ctrl-C while Python imports torch or Hydra is a
    recorded interrupt, never a traceback). Idempotent; a no-op outside the main thread."""
    global _received
    if _received is not None:
        return
    try:
        for sig in SIGNALS:
            signal.signal(sig, _handler)
    except ValueError:
        return
    _received = []


@contextlib.contextmanager
def _mode(shield: bool) -> Iterator[None]:
    _modes.append(shield)
    try:
        yield
    finally:
        _modes.pop()


def shielded() -> contextlib.AbstractContextManager:
    """Inside the block a second signal is recorded too instead of raising (a job's writes,
    which must all end with the same status)."""
    return _mode(True)


def enter_shield() -> None:
    """:func:`shielded` without a ``with`` block (Hydra's ``on_job_start`` callback), until
    :func:`exit_shield`."""
    _modes.append(True)


def exit_shield() -> None:
    """End the block :func:`enter_shield` began (``on_job_end``)."""
    if _modes:
        _modes.pop()


def interruptible() -> contextlib.AbstractContextManager:
    """Inside the block (even within :func:`shielded`) a second signal raises
    ``KeyboardInterrupt`` at once: the training loop, which turns it into ``interrupted``."""
    return _mode(False)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Defer SIGINT/SIGTERM inside the block (see the module docstring); restores the previous
    handlers on exit. Re-entrant: an inner block shares the outer one's record."""
    global _received
    if _received is not None:
        yield
        return
    previous = {}
    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, _handler)
    except ValueError:  # not the main thread: signals go to the main thread anyway
        pass
    _received = []
    try:
        yield
    finally:
        _received = None
        for sig, old in previous.items():
            signal.signal(sig, old)


def ignore_from_now() -> None:
    """Ignore SIGINT/SIGTERM for the rest of the process (the command has done its work and is
    exiting; the interpreter's shutdown would otherwise die of a late Ctrl-C with its default
    action, and the exit status would no longer say how the run ended)."""
    try:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:
        pass


def requested() -> int | None:
    """The number of the first signal received while deferring, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a signal was received (a safe point to stop)."""
    signum = requested()
    if signum is not None:
        raise KeyboardInterrupt(f"signal {signum}")


def pause_point(phase: str) -> None:
    """Test hook (see the module docstring): pause at ``phase`` when the environment asks."""
    if os.environ.get("ATTNLAB_TEST_PAUSE_AT") != phase or not os.environ.get("ATTNLAB_TEST_PAUSE_FILE"):
        return
    path = os.environ["ATTNLAB_TEST_PAUSE_FILE"]
    with open(path, "w") as f:
        f.write(f"{os.getpid()} {phase}\n")
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while os.path.exists(path) and requested() is None and time.monotonic() < deadline:
        time.sleep(0.01)
