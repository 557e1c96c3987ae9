"""The one reader of run dirs someone else made (docs/security.md). A run dir is data, never code:
every file is opened by :func:`attnlab.core.files.open_run_file`; YAML is composed, checked on its
node graph (nodes after alias expansion, depth, core tags only, no merge or duplicate keys), then
constructed by CSafeLoader; JSON, metrics.csv and .npz (the zip directory, each member's .npy header,
then ``np.load(allow_pickle=False)``) are bounded and checked. Every error is one line,
:class:`RunFileError` ``<file>: <what is wrong>`` (:class:`MissingRunFile` when absent)."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import struct
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import yaml

from attnlab.core import files
from attnlab.core.config import select, walk
from attnlab.core.files import *  # noqa: F401,F403  (the limits, printable, the bounded reads, the errors)
from attnlab.core.files import RunFileError, decode_utf8, open_run_file, printable, read_bytes, read_text
from attnlab.outputs.artifacts import ATTENTION, METRICS, SUMMARY, WALKTHROUGH  # the names the writer gives them

CONFIG = ".hydra/config.yaml"
OVERRIDES = ".hydra/overrides.yaml"
HYDRA = ".hydra/hydra.yaml"


_CORE = "tag:yaml.org,2002:"
_TAGS = {_CORE + t for t in ("null", "bool", "int", "float", "str", "seq", "map")}
MAX_NUMBER_CHARS = 4300  # Python's limit on the digits of an int converted from text
MAX_INT_BITS = 14_284  # 2**14284 < 10**4300: an int this size prints within Python's limit
_NUMERIC = re.compile(r"[-+]?[0-9.][0-9_:.eE+-]*")


@functools.cache
def _loader() -> type:
    """CSafeLoader without timestamps, reading ``1e-3`` as a float as OmegaConf does."""
    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        yaml_implicit_resolvers = {k: [(t, r) for t, r in v if t != _CORE + "timestamp"]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    Loader.add_implicit_resolver(_CORE + "float", re.compile(r"""^(?:
         [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
    return Loader


def _measure(node: yaml.Node, memo: dict[int, Any], level: int = 1) -> tuple[int, int]:
    """(nodes with aliases expanded, depth) of a composed ``node`` at nesting ``level``; an alias is its
    anchor's node again, measured once (``memo``: id -> result, None while inside it), never expanded.
    ValueError for a recursive alias, a tag but the core schema's, a number longer than
    :data:`MAX_NUMBER_CHARS`, a key not a string, a merge or duplicate key, or past the bounds."""
    if id(node) in memo:
        if memo[id(node)] is None:
            raise ValueError("an alias of a node it is inside (recursive) or of no anchor")
        return memo[id(node)]
    if node.tag not in _TAGS:
        raise ValueError(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); "
                         "allowed: null, bool, int, float, str, seq, map")
    if isinstance(node, yaml.ScalarNode):
        if not node.style and len(node.value) > MAX_NUMBER_CHARS and _NUMERIC.fullmatch(node.value):
            raise ValueError(f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS})")
        return 1, 1
    if level > files.YAML_MAX_DEPTH:
        raise ValueError(f"nested deeper than {files.YAML_MAX_DEPTH} levels")
    mapping = isinstance(node, yaml.MappingNode)
    keys: set[str] = set()
    for key, _ in node.value if mapping else ():
        line = f"(line {key.start_mark.line + 1})"
        if not isinstance(key, yaml.ScalarNode):
            raise ValueError(f"a mapping key that is not a string {line}")
        if key.tag == _CORE + "merge":
            raise ValueError(f"merge key '<<' {line}")
        if key.value in keys:
            raise ValueError(f"duplicate key {printable(key.value, 60)} {line}")
        keys.add(key.value)
    memo[id(node)] = None
    size, depth = 1, 1
    for child in [n for pair in node.value for n in pair] if mapping else node.value:
        n, d = _measure(child, memo, level + 1)
        size, depth = size + n, max(depth, d + 1)
    if size > files.YAML_MAX_NODES:
        raise ValueError(f"more than {files.YAML_MAX_NODES} YAML nodes (aliases expanded)")
    if level - 1 + depth > files.YAML_MAX_DEPTH:
        raise ValueError(f"nested deeper than {files.YAML_MAX_DEPTH} levels (aliases expanded)")
    memo[id(node)] = size, depth
    return size, depth


def parse_yaml_data(text: str, label: Any = "<yaml>") -> Any:
    """YAML ``text`` as plain data: composed, :func:`_measure`-d, then constructed (one document).
    Raises RunFileError naming ``label``: ``not valid YAML (line N: ...)`` or ``refused YAML: ...``."""
    loader = _loader()(text)
    try:
        node, data = loader.get_single_node(), None  # node None: no document
        if node is not None:
            _measure(node, {})
            data = loader.construct_document(node)
        for _, value in walk(data):
            if isinstance(value, dict) and not all(isinstance(k, str) for k in value):
                bad = next(k for k in value if not isinstance(k, str))
                raise ValueError(f"a mapping key that is not a string ({printable(repr(bad), 40)})")
            if isinstance(value, str) and re.search("[\ud800-\udfff]", value):
                raise ValueError("a lone surrogate in a string")
            if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                raise ValueError(f"an integer of {value.bit_length()} bits (more than Python prints)")
    except (yaml.YAMLError, RecursionError) as err:
        problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
        if problem == "exceeded maximum nesting depth" or isinstance(err, RecursionError):  # the parser's own bound
            raise RunFileError(label, f"refused YAML: nested deeper than {files.YAML_MAX_DEPTH} levels") from None
        why = printable(problem or str(err).splitlines()[0], 120)
        raise RunFileError(label, f"not valid YAML ({f'line {mark.line + 1}: ' if mark else ''}{why})") from None
    except ValueError as err:
        raise RunFileError(label, f"refused YAML: {printable(err, 200)}") from None
    except (LookupError, TypeError, ArithmeticError) as err:  # !!bool maybe, !!int ''
        raise RunFileError(label, f"refused YAML: a value its tag does not allow ({type(err).__name__}: "
                           f"{printable(err, 100)})") from None
    finally:
        loader.dispose()
    return data


def read_yaml_data(path: Path, limit: int = files.CONFIG_LIMIT, *, root: Path | None = None) -> Any:
    return parse_yaml_data(read_text(path, limit, root=root), Path(path))


def read_json_data(path: Path, limit: int = files.SUMMARY_LIMIT, *, root: Path | None = None) -> Any:
    """``path`` as JSON (NaN/Infinity allowed), nested at most :data:`JSON_MAX_DEPTH` levels."""
    path = Path(path)
    text = read_text(path, limit, root=root)
    deep = f"nested deeper than {files.JSON_MAX_DEPTH} levels"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFileError(path, f"not valid JSON (line {err.lineno} column {err.colno}: {err.msg})") from None
    except RecursionError:
        raise RunFileError(path, deep) from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise RunFileError(path, f"refused JSON value ({printable(str(err), 120)})") from None
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > files.JSON_MAX_DEPTH:
                raise RunFileError(path, deep)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return data


def read_run_metrics(run_dir: Path, limit: int = files.METRICS_LIMIT, *,
                     root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``RUN_DIR/metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)``: header ``step,loss``,
    steps non-negative and increasing. Raises RunFileError naming the line."""
    path = Path(run_dir) / METRICS
    raw = read_bytes(path, limit, root=root or run_dir)
    lengths = np.diff(np.concatenate(([-1], np.flatnonzero(np.frombuffer(raw, np.uint8) == 10), [len(raw)]))) - 1
    if (lengths > files.METRICS_LINE_LIMIT).any():
        raise RunFileError(path, f"line {int(np.argmax(lengths > files.METRICS_LINE_LIMIT)) + 1}: longer than "
                           f"{files.METRICS_LINE_LIMIT} bytes")
    lines = decode_utf8(raw, path).split("\n")
    if not lines[0].strip():
        raise RunFileError(path, "empty (no step,loss header)")
    if lines[0].rstrip("\r").split(",")[:2] != ["step", "loss"]:
        raise RunFileError(path, f"line 1: header must start with step,loss (found '{printable(lines[0], 60)}')")
    try:  # numpy's C reader (~1 s a million rows); a file it refuses is walked line by line below
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data": a header-only file
            rows = np.loadtxt(lines[1:], delimiter=",", usecols=(0, 1), comments=None, quotechar=None, ndmin=1,
                              dtype=[("step", np.int64), ("loss", np.float64)])
        if not rows.size or (rows["step"][0] >= 0 and (np.diff(rows["step"]) > 0).all()):
            return rows["step"].copy(), rows["loss"].copy()
    except (ValueError, OverflowError):
        pass
    steps, losses = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) < 2:
            raise RunFileError(path, f"line {n}: 1 field, expected at least 2 (step,loss)")
        if not re.fullmatch(r"\s*\+?[0-9]+\s*", fields[0]) or int(fields[0]) >= 2 ** 63:
            raise RunFileError(path, f"line {n}: step '{printable(fields[0], 40)}' is not a non-negative integer")
        try:
            loss = float(fields[1].replace("_", "x"))  # float() would read 1_0 as 10
        except ValueError:
            raise RunFileError(path, f"line {n}: loss '{printable(fields[1], 40)}' is not a number") from None
        if steps and int(fields[0]) <= steps[-1]:
            raise RunFileError(path, f"line {n}: step {int(fields[0])} after step {steps[-1]} (steps must increase)")
        steps.append(int(fields[0]))
        losses.append(loss)
    return np.array(steps, dtype=np.int64), np.array(losses, dtype=np.float64)


def interpolations(data: Any) -> list[tuple[str, str]]:
    """``(key path, value)`` of every string holding ``${``."""
    return [(k, v) for k, v in walk(data) if isinstance(v, str) and "${" in v]


HYDRA_SPECIAL = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")


def special_keys(data: Any) -> list[tuple[str, Any]]:
    """``(key path, value)`` of every Hydra instantiation key (:data:`HYDRA_SPECIAL`) in ``data``."""
    return [(f"{key}.{k}" if key else str(k), v) for key, value in walk(data) if isinstance(value, dict)
            for k, v in value.items() if k in HYDRA_SPECIAL]


_MISSING = object()
_REFERENCE = re.compile(r"\$\{([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\}")


def resolve_references(data: Any, label: Any = "config.yaml") -> Any:
    r"""A copy of ``data`` where a string that is exactly ``${a.b}`` naming a scalar becomes it
    (chains up to :data:`REFERENCE_CHAIN`) and a wholly escaped ``\${`` becomes text. RunFileError for
    any other ``${`` (a resolver is never run), a missing key, a section, a cycle or a long chain."""
    resolved: dict[str, Any] = {}
    for key, value in interpolations(data):
        seen, current = [key], value
        for _ in range(files.REFERENCE_CHAIN + 1):
            if all(len(m) == 1 for m in re.findall(r"(\\*)\$\{", current)):  # every ${ escaped once
                resolved[key] = current.replace("\\${", "${")
                break
            m = _REFERENCE.fullmatch(current)
            if m is None:
                why = ("resolvers never run on a shared config" if ":" in current
                       else "only a whole-string ${key.path} reference to another key is allowed")
                raise RunFileError(label, f"{key} holds an interpolation ({printable(value, 60)}); {why}")
            target = m.group(1)
            hit = select(data, target, _MISSING)
            if hit is _MISSING:
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
            raise RunFileError(label, f"{key}: a chain of more than {files.REFERENCE_CHAIN} references")
    return _replace(data, "", resolved) if resolved else data


def _replace(data: Any, key: str, resolved: dict[str, Any]) -> Any:
    if isinstance(data, dict):
        return {k: _replace(v, f"{key}.{k}" if key else str(k), resolved) for k, v in data.items()}
    if isinstance(data, list):
        return [_replace(v, f"{key}[{i}]", resolved) for i, v in enumerate(data)]
    return resolved.get(key, data)


def type_name(value: Any) -> str:
    """``a str``, ``an int``, ``null``, ..."""
    names = {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list", dict: "a dict"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


NUMBER, NULL = (int, float), type(None)
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", NUMBER: "a number", int: "an integer", NULL: "null"}
# summary.json fields attnlab writes; task and config are null for a job refused for a bad value
SUMMARY_TYPES: dict[str, tuple] = {
    "status": (str,), "task": (str, NULL), "started_at": (str,), "error": (str, NULL),
    "config": (dict, NULL), "overrides": (list,),
    "final_loss": (NUMBER, NULL), "steps_run": (int,), "steps_to_threshold": (int, NULL),
    "wall_time_s": (NUMBER, NULL), "versions": (dict, NULL), "n_tokens": (int,),
    "token_table": (list,), "shapes": (dict,), "max_abs_weight_minus_uniform": (NUMBER,),
    "permutation_check": (dict,), "reproduced_from": (str,), "job_num": (int, NULL),
}


def type_problems(data: Any, types: Mapping[str, tuple], label: str = SUMMARY) -> list[str]:
    """One line per field of ``data`` not of a type in ``types[field]`` (a bool is no number)."""
    if not isinstance(data, dict):
        return [f"{label}: is {type_name(data)}, expected an object"]
    return [f"{label}: {k} is {type_name(v)}, expected {' or '.join(_TYPE_NAMES[t] for t in types[k])}"
            for k, v in data.items() if k in types and (isinstance(v, bool) or not isinstance(v, types[k]))]


# ``root`` (default ``run_dir``): no link is followed below it (the sweep folder a job was found in)
def read_config(run_dir: Path, limit: int = files.CONFIG_LIMIT, *, root: Path | None = None,
                resolve: bool = True) -> dict[str, Any]:
    """``.hydra/config.yaml`` as a mapping, plain references resolved unless ``resolve=False``."""
    path = Path(run_dir) / CONFIG
    data = read_yaml_data(path, limit, root=root or run_dir)
    if not isinstance(data, dict):
        raise RunFileError(path, f"not a config (a YAML mapping is expected, found {type_name(data)})")
    return resolve_references(data, path) if resolve else data


def read_overrides(run_dir: Path, limit: int = files.CONFIG_LIMIT, *, root: Path | None = None) -> list[str]:
    """``.hydra/overrides.yaml``: the command-line overrides (raw text)."""
    path = Path(run_dir) / OVERRIDES
    data = read_yaml_data(path, limit, root=root or run_dir)
    if data is not None and not (isinstance(data, list) and all(isinstance(o, str) for o in data)):
        raise RunFileError(path, "not a list of override strings")
    return data or []


def read_job_num(run_dir: Path, limit: int = files.CONFIG_LIMIT, *, root: Path | None = None) -> int | None:
    """``hydra.job.num`` of ``.hydra/hydra.yaml`` when an integer, else None."""
    num = select(read_yaml_data(Path(run_dir) / HYDRA, limit, root=root or run_dir), "hydra.job.num")
    return num if isinstance(num, int) and not isinstance(num, bool) else None


def read_summary(run_dir: Path, limit: int = files.SUMMARY_LIMIT, *, root: Path | None = None) -> dict[str, Any]:
    """``summary.json`` with its fields (:data:`SUMMARY_TYPES`) type-checked; MissingRunFile when absent."""
    path = Path(run_dir) / SUMMARY
    data = read_json_data(path, limit, root=root or run_dir)
    problems = type_problems(data, SUMMARY_TYPES)
    if not problems:
        odd = [o for o in data.get("overrides", []) if not isinstance(o, str)]
        problems = [f"{SUMMARY}: overrides holds {type_name(odd[0])}, expected strings"] if odd else []
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFileError(path, problems[0].removeprefix(f"{SUMMARY}: ") + more)
    return data


@dataclass(frozen=True)
class Member:
    """What a member must be: ``dims`` names each axis (one length per name across members), ``kinds``
    the dtype kinds: ``f`` float32/64, ``i`` int32/64, ``U`` strings of at most :data:`TOKEN_CHARS`."""

    dims: tuple[str, ...]
    kinds: str
    required: bool = True


ATTENTION_MEMBERS = {"steps": Member(("S",), "i"), "weights": Member(("S", "H", "T", "T"), "f"),
                     "tokens": Member(("T",), "U"), "token_ids": Member(("T",), "i"),
                     "layers": Member(("S", "L", "H", "T", "T"), "f", required=False)}  # a GPT's every block
WALKTHROUGH_MEMBERS = {"token_ids": Member(("T",), "i"), "token_embeddings": Member(("T", "d_model"), "f"),
                       "pos_embeddings": Member(("T", "d_model"), "f"), "X": Member(("T", "d_model"), "f"),
                       "Q": Member(("T", "d_k"), "f"), "K": Member(("T", "d_k"), "f"), "V": Member(("T", "d_v"), "f"),
                       "scores": Member(("T", "T"), "f"), "weights": Member(("T", "T"), "f"),
                       "Z": Member(("T", "d_v"), "f")}
_ALLOWED = {"f": "float32, float64", "i": "int32, int64", "U": f"strings of at most {files.TOKEN_CHARS} characters"}
# what zipfile, zlib and numpy raise on a damaged archive (CRC errors, truncation, bad headers, encryption)
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, struct.error, OSError, ValueError, NotImplementedError,
           RuntimeError, UnicodeDecodeError, SyntaxError, TypeError)


class NpzArchive(contextlib.AbstractContextManager):
    """An .npz of a run dir, checked as the module docstring says (the zip's end record before zipfile
    reads its directory; declared sizes within ``limit`` before anything is decompressed); ``shapes``:
    name -> shape of each member present; ``strict``: a member not in ``members`` is refused too.
    Every problem is one RunFileError naming the file."""

    def __init__(self, path: Path, members: Mapping[str, Member], limit: int = files.NPZ_LIMIT, *,
                 root: Path | None = None, strict: bool = False) -> None:
        self.path = Path(path)
        self._file = open_run_file(self.path, limit, root=root)
        self._zip = None
        try:
            for n in (42, 42 + 65535):  # the end record and a zip64 locator before it, then room for a zip comment
                self._file.seek(max(0, self._file.size - n))
                tail = self._file.read(n)
                at = tail.rfind(b"PK\x05\x06")
                if 0 <= at <= len(tail) - 22 and (at >= 20 or len(tail) == self._file.size):
                    break
            else:
                raise RunFileError(self.path, "not a zip archive (an .npz is one; empty or truncated?)")
            if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":  # zipfile would take the sizes from it
                raise RunFileError(self.path, "a zip64 end record (refused: an .npz attnlab writes has none)")
            if (size := int.from_bytes(tail[at + 12:at + 16], "little")) > files.NPZ_DIRECTORY_LIMIT:
                raise RunFileError(self.path, f"zip directory of {size} bytes, more than the limit of "
                                   f"{files.NPZ_DIRECTORY_LIMIT}")
            self._zip = zipfile.ZipFile(self._file)
            self.shapes = self._check_members(members, limit, strict)
        except BaseException as err:
            self.close()
            raise (self._damaged(err) if isinstance(err, _DAMAGE) else err) from None

    def _damaged(self, err: BaseException) -> RunFileError:
        msg = printable(str(err).strip().partition("\n")[0], 120)
        return RunFileError(self.path, f"damaged archive ({type(err).__name__}{': ' + msg if msg else ''})")

    def _check_members(self, members: Mapping[str, Member], limit: int, strict: bool) -> dict[str, tuple[int, ...]]:
        names = self._zip.namelist()
        if len(names) > files.NPZ_MAX_MEMBERS:
            raise RunFileError(self.path, f"{len(names)} members, more than the limit of {files.NPZ_MAX_MEMBERS}")
        if twice := [n for n in names if names.count(n) > 1]:
            raise RunFileError(self.path, f"member {printable(twice[0], 60)} appears twice")
        if strict and (unknown := sorted(set(names) - {f"{n}.npy" for n in members})):
            raise RunFileError(self.path, f"member {printable(unknown[0], 60)} is not one attnlab writes")
        infos = {n: self._zip.getinfo(f"{n}.npy") for n in members if f"{n}.npy" in names}
        for info in infos.values():  # zipfile refuses an encrypted member when it is opened
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise RunFileError(self.path, f"member {info.filename}: compression method {info.compress_type} "
                                   "(allowed: stored, deflate)")
        if (total := sum(info.file_size for info in infos.values())) > limit:
            raise RunFileError(self.path, f"members declare {total} bytes uncompressed, more than the limit of {limit}")
        shapes: dict[str, tuple[int, ...]] = {}
        dims: dict[str, tuple[int, str]] = {}
        for name, spec in members.items():
            if name not in infos:
                if spec.required:
                    raise RunFileError(self.path, f"no member {name}.npy")
                continue
            info, where = infos[name], f"member {name}.npy"
            try:
                with self._zip.open(info.filename) as f:  # numpy's .npy header reader: a few hundred bytes decompressed
                    version = np.lib.format.read_magic(f)
                    if version not in ((1, 0), (2, 0)):
                        raise RunFileError(self.path, f"{where}: .npy format version {version} (allowed: 1.0, 2.0)")
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read(f, max_header_size=files.NPY_HEADER_LIMIT)
                    header = f.tell()
            except (ValueError, SyntaxError, TypeError) as err:  # numpy's words for a header that is not one
                why = re.sub(r" at 0x[0-9a-fA-F]+", "", str(err))  # an object's address differs every run
                raise RunFileError(self.path, f"{where}: bad .npy header ({printable(why, 100)})") from None
            itemsizes = (4, 8) if dtype.kind in "fi" else range(1, 4 * files.TOKEN_CHARS + 1)  # U: 4 bytes a character
            if (dtype.kind not in spec.kinds or dtype.itemsize not in itemsizes or dtype.hasobject
                    or dtype.fields is not None or dtype.subdtype is not None):
                allowed = "; ".join(_ALLOWED[k] for k in spec.kinds)
                raise RunFileError(self.path, f"{name} has dtype {printable(str(dtype), 60)}, allowed: {allowed}")
            if any(n < 0 for n in shape):
                raise RunFileError(self.path, f"{where}: negative length in shape {shape}")
            if fortran:
                raise RunFileError(self.path, f"{where} is in Fortran order (attnlab writes C order)")
            if len(shape) != len(spec.dims):
                raise RunFileError(self.path, f"{name} has shape {shape}, expected {len(spec.dims)} dimension"
                                   f"{'s' if len(spec.dims) > 1 else ''} ({', '.join(spec.dims)})")
            if header + (nbytes := math.prod(shape) * dtype.itemsize) != info.file_size:
                raise RunFileError(self.path, f"{where}: its header declares shape {shape} {dtype.str} "
                                   f"({nbytes} bytes) but the member holds {info.file_size - header}")
            for axis, (dim, n) in enumerate(zip(spec.dims, shape)):
                if dims.setdefault(dim, (n, name))[0] != n:
                    raise RunFileError(self.path, f"{name} has {dim}={n} (axis {axis}) but {dims[dim][1]} has "
                                       f"{dim}={dims[dim][0]}")
            shapes[name] = tuple(shape)
        return shapes

    def read(self, name: str) -> np.ndarray:
        """Member ``name``, its CRC verified."""
        if name not in self.shapes:
            raise RunFileError(self.path, f"no member {name}.npy")
        try:
            with self._zip.open(f"{name}.npy") as f:
                arr = np.load(f, allow_pickle=False, max_header_size=files.NPY_HEADER_LIMIT)
                f.read(1)  # at the end: zipfile checks the CRC
        except _DAMAGE as err:
            raise self._damaged(err) from None
        files._counters["bytes_decompressed"] += arr.nbytes
        codes = np.dtype(np.uint32).newbyteorder(arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "=")
        if arr.dtype.kind == "U" and arr.size and int(arr.view(codes).max()) > 0x10FFFF:
            raise RunFileError(self.path, f"{name} holds a character code outside Unicode")
        return arr

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        self._file.close()

    def __exit__(self, *exc) -> None:
        self.close()


def read_npz(path: Path, members: Mapping[str, Member], limit: int = files.NPZ_LIMIT, *,
             root: Path | None = None, load: Iterable[str] | None = None,
             strict: bool = False) -> dict[str, np.ndarray]:
    """The arrays ``load`` (default all present) of a checked .npz (``strict``: :class:`NpzArchive`)."""
    with NpzArchive(path, members, limit, root=root, strict=strict) as npz:
        return {k: npz.read(k) for k in (list(npz.shapes) if load is None else load)}


def open_attention(run_dir: Path, limit: int = files.NPZ_LIMIT, *, root: Path | None = None) -> NpzArchive:
    """``attention.npz`` as a checked :class:`NpzArchive`."""
    return NpzArchive(Path(run_dir) / ATTENTION, ATTENTION_MEMBERS, limit, root=root or run_dir)


def read_attention(run_dir: Path, keys: Sequence[str] | None = None, limit: int = files.NPZ_LIMIT, *,
                   root: Path | None = None) -> dict[str, np.ndarray]:
    """``attention.npz`` members ``keys`` (default all: steps (S,), weights (S, H, T, T), tokens, token_ids)."""
    return read_npz(Path(run_dir) / ATTENTION, ATTENTION_MEMBERS, limit, root=root or run_dir, load=keys)


def read_last_snapshot(run_dir: Path, limit: int = files.NPZ_LIMIT, *,
                       root: Path | None = None) -> tuple[int, np.ndarray] | None:
    """``(step, weights (H, T, T))`` of attention.npz's last snapshot, None without one."""
    with open_attention(run_dir, limit, root=root) as archive:
        steps = archive.read("steps")
        return (int(steps[-1]), archive.read("weights")[-1]) if steps.size else None


def read_walkthrough(run_dir: Path, limit: int = files.NPZ_LIMIT, *, root: Path | None = None,
                     keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``walkthrough.npz`` members ``keys`` (default all, :data:`WALKTHROUGH_MEMBERS`)."""
    return read_npz(Path(run_dir) / WALKTHROUGH, WALKTHROUGH_MEMBERS, limit, root=root or run_dir, load=keys)


def exists(run_dir: Path, name: str) -> bool:
    """Whether ``RUN_DIR/name`` is there in any form (a link too: reading it is refused)."""
    return os.path.lexists(Path(run_dir) / name)


def file_problem(err: RunFileError, run_dir: Path) -> str:
    """``err`` as one line naming its file relative to ``run_dir``."""
    path = Path(err.path)
    name = path.relative_to(run_dir).as_posix() if path.is_relative_to(run_dir) else path.name
    return f"{printable(name, 300)}: {printable(err.reason, 1000)}"


def output_problem(out: Path, run_dirs: Iterable[Path], *, key: str = "--out", allow: Sequence[str] = ()) -> str | None:
    """Why a tool must not write ``out``, or None: it is (inside) a run dir it reads, unless a file
    named in ``allow`` directly in it. ``key`` names the option in the line."""
    target = Path(os.path.realpath(out))
    for run in run_dirs:
        run = Path(os.path.realpath(run))
        if (target == run or run in target.parents) and not (target.parent == run and target.name in allow):
            return (f"{key} {printable(str(out), 300)}: inside the run dir {printable(str(run), 300)} it reads; "
                    "choose a path outside it")
    return None
