"""Console output that never stops a run: what the console cannot encode (Chinese on ``cp1252``) is
escaped (``\\u4f60``); a closed pipe (``attnlab | head -2``) or a gone terminal silences the stream."""
from __future__ import annotations

import contextlib
import os
import sys
import threading


class SafeStream:
    """A text stream whose ``write`` / ``flush`` never raise; after a broken pipe or I/O error it is silent
    (:attr:`broken`), its descriptor on ``os.devnull`` (the interpreter's last flush too). Whole lines go
    out in one write, so lines of jobs that share a terminal never merge."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.broken = stream is None
        self._pending = ""  # the start of a line not written yet

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in text:
            lines, newline, self._pending = self._pending.rpartition("\n")
            self._write(lines + newline)
        return len(text)

    def _write(self, text: str, flush: bool = False) -> None:
        if self.broken:
            return
        try:
            if text:
                self.stream.write(text)
            if flush:
                self.stream.flush()
        except UnicodeEncodeError:
            encoding = getattr(self.stream, "encoding", None) or "ascii"
            self._write(text.encode(encoding, "backslashreplace").decode(encoding), flush)
        except (OSError, ValueError):  # EPIPE, EIO; ValueError: the stream was closed
            self._silence()

    def flush(self) -> None:
        text, self._pending = self._pending, ""
        self._write(text, flush=True)

    def _silence(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def safe(stream) -> SafeStream:
    """``stream`` as a :class:`SafeStream` (itself when it already is one)."""
    return stream if isinstance(stream, SafeStream) else SafeStream(stream)


def _quiet_tensorboard_thread(args) -> None:
    """TensorBoard's writer thread failing to write (a full disk) prints nothing: the run records it."""
    if not (issubclass(args.exc_type, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
        threading.__excepthook__(args)


def install() -> None:
    """For attnlab's commands: a closed standard descriptor (``attnlab >&-``) reopened on ``os.devnull`` (no
    run's file becomes descriptor 1 or 2), ``sys.stdout``/``sys.stderr`` :class:`SafeStream`, TensorBoard quiet."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:  # descriptors below fd are open: os.open returns fd itself
            os.open(os.devnull, os.O_RDWR)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))
    for name in ("stdout", "stderr"):  # (None under pythonw: a silent SafeStream)
        with contextlib.suppress(AttributeError, ValueError, OSError):
            getattr(sys, name).reconfigure(errors="backslashreplace")
        setattr(sys, name, safe(getattr(sys, name)))
    threading.excepthook = _quiet_tensorboard_thread
