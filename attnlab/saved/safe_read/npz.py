""".npz archives of a run dir (``attention.npz``, ``walkthrough.npz``): the zip's central
directory, every member's compression, declared size and ``.npy`` header are checked before one
byte of data is decompressed; dtypes from an allow-list (never object, never pickle); rank and
named dims agree across members; CRC errors and truncation are one-line errors."""
from __future__ import annotations

import contextlib
import io
import math
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from attnlab.saved.safe_read.files import open_run_file
from attnlab.saved.safe_read.limits import (
    CHUNK,
    NPY_HEADER_LIMIT,
    NPZ_DIRECTORY_LIMIT,
    NPZ_LIMIT,
    NPZ_MAX_MEMBERS,
    TOKEN_CHARS,
    _counters,
)
from attnlab.saved.safe_read.text import RunFileError, printable


@dataclass(frozen=True)
class Member:
    """What an .npz member must be: ``dims`` names each axis (the same name must have the same
    length in every member, e.g. ``("S", "H", "T", "T")``), ``kinds`` the allowed dtype kinds:
    ``f`` float32/float64, ``i`` int32/int64, ``U`` strings up to :data:`TOKEN_CHARS`
    characters."""

    dims: tuple[str, ...]
    kinds: str
    required: bool = True


_ITEMSIZES = {"f": (4, 8), "i": (4, 8)}
_ALLOWED = {"f": "float32, float64", "i": "int32, int64", "U": f"strings of at most {TOKEN_CHARS} characters"}


@dataclass(frozen=True)
class MemberInfo:
    """A checked member: its ``shape``, ``dtype``, data bytes ``nbytes``, .npy header bytes
    ``header_size`` and the archive entry."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    header_size: int
    info: zipfile.ZipInfo


def _damaged(path: Path, err: BaseException) -> RunFileError:
    msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return RunFileError(path, f"damaged archive ({type(err).__name__}{': ' + printable(msg, 120) if msg else ''})")


_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, struct.error, OSError, ValueError,
               NotImplementedError, RuntimeError, UnicodeDecodeError)


class NpzArchive:
    """An .npz file of a run dir, opened and checked member by member before any data is read.

    ``NpzArchive(path, members, limit, root=...)`` checks: a zip (central directory at most
    :data:`NPZ_DIRECTORY_LIMIT` bytes and :data:`NPZ_MAX_MEMBERS` entries, no duplicate names,
    no encryption, stored or deflate only), every member of ``members`` present when required,
    its ``.npy`` header (v1/v2, at most :data:`NPY_HEADER_LIMIT` bytes, C order, dtype allowed
    by its :class:`Member`, rank = len(dims)), header shape x itemsize = the member's declared
    size, named dims equal across members. ``infos`` holds the checked :class:`MemberInfo`.
    Reading (:meth:`read`, :meth:`frames`, :meth:`read_frame`) then decompresses at most the
    declared sizes; :meth:`read` and :meth:`frames` verify the CRC. Every problem is one
    RunFileError naming the file. Members not in ``members`` are never read. Use as a context
    manager."""

    def __init__(self, path: Path, members: Mapping[str, Member], limit: int = NPZ_LIMIT, *,
                 root: Path | None = None) -> None:
        self.path = Path(path)
        self.limit = limit
        self.members = dict(members)
        self._file = open_run_file(self.path, limit, root=root)
        try:
            with self._zip_errors():
                self._zip = self._open_zip()
                self.infos = self._check_members()
        except RunFileError:
            self.close()
            raise

    @contextlib.contextmanager
    def _zip_errors(self) -> Iterator[None]:
        """Whatever zipfile, zlib or numpy raise on a damaged archive, as one RunFileError."""
        try:
            yield
        except _ZIP_ERRORS as err:
            raise _damaged(self.path, err) from None

    # -- checks
    def _open_zip(self) -> zipfile.ZipFile:
        end = zipfile._EndRecData(self._file) if hasattr(zipfile, "_EndRecData") else None
        if hasattr(zipfile, "_EndRecData"):
            if end is None:
                raise RunFileError(self.path, "not a zip archive (an .npz is one; empty or truncated?)")
            entries, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
            if entries > NPZ_MAX_MEMBERS:
                raise RunFileError(self.path, f"{entries} members, more than the limit of {NPZ_MAX_MEMBERS}")
            if size > NPZ_DIRECTORY_LIMIT:
                raise RunFileError(self.path, f"zip directory of {size} bytes, more than the limit of "
                                   f"{NPZ_DIRECTORY_LIMIT}")
        self._file.seek(0)
        zf = zipfile.ZipFile(self._file)
        infos = zf.infolist()
        if len(infos) > NPZ_MAX_MEMBERS:
            raise RunFileError(self.path, f"{len(infos)} members, more than the limit of {NPZ_MAX_MEMBERS}")
        names = [i.filename for i in infos]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise RunFileError(self.path, f"member {printable(sorted(dup)[0], 60)} appears twice")
        return zf

    def _check_members(self) -> dict[str, MemberInfo]:
        out: dict[str, MemberInfo] = {}
        dims: dict[str, tuple[int, str]] = {}
        total = 0
        for name, spec in self.members.items():
            try:
                info = self._zip.getinfo(f"{name}.npy")
            except KeyError:
                if spec.required:
                    raise RunFileError(self.path, f"no member {name}.npy") from None
                continue
            where = f"member {name}.npy"
            if info.flag_bits & 0x1:
                raise RunFileError(self.path, f"{where} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise RunFileError(self.path, f"{where}: compression method {info.compress_type} "
                                   "(allowed: stored, deflate)")
            if info.file_size > self.limit:
                raise RunFileError(self.path, f"{where} declares {info.file_size} bytes uncompressed, more than "
                                   f"the limit of {self.limit}")
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise RunFileError(self.path, f"{where} is stored but declares {info.compress_size} bytes "
                                   f"compressed and {info.file_size} uncompressed")
            if info.header_offset + 30 + info.compress_size > self._file.size:
                raise RunFileError(self.path, f"{where} runs past the end of the file (truncated)")
            shape, dtype, header_size = self._npy_header(name, info, spec)
            nbytes = math.prod(shape) * dtype.itemsize
            if header_size + nbytes != info.file_size:
                raise RunFileError(self.path, f"{where}: its header declares shape {shape} {dtype.str} "
                                   f"({nbytes} bytes) but the member holds {info.file_size - header_size}")
            for axis, (dim, n) in enumerate(zip(spec.dims, shape)):
                if dim in dims and dims[dim][0] != n:
                    raise RunFileError(self.path, f"{name} has {dim}={n} (axis {axis}) but {dims[dim][1]} has "
                                       f"{dim}={dims[dim][0]}")
                dims.setdefault(dim, (n, name))
            total += nbytes
            if total > self.limit:
                raise RunFileError(self.path, f"members declare {total} bytes in all, more than the limit of "
                                   f"{self.limit}")
            out[name] = MemberInfo(tuple(shape), dtype, nbytes, header_size, info)
        return out

    def _npy_header(self, name: str, info: zipfile.ZipInfo, spec: Member):
        where = f"member {name}.npy"
        with self._zip.open(info) as f:
            head = f.read(min(12, info.file_size))
            if len(head) < 10 or head[:6] != b"\x93NUMPY":
                raise RunFileError(self.path, f"{where} is not a .npy array")
            major = head[6]
            if major not in (1, 2):
                raise RunFileError(self.path, f"{where}: .npy format version {major} (allowed: 1, 2)")
            fixed = 10 if major == 1 else 12
            if len(head) < fixed:
                raise RunFileError(self.path, f"{where} is not a .npy array")
            hlen = int.from_bytes(head[8:fixed], "little")
            if hlen > NPY_HEADER_LIMIT:
                raise RunFileError(self.path, f"{where}: .npy header of {hlen} bytes, more than {NPY_HEADER_LIMIT}")
            rest = head[fixed:] + f.read(hlen - (len(head) - fixed))
            _counters["bytes_decompressed"] += fixed + len(rest)
        if len(rest) != hlen:
            raise RunFileError(self.path, f"{where}: .npy header cut short")
        reader = (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)
        try:
            shape, fortran, dtype = reader(io.BytesIO(head[8:fixed] + rest), max_header_size=NPY_HEADER_LIMIT)
        except (ValueError, TypeError, SyntaxError) as err:
            why = re.sub(r" at 0x[0-9a-fA-F]+", "", str(err))  # "<ast.Call object at 0x7f..>": the same every time
            raise RunFileError(self.path, f"{where}: bad .npy header ({printable(why, 100)})") from None
        if fortran:
            raise RunFileError(self.path, f"{where} is in Fortran order (attnlab writes C order)")
        if any(n < 0 for n in shape):
            raise RunFileError(self.path, f"{where}: negative length in shape {shape}")
        ok = (not dtype.hasobject and dtype.fields is None and dtype.subdtype is None and dtype.kind in spec.kinds
              and (dtype.itemsize in _ITEMSIZES[dtype.kind] if dtype.kind in _ITEMSIZES
                   else 0 < dtype.itemsize <= 4 * TOKEN_CHARS))
        if not ok:
            allowed = "; ".join(_ALLOWED[k] for k in spec.kinds)
            raise RunFileError(self.path, f"{name} has dtype {printable(str(dtype), 60)}, allowed: {allowed}")
        if len(shape) != len(spec.dims):
            raise RunFileError(self.path, f"{name} has shape {shape}, expected {len(spec.dims)} dimension"
                               f"{'s' if len(spec.dims) > 1 else ''} ({', '.join(spec.dims)})")
        return tuple(int(n) for n in shape), dtype, fixed + hlen

    # -- reading
    def _check_strings(self, name: str, arr: np.ndarray) -> np.ndarray:
        if arr.dtype.kind != "U" or not arr.size:
            return arr
        order = arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "="
        if int(arr.view(np.dtype(np.uint32).newbyteorder(order)).max()) > 0x10FFFF:
            raise RunFileError(self.path, f"{name} holds a character code outside Unicode")
        return arr

    def _stream(self, name: str):
        m = self.infos[name]
        f = self._zip.open(m.info)
        skipped = 0
        while skipped < m.header_size:
            data = f.read(m.header_size - skipped)
            if not data:
                raise RunFileError(self.path, f"member {name}.npy cut short")
            skipped += len(data)
        return f

    def _fill(self, f, name: str, out: np.ndarray) -> None:
        buf = out.reshape(-1).view(np.uint8)
        pos = 0
        while pos < buf.size:
            data = f.read(min(CHUNK, buf.size - pos))
            if not data:
                raise RunFileError(self.path, f"member {name}.npy cut short")
            buf[pos:pos + len(data)] = np.frombuffer(data, np.uint8)
            pos += len(data)
            _counters["bytes_decompressed"] += len(data)

    def read(self, name: str) -> np.ndarray:
        """The whole member ``name`` as an array (CRC verified). Raises RunFileError."""
        m = self.infos.get(name)
        if m is None:
            raise RunFileError(self.path, f"no member {name}.npy")
        with self._zip_errors(), self._stream(name) as f:
            out = np.empty(m.shape, dtype=m.dtype)
            self._fill(f, name, out)
            f.read(1)  # reaches the end: zipfile checks the CRC
        return self._check_strings(name, out)

    def frames(self, name: str) -> Iterator[np.ndarray]:
        """Member ``name`` one axis-0 slice at a time (memory: one frame), CRC verified at the
        end. Raises RunFileError (possibly after yielding frames)."""
        m = self.infos[name]
        with self._zip_errors(), self._stream(name) as f:
            for _ in range(m.shape[0]):
                out = np.empty(m.shape[1:], dtype=m.dtype)
                self._fill(f, name, out)
                yield self._check_strings(name, out)
            f.read(1)

    def read_frame(self, name: str, index: int) -> np.ndarray:
        """One axis-0 slice of member ``name`` (``index`` may be negative): :meth:`read_frames`."""
        return self.read_frames(name, [index])[0]

    def read_frames(self, name: str, indices: Sequence[int]) -> np.ndarray:
        """Axis-0 slices ``indices`` (increasing; negative ones count from the end) of member
        ``name``, as ``(len(indices), *shape[1:])``. For a stored member only those frames'
        bytes are read (no CRC check: the rest is never read); for a deflated one the member is
        decompressed once up to the last frame asked, the data between dropped chunk by chunk.
        Raises RunFileError (also for an index out of range)."""
        m = self.infos[name]
        n = m.shape[0]
        for i in indices:
            if not -n <= i < n:
                raise RunFileError(self.path, f"{name} has {n} frames; no frame {i}")
        idx = [i % n for i in indices]
        if any(b <= a for a, b in zip(idx, idx[1:])):
            raise ValueError(f"frames must be asked in increasing order, not {list(indices)}")
        frame = math.prod(m.shape[1:]) * m.dtype.itemsize
        out = np.empty((len(idx), *m.shape[1:]), dtype=m.dtype)
        with self._zip_errors():
            if m.info.compress_type == zipfile.ZIP_STORED:
                base = self._stored_data_start(name, m)
                for k, i in enumerate(idx):
                    start = base + i * frame
                    if start + frame > self._file.size:
                        raise RunFileError(self.path, f"member {name}.npy runs past the end of the file (truncated)")
                    self._file.seek(start)
                    self._fill(self._file, name, out[k:k + 1])
            else:
                with self._stream(name) as f:
                    done = 0
                    for k, i in enumerate(idx):
                        self._skip(f, name, (i - done) * frame)
                        self._fill(f, name, out[k:k + 1])
                        done = i + 1
        return self._check_strings(name, out)

    def _stored_data_start(self, name: str, m: MemberInfo) -> int:
        """Offset in the file of a stored member's array data (after its local zip header and
        its .npy header)."""
        self._file.seek(m.info.header_offset)
        local = self._file.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise RunFileError(self.path, f"member {name}.npy: bad local header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        return m.info.header_offset + 30 + name_len + extra_len + m.header_size

    def _skip(self, f, name: str, left: int) -> None:
        """Decompress and drop ``left`` bytes of a member's stream, one chunk at a time."""
        while left:
            data = f.read(min(CHUNK, left))
            if not data:
                raise RunFileError(self.path, f"member {name}.npy cut short")
            left -= len(data)
            _counters["bytes_decompressed"] += len(data)

    def verify(self) -> None:
        """Read every checked member through (one chunk in memory at a time) so a CRC error or a
        truncated member is found now. Raises RunFileError."""
        for name, m in self.infos.items():
            with self._zip_errors():
                with self._stream(name) as f:
                    self._skip(f, name, m.nbytes)
                    f.read(1)

    def close(self) -> None:
        if getattr(self, "_zip", None) is not None:
            self._zip.close()
        self._file.close()

    def __enter__(self) -> "NpzArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_npz(path: Path, members: Mapping[str, Member], limit: int = NPZ_LIMIT, *,
             root: Path | None = None, load: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz (checked as :class:`NpzArchive`): every member of ``load``
    (default: every member of ``members`` the archive has). Raises RunFileError."""
    with NpzArchive(path, members, limit, root=root) as npz:
        names = list(npz.infos) if load is None else list(load)
        return {k: npz.read(k) for k in names}

