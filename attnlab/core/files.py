"""Reading files that someone else may have made, bounded and never blocking, and showing their
text safely: the primitives every reader shares (the tokenizer's ``text_file``, the run-dir
readers of :mod:`attnlab.saved`, the claim of a run dir), and the limits that writers and readers
share, so attnlab never writes a run its own readers refuse.

Errors: :class:`RunFileError` (one line ``<file>: <reason>``), :class:`MissingRunFile`.
"""
from __future__ import annotations

import io
import os
import re
import stat
from pathlib import Path
from typing import Any

from attnlab.core.errors import RunDirError

CONFIG_LIMIT = 256 * 1024  # bytes of a .hydra/*.yaml file (attnlab's are ~1-4 KB)
SUMMARY_LIMIT = 1024 * 1024  # bytes of summary.json (attnlab's are ~1-15 KB)
METRICS_LIMIT = 64 * 1024 * 1024  # bytes of metrics.csv (~25 bytes a step: ~2.5 million steps)
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
CHUNK = 1 << 20  # bytes per read/decompress step

# bytes read from run-dir files, and bytes of .npz member data decompressed (or copied)
_counters = {"bytes_read": 0, "bytes_decompressed": 0}


def counters() -> dict[str, int]:
    """Bytes read from run-dir files and bytes of .npz member data decompressed (or copied)
    by :mod:`attnlab.saved.safe_read` since :func:`reset_counters`: the bound on memory and time the
    tests assert."""
    return dict(_counters)


def reset_counters() -> None:
    for k in _counters:
        _counters[k] = 0


class RunFileError(RunDirError):
    """A file of a run dir cannot be used: one line ``<file>: <reason>`` (``path``, ``reason``)."""

    def __init__(self, path: Any, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{printable(str(path), 300)}: {printable(reason, 1000)}")


class MissingRunFile(RunFileError):
    """The file does not exist (e.g. no summary.json: the run never started)."""


class ResolverInterpolation(RunFileError):
    """A config value is an interpolation that would run a resolver (``${oc.env:X}``, a preset's
    ``${attnlab.per_head:4,${model.n_heads}}``) or has text around it: never resolved here."""


_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ufeff\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` (``str()`` of anything else) safe to print to a terminal or write into a table
    cell or CSV: C0/C1 control characters (ESC, so CSI/OSC sequences; BEL; newlines), DEL,
    bidi overrides and isolates (U+202A-E, U+2066-9, LRM/RLM/ALM), line/paragraph separators,
    BOM and lone surrogates are written as ``\\x1b`` / ``\\n`` / ``\\u202e`` escapes; text
    longer than ``limit`` characters (after escaping) is cut and ends with ``…[+N chars]``
    (N = characters of ``text`` not shown). Work is O(limit) whatever the length of ``text``."""
    if not isinstance(text, str):
        text = str(text)
    head = text[: limit + 1]
    out: list[str] = []
    width = 0
    shown = 0
    for ch in head:
        piece = _escape(ch) if _UNSAFE.match(ch) else ch
        if width + len(piece) > limit:
            break
        out.append(piece)
        width += len(piece)
        shown += 1
    if shown == len(text):
        return "".join(out)
    return "".join(out) + f"…[+{len(text) - shown} chars]"


_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")]
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_DIR_FD = os.open in os.supports_dir_fd and bool(_O_NOFOLLOW)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


class _BoundedFile(io.FileIO):
    """A read-only file that never reads past ``size`` (its size when it was checked) and
    counts what it reads."""

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

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        data = self.read(len(memoryview(b)))
        memoryview(b).cast("B")[: len(data)] = data
        return len(data)


def _split(path: Path, root: Path | None) -> tuple[Path, list[str]]:
    path = Path(path)
    root = path.parent if root is None else Path(root)
    try:
        parts = list(path.relative_to(root).parts)
    except ValueError:
        raise RunFileError(path, f"not inside the run dir {printable(str(root), 300)}") from None
    if not parts or any(p in ("..", ".", "") for p in parts):
        raise RunFileError(path, "not a file path inside the run dir")
    return root, parts


def open_run_file(path: Path, limit: int, *, root: Path | None = None) -> _BoundedFile:
    """Open ``path`` (a file inside the run dir ``root``; default: ``path``'s folder) for
    reading, as a binary file object that never reads past the size checked here. Refuses,
    with :class:`RunFileError` and without reading a byte: a symbolic link anywhere between
    ``root`` and the file, anything but a regular file (FIFO, socket, device, folder), a file
    with more than one hard link, a file larger than ``limit`` bytes; :class:`MissingRunFile`
    when it does not exist. Use as a context manager."""
    root, parts = _split(path, root)
    shown = Path(path)
    if not _DIR_FD:  # no openat (Windows): lstat every component, then open (racy, still no links)
        current = root
        for part in parts:
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                raise MissingRunFile(shown, "missing") from None
            except OSError as err:
                raise RunFileError(shown, f"cannot be read ({type(err).__name__}: {err.strerror})") from None
            if stat.S_ISLNK(st.st_mode):
                raise RunFileError(shown, f"{'' if current == shown else printable(part) + ' '}is a symbolic link "
                                   "(refused: a run dir holds no links)")
        fd = os.open(current, os.O_RDONLY | _O_BINARY | _O_NONBLOCK)
        return _checked(fd, shown, limit)
    try:
        dir_fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except FileNotFoundError:
        raise MissingRunFile(shown, f"missing (no folder {printable(str(root), 300)})") from None
    except OSError as err:
        raise RunFileError(shown, f"run dir cannot be opened ({type(err).__name__}: {err.strerror})") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                st = os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise MissingRunFile(shown, "missing" if last else f"missing (no folder {printable(part)})") from None
            except OSError as err:
                raise RunFileError(shown, f"cannot be read ({type(err).__name__}: {err.strerror})") from None
            if stat.S_ISLNK(st.st_mode):
                where = "" if last else f"its folder {printable(part)} "
                raise RunFileError(shown, f"{where}is a symbolic link (refused: a run dir holds no links)")
            if not last and not stat.S_ISDIR(st.st_mode):
                raise RunFileError(shown, f"{printable(part)} is {_kind(st.st_mode)}, not a folder")
            if last and not stat.S_ISREG(st.st_mode):
                raise RunFileError(shown, f"is {_kind(st.st_mode)}, not a regular file (refused)")
            flags = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | (0 if last else _O_DIRECTORY)
            try:
                fd = os.open(part, flags, dir_fd=dir_fd)
            except OSError as err:  # ELOOP: swapped for a link since the stat
                raise RunFileError(shown, f"cannot be opened ({type(err).__name__}: {err.strerror})") from None
            os.close(dir_fd)
            dir_fd = fd
        fd, dir_fd = dir_fd, -1
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
    return _checked(fd, shown, limit)


def _checked(fd: int, shown: Path, limit: int) -> _BoundedFile:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the lstat: check the descriptor itself
            raise RunFileError(shown, f"is {_kind(st.st_mode)}, not a regular file (refused)")
        if st.st_nlink > 1:
            raise RunFileError(shown, f"has {st.st_nlink} hard links (refused: it may be a file outside the run dir)")
        if st.st_size > limit:
            raise RunFileError(shown, f"is {st.st_size} bytes, more than the limit of {limit} bytes")
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return _BoundedFile(fd, st.st_size)


def read_bytes(path: Path, limit: int, *, root: Path | None = None) -> bytes:
    """The bytes of ``path`` (checked as :func:`open_run_file`; at most ``limit`` bytes)."""
    with open_run_file(path, limit, root=root) as f:
        chunks, left = [], f.size
        while left > 0:
            data = f.read(min(left, CHUNK))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)


def decode_utf8(data: bytes, path: Path) -> str:
    """``data`` as strict UTF-8; raises RunFileError naming ``path`` and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RunFileError(path, f"not UTF-8 text (byte {err.start}: {err.reason})") from None


def read_text(path: Path, limit: int, *, root: Path | None = None) -> str:
    """``path`` as UTF-8 text (strict; at most ``limit`` bytes). Raises RunFileError."""
    return decode_utf8(read_bytes(path, limit, root=root), Path(path))
