"""Opening a file of a run dir: no symbolic link anywhere, regular files only, at most one hard
link, the size checked with ``fstat`` before reading and never more than that read."""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from attnlab.saved.safe_read.limits import CHUNK, _counters
from attnlab.saved.safe_read.text import MissingRunFile, RunFileError, printable

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

