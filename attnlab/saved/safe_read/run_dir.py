"""The files of a run dir, one reader each. ``root`` (default: ``run_dir``) is the folder from
which no symlink is followed: pass the sweep folder the user named when ``run_dir`` is a job
found inside it, so a job folder that is itself a link is refused too."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab.saved.safe_read.data import (
    SUMMARY_TYPES,
    _type_name,
    read_json_data,
    resolve_references,
    select,
    type_problems,
)
from attnlab.saved.safe_read.limits import CONFIG_LIMIT, METRICS_LIMIT, NPZ_LIMIT, SUMMARY_LIMIT
from attnlab.saved.safe_read.metrics import read_metrics
from attnlab.saved.safe_read.npz import Member, NpzArchive, read_npz
from attnlab.saved.safe_read.text import RunFileError, printable
from attnlab.saved.safe_read.yaml_data import read_yaml_data

HYDRA_DIR = ".hydra"
CONFIG = f"{HYDRA_DIR}/config.yaml"
OVERRIDES = f"{HYDRA_DIR}/overrides.yaml"
HYDRA = f"{HYDRA_DIR}/hydra.yaml"
SUMMARY = "summary.json"
METRICS = "metrics.csv"
ATTENTION = "attention.npz"
WALKTHROUGH = "walkthrough.npz"

ATTENTION_MEMBERS = {"steps": Member(("S",), "i"), "weights": Member(("S", "H", "T", "T"), "f"),
                     "tokens": Member(("T",), "U"), "token_ids": Member(("T",), "i")}
WALKTHROUGH_MEMBERS = {"token_ids": Member(("T",), "i"), "token_embeddings": Member(("T", "d_model"), "f"),
                       "pos_embeddings": Member(("T", "d_model"), "f"), "X": Member(("T", "d_model"), "f"),
                       "Q": Member(("T", "d_k"), "f"), "K": Member(("T", "d_k"), "f"), "V": Member(("T", "d_v"), "f"),
                       "scores": Member(("T", "T"), "f"), "weights": Member(("T", "T"), "f"),
                       "Z": Member(("T", "d_v"), "f")}


def read_config(run_dir: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None,
                resolve: bool = True) -> dict[str, Any]:
    """``RUN_DIR/.hydra/config.yaml`` as plain data with plain references resolved
    (:func:`resolve_references`); raises RunFileError (missing, unsafe, not YAML, not a
    mapping, an interpolation other than a plain reference). ``_target_`` keys stay data:
    see :func:`special_keys`. ``resolve=False``: every ``${...}`` stays text (nothing is
    refused for it), for tools that only show or select values."""
    path = Path(run_dir) / CONFIG
    data = read_yaml_data(path, limit, root=root or run_dir)
    if not isinstance(data, dict):
        raise RunFileError(path, f"not a config (a YAML mapping is expected, found {_type_name(data)})")
    return resolve_references(data, path) if resolve else data


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
    odd = [o for o in data.get("overrides", []) if not isinstance(o, str)] if not problems else []
    if odd:
        problems = [f"{SUMMARY}: overrides holds {_type_name(odd[0])}, expected strings"]
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


def read_walkthrough(run_dir: Path, limit: int = NPZ_LIMIT, *, root: Path | None = None,
                     keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``RUN_DIR/walkthrough.npz`` (:data:`WALKTHROUGH_MEMBERS`: token_ids (T,), X (T, d_model),
    Q/K (T, d_k), V/Z (T, d_v), scores/weights (T, T), ...), checked as :class:`NpzArchive`;
    the members ``keys`` (default all)."""
    return read_npz(Path(run_dir) / WALKTHROUGH, WALKTHROUGH_MEMBERS, limit, root=root or run_dir, load=keys)


def exists(run_dir: Path, name: str) -> bool:
    """Whether ``RUN_DIR/name`` is there in any form (a file, a folder, a link, a FIFO): what
    decides whether a file is read (and refused when it is not a regular file) or missing."""
    return os.path.lexists(Path(run_dir) / name)


def file_problem(err: RunFileError, run_dir: Path) -> str:
    """``err`` as one line naming its file relative to ``run_dir``, as tables and reports show
    it: ``attention.npz: damaged archive (...)``, ``.hydra/config.yaml: refused YAML: ...``
    (printable: control characters escaped)."""
    try:
        name = Path(err.path).relative_to(run_dir).as_posix()
    except ValueError:
        name = Path(err.path).name
    return f"{printable(name, 300)}: {printable(err.reason, 1000)}"
