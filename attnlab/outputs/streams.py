"""Console output that degrades and never stops a run.

:class:`SafeStream` wraps ``sys.stdout`` / ``sys.stderr`` (or any text stream): text the
console cannot encode (Chinese on a ``cp1252`` console, ``PYTHONIOENCODING=cp1252``) is
written with backslash escapes (``\\u4f60``); a closed pipe (``attnlab | head -2``) or a gone
terminal silences the stream (its descriptor is pointed at ``os.devnull``, so the interpreter's
final flush stays quiet) and training and every run file go on. :func:`install` does this for
the whole ``attnlab`` process; :class:`attnlab.outputs.console.ConsoleSink` wraps its own stream too.
"""
from __future__ import annotations

import os
import sys
import threading


class SafeStream:
    """A text stream whose ``write``/``flush`` never raise for an encoding the stream cannot
    represent (backslash escapes instead) nor for a broken pipe or I/O error (the stream goes
    silent: :attr:`broken`). Everything else (``isatty``, ``fileno``, ``encoding``) is the
    wrapped stream's."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.broken = stream is None  # no stream at all (Python's when the descriptor was closed): silent

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            return self.stream.write(text)
        except UnicodeEncodeError:
            encoding = getattr(self.stream, "encoding", None) or "ascii"
            try:
                return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
            except OSError:
                self._silence()
        except (OSError, ValueError):  # EPIPE, EIO; ValueError: the stream was closed
            self._silence()
        return len(text)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self._silence()

    def _silence(self) -> None:
        """Stop writing; point the stream's descriptor at devnull so buffered text that the
        interpreter flushes at exit goes nowhere instead of raising again."""
        self.broken = True
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError, AttributeError):
            return
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except OSError:
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


_hook_installed = False


def safe(stream) -> SafeStream:
    """``stream`` wrapped in a :class:`SafeStream` (itself when it already is one)."""
    return stream if isinstance(stream, SafeStream) else SafeStream(stream)


def _reconfigure(stream) -> None:
    try:
        stream.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError, OSError):
        pass


def _reopen_closed_descriptors() -> None:
    """Point a closed standard descriptor (``attnlab >&-``, ``2>&-``, ``<&-``) at
    ``os.devnull``, so the first file the run opens does not become descriptor 1 or 2 (and get
    console text or a child's output written into it), and give Python a stream for it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        except OSError:
            continue
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False))


def install() -> None:
    """For attnlab's commands: a closed standard descriptor reopened on ``os.devnull``
    (:func:`_reopen_closed_descriptors`), ``sys.stdout`` and ``sys.stderr`` as SafeStreams
    (their text wrappers set to ``errors="backslashreplace"``), and TensorBoard's writer
    thread kept from printing a traceback when the disk is full (the error reaches the run
    through the writer itself, and the run records it)."""
    _reopen_closed_descriptors()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, SafeStream):
            continue
        _reconfigure(stream)
        setattr(sys, name, SafeStream(stream))
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = threading.excepthook

    def hook(args) -> None:
        thread = type(args.thread).__name__ if args.thread is not None else ""
        if issubclass(args.exc_type, OSError) and thread == "_AsyncWriterThread":
            return  # tensorboard's event writer: re-raised by the writer in the main thread
        previous(args)

    threading.excepthook = hook
