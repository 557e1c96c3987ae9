"""The run-dir contract (DESIGN.md): atomic writes while a run goes, and reading runs back.

A run directory holds ``.hydra/config.yaml`` (Hydra's), ``metrics.csv`` (``step,loss``, one row
per optimizer step, losses at full precision), ``attention.npz`` (``steps`` (S,), ``weights``
(S, H, T, T), ``tokens`` (T,), ``token_ids`` (T,)), ``summary.json`` and, for the walkthrough,
``walkthrough.npz``. Files are written to a temporary name and renamed, so a file with its
final name is always complete; ``summary.json`` is written first as ``running`` and last with the
final status.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab import safe_read
from attnlab.errors import RunDirError
from attnlab.records import RunInfo, RunResult, Sink, Snapshot

SUMMARY = "summary.json"
METRICS = "metrics.csv"
ATTENTION = "attention.npz"
WALKTHROUGH = "walkthrough.npz"
FINISHED = ("completed", "diverged", "interrupted", "failed")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_beside(path: Path, suffix: str) -> tuple[int, str]:
    """A temporary file next to ``path`` with the permissions a plain ``open`` would give."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, tmp


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = _temp_beside(path, ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write_bytes`` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


@dataclass(frozen=True)
class RawArray:
    """An array stored as raw C-order bytes in ``path`` (no header), e.g. snapshots streamed
    to a partial file; :func:`atomic_savez` copies it into the archive in chunks."""

    path: Path
    shape: tuple[int, ...]
    dtype: Any = np.float32


def atomic_savez(path: Path, **arrays: Any) -> None:
    """``np.savez`` into a temporary file, then rename to ``path`` (which must end in .npz).

    A :class:`RawArray` value is streamed from its file into the archive 1 MB at a time, so
    memory stays flat however large it is (``np.savez`` of a memmap would page the whole file
    into the process); the archive is the same as ``np.savez`` writes (stored, ``.npy`` v1.0
    members in argument order)."""
    path = Path(path)
    fd, tmp = _temp_beside(path, ".npz")
    os.close(fd)
    try:
        if any(isinstance(a, RawArray) for a in arrays.values()):
            _savez_streaming(tmp, arrays)
        else:
            np.savez(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _savez_streaming(file: str, arrays: dict[str, Any]) -> None:
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                if not isinstance(value, RawArray):
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
                    continue
                dtype = np.dtype(value.dtype)
                expected = int(np.prod(value.shape, dtype=np.int64)) * dtype.itemsize
                if os.path.getsize(value.path) != expected:
                    raise ValueError(f"{value.path}: {os.path.getsize(value.path)} bytes, expected "
                                     f"{expected} for shape {value.shape} {dtype}")
                np.lib.format.write_array_header_1_0(member, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                              "fortran_order": False, "shape": tuple(value.shape)})
                with open(value.path, "rb") as raw:
                    shutil.copyfileobj(raw, member, 1 << 20)


def environment(device: str = "cpu") -> dict[str, Any]:
    """What a reproduction depends on: library versions, platform, device, thread count, and
    attnlab's version and git commit (None outside a git checkout). Versions and commit are
    looked up once per process (the code a sweep's jobs run is the code loaded at its start)."""
    import torch

    return {**_static_environment(), "device": device, "torch_threads": torch.get_num_threads()}


@functools.lru_cache(maxsize=1)
def _static_environment() -> dict[str, Any]:
    from importlib import metadata

    import torch

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "attnlab": version("attnlab"),
        "git_commit": _git_commit(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "tiktoken": version("tiktoken"),
        "hydra-core": version("hydra-core"),
        "omegaconf": version("omegaconf"),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent.parent
    if not (here / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def read_summary(run_dir: Path) -> dict[str, Any]:
    """``summary.json`` of ``run_dir`` as a dict ({} when there is none yet), read through
    :func:`attnlab.safe_read.read_summary` (bounded, a regular file, fields of their types).
    Raises RunDirError (one line naming the file) when it cannot be used."""
    try:
        return safe_read.read_summary(run_dir)
    except safe_read.MissingRunFile:
        return {}


def write_summary(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Update ``summary.json`` with ``fields`` (atomically) and return the whole summary."""
    summary = read_summary(run_dir)
    summary.update(fields)
    atomic_write_text(Path(run_dir) / SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def check_not_finished(run_dir: Path) -> None:
    """Raise RunDirError when ``run_dir`` already holds a finished run (never overwrite one)."""
    status = read_summary(run_dir).get("status")
    if status in FINISHED:
        raise RunDirError(f"hydra.run.dir={str(run_dir)!r}: already holds a {status} run; "
                          "choose another hydra.run.dir (runs are never overwritten)")


class RunDirSink(Sink):
    """Writes ``metrics.csv``, ``attention.npz`` and the final ``summary.json`` into ``run_dir``.

    Losses and snapshots are streamed to hidden partial files while the run goes (memory stays
    flat however many snapshots), and renamed to their final names in ``on_end`` whatever the
    status, so a diverged or interrupted run keeps everything recorded up to its last step.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._metrics_tmp = self.run_dir / f".{METRICS}.partial"
        self._weights_tmp = self.run_dir / f".{ATTENTION}.weights.partial"
        self._metrics = None
        self._weights = None
        self._snap_steps: list[int] = []
        self._snap_shape: tuple[int, ...] | None = None
        self._info: RunInfo | None = None

    def on_start(self, info: RunInfo) -> None:
        self._info = info
        self._metrics = open(self._metrics_tmp, "w", encoding="utf-8", newline="")
        self._metrics.write("step,loss\n")
        self._weights = open(self._weights_tmp, "wb")

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        self._metrics.write("".join(f"{step},{loss!r}\n" for step, loss in zip(steps.tolist(), losses.tolist())))
        self._metrics.flush()

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._weights.write(np.ascontiguousarray(snapshot.weights, dtype=np.float32).data)
        self._snap_steps.append(snapshot.step)
        self._snap_shape = snapshot.weights.shape

    def on_end(self, result: RunResult) -> None:
        info = self._info
        if info is None:
            return
        self.close()
        os.replace(self._metrics_tmp, self.run_dir / METRICS)
        S = len(self._snap_steps)
        T = info.seq_len
        shape = (S, *(self._snap_shape or (1, T, T)))
        # streamed from the partial file in chunks: memory stays flat however many snapshots
        weights = RawArray(self._weights_tmp, shape, np.float32) if S else np.zeros(shape, dtype=np.float32)
        atomic_savez(self.run_dir / ATTENTION, steps=np.asarray(self._snap_steps, dtype=np.int64),
                     weights=weights, tokens=np.asarray(info.tokens, dtype=str),
                     token_ids=np.asarray(info.token_ids, dtype=np.int64))
        self._weights_tmp.unlink(missing_ok=True)
        write_summary(self.run_dir, **summary_fields(result))

    def close(self) -> None:
        for f in (self._metrics, self._weights):
            if f is not None and not f.closed:
                f.close()


def summary_fields(result: RunResult) -> dict[str, Any]:
    """The summary.json fields a finished training run adds."""
    return {
        "status": result.status,
        "final_loss": result.final_loss,
        "steps_run": result.steps_run,
        "steps_to_threshold": result.steps_to_threshold,
        "wall_time_s": round(result.wall_time_s, 6),
        "error": result.error,
    }


def is_run_dir(path: Path) -> bool:
    """True when ``path`` has a Hydra config and a summary.json (a run or a sweep job)."""
    path = Path(path)
    return (path / ".hydra" / "config.yaml").is_file() and (path / SUMMARY).is_file()


def read_metrics(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """``metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)``
    (:func:`attnlab.safe_read.read_run_metrics`); raises RunDirError."""
    return safe_read.read_run_metrics(run_dir)


def read_attention(run_dir: Path, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """``attention.npz`` as a dict of arrays (steps, weights, tokens, token_ids); only ``keys``
    when given (members are read one by one: ``keys=("tokens", "token_ids")`` does not read the
    (S, H, T, T) weights, 262 MB for 1,000 snapshots at T = 256). Checked and bounded by
    :func:`attnlab.safe_read.read_attention`; raises RunDirError."""
    return safe_read.read_attention(run_dir, keys)


def read_last_snapshot(run_dir: Path) -> tuple[int, np.ndarray] | None:
    """``(step, weights (H, T, T) float32)`` of the last snapshot in ``attention.npz``, or None
    when the run has none. Reads only that frame (the archive is stored uncompressed, as
    :func:`atomic_savez` and ``np.savez`` write it), so a summary over many runs with thousands
    of snapshots each does not load every (S, H, T, T) array
    (:func:`attnlab.safe_read.read_last_snapshot`). Raises RunDirError."""
    return safe_read.read_last_snapshot(run_dir)
