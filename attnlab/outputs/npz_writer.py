"""An ``.npz`` archive that grows one frame at a time and is finished in place.

``attention.npz`` holds ``weights`` (S, H, T, T) float32, one (H, T, T) frame per snapshot.
:class:`GrowingNpz` writes the frames straight into the archive's hidden partial file, after
a reserved head (the zip local header and the ``.npy`` header of ``weights``). Finishing
writes the real headers into the head, appends the other members and the zip directory, and
renames the file: the frames are never copied, so finishing a run needs no more free disk
than the small members (a few KB), and a run of 1,000 snapshots at T = 256 (262 MB) ends
without reading them into memory or writing them twice.

While the run goes, the ``.npy`` header in the head always describes the frames written so
far: after ``kill -9`` the partial file, from byte :data:`LOCAL_HEADER` on, is a complete
``.npy`` array of the snapshots the run took (``numpy.load`` of that slice reads it).

The finished archive is a standard zip (stored members, zip64 records, fixed timestamps, so
the same records give the same bytes), read by ``numpy.load`` and :mod:`attnlab.saved.safe_read`;
members in the order ``weights``, then the others as given.
"""
from __future__ import annotations

import errno as _errno
import io
import math
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

NAME = b"weights.npy"
_ZIP64_EXTRA_LOCAL = 20  # header id, size, uncompressed and compressed size
LOCAL_HEADER = 30 + len(NAME) + _ZIP64_EXTRA_LOCAL  # bytes of the zip local header of weights.npy
NPY_HEADER = 128  # bytes reserved for the .npy header, as numpy writes one for these shapes (room for ~14 digits a dim)
HEAD = LOCAL_HEADER + NPY_HEADER
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the zip epoch: the same records give the same bytes
_DOS_TIME = 0
_VERSION = 45  # zip64
CHUNK = 1 << 20


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _pwrite(fd: int, data, offset: int) -> int:
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: no pwrite
    return os.write(fd, data)


def _pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)


def write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """``os.pwrite`` all of ``data`` at ``offset`` (a short write is continued); raises OSError."""
    view = memoryview(data).cast("B")
    while view:
        n = _pwrite(fd, view, offset)
        if n <= 0:
            raise OSError(_errno.EIO, "short write")
        view, offset = view[n:], offset + n


def npy_header(shape: tuple[int, ...], dtype: Any, size: int = NPY_HEADER) -> bytes:
    """A ``.npy`` v1.0 header of exactly ``size`` bytes (padded with spaces) for a C-order
    array of ``shape`` and ``dtype``."""
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    text = repr(d).encode("latin1")
    body = size - 10
    if len(text) + 1 > body:
        raise ValueError(f"shape {shape} does not fit a {size}-byte .npy header")
    text = text + b" " * (body - len(text) - 1) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", body) + text


def _local_header(name: bytes, crc: int, size: int) -> bytes:
    extra = struct.pack("<HHQQ", 0x0001, 16, size, size)
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, _VERSION, 0, 0, _DOS_TIME, _DOS_DATE, crc,
                       0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra)) + name + extra


def _central_header(name: bytes, crc: int, size: int, offset: int) -> bytes:
    extra = struct.pack("<HHQQQ", 0x0001, 24, size, size, offset)
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, _VERSION, _VERSION, 0, 0, _DOS_TIME, _DOS_DATE, crc,
                       0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0o644 << 16,
                       0xFFFFFFFF) + name + extra


def _end_records(entries: int, cd_size: int, cd_offset: int) -> bytes:
    zip64_end = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, _VERSION, _VERSION, 0, 0, entries, entries,
                            cd_size, cd_offset)
    locator = struct.pack("<IIQI", 0x07064B50, 0, cd_offset + cd_size, 1)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(entries, 0xFFFF), min(entries, 0xFFFF),
                      min(cd_size, 0xFFFFFFFF), min(cd_offset, 0xFFFFFFFF), 0)
    return zip64_end + locator + end


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=False)
    return buf.getvalue()


class GrowingNpz:
    """The partial file of an ``.npz`` whose first member, ``weights``, grows by one frame per
    :meth:`append` (see the module docstring). Raises OSError from the filesystem; a failed
    append leaves the file holding the frames before it."""

    def __init__(self, path: Path, dtype: Any = np.float32) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.frames = 0
        self.frame_shape: tuple[int, ...] | None = None
        self.error: OSError | None = None  # the error that made finish() drop frames
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                                       0o666 & ~_umask())

    @property
    def frame_bytes(self) -> int:
        return math.prod(self.frame_shape) * self.dtype.itemsize if self.frame_shape else 0

    def append(self, frame: np.ndarray) -> None:
        """Write one frame (same shape every time) and update the ``.npy`` header; the bytes
        reach the OS at once (a ``kill -9`` keeps them)."""
        data = np.ascontiguousarray(frame, dtype=self.dtype)
        if self.frame_shape is None:
            self.frame_shape = tuple(data.shape)
        elif tuple(data.shape) != self.frame_shape:
            raise ValueError(f"frame of shape {data.shape}, expected {self.frame_shape}")
        end = HEAD + self.frames * self.frame_bytes
        try:
            write_all(self._fd, data.reshape(-1).view(np.uint8).data, end)
            write_all(self._fd, npy_header((self.frames + 1, *self.frame_shape), self.dtype), LOCAL_HEADER)
        except OSError:
            self._truncate(end)
            raise
        self.frames += 1

    def _truncate(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            pass

    def finish(self, final: Path, steps: np.ndarray, default_frame: tuple[int, ...], **members: np.ndarray) -> int:
        """Turn the partial file into the archive ``final``: ``weights`` of the first
        ``len(steps)`` frames (shape ``(S, *frame)``; ``default_frame`` when no frame was
        written), ``steps`` (S,) (cut to the frames kept), then ``members`` in order. When the
        filesystem refuses the last bytes (disk full, file-size limit), frames are dropped
        from the end until the archive fits (:attr:`error` then holds the refusal). Returns
        the number of frames kept; raises OSError (the partial file is then removed) when not
        even an archive without frames can be written."""
        steps = np.asarray(steps)
        keep = max(0, min(len(steps), self.frames))
        frame_shape = self.frame_shape or tuple(default_frame)
        fixed = [(f"{k}.npy".encode(), _npy_bytes(v)) for k, v in members.items()]
        try:
            while True:
                tail_members = [(b"steps.npy", _npy_bytes(steps[:keep])), *fixed]
                try:
                    self._write_archive(keep, frame_shape, tail_members)
                    break
                except OSError as err:
                    if err.errno not in (_errno.ENOSPC, _errno.EFBIG, _errno.EDQUOT) or keep == 0:
                        raise
                    self.error = self.error or err
                    fb = math.prod(frame_shape) * self.dtype.itemsize
                    tail = sum(30 + len(n) + _ZIP64_EXTRA_LOCAL + len(b) + 46 + len(n) + 28 for n, b in tail_members)
                    drop = math.ceil((tail + 46 + len(NAME) + 28 + 98 + 8192) / max(fb, 1))
                    keep = max(0, keep - drop)
            os.close(self._fd)
            self._fd = None
            os.replace(self.path, final)
        except BaseException:
            self.discard()
            raise
        self.frames = keep
        return keep

    def _write_archive(self, keep: int, frame_shape: tuple[int, ...], tail_members: list[tuple[bytes, bytes]]) -> None:
        fd = self._fd
        data_end = HEAD + keep * math.prod(frame_shape) * self.dtype.itemsize
        os.ftruncate(fd, data_end)
        header = npy_header((keep, *frame_shape), self.dtype)
        crc = zlib.crc32(header)
        pos = HEAD
        while pos < data_end:
            chunk = _pread(fd, min(CHUNK, data_end - pos), pos)
            if not chunk:
                raise OSError(_errno.EIO, "partial file shorter than its frames")
            crc = zlib.crc32(chunk, crc)
            pos += len(chunk)
        size = NPY_HEADER + data_end - HEAD
        entries = [(NAME, crc, size, 0)]
        tail = io.BytesIO()
        offset = data_end
        for name, body in tail_members:
            local = _local_header(name, zlib.crc32(body), len(body))
            entries.append((name, zlib.crc32(body), len(body), offset))
            tail.write(local)
            tail.write(body)
            offset += len(local) + len(body)
        directory = b"".join(_central_header(n, c, s, o) for n, c, s, o in entries)
        tail.write(directory)
        tail.write(_end_records(len(entries), len(directory), offset))
        try:
            write_all(fd, tail.getvalue(), data_end)
            write_all(fd, _local_header(NAME, crc, size) + header, 0)
        except OSError:
            self._truncate(data_end)
            raise

    def discard(self) -> None:
        """Close and delete the partial file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the partial file, keeping it (a run that stops without finishing)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
