"""Plain data read from a run dir: its interpolations and Hydra keys, plain references resolved by
copying (nothing evaluated), and summary.json's field types."""
from __future__ import annotations

import re
from typing import Any, Mapping

from attnlab.core.config import select, walk
from attnlab.core.files import REFERENCE_CHAIN, RunFileError, printable
from attnlab.outputs.artifacts import SUMMARY


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
    if isinstance(value, bool):
        return False
    return isinstance(value, {NUMBER: (int, float), INTEGER: int}.get(t, t))


def type_problems(data: Any, types: Mapping[str, tuple], label: str = SUMMARY) -> list[str]:
    """One line per field of ``data`` not of a type in ``types[field]`` (a bool is no number)."""
    if not isinstance(data, dict):
        return [f"{label}: is {type_name(data)}, expected an object"]
    return [f"{label}: {k} is {type_name(data[k])}, expected {' or '.join(_TYPE_NAMES[t] for t in allowed)}"
            for k, allowed in types.items() if k in data and not any(_is(data[k], t) for t in allowed)]
