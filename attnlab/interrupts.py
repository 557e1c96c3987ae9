"""The one interrupt mechanism: Ctrl-C (SIGINT) and SIGTERM are deferred to a safe point.

While :func:`deferred` is active, the first signal is only recorded; the training loop checks
:func:`requested` between steps and the job checks it before and after training, so a signal
never lands halfway through a write and every artifact of a run agrees on one status. A second
signal raises ``KeyboardInterrupt`` at once (for a step that is stuck).

``attnlab`` defers signals for the whole process (:mod:`attnlab.cli`); ``training.train`` and
``job.run_job`` defer them too when called from Python (nested use shares the outer block).
Handlers can only be set in the main thread; elsewhere :func:`deferred` changes nothing.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] | None = None  # signals seen while deferring; None when not deferring


def _handler(signum, frame) -> None:
    if _received:  # the second signal: stop now
        raise KeyboardInterrupt(f"signal {signum}")
    if _received is not None:
        _received.append(signum)


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


def requested() -> int | None:
    """The number of the first signal received while deferring, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a signal was received (a safe point to stop)."""
    signum = requested()
    if signum is not None:
        raise KeyboardInterrupt(f"signal {signum}")
