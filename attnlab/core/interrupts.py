"""Stopping at a safe point: inside :func:`deferred` (or after :func:`install`) the first of :data:`SIGNALS`
is only recorded, and :func:`check` (between steps) raises ``KeyboardInterrupt``; a second raises at once,
except inside :func:`shielded` (:func:`interruptible`: even there; the innermost block decides). Main thread only."""
from __future__ import annotations

import contextlib
import functools
import signal
from typing import Iterator

# Ctrl-C, SIGTERM, and where the platform has them SIGHUP (the terminal closed) and Ctrl-Break (Windows)
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK") if hasattr(signal, name))
_received: list[int] | None = None  # signals recorded while deferring; None when not deferring
_modes: list[bool] = []  # the stack of shielded() (True) / interruptible() (False) blocks


def _handler(signum, frame) -> None:
    if _received and not (_modes and _modes[-1]):  # a second signal, not shielded: stop now
        raise KeyboardInterrupt(f"signal {signum}")
    if _received is not None:
        _received.append(signum)


def _set_handlers(handler) -> dict:
    """The previous handlers ({} outside the main thread)."""
    try:
        return {sig: signal.signal(sig, handler) for sig in SIGNALS}
    except ValueError:
        return {}


def install() -> dict:
    """Record :data:`SIGNALS` from now on (main thread only); the handlers replaced ({} when recording already)."""
    global _received
    previous = {} if _received is not None else _set_handlers(_handler)
    if previous:
        _received = []
    return previous


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """:func:`install` for the block, then the handlers restored. Re-entrant."""
    global _received
    previous = install()
    try:
        yield
    finally:
        if previous:
            _received = None
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _mode(shield: bool) -> Iterator[None]:
    _modes.append(shield)
    try:
        yield
    finally:
        _modes.pop()


shielded = functools.partial(_mode, True)  # a second signal inside the block is recorded too
interruptible = functools.partial(_mode, False)  # a second signal raises at once, even when shielded


def ignore_from_now() -> None:
    """Ignore :data:`SIGNALS` for the rest of the process (a command exiting)."""
    _set_handlers(signal.SIG_IGN)


def requested() -> int | None:
    """The first signal recorded, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a signal was recorded (a safe point to stop)."""
    if _received:
        raise KeyboardInterrupt(f"signal {_received[0]}")


def pause_point(phase: str) -> None:
    """A named moment of a run (before_training, model_built, first_snapshot, finishing, drawing,
    sweep_end); does nothing. Tests replace it to make a fault happen at that moment."""
