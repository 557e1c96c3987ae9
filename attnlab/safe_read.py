"""The one place that reads files from a run dir someone else may have made (issue 11).

A run dir from someone else is **data, never code**: nothing read here is instantiated, no
OmegaConf interpolation or resolver runs on it, nothing from it is printed raw, and every read
is bounded before it starts. Callers (``attnlab-reproduce``, ``attnlab-compare``, the sweep
table) read run dirs only through this module.

What every reader guarantees (limits are the constants below; docs/security.md has the table):

- **Regular files only, no symbolic links at all.** Every path component from the run dir down
  to the file is opened with ``O_NOFOLLOW`` relative to its parent folder's descriptor, so a
  symlink anywhere inside the run dir (``summary.json -> /dev/zero``, ``.hydra -> ~/.ssh``, even
  ``metrics.csv -> other.csv`` pointing inside) is refused, whatever it points to: attnlab never
  writes a symlink, and "inside" cannot be decided safely for a link that a later rename could
  retarget. The run dir itself (the path the user typed) may be a link. The file is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor: a FIFO, socket, device or
  folder is refused without blocking or reading a byte, and so is a file with more than one hard
  link (a hard link is a second name for a file that may live outside the run dir).
- **Size checked before reading** (``fstat``), and never more than that size read, even if the
  file grows meanwhile (:func:`counters` tallies every byte read and decompressed).
- **YAML** becomes plain data (dict/list/str/int/float/bool/None) through PyYAML's pure-Python
  parser with a bounded number of nodes *after alias expansion* (billion laughs), a bounded
  depth, no tags but the YAML core ones, no merge keys, no duplicate keys. ``${...}`` stays text:
  :func:`interpolations` lists it, :func:`resolve_references` resolves only a whole-string plain
  reference to another scalar key (``d_v: ${model.d_model}``, which Hydra saves unresolved in
  every run) and refuses everything else (``${oc.env:..}``, ``${oc.decode:..}``, any resolver,
  text around an interpolation, cycles, chains, references to sections).
- **JSON** with bounded size and depth; :func:`type_problems` checks field types.
- **metrics.csv**: header ``step,loss``; every row checked (increasing int step, float loss),
  lines bounded; errors name the line.
- **npz**: the zip's central directory, every member's compression, declared size and ``.npy``
  header are checked before one byte of data is decompressed: the header's shape x itemsize
  must equal the member's size, the dtype must be in an allow-list (never object, never
  pickle), the rank and the named dims must agree across members, and the total must be within
  the limit. CRC errors and truncation become one-line errors.
- **printable()**: control characters, escape sequences (ESC, CSI, OSC, C1), bidi overrides and
  lone surrogates are shown escaped (``\\x1b``) and long text is cut with a marker.

Every error is a :class:`RunFileError` (a :class:`~attnlab.errors.RunDirError`), one line:
``<file>: <what is wrong>``; :class:`MissingRunFile` when the file does not exist.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from attnlab.errors import RunDirError

# ----------------------------------------------------------------------------- limits
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

_counters = {"bytes_read": 0, "bytes_decompressed": 0}


def counters() -> dict[str, int]:
    """Bytes read from run-dir files and bytes of .npz member data decompressed (or copied)
    by this module since :func:`reset_counters`: the bound on memory and time the tests assert."""
    return dict(_counters)


def reset_counters() -> None:
    for k in _counters:
        _counters[k] = 0


# ----------------------------------------------------------------------------- errors
class RunFileError(RunDirError):
    """A file of a run dir cannot be used: one line ``<file>: <reason>`` (``path``, ``reason``)."""

    def __init__(self, path: Any, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{printable(str(path), 300)}: {printable(reason, 1000)}")


class MissingRunFile(RunFileError):
    """The file does not exist (e.g. no summary.json: the run never started)."""


# ----------------------------------------------------------------------------- printable
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


# ----------------------------------------------------------------------------- opening files
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


# ----------------------------------------------------------------------------- YAML
def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):  # the pure-Python parser: bounded recursion, stops early
        yaml_implicit_resolvers = {k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

        def __init__(self, stream):
            super().__init__(stream)
            self.depth = 0
            self.nodes = 0

        def compose_node(self, parent, index):
            self.nodes += 1
            if self.nodes > YAML_MAX_NODES:
                raise _Refused(f"more than {YAML_MAX_NODES} YAML nodes")
            self.depth += 1
            try:
                if self.depth > YAML_MAX_DEPTH:
                    raise _Refused(f"nested deeper than {YAML_MAX_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    # the float forms OmegaConf reads (1e-3 without a dot), so values come out as Hydra reads them
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:
         [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
    return Loader


class _Refused(Exception):
    pass


_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("null", "bool", "int", "float", "str")}


def parse_yaml_data(text: str, label: Any = "<yaml>") -> Any:
    """YAML ``text`` as plain data (dict/list/str/int/float/bool/None). Raises RunFileError
    naming ``label``: not YAML, more than one document, more than :data:`YAML_MAX_NODES` nodes
    after alias expansion, deeper than :data:`YAML_MAX_DEPTH`, a recursive alias, a tag other than
    null/bool/int/float/str/seq/map (``!!python/...``, ``!!binary``, ``!custom``), a merge key
    ``<<``, a duplicate key or one that is not a string (``null:``, ``3:``, ``yes:``). Dates stay
    text; ``1e-3`` is a float (as
    OmegaConf reads it). ``${...}`` is kept as text (see :func:`interpolations`)."""
    import yaml

    loader = _yaml_loader()(text)
    try:
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
        if node is None:
            return None
        _check_expansion(node)
        return _construct(node, loader)
    except _Refused as err:
        raise RunFileError(label, f"refused YAML: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RunFileError(label, f"not valid YAML ({where}{printable(what, 120)})") from None
    except (ValueError, OverflowError) as err:  # int('9' * 5000): more digits than Python converts
        raise RunFileError(label, f"refused YAML value ({printable(str(err), 120)})") from None


def _check_expansion(root) -> None:
    """Nodes and depth of the tree the node graph expands to (each alias counted as a full
    copy), computed once per distinct node; raises _Refused past the bounds or on a cycle."""
    import yaml

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_stack: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_stack.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > YAML_MAX_NODES:
                raise _Refused(f"aliases expand to more than {YAML_MAX_NODES} nodes")
            if depth[key] > YAML_MAX_DEPTH:
                raise _Refused(f"aliases nest deeper than {YAML_MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in on_stack:
            raise _Refused("a recursive alias (a node that contains itself)")
        on_stack.add(key)
        stack.append((node, True))
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            for c in _children(node):
                if id(c) in on_stack:
                    raise _Refused("a recursive alias (a node that contains itself)")
                if id(c) not in size:
                    stack.append((c, False))


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def _construct(node, loader) -> Any:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); "
                           "allowed: null, bool, int, float, str, seq, map")
        return {"null": loader.construct_yaml_null, "bool": loader.construct_yaml_bool,
                "int": loader.construct_yaml_int, "float": loader.construct_yaml_float,
                "str": loader.construct_yaml_str}[node.tag[len(_CORE):]](node)
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _CORE + "seq":
            raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); allowed: seq")
        return [_construct(c, loader) for c in node.value]
    if node.tag != _CORE + "map":
        raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); allowed: map")
    out: dict[Any, Any] = {}
    for k, v in node.value:
        if k.tag == _CORE + "merge":
            raise _Refused(f"merge key '<<' (line {k.start_mark.line + 1})")
        if not isinstance(k, yaml.ScalarNode):
            raise _Refused(f"a mapping key that is not a scalar (line {k.start_mark.line + 1})")
        key = _construct(k, loader)
        if not isinstance(key, str):
            raise _Refused(f"a mapping key that is not a string ({printable(repr(key), 40)}, "
                           f"line {k.start_mark.line + 1})")
        if key in out:
            raise _Refused(f"duplicate key {printable(str(key), 60)} (line {k.start_mark.line + 1})")
        out[key] = _construct(v, loader)
    return out


def read_yaml_data(path: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> Any:
    """``path`` (checked as :func:`open_run_file`, at most ``limit`` bytes, UTF-8) parsed by
    :func:`parse_yaml_data`. Never resolves ``${...}``. Raises RunFileError."""
    return parse_yaml_data(read_text(path, limit, root=root), Path(path))


def walk(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(key path, value) of every node of plain data, depth first, in document order: the root
    as ``("", data)``, then ``("a", ...)``, ``("a.b", ...)``, ``("a.b[0]", ...)``."""
    stack = [(prefix, data)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            items = [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))


def interpolations(data: Any) -> list[tuple[str, str]]:
    """``(key path, value)`` of every string in ``data`` that holds ``${`` (an OmegaConf
    interpolation or resolver call, escaped or not), in document order, e.g.
    ``[("model.d_v", "${model.d_model}"), ("sentence", "${oc.env:HOME}")]``."""
    return [(k, v) for k, v in walk(data) if isinstance(v, str) and "${" in v]


HYDRA_SPECIAL = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")


def special_keys(data: Any) -> list[tuple[str, Any]]:
    """``(key path, value)`` of every Hydra instantiation key (``_target_``, ``_args_``,
    ``_partial_``, ``_recursive_``, ``_convert_``) anywhere in ``data``, in document order, e.g.
    ``[("optimizer._target_", "torch.optim.Adam"), ("optimizer.betas[0]._target_", "builtins.open")]``:
    a caller allows the ones it expects and refuses the rest."""
    out = []
    for key, value in walk(data):
        if isinstance(value, dict):
            out.extend((f"{key}.{k}" if key else str(k), v) for k, v in value.items() if k in HYDRA_SPECIAL)
    return out


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


def _lookup(data: Any, dotted: str) -> tuple[bool, Any]:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def resolve_references(data: Any, label: Any = "config.yaml") -> Any:
    """A copy of ``data`` with every plain reference resolved: a string that is exactly
    ``${a.b.c}`` (an absolute key path, no resolver, nothing around it) whose key holds a
    scalar is replaced by that scalar (chains followed up to :data:`REFERENCE_CHAIN`). Hydra
    saves ``d_v: ${model.d_model}`` this way in every run. Any other ``${`` is refused with
    RunFileError naming ``label`` and the key (value shown escaped and cut): resolvers
    (``${oc.env:X}``, ``${oc.decode:..}``, ``${now:..}``), text around an interpolation, relative
    or nested references, references to a missing key, to a section or list, or in a cycle.
    Nothing is evaluated: the result is built from values already in ``data``."""
    found = interpolations(data)
    if not found:
        return data
    resolved: dict[str, Any] = {}
    for key, value in found:
        seen = [key]
        current = value
        for _ in range(REFERENCE_CHAIN + 1):
            m = _REFERENCE.fullmatch(current)
            if m is None:
                why = ("resolvers never run on a shared config" if ":" in current
                       else "only a whole-string ${key.path} reference to another key is allowed")
                raise RunFileError(label, f"{key} holds an interpolation ({printable(value, 60)}); {why}")
            target = m.group(1)
            ok, hit = _lookup(data, target)
            if not ok:
                raise RunFileError(label, f"{key} refers to {target}, which the config does not have")
            if target in seen:
                raise RunFileError(label, f"{key}: the references {' -> '.join(seen + [target])} form a cycle")
            if isinstance(hit, (dict, list)):
                raise RunFileError(label, f"{key} refers to {target}, a section; only a value can be referred to")
            seen.append(target)
            if not (isinstance(hit, str) and "${" in hit):
                resolved[key] = hit
                break
            current = hit
        else:
            raise RunFileError(label, f"{key}: a chain of more than {REFERENCE_CHAIN} references")
    return _replace(data, "", resolved)


def _replace(data: Any, key: str, resolved: dict[str, Any]) -> Any:
    if isinstance(data, dict):
        return {k: _replace(v, f"{key}.{k}" if key else str(k), resolved) for k, v in data.items()}
    if isinstance(data, list):
        return [_replace(v, f"{key}[{i}]", resolved) for i, v in enumerate(data)]
    return resolved.get(key, data)


def select(data: Any, dotted: str, default: Any = None) -> Any:
    """``data["a"]["b"]`` for ``"a.b"`` in plain data (never resolves anything), else ``default``."""
    ok, value = _lookup(data, dotted)
    return value if ok else default


# ----------------------------------------------------------------------------- JSON
def read_json_data(path: Path, limit: int = SUMMARY_LIMIT, *, root: Path | None = None) -> Any:
    """``path`` (checked as :func:`open_run_file`, at most ``limit`` bytes, UTF-8) as plain
    JSON data (NaN/Infinity allowed, as Python writes them). Raises RunFileError: not valid
    JSON (with line and column), nested deeper than :data:`JSON_MAX_DEPTH`, an integer with more
    digits than Python converts."""
    path = Path(path)
    text = read_text(path, limit, root=root)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFileError(path, f"not valid JSON (line {err.lineno} column {err.colno}: {err.msg})") from None
    except RecursionError:
        raise RunFileError(path, f"nested deeper than {JSON_MAX_DEPTH} levels") from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise RunFileError(path, f"refused JSON value ({printable(str(err), 120)})") from None
    stack = [(data, 1)]
    while stack:
        value, d = stack.pop()
        if isinstance(value, (dict, list)):
            if d > JSON_MAX_DEPTH:
                raise RunFileError(path, f"nested deeper than {JSON_MAX_DEPTH} levels")
            stack.extend((v, d + 1) for v in (value.values() if isinstance(value, dict) else value))
    return data


NUMBER = "number"
INTEGER = "integer"
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", bool: "true/false",
               NUMBER: "a number", INTEGER: "an integer", None: "null"}

# summary.json fields attnlab writes (artifacts, cli.run_job, exercises.observe, reproduce)
SUMMARY_TYPES: dict[str, tuple] = {
    "status": (str,), "task": (str,), "started_at": (str,), "error": (str, None),
    "final_loss": (NUMBER, None), "steps_run": (INTEGER,), "steps_to_threshold": (INTEGER, None),
    "wall_time_s": (NUMBER, None), "versions": (dict, None), "n_tokens": (INTEGER,),
    "token_table": (list,), "shapes": (dict,), "max_abs_weight_minus_uniform": (NUMBER,),
    "permutation_check": (dict,), "reproduced_from": (str,),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list", dict: "a dict"}.get(
        type(value), type(value).__name__)


def _is(value: Any, t: Any) -> bool:
    if t is None:
        return value is None
    if t is NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t) and (t is not int or not isinstance(value, bool))


def type_problems(data: Any, types: Mapping[str, tuple], label: str = "summary.json") -> list[str]:
    """One line per field of ``data`` whose type is not one of ``types[field]`` (``str``,
    ``dict``, ``list``, :data:`NUMBER` (int or float, not bool), :data:`INTEGER`, ``None``),
    e.g. ``summary.json: final_loss is a str, expected a number``; ``["summary.json: is a list,
    expected an object"]`` when ``data`` is not a dict. Fields not in ``types`` are not checked."""
    if not isinstance(data, dict):
        return [f"{label}: is {_type_name(data)}, expected an object"]
    out = []
    for key, allowed in types.items():
        if key in data and not any(_is(data[key], t) for t in allowed):
            want = " or ".join(_TYPE_NAMES[t] for t in allowed)
            out.append(f"{label}: {key} is {_type_name(data[key])}, expected {want}")
    return out


# ----------------------------------------------------------------------------- metrics.csv
_INT = re.compile(r"\+?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)


def read_metrics(path: Path, limit: int = METRICS_LIMIT, *, root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)``. Line 1 must start with
    ``step,loss`` (more columns are allowed and ignored); every other non-empty line must have
    a non-negative integer step, larger than the line before, and a float loss (``nan``/``inf``
    as Python writes a diverged loss; spaces around a number and ``\r\n`` are accepted).
    Raises RunFileError naming the file and the line, e.g. ``metrics.csv: line 7: loss 'abc'
    is not a number``; lines longer than :data:`METRICS_LINE_LIMIT` bytes are refused before
    anything is parsed. Rows are parsed by numpy's C reader (~1 s a million rows here); a file
    it rejects is walked line by line to name the first bad line."""
    import warnings

    path = Path(path)
    raw = read_bytes(path, limit, root=root)
    if raw.strip() == b"":
        raise RunFileError(path, "empty (no step,loss header)")
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    bounds = np.concatenate(([-1], ends, [len(raw)]))
    lengths = np.diff(bounds) - 1
    if lengths.max() > METRICS_LINE_LIMIT:
        line = int(np.argmax(lengths > METRICS_LINE_LIMIT)) + 1
        raise RunFileError(path, f"line {line}: longer than {METRICS_LINE_LIMIT} bytes")
    text = decode_utf8(raw, path)
    header = text.split("\n", 1)[0].removesuffix("\r")
    if header.split(",")[:2] != ["step", "loss"]:
        raise RunFileError(path, f"line 1: header must start with step,loss (found '{printable(header, 60)}')")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" for a header-only file
            rows = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=(0, 1), comments=None,
                              dtype=[("step", np.int64), ("loss", np.float64)], ndmin=1, quotechar=None)
        steps, losses = rows["step"].copy(), rows["loss"].copy()
        if steps.size and (steps[0] < 0 or (np.diff(steps) <= 0).any()):
            raise ValueError("steps not increasing")
        return steps, losses
    except (ValueError, OverflowError) as err:
        _first_bad_line(path, text)
        raise RunFileError(path, f"not a step,loss table ({printable(str(err), 120)})") from None


def _first_bad_line(path: Path, text: str) -> None:
    """Raise RunFileError for the first line of ``text`` that is not a valid row (slow path)."""
    previous = None
    for n, line in enumerate(text.split("\n")[1:], start=2):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) < 2:
            raise RunFileError(path, f"line {n}: {len(fields)} field, expected at least 2 (step,loss)")
        step_text, loss_text = fields[0].strip(), fields[1].strip()
        if not _INT.fullmatch(step_text) or int(step_text) >= 2 ** 63:
            raise RunFileError(path, f"line {n}: step '{printable(fields[0], 40)}' is not a non-negative integer")
        if not _FLOAT.fullmatch(loss_text):
            raise RunFileError(path, f"line {n}: loss '{printable(fields[1], 40)}' is not a number")
        if previous is not None and int(step_text) <= previous:
            raise RunFileError(path, f"line {n}: step {int(step_text)} after step {previous} (steps must increase)")
        previous = int(step_text)


# ----------------------------------------------------------------------------- npz
@dataclass(frozen=True)
class Member:
    """What an .npz member must be: ``dims`` names each axis (the same name must have the same
    length in every member, e.g. ``("S", "H", "T", "T")``), ``kinds`` the allowed dtype kinds:
    ``f`` float32/float64, ``i`` int32/int64, ``U`` strings up to :data:`TOKEN_CHARS`
    characters."""

    dims: tuple[str, ...]
    kinds: str
    required: bool = True


ATTENTION_MEMBERS = {"steps": Member(("S",), "i"), "weights": Member(("S", "H", "T", "T"), "f"),
                     "tokens": Member(("T",), "U"), "token_ids": Member(("T",), "i")}
WALKTHROUGH_MEMBERS = {"token_ids": Member(("T",), "i"), "token_embeddings": Member(("T", "d_model"), "f"),
                       "pos_embeddings": Member(("T", "d_model"), "f"), "X": Member(("T", "d_model"), "f"),
                       "Q": Member(("T", "d_k"), "f"), "K": Member(("T", "d_k"), "f"), "V": Member(("T", "d_v"), "f"),
                       "scores": Member(("T", "T"), "f"), "weights": Member(("T", "T"), "f"),
                       "Z": Member(("T", "d_v"), "f")}
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
            self._zip = self._open_zip()
            self.infos = self._check_members()
        except RunFileError:
            self.close()
            raise
        except _ZIP_ERRORS as err:
            self.close()
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
            raise RunFileError(self.path, f"{where}: bad .npy header ({printable(str(err), 100)})") from None
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
        try:
            with self._stream(name) as f:
                out = np.empty(m.shape, dtype=m.dtype)
                self._fill(f, name, out)
                f.read(1)  # reaches the end: zipfile checks the CRC
        except RunFileError:
            raise
        except _ZIP_ERRORS as err:
            raise _damaged(self.path, err) from None
        return self._check_strings(name, out)

    def frames(self, name: str) -> Iterator[np.ndarray]:
        """Member ``name`` one axis-0 slice at a time (memory: one frame), CRC verified at the
        end. Raises RunFileError (possibly after yielding frames)."""
        m = self.infos[name]
        try:
            with self._stream(name) as f:
                for _ in range(m.shape[0]):
                    out = np.empty(m.shape[1:], dtype=m.dtype)
                    self._fill(f, name, out)
                    yield self._check_strings(name, out)
                f.read(1)
        except RunFileError:
            raise
        except _ZIP_ERRORS as err:
            raise _damaged(self.path, err) from None

    def read_frame(self, name: str, index: int) -> np.ndarray:
        """One axis-0 slice of member ``name`` (``index`` may be negative). For a stored member
        only that frame's bytes are read (no CRC check: the rest is never read); for a deflated
        one the data before it is decompressed and dropped chunk by chunk. Raises RunFileError
        (also for an index out of range)."""
        m = self.infos[name]
        n = m.shape[0]
        if not -n <= index < n:
            raise RunFileError(self.path, f"{name} has {n} frames; no frame {index}")
        index %= n
        frame = math.prod(m.shape[1:]) * m.dtype.itemsize
        out = np.empty(m.shape[1:], dtype=m.dtype)
        try:
            if m.info.compress_type == zipfile.ZIP_STORED:
                self._file.seek(m.info.header_offset)
                local = self._file.read(30)
                if len(local) != 30 or local[:4] != b"PK\x03\x04":
                    raise RunFileError(self.path, f"member {name}.npy: bad local header")
                name_len, extra_len = struct.unpack("<HH", local[26:30])
                start = m.info.header_offset + 30 + name_len + extra_len + m.header_size + index * frame
                if start + frame > self._file.size:
                    raise RunFileError(self.path, f"member {name}.npy runs past the end of the file (truncated)")
                self._file.seek(start)
                self._fill(self._file, name, out)
            else:
                with self._stream(name) as f:
                    left = index * frame
                    while left:
                        data = f.read(min(CHUNK, left))
                        if not data:
                            raise RunFileError(self.path, f"member {name}.npy cut short")
                        left -= len(data)
                        _counters["bytes_decompressed"] += len(data)
                    self._fill(f, name, out)
        except RunFileError:
            raise
        except _ZIP_ERRORS as err:
            raise _damaged(self.path, err) from None
        return self._check_strings(name, out)

    def verify(self) -> None:
        """Read every checked member through (one chunk in memory at a time) so a CRC error or a
        truncated member is found now. Raises RunFileError."""
        for name, m in self.infos.items():
            try:
                with self._stream(name) as f:
                    left = m.nbytes
                    while left:
                        data = f.read(min(CHUNK, left))
                        if not data:
                            raise RunFileError(self.path, f"member {name}.npy cut short")
                        left -= len(data)
                        _counters["bytes_decompressed"] += len(data)
                    f.read(1)
            except RunFileError:
                raise
            except _ZIP_ERRORS as err:
                raise _damaged(self.path, err) from None

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


# ----------------------------------------------------------------------------- a run dir
# Every helper below reads one file of ``run_dir``. ``root`` (default: ``run_dir``) is the folder
# from which no symlink is followed: pass the sweep folder the user named when ``run_dir`` is a
# job found inside it, so a job folder that is itself a link is refused too.
HYDRA_DIR = ".hydra"
CONFIG = f"{HYDRA_DIR}/config.yaml"
OVERRIDES = f"{HYDRA_DIR}/overrides.yaml"
HYDRA = f"{HYDRA_DIR}/hydra.yaml"
SUMMARY = "summary.json"
METRICS = "metrics.csv"
ATTENTION = "attention.npz"
WALKTHROUGH = "walkthrough.npz"


def read_config(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> dict[str, Any]:
    """``RUN_DIR/.hydra/config.yaml`` as plain data with plain references resolved
    (:func:`resolve_references`); raises RunFileError (missing, unsafe, not YAML, not a
    mapping, an interpolation other than a plain reference). ``_target_`` keys stay data:
    see :func:`special_keys`."""
    path = Path(run_dir) / CONFIG
    data = read_yaml_data(path, limit, root=root or run_dir)
    if not isinstance(data, dict):
        raise RunFileError(path, f"not a config (a YAML mapping is expected, found {_type_name(data)})")
    return resolve_references(data, path)


def read_overrides(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> list[str]:
    """``RUN_DIR/.hydra/overrides.yaml``: the command-line overrides, a list of strings
    (raw text: pass through :func:`printable` to show). Raises RunFileError."""
    path = Path(run_dir) / OVERRIDES
    data = read_yaml_data(path, limit, root=root or run_dir)
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(o, str) for o in data):
        raise RunFileError(path, "not a list of override strings")
    return data


def read_job_num(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> int | None:
    """``hydra.job.num`` from ``RUN_DIR/.hydra/hydra.yaml`` when it is an integer, else None
    (a single run has ``???``). Raises RunFileError for an unsafe or unreadable file."""
    data = read_yaml_data(Path(run_dir) / HYDRA, limit, root=root or run_dir)
    num = select(data, "hydra.job.num")
    return num if isinstance(num, int) and not isinstance(num, bool) else None


def read_summary(run_dir: Path, limit: int = SUMMARY_LIMIT, *, root: Path | None = None) -> dict[str, Any]:
    """``RUN_DIR/summary.json`` as a dict whose known fields (:data:`SUMMARY_TYPES`) have their
    types. Raises MissingRunFile when absent, RunFileError otherwise (the first problem, and how
    many more)."""
    path = Path(run_dir) / SUMMARY
    data = read_json_data(path, limit, root=root or run_dir)
    problems = type_problems(data, SUMMARY_TYPES, SUMMARY)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFileError(path, problems[0].removeprefix(f"{SUMMARY}: ") + more)
    return data


def read_run_metrics(run_dir: Path, limit: int = METRICS_LIMIT, *,
                     root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_metrics` of ``RUN_DIR/metrics.csv``."""
    return read_metrics(Path(run_dir) / METRICS, limit, root=root or run_dir)


def open_attention(run_dir: Path, limit: int = NPZ_LIMIT, *, root: Path | None = None) -> NpzArchive:
    """``RUN_DIR/attention.npz`` as a checked :class:`NpzArchive` (:data:`ATTENTION_MEMBERS`)."""
    return NpzArchive(Path(run_dir) / ATTENTION, ATTENTION_MEMBERS, limit, root=root or run_dir)


def read_attention(run_dir: Path, keys: Sequence[str] | None = None, limit: int = NPZ_LIMIT, *,
                   root: Path | None = None) -> dict[str, np.ndarray]:
    """``RUN_DIR/attention.npz`` members ``keys`` (default all four: steps (S,), weights
    (S, H, T, T), tokens (T,), token_ids (T,)), checked as :class:`NpzArchive`."""
    return read_npz(Path(run_dir) / ATTENTION, ATTENTION_MEMBERS, limit, root=root or run_dir, load=keys)


def read_last_snapshot(run_dir: Path, limit: int = NPZ_LIMIT, *,
                       root: Path | None = None) -> tuple[int, np.ndarray] | None:
    """``(step, weights (H, T, T))`` of the last snapshot in ``RUN_DIR/attention.npz``, or None
    when it has none; reads the steps and that one frame only. Raises RunFileError."""
    with open_attention(run_dir, limit, root=root) as npz:
        steps = npz.read("steps")
        if not steps.size:
            return None
        return int(steps[-1]), npz.read_frame("weights", -1)


def read_walkthrough(run_dir: Path, limit: int = NPZ_LIMIT, *, root: Path | None = None) -> dict[str, np.ndarray]:
    """``RUN_DIR/walkthrough.npz`` (:data:`WALKTHROUGH_MEMBERS`: token_ids (T,), X (T, d_model),
    Q/K (T, d_k), V/Z (T, d_v), scores/weights (T, T), ...), checked as :class:`NpzArchive`."""
    return read_npz(Path(run_dir) / WALKTHROUGH, WALKTHROUGH_MEMBERS, limit, root=root or run_dir)
