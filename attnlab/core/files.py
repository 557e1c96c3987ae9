"""Bounded, never-blocking reads of files someone else may have made, :func:`printable` to show
their text, and the limits writers and readers share (attnlab never writes a run it refuses).

Errors: :class:`RunFileError` (one line ``<file>: <reason>``), :class:`MissingRunFile`.
"""
from __future__ import annotations

import io
import itertools
import os
import re
import stat
from pathlib import Path
from typing import Any

from attnlab.core.errors import RunDirError

CONFIG_LIMIT = 256 * 1024  # bytes of a .hydra/*.yaml file (attnlab's are ~1-4 KB)
SUMMARY_LIMIT = 1024 * 1024  # bytes of summary.json (attnlab's are ~1-15 KB)
METRICS_LIMIT = 64 * 1024 * 1024  # bytes of metrics.csv (at most ~33 bytes a step: ~2 million steps)
METRICS_LINE_LIMIT = 1024  # bytes of one metrics.csv line
NPZ_LIMIT = 1024 ** 3  # bytes: the .npz file, and the uncompressed data of the members read from it
NPZ_MAX_MEMBERS = 64  # entries in an .npz archive (attnlab writes 4 or 10)
NPZ_DIRECTORY_LIMIT = 64 * 1024  # bytes of an .npz archive's central directory
NPY_HEADER_LIMIT = 10_000  # bytes of a member's .npy header (numpy's own default)
TOKEN_CHARS = 256  # characters of one token string in attention.npz ``tokens``
YAML_MAX_NODES = 5_000  # YAML nodes after alias expansion (a run's config.yaml has ~60, hydra.yaml ~250)
YAML_MAX_DEPTH = 32  # nesting of YAML/JSON collections (attnlab's configs: 4)
JSON_MAX_DEPTH = 32
REFERENCE_CHAIN = 8  # ${a} -> ${b} -> ... plain references followed at most
TEXT_LIMIT = 200  # characters printable() keeps by default
TEXT_FILE_LIMIT = 1024 * 1024  # bytes of a text_file (the default tokenizer.max_tokens=4096 is ~20 KB)
PAGE_WEIGHT_BUDGET = 18_000_000  # bytes of attention weights (JSON) on one report page, shared by its runs
PAGE_BYTES_PER_WEIGHT = 7  # upper bound of one weight in the page's JSON: "0.1234," (rounded to 4 decimals)


def page_frame_bytes(H: int, T: int) -> int:
    """Upper bound of the report page's JSON bytes of one (H, T, T) snapshot."""
    return H * T * (PAGE_BYTES_PER_WEIGHT * T + 2) + 2 * H + 2

# bytes read from run-dir files, and bytes of .npz member data decompressed (or copied)
_counters = {"bytes_read": 0, "bytes_decompressed": 0}


def counters() -> dict[str, int]:
    """Bytes read and .npz bytes decompressed since :func:`reset_counters` (what tests bound)."""
    return dict(_counters)


def reset_counters() -> None:
    _counters.update(dict.fromkeys(_counters, 0))


class RunFileError(RunDirError):
    """A file of a run dir cannot be used: one line ``<file>: <reason>`` (``path``, ``reason``)."""

    def __init__(self, path: Any, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{printable(str(path), 300)}: {printable(reason, 1000)}")


class MissingRunFile(RunFileError):
    """The file does not exist (e.g. no summary.json: the run never started)."""


_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ufeff\ud800-\udfff]")


def printable(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``str(text)`` safe for a terminal, table cell or CSV: control characters, DEL, bidi controls,
    line separators, BOM and lone surrogates as ``\\x1b``-style escapes; cut to ``limit`` characters,
    ending ``…[+N chars]`` (N not shown)."""
    text = str(text)
    pieces = [ch.encode("unicode_escape").decode("ascii") if _UNSAFE.match(ch) else ch for ch in text[: limit + 1]]
    shown = sum(1 for width in itertools.accumulate(map(len, pieces)) if width <= limit)  # characters shown
    cut = "" if shown == len(text) else f"…[+{len(text) - shown} chars]"
    return "".join(pieces[:shown]) + cut


_KINDS = {"d": "a directory", "p": "a FIFO (named pipe)", "s": "a socket", "c": "a character device",
          "b": "a block device", "l": "a symbolic link"}  # by stat.filemode's first letter


def _kind(mode: int) -> str:
    return _KINDS.get(stat.filemode(mode)[0], "not a regular file")


class _BoundedFile(io.FileIO):
    """A read-only file that never reads past ``size`` (its size when checked); counts what it reads."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__(fd, "rb", closefd=True)
        self.size = size

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.tell()
        if left <= 0:
            return b""
        n = left if n is None or n < 0 else min(n, left)
        data = super().read(n)
        _counters["bytes_read"] += len(data)
        return data


_BINARY = getattr(os, "O_BINARY", 0)  # (Windows) no newline translation
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # (POSIX) a FIFO never blocks the open
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# (POSIX) each component opened relative to its folder's descriptor: no race can slip a link in
_OPENAT = bool(os.open in os.supports_dir_fd and _NOFOLLOW and hasattr(os, "O_DIRECTORY"))


def open_run_file(path: Path, limit: int, *, root: Path | None = None) -> _BoundedFile:
    """``path`` (inside the run dir ``root``, default its folder) open for binary reading, never past the
    size checked here: every component ``lstat``-ed (on POSIX relative to its folder's descriptor, opened
    ``O_NOFOLLOW``), the opened file the one ``lstat`` saw, elsewhere its real path inside the run dir's.
    RunFileError, before a byte is read, for a link (or junction) on the way, anything but a regular file,
    more than one hard link or more than ``limit`` bytes; MissingRunFile."""
    shown = Path(path)
    root = shown.parent if root is None else Path(root)
    try:
        parts = shown.relative_to(root).parts
    except ValueError:
        raise RunFileError(shown, f"not inside the run dir {printable(str(root), 300)}") from None
    if not parts or any(p in ("..", ".", "") for p in parts):
        raise RunFileError(shown, "not a file path inside the run dir")
    fd = None  # (POSIX) the folder reached, then the file
    try:
        try:
            if _OPENAT:
                fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            elif not stat.S_ISDIR(os.stat(root).st_mode):
                raise NotADirectoryError(20, "Not a directory")
        except FileNotFoundError:
            raise MissingRunFile(shown, f"missing (no folder {printable(str(root), 300)})") from None
        except OSError as err:
            raise RunFileError(shown, f"run dir cannot be opened ({type(err).__name__}: {err.strerror})") from None
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            name = part if _OPENAT else root.joinpath(*parts[: i + 1])
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                raise MissingRunFile(shown, "missing" if last else f"missing (no folder {printable(part)})") from None
            except OSError as err:
                raise RunFileError(shown, f"cannot be read ({type(err).__name__}: {err.strerror})") from None
            if stat.S_ISLNK(st.st_mode) or getattr(st, "st_file_attributes", 0) & stat.FILE_ATTRIBUTE_REPARSE_POINT:
                where = "" if last else f"its folder {printable(part)} "
                raise RunFileError(shown, f"{where}is a symbolic link (refused: a run dir holds no links)")
            if not last and not stat.S_ISDIR(st.st_mode):
                raise RunFileError(shown, f"{printable(part)} is {_kind(st.st_mode)}, not a folder")
            if last and not stat.S_ISREG(st.st_mode):
                raise RunFileError(shown, f"is {_kind(st.st_mode)}, not a regular file (refused)")
            if _OPENAT or last:
                flags = os.O_RDONLY | _BINARY | _NONBLOCK | _NOFOLLOW | (0 if last else os.O_DIRECTORY)
                try:
                    opened = os.open(name, flags, dir_fd=fd)
                except OSError as err:  # ELOOP: swapped for a link since the lstat
                    raise RunFileError(shown, f"cannot be opened ({type(err).__name__}: {err.strerror})") from None
                if fd is not None:
                    os.close(fd)
                fd = opened
        if not os.path.samestat(os.fstat(fd), st):
            raise RunFileError(shown, "was replaced while it was opened (refused)")
        if not _OPENAT and not Path(os.path.realpath(shown)).is_relative_to(os.path.realpath(root)):
            raise RunFileError(shown, "leads outside the run dir (refused: a run dir holds no links)")
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return _checked(fd, shown, limit)


def _checked(fd: int, shown: Path, limit: int, own: bool = False) -> _BoundedFile:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the stat: check the descriptor itself
            raise RunFileError(shown, f"is {_kind(st.st_mode)}, not a regular file (refused)")
        if st.st_nlink > 1 and not own:
            raise RunFileError(shown, f"has {st.st_nlink} hard links (refused: it may be a file outside the run dir)")
        if st.st_size > limit:
            raise RunFileError(shown, f"is {st.st_size} bytes, more than the limit of {limit} bytes")
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return _BoundedFile(fd, st.st_size)


def read_own_file(path: Path, limit: int = TEXT_FILE_LIMIT) -> str:
    """A file the user named (links followed) as UTF-8 text, a leading BOM dropped: opened without
    blocking, refused (RunFileError, nothing read) unless a regular file of at most ``limit`` bytes."""
    try:
        fd = os.open(Path(path).expanduser(), os.O_RDONLY | _BINARY | _NONBLOCK)
    except OSError as err:
        raise RunFileError(path, err.strerror or type(err).__name__) from None
    with _checked(fd, Path(path), limit, own=True) as f:
        return decode_utf8(f.read(), Path(path)).removeprefix("\ufeff")


def read_bytes(path: Path, limit: int, *, root: Path | None = None) -> bytes:
    """The bytes of ``path``, opened by :func:`open_run_file`."""
    with open_run_file(path, limit, root=root) as f:
        return f.read()


def decode_utf8(data: bytes, path: Path) -> str:
    """``data`` as strict UTF-8, else RunFileError naming ``path`` and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RunFileError(path, f"not UTF-8 text (byte {err.start}: {err.reason})") from None


def read_text(path: Path, limit: int, *, root: Path | None = None) -> str:
    """:func:`read_bytes` as strict UTF-8 text."""
    return decode_utf8(read_bytes(path, limit, root=root), Path(path))
