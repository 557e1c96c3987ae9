"""The one reader of run dirs someone else made (docs/security.md). A run dir is data, never code:
every file is opened by :func:`attnlab.core.files.open_run_file`; YAML is pre-scanned (nodes after
alias expansion, depth, core tags only, no merge or duplicate keys) then loaded with CSafeLoader;
JSON, metrics.csv and .npz (:mod:`attnlab.saved.npz`) are bounded and checked. Every error is one
line, :class:`RunFileError` ``<file>: <what is wrong>`` (:class:`MissingRunFile` when absent)."""
from __future__ import annotations

import functools
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import yaml

from attnlab.core.config import select, walk
from attnlab.core.files import *  # noqa: F401,F403  (the limits, printable, the bounded reads, the errors)
from attnlab.core.files import (
    CONFIG_LIMIT,
    JSON_MAX_DEPTH,
    METRICS_LIMIT,
    METRICS_LINE_LIMIT,
    NPZ_LIMIT,
    REFERENCE_CHAIN,
    SUMMARY_LIMIT,
    YAML_MAX_DEPTH,
    YAML_MAX_NODES,
    RunFileError,
    decode_utf8,
    printable,
    read_bytes,
    read_text,
)
from attnlab.outputs.artifacts import ATTENTION, METRICS, SUMMARY, WALKTHROUGH  # the names the writer gives them
from attnlab.saved import npz
from attnlab.saved.npz import *  # noqa: F401,F403  (Member, NpzArchive, read_npz, ...)

CONFIG = ".hydra/config.yaml"
OVERRIDES = ".hydra/overrides.yaml"
HYDRA = ".hydra/hydra.yaml"


_CORE = "tag:yaml.org,2002:"
_TAGS = {None, "!", *(_CORE + t for t in ("null", "bool", "int", "float", "str", "seq", "map"))}
MAX_NUMBER_CHARS = 4300  # Python's limit on the digits of an int converted from text
MAX_INT_BITS = 14_284  # 2**14284 < 10**4300: an int this size prints within Python's limit
_NUMERIC = re.compile(r"[-+]?[0-9.][0-9_:.eE+-]*")
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def _prescan(text: str) -> None:
    """Walk ``yaml.parse`` events (no tree built); ValueError past the bounds (see the module docstring),
    for a recursive alias or a number longer than :data:`MAX_NUMBER_CHARS` (the loader refuses a second document)."""
    anchored: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, depth)
    stack: list[list] = []  # open collections: [anchor, total at start, depth below, keys or None, next is key]
    total = 0
    for ev in yaml.parse(text, Loader=_loader()):
        if not isinstance(ev, (yaml.NodeEvent, yaml.CollectionEndEvent)):
            continue
        if isinstance(ev, yaml.NodeEvent) and stack and stack[-1][3] is not None:  # inside a mapping
            frame = stack[-1]
            if frame[4]:
                if not isinstance(ev, yaml.ScalarEvent):
                    raise ValueError(f"a mapping key that is not a string (line {ev.start_mark.line + 1})")
                if ev.value == "<<" and ev.implicit[0]:
                    raise ValueError(f"merge key '<<' (line {ev.start_mark.line + 1})")
                if ev.value in frame[3]:
                    raise ValueError(f"duplicate key {printable(ev.value, 60)} (line {ev.start_mark.line + 1})")
                frame[3].add(ev.value)
            frame[4] = not frame[4]
        if getattr(ev, "tag", None) not in _TAGS:
            raise ValueError(f"tag {printable(ev.tag, 60)} (line {ev.start_mark.line + 1}); "
                             "allowed: null, bool, int, float, str, seq, map")
        if isinstance(ev, yaml.CollectionStartEvent):
            total += 1
            stack.append([ev.anchor, total, 1, set() if isinstance(ev, yaml.MappingStartEvent) else None, True])
            if len(stack) > YAML_MAX_DEPTH:
                raise ValueError(f"nested deeper than {YAML_MAX_DEPTH} levels")
            continue
        if isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in anchored:
                raise ValueError("an alias of a node it is inside (recursive) or of no anchor")
            size, depth = anchored[ev.anchor]
            anchor = None
        elif isinstance(ev, yaml.ScalarEvent):
            if ev.implicit[0] and len(ev.value) > MAX_NUMBER_CHARS and _NUMERIC.fullmatch(ev.value):
                raise ValueError(f"a number of {len(ev.value)} characters (at most {MAX_NUMBER_CHARS})")
            size, depth, anchor = 1, 1, ev.anchor
        else:  # the end of a collection
            anchor, start, depth, _, _ = stack.pop()
            size = total - start + 1
            total -= size
        total += size
        if anchor is not None:
            anchored[anchor] = (size, depth)
        if stack:
            stack[-1][2] = max(stack[-1][2], depth + 1)
        if total > YAML_MAX_NODES:
            raise ValueError(f"more than {YAML_MAX_NODES} YAML nodes (aliases expanded)")
        if len(stack) + depth > YAML_MAX_DEPTH:
            raise ValueError(f"nested deeper than {YAML_MAX_DEPTH} levels (aliases expanded)")


def parse_yaml_data(text: str, label: Any = "<yaml>") -> Any:
    """YAML ``text`` as plain data, :func:`_prescan` first. Raises RunFileError naming ``label``:
    ``not valid YAML (line N: ...)`` or ``refused YAML: ...``."""
    try:
        _prescan(text)
        data = yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader subclass)
        for _, value in walk(data):
            if isinstance(value, dict) and not all(isinstance(k, str) for k in value):
                bad = next(k for k in value if not isinstance(k, str))
                raise ValueError(f"a mapping key that is not a string ({printable(repr(bad), 40)})")
            if isinstance(value, str) and _SURROGATE.search(value):
                raise ValueError("a lone surrogate in a string")
            if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                raise ValueError(f"an integer of {value.bit_length()} bits (more than Python prints)")
    except yaml.YAMLError as err:
        problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
        if problem == "exceeded maximum nesting depth":  # libyaml's own bound, before ours is reached
            raise RunFileError(label, f"refused YAML: nested deeper than {YAML_MAX_DEPTH} levels") from None
        why = printable(problem or str(err).splitlines()[0], 120)
        raise RunFileError(label, f"not valid YAML ({f'line {mark.line + 1}: ' if mark else ''}{why})") from None
    except ValueError as err:
        raise RunFileError(label, f"refused YAML: {printable(err, 200)}") from None
    except (LookupError, TypeError, ArithmeticError) as err:  # !!bool maybe, !!int ''
        raise RunFileError(label, f"refused YAML: a value its tag does not allow ({type(err).__name__}: "
                           f"{printable(err, 100)})") from None
    return data


def read_yaml_data(path: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> Any:
    return parse_yaml_data(read_text(path, limit, root=root), Path(path))


def read_json_data(path: Path, limit: int = SUMMARY_LIMIT, *, root: Path | None = None) -> Any:
    """``path`` as JSON (NaN/Infinity allowed), nested at most :data:`JSON_MAX_DEPTH` levels."""
    path = Path(path)
    text = read_text(path, limit, root=root)
    deep = f"nested deeper than {JSON_MAX_DEPTH} levels"
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
            if depth > JSON_MAX_DEPTH:
                raise RunFileError(path, deep)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return data


_INT = re.compile(r"\s*\+?[0-9]+\s*")


def read_run_metrics(run_dir: Path, limit: int = METRICS_LIMIT, *,
                     root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``RUN_DIR/metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)``: header ``step,loss``,
    steps non-negative and increasing. Raises RunFileError naming the line."""
    path = Path(run_dir) / METRICS
    raw = read_bytes(path, limit, root=root or run_dir)
    lengths = np.diff(np.concatenate(([-1], np.flatnonzero(np.frombuffer(raw, np.uint8) == 10), [len(raw)]))) - 1
    if (lengths > METRICS_LINE_LIMIT).any():
        raise RunFileError(path, f"line {int(np.argmax(lengths > METRICS_LINE_LIMIT)) + 1}: longer than "
                           f"{METRICS_LINE_LIMIT} bytes")
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
        if not _INT.fullmatch(fields[0]) or int(fields[0]) >= 2 ** 63:
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
        for _ in range(REFERENCE_CHAIN + 1):
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
            raise RunFileError(label, f"{key}: a chain of more than {REFERENCE_CHAIN} references")
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


NUMBER, INTEGER = "number", "integer"
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", NUMBER: "a number", INTEGER: "an integer",
               None: "null"}
# summary.json fields attnlab writes; task and config are null for a job refused for a bad value
SUMMARY_TYPES: dict[str, tuple] = {
    "status": (str,), "task": (str, None), "started_at": (str,), "error": (str, None),
    "config": (dict, None), "overrides": (list,),
    "final_loss": (NUMBER, None), "steps_run": (INTEGER,), "steps_to_threshold": (INTEGER, None),
    "wall_time_s": (NUMBER, None), "versions": (dict, None), "n_tokens": (INTEGER,),
    "token_table": (list,), "shapes": (dict,), "max_abs_weight_minus_uniform": (NUMBER,),
    "permutation_check": (dict,), "reproduced_from": (str,), "job_num": (INTEGER, None),
}


def _is(value: Any, t: Any) -> bool:
    if t is None:
        return value is None
    return not isinstance(value, bool) and isinstance(value, {NUMBER: (int, float), INTEGER: int}.get(t, t))


def type_problems(data: Any, types: Mapping[str, tuple], label: str = SUMMARY) -> list[str]:
    """One line per field of ``data`` not of a type in ``types[field]`` (a bool is no number)."""
    if not isinstance(data, dict):
        return [f"{label}: is {type_name(data)}, expected an object"]
    return [f"{label}: {k} is {type_name(data[k])}, expected {' or '.join(_TYPE_NAMES[t] for t in allowed)}"
            for k, allowed in types.items() if k in data and not any(_is(data[k], t) for t in allowed)]


# ``root`` (default ``run_dir``): no link is followed below it (the sweep folder a job was found in)
def read_config(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None,
                resolve: bool = True) -> dict[str, Any]:
    """``.hydra/config.yaml`` as a mapping, plain references resolved unless ``resolve=False``."""
    path = Path(run_dir) / CONFIG
    data = read_yaml_data(path, limit, root=root or run_dir)
    if not isinstance(data, dict):
        raise RunFileError(path, f"not a config (a YAML mapping is expected, found {type_name(data)})")
    return resolve_references(data, path) if resolve else data


def read_overrides(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> list[str]:
    """``.hydra/overrides.yaml``: the command-line overrides (raw text)."""
    path = Path(run_dir) / OVERRIDES
    data = read_yaml_data(path, limit, root=root or run_dir)
    if data is not None and not (isinstance(data, list) and all(isinstance(o, str) for o in data)):
        raise RunFileError(path, "not a list of override strings")
    return data or []


def read_job_num(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> int | None:
    """``hydra.job.num`` of ``.hydra/hydra.yaml`` when an integer, else None."""
    num = select(read_yaml_data(Path(run_dir) / HYDRA, limit, root=root or run_dir), "hydra.job.num")
    return num if isinstance(num, int) and not isinstance(num, bool) else None


def read_summary(run_dir: Path, limit: int = SUMMARY_LIMIT, *, root: Path | None = None) -> dict[str, Any]:
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


def open_attention(run_dir: Path, limit: int = NPZ_LIMIT, *, root: Path | None = None) -> npz.NpzArchive:
    """``attention.npz`` as a checked :class:`NpzArchive`."""
    return npz.NpzArchive(Path(run_dir) / ATTENTION, npz.ATTENTION_MEMBERS, limit, root=root or run_dir)


def read_attention(run_dir: Path, keys: Sequence[str] | None = None, limit: int = NPZ_LIMIT, *,
                   root: Path | None = None) -> dict[str, np.ndarray]:
    """``attention.npz`` members ``keys`` (default all: steps (S,), weights (S, H, T, T), tokens, token_ids)."""
    return npz.read_npz(Path(run_dir) / ATTENTION, npz.ATTENTION_MEMBERS, limit, root=root or run_dir, load=keys)


def read_last_snapshot(run_dir: Path, limit: int = NPZ_LIMIT, *,
                       root: Path | None = None) -> tuple[int, np.ndarray] | None:
    """``(step, weights (H, T, T))`` of attention.npz's last snapshot, None without one."""
    with open_attention(run_dir, limit, root=root) as archive:
        steps = archive.read("steps")
        return (int(steps[-1]), archive.read_frame("weights", -1)) if steps.size else None


def read_walkthrough(run_dir: Path, limit: int = NPZ_LIMIT, *, root: Path | None = None,
                     keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``walkthrough.npz`` members ``keys`` (default all, :data:`WALKTHROUGH_MEMBERS`)."""
    return npz.read_npz(Path(run_dir) / WALKTHROUGH, npz.WALKTHROUGH_MEMBERS, limit, root=root or run_dir, load=keys)


def exists(run_dir: Path, name: str) -> bool:
    """Whether ``RUN_DIR/name`` is there in any form (a link too: reading it is refused)."""
    return os.path.lexists(Path(run_dir) / name)


def file_problem(err: RunFileError, run_dir: Path) -> str:
    """``err`` as one line naming its file relative to ``run_dir``."""
    try:
        name = Path(err.path).relative_to(run_dir).as_posix()
    except ValueError:
        name = Path(err.path).name
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
