"""Plain data read from a run dir: walking it, the interpolations and Hydra instantiation keys
it holds, plain references resolved by copying (nothing evaluated), JSON with bounded depth, and
the types of summary.json's fields."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

from attnlab.saved.safe_read.files import read_text
from attnlab.saved.safe_read.limits import JSON_MAX_DEPTH, REFERENCE_CHAIN, SUMMARY_LIMIT
from attnlab.saved.safe_read.text import ResolverInterpolation, RunFileError, printable


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
_BACKSLASHES_THEN_INTERPOLATION = re.compile(r"(\\*)\$\{")


def escaped_text(value: str) -> str | None:
    r"""The text of a string whose every ``${`` is escaped as OmegaConf escapes it, ``\${``
    (what Hydra saves for ``attnlab 'sentence=costs ${price} today'``): ``costs ${price} today``;
    None when any ``${`` is an interpolation (no backslash before it, or ``\\${``: an escaped
    backslash, then an interpolation) or is preceded by more backslashes."""
    marks = [len(m.group(1)) for m in _BACKSLASHES_THEN_INTERPOLATION.finditer(value)]
    if not marks or any(n != 1 for n in marks):
        return None
    return value.replace("\\${", "${")


def _lookup(data: Any, dotted: str) -> tuple[bool, Any]:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def resolve_references(data: Any, label: Any = "config.yaml") -> Any:
    r"""A copy of ``data`` with every plain reference resolved: a string that is exactly
    ``${a.b.c}`` (an absolute key path, no resolver, nothing around it) whose key holds a
    scalar is replaced by that scalar (chains followed up to :data:`REFERENCE_CHAIN`), and a
    string whose every ``${`` is escaped (``\${``) becomes its text (:func:`escaped_text`). Hydra
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
            text = escaped_text(current)
            if text is not None:  # text, not an interpolation
                resolved[key] = text
                break
            m = _REFERENCE.fullmatch(current)
            if m is None:
                why = ("resolvers never run on a shared config" if ":" in current
                       else "only a whole-string ${key.path} reference to another key is allowed")
                raise ResolverInterpolation(label, f"{key} holds an interpolation ({printable(value, 60)}); {why}")
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

# summary.json fields attnlab writes (artifacts, job.run_job, exercises.observe, reproduce); task and
# config are null until the config is checked (a job refused for a bad value keeps them null)
SUMMARY_TYPES: dict[str, tuple] = {
    "status": (str,), "task": (str, None), "started_at": (str,), "error": (str, None),
    "config": (dict, None), "overrides": (list,),
    "final_loss": (NUMBER, None), "steps_run": (INTEGER,), "steps_to_threshold": (INTEGER, None),
    "wall_time_s": (NUMBER, None), "versions": (dict, None), "n_tokens": (INTEGER,),
    "token_table": (list,), "shapes": (dict,), "max_abs_weight_minus_uniform": (NUMBER,),
    "permutation_check": (dict,), "reproduced_from": (str,), "job_num": (INTEGER, None),
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

