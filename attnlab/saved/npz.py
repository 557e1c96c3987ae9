""".npz archives of a run dir, checked before any member's data is decompressed: the zip directory
(entries, names, compression, declared sizes), each member's .npy header by numpy's reader (dtype
allow-list, rank, shape x itemsize = declared size, named dims equal across members), then
``np.load(allow_pickle=False)``."""
from __future__ import annotations

import contextlib
import math
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from attnlab.core.files import (
    NPY_HEADER_LIMIT,
    NPZ_DIRECTORY_LIMIT,
    NPZ_LIMIT,
    NPZ_MAX_MEMBERS,
    TOKEN_CHARS,
    RunFileError,
    _counters,
    open_run_file,
    printable,
)


@dataclass(frozen=True)
class Member:
    """What a member must be: ``dims`` names each axis (one length per name across members), ``kinds``
    the dtype kinds: ``f`` float32/64, ``i`` int32/64, ``U`` strings of at most :data:`TOKEN_CHARS`."""

    dims: tuple[str, ...]
    kinds: str
    required: bool = True


@dataclass(frozen=True)
class MemberInfo:
    shape: tuple[int, ...]
    info: zipfile.ZipInfo


ATTENTION_MEMBERS = {"steps": Member(("S",), "i"), "weights": Member(("S", "H", "T", "T"), "f"),
                     "tokens": Member(("T",), "U"), "token_ids": Member(("T",), "i"),
                     "layers": Member(("S", "L", "H", "T", "T"), "f", required=False)}  # a GPT's every block
WALKTHROUGH_MEMBERS = {"token_ids": Member(("T",), "i"), "token_embeddings": Member(("T", "d_model"), "f"),
                       "pos_embeddings": Member(("T", "d_model"), "f"), "X": Member(("T", "d_model"), "f"),
                       "Q": Member(("T", "d_k"), "f"), "K": Member(("T", "d_k"), "f"), "V": Member(("T", "d_v"), "f"),
                       "scores": Member(("T", "T"), "f"), "weights": Member(("T", "T"), "f"),
                       "Z": Member(("T", "d_v"), "f")}
_ALLOWED = {"f": "float32, float64", "i": "int32, int64", "U": f"strings of at most {TOKEN_CHARS} characters"}
# what zipfile, zlib and numpy raise on a damaged archive (CRC errors, truncation, bad headers)
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, struct.error, OSError, ValueError, NotImplementedError,
           RuntimeError, UnicodeDecodeError, SyntaxError, TypeError)


def _dtype_ok(dtype: np.dtype, kinds: str) -> bool:
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in kinds:
        return False
    return dtype.itemsize in (4, 8) if dtype.kind in "fi" else 0 < dtype.itemsize <= 4 * TOKEN_CHARS


class NpzArchive(contextlib.AbstractContextManager):
    """An .npz of a run dir, checked as the module docstring says (declared sizes within ``limit``);
    ``infos``: name -> :class:`MemberInfo`; ``strict``: a member not in ``members`` is refused too.
    Every problem is one RunFileError naming the file."""

    def __init__(self, path: Path, members: Mapping[str, Member], limit: int = NPZ_LIMIT, *,
                 root: Path | None = None, strict: bool = False) -> None:
        self.path = Path(path)
        self._file = open_run_file(self.path, limit, root=root)
        self._zip = None
        try:
            self._check_directory()
            self._zip = zipfile.ZipFile(self._file)
            self.infos = self._check_members(members, limit)
            if strict and (unknown := sorted(set(self._zip.namelist()) - {f"{n}.npy" for n in members})):
                raise RunFileError(self.path, f"member {printable(unknown[0], 60)} is not one attnlab writes")
        except BaseException as err:
            self.close()
            raise (self._damaged(err) if isinstance(err, _DAMAGE) else err) from None

    def _damaged(self, err: BaseException) -> RunFileError:
        msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
        why = type(err).__name__ + (f": {printable(msg, 120)}" if msg else "")
        return RunFileError(self.path, f"damaged archive ({why})")

    def _check_directory(self) -> None:
        """The end record's directory size, before zipfile reads the directory (bounding its entries)."""
        tail = b""
        for n in (22, 22 + 65535):  # the end record, then room for a zip comment before it
            n = min(n, self._file.size)
            self._file.seek(self._file.size - n)
            tail = self._file.read(n)
            at = tail.rfind(b"PK\x05\x06")
            if at >= 0 and len(tail) - at >= 22:
                break
        else:
            raise RunFileError(self.path, "not a zip archive (an .npz is one; empty or truncated?)")
        size = struct.unpack("<I", tail[at + 12:at + 16])[0]
        if size > NPZ_DIRECTORY_LIMIT:
            raise RunFileError(self.path, f"zip directory of {size} bytes, more than the limit of "
                               f"{NPZ_DIRECTORY_LIMIT}")
        self._file.seek(0)

    def _check_members(self, members: Mapping[str, Member], limit: int) -> dict[str, MemberInfo]:
        entries = self._zip.infolist()
        names = [i.filename for i in entries]
        if len(entries) > NPZ_MAX_MEMBERS:
            raise RunFileError(self.path, f"{len(entries)} members, more than the limit of {NPZ_MAX_MEMBERS}")
        if len(set(names)) != len(names):
            raise RunFileError(self.path, f"member {printable(next(n for n in names if names.count(n) > 1), 60)} "
                               "appears twice")
        out: dict[str, MemberInfo] = {}
        dims: dict[str, tuple[int, str]] = {}
        total = 0
        for name, spec in members.items():
            if f"{name}.npy" not in names:
                if spec.required:
                    raise RunFileError(self.path, f"no member {name}.npy")
                continue
            info = self._zip.getinfo(f"{name}.npy")
            where = f"member {name}.npy"
            if info.flag_bits & 0x1:
                raise RunFileError(self.path, f"{where} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise RunFileError(self.path, f"{where}: compression method {info.compress_type} "
                                   "(allowed: stored, deflate)")
            total += info.file_size
            if total > limit:
                raise RunFileError(self.path, f"members declare {total} bytes uncompressed, more than the limit "
                                   f"of {limit}")
            try:
                with self._zip.open(info) as f:  # numpy's .npy header reader: a few hundred bytes decompressed
                    version = np.lib.format.read_magic(f)
                    if version not in ((1, 0), (2, 0)):
                        raise RunFileError(self.path, f"{where}: .npy format version {version} (allowed: 1.0, 2.0)")
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read(f, max_header_size=NPY_HEADER_LIMIT)
                    header = f.tell()
            except (ValueError, SyntaxError, TypeError) as err:  # numpy's words for a header that is not one
                why = re.sub(r" at 0x[0-9a-fA-F]+", "", str(err))  # an object's address differs every run
                raise RunFileError(self.path, f"{where}: bad .npy header ({printable(why, 100)})") from None
            if not _dtype_ok(dtype, spec.kinds):
                allowed = "; ".join(_ALLOWED[k] for k in spec.kinds)
                raise RunFileError(self.path, f"{name} has dtype {printable(str(dtype), 60)}, allowed: {allowed}")
            if any(n < 0 for n in shape):
                raise RunFileError(self.path, f"{where}: negative length in shape {shape}")
            if fortran:
                raise RunFileError(self.path, f"{where} is in Fortran order (attnlab writes C order)")
            if len(shape) != len(spec.dims):
                raise RunFileError(self.path, f"{name} has shape {shape}, expected {len(spec.dims)} dimension"
                                   f"{'s' if len(spec.dims) > 1 else ''} ({', '.join(spec.dims)})")
            nbytes = math.prod(shape) * dtype.itemsize
            if header + nbytes != info.file_size:
                raise RunFileError(self.path, f"{where}: its header declares shape {shape} {dtype.str} "
                                   f"({nbytes} bytes) but the member holds {info.file_size - header}")
            for axis, (dim, n) in enumerate(zip(spec.dims, shape)):
                if dims.setdefault(dim, (n, name))[0] != n:
                    raise RunFileError(self.path, f"{name} has {dim}={n} (axis {axis}) but {dims[dim][1]} has "
                                       f"{dim}={dims[dim][0]}")
            out[name] = MemberInfo(tuple(shape), info)
        return out

    def read(self, name: str) -> np.ndarray:
        """Member ``name``, its CRC verified."""
        if name not in self.infos:
            raise RunFileError(self.path, f"no member {name}.npy")
        try:
            with self._zip.open(self.infos[name].info) as f:
                arr = np.load(f, allow_pickle=False, max_header_size=NPY_HEADER_LIMIT)
                f.read(1)  # at the end: zipfile checks the CRC
        except _DAMAGE as err:
            raise self._damaged(err) from None
        _counters["bytes_decompressed"] += arr.nbytes
        codes = np.dtype(np.uint32).newbyteorder(arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "=")
        if arr.dtype.kind == "U" and arr.size and int(arr.view(codes).max()) > 0x10FFFF:
            raise RunFileError(self.path, f"{name} holds a character code outside Unicode")
        return arr

    def read_frame(self, name: str, index: int) -> np.ndarray:
        """Axis-0 slice ``index`` of member ``name``. Raises RunFileError when out of range."""
        n = self.infos[name].shape[0] if name in self.infos else 0
        if not -n <= index < n:
            raise RunFileError(self.path, f"{name} has {n} frames; no frame {index}")
        return self.read(name)[index]

    def verify(self) -> None:
        """Read every member, so a CRC error or truncation is found now."""
        for name in self.infos:
            self.read(name)

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        self._file.close()

    def __exit__(self, *exc) -> None:
        self.close()


def read_npz(path: Path, members: Mapping[str, Member], limit: int = NPZ_LIMIT, *,
             root: Path | None = None, load: Iterable[str] | None = None,
             strict: bool = False) -> dict[str, np.ndarray]:
    """The arrays ``load`` (default all present) of a checked .npz (``strict``: :class:`NpzArchive`)."""
    with NpzArchive(path, members, limit, root=root, strict=strict) as npz:
        return {k: npz.read(k) for k in (list(npz.infos) if load is None else load)}
