"""The run-dir contract (DESIGN.md): atomic writes while a run goes, and reading runs back.

A run directory holds ``.hydra/config.yaml`` (Hydra's), ``metrics.csv`` (``step,loss``, one row
per optimizer step, losses at full precision), ``attention.npz`` (``steps`` (S,), ``weights``
(S, H, T, T), ``tokens`` (T,), ``token_ids`` (T,)), ``summary.json`` and, for the walkthrough,
``walkthrough.npz``. Files are written to a temporary name and renamed, so a file with its
final name is always complete; ``summary.json`` is written first as ``running`` and last with the
final status.

While a run goes, its records are in hidden partial files that reach the OS at every batch of
losses and every snapshot (``kill -9`` keeps them): ``.metrics.csv.partial`` (metrics.csv's
format, whole rows) and ``.attention.npz.partial`` (:mod:`attnlab.outputs.npz_writer`: from byte
``LOCAL_HEADER`` on, an ``.npy`` array of the snapshots taken). A run that cannot write (disk
full, file-size limit, I/O error) stops at that step: what was recorded is promoted into
``metrics.csv`` and ``attention.npz``, every file agrees on ``steps_run``, and ``summary.json``
says ``failed`` with the reason (``no space left on device while writing metrics.csv at step
57``). The run dir's lock (:mod:`attnlab.outputs.rundir`, :func:`run_is_live`) tells a live run from a
killed one.
"""
from __future__ import annotations

import errno
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

from attnlab.outputs import rundir
from attnlab.saved import safe_read
from attnlab.core.errors import RunDirError, WriteError
from attnlab.outputs.npz_writer import GrowingNpz, write_all
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot
from attnlab.outputs.rundir import LOCK, run_is_live  # noqa: F401  (part of the run-dir contract)

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
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    Raises :class:`~attnlab.core.errors.WriteError` (an OSError) naming ``path``'s file when the
    filesystem refuses; ``path`` is then untouched and no temporary file is left. When the
    disk is full and this process holds the folder's reserve (:mod:`attnlab.outputs.rundir`), the
    reserve is given back and the write tried once more."""
    _with_reserve(Path(path), lambda: _write_replace(Path(path), data))


def _with_reserve(path: Path, write) -> None:
    """``write()``, and once more after giving back the folder's disk reserve when the disk is
    full; an OSError becomes a WriteError naming ``path``'s file."""
    try:
        write()
    except OSError as err:
        held = rundir.claimed(path.parent)
        if err.errno in (errno.ENOSPC, errno.EDQUOT) and held is not None and held.reserve:
            rundir.release_reserve(path.parent)
            try:
                write()
                return
            except OSError as again:
                err = again
        raise WriteError.from_os_error(err, path.name) from err


def _write_replace(path: Path, data: bytes) -> None:
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
    members in argument order). Raises :class:`~attnlab.core.errors.WriteError` like
    :func:`atomic_write_bytes`."""
    path = Path(path)
    _with_reserve(path, lambda: _savez_replace(path, arrays))


def _savez_replace(path: Path, arrays: dict[str, Any]) -> None:
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
    :func:`attnlab.saved.safe_read.read_summary` (bounded, a regular file, fields of their types).
    Raises RunDirError (one line naming the file) when it cannot be used."""
    try:
        return safe_read.read_summary(run_dir)
    except safe_read.MissingRunFile:
        return {}


def _own_summary(run_dir: Path) -> dict[str, Any]:
    """The summary.json this process is writing (attnlab's own file; {} before the first)."""
    path = Path(run_dir) / SUMMARY
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def write_summary(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Update ``summary.json`` with ``fields`` (atomically) and return the whole summary.
    Raises :class:`~attnlab.core.errors.WriteError` (summary.json unchanged) when it cannot be
    written."""
    summary = _own_summary(run_dir)
    summary.update(fields)
    atomic_write_text(Path(run_dir) / SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def check_not_finished(run_dir: Path) -> None:
    """Raise RunDirError when ``run_dir`` already holds a finished run (never overwrite one).
    :func:`attnlab.outputs.rundir.claim` does this and more (a killed run, someone else's files, a
    live run of another process) and is what ``job.run_job`` uses."""
    status = rundir._status(Path(run_dir)) if (Path(run_dir) / SUMMARY).exists() else None
    if status in FINISHED:
        raise RunDirError(f"hydra.run.dir={str(run_dir)!r}: already holds a {status} run; "
                          "choose another hydra.run.dir (runs are never overwritten)")


class RunDirSink(Sink):
    """Writes ``metrics.csv``, ``attention.npz`` and the final ``summary.json`` into ``run_dir``.

    Losses and snapshots go to hidden partial files as the run goes (memory stays flat however
    many snapshots; every batch of losses and every snapshot reaches the OS at once, so a
    killed run keeps them), and are promoted to their final names in ``on_end`` whatever the
    status, so a diverged or interrupted run keeps everything recorded up to its last step.

    A write the filesystem refuses raises :class:`~attnlab.core.errors.WriteError` (``no space left
    on device while writing metrics.csv at step 57``; the training loop then stops) after
    cutting the partial file back to its last whole record; ``on_end`` promotes what was
    recorded (dropping snapshots at the end of ``attention.npz`` when even its last bytes do
    not fit) and writes ``summary.json`` as ``failed`` with that reason. ``metrics.csv`` always
    holds exactly ``steps_run`` rows and ``attention.npz`` only snapshots of those steps.

    ``final_status=False`` (a job of :mod:`attnlab.commands.job`, whose figures and TensorBoard sink end
    after this one): ``summary.json`` gets every final field but keeps ``status: running``; the
    job writes the status once every file is written, so a run killed while drawing its last
    figures reads as killed, never as completed without its figures.
    """

    def __init__(self, run_dir: Path, final_status: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.final_status = final_status
        self._metrics_tmp = self.run_dir / f".{METRICS}.partial"
        self._weights_tmp = self.run_dir / f".{ATTENTION}.partial"
        self._metrics_fd: int | None = None
        self._archive: GrowingNpz | None = None
        self._last = (0, 0, None)  # (rows, byte offset after them, loss of the last row) written
        self._prev = (0, 0, None)  # the same before the last batch
        self._snap_steps: list[int] = []
        self._info: RunInfo | None = None
        self.failure: WriteError | None = None  # the first write that failed

    def _fail(self, err: OSError, file: str, step: int | None) -> WriteError:
        rundir.release_reserve(self.run_dir)  # room to record the failure
        if self.failure is None:
            self.failure = WriteError.from_os_error(err, file, step)
        return self.failure

    def on_start(self, info: RunInfo) -> None:
        self._info = info
        try:
            self._metrics_fd = os.open(self._metrics_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                       | getattr(os, "O_CLOEXEC", 0), 0o666 & ~_umask())
            header = b"step,loss\n"
            write_all(self._metrics_fd, header, 0)
            self._last = self._prev = (0, len(header), None)
        except OSError as err:
            raise self._fail(err, METRICS, 0) from err
        try:
            self._archive = GrowingNpz(self._weights_tmp)
        except OSError as err:
            raise self._fail(err, ATTENTION, 0) from err

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        if not len(steps):
            return
        rows, end, _ = self._last
        data = "".join(f"{step},{loss!r}\n" for step, loss in zip(steps.tolist(), losses.tolist())).encode("ascii")
        try:
            write_all(self._metrics_fd, data, end)
        except OSError as err:
            try:
                os.ftruncate(self._metrics_fd, end)  # no half-written batch
            except OSError:
                pass
            raise self._fail(err, METRICS, int(steps[0])) from err
        self._prev = self._last
        self._last = (rows + len(steps), end + len(data), float(losses[-1]))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        try:
            self._archive.append(snapshot.weights)
        except OSError as err:
            raise self._fail(err, ATTENTION, snapshot.step) from err
        self._snap_steps.append(snapshot.step)
        if len(self._snap_steps) == 1:
            from attnlab.core.interrupts import pause_point

            pause_point("first_snapshot")  # a test hook (a fault made real at this moment)

    def _rows_upto(self, n: int) -> tuple[int, float | None]:
        """Byte offset after the first ``n`` rows, and the loss of row ``n - 1``."""
        for rows, end, loss in (self._last, self._prev):
            if rows == n:
                return end, loss
        with open(self._metrics_tmp, "rb") as f:  # only when a sink after this one failed oddly
            offset, loss = len(f.readline()), None
            for _ in range(n):
                line = f.readline()
                offset += len(line)
                loss = float(line.split(b",")[1])
        return offset, loss

    def on_end(self, result: RunResult) -> None:
        info = self._info
        if info is None:
            return
        from attnlab.core.interrupts import pause_point

        pause_point("finishing")  # a test hook: the run's last writes begin
        # part of the reserve goes to those last writes now, before any of them fails: TensorBoard's
        # writer thread writes the events buffered so far whenever it runs, and cannot give the
        # reserve back and try again as the run's own writes do (_with_reserve: the rest is theirs)
        rundir.release_reserve(self.run_dir, last_writes=True)
        failure = self.failure
        rows, _, last_loss = self._last
        n = result.steps_run  # a later sink may have failed on a batch this one wrote: cut it off
        if rows < n and failure is not None:  # (fewer rows only when this sink's write failed)
            n = rows
        final_loss = last_loss if n == rows else result.final_loss
        if self._metrics_fd is not None:
            try:
                if n < rows:
                    end, final_loss = self._rows_upto(n)
                else:
                    end = self._last[1]
                os.ftruncate(self._metrics_fd, end)  # nothing after the last whole row counted
                os.close(self._metrics_fd)
                self._metrics_fd = None
                os.replace(self._metrics_tmp, self.run_dir / METRICS)
            except OSError as err:
                failure = self._fail(err, METRICS, None)
        if self._archive is not None:
            steps = [s for s in self._snap_steps if s < n]
            T = info.seq_len
            try:
                kept = self._archive.finish(self.run_dir / ATTENTION, np.asarray(steps, dtype=np.int64), (1, T, T),
                                            tokens=np.asarray(info.tokens, dtype=str),
                                            token_ids=np.asarray(info.token_ids, dtype=np.int64))
                if kept < len(steps):
                    failure = self._fail(self._archive.error, ATTENTION, None)
            except OSError as err:
                failure = self._fail(err, ATTENTION, None)
        fields = summary_fields(result)
        threshold = result.steps_to_threshold
        fields.update(steps_run=n, final_loss=final_loss if n else None,
                      steps_to_threshold=threshold if threshold is not None and threshold < n else None)
        if failure is not None and result.status != "failed":
            fields.update(status="failed", error=str(failure))
        if not self.final_status:
            fields.pop("status")
        write_summary(self.run_dir, **fields)
        if failure is not None and result.status != "failed":
            raise failure  # the sinks after this one record the failure too

    def close(self) -> None:
        if self._metrics_fd is not None:
            os.close(self._metrics_fd)
            self._metrics_fd = None
        if self._archive is not None:
            self._archive.close()


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
    (:func:`attnlab.saved.safe_read.read_run_metrics`); raises RunDirError."""
    return safe_read.read_run_metrics(run_dir)


def read_attention(run_dir: Path, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """``attention.npz`` as a dict of arrays (steps, weights, tokens, token_ids); only ``keys``
    when given (members are read one by one: ``keys=("tokens", "token_ids")`` does not read the
    (S, H, T, T) weights, 262 MB for 1,000 snapshots at T = 256). Checked and bounded by
    :func:`attnlab.saved.safe_read.read_attention`; raises RunDirError."""
    return safe_read.read_attention(run_dir, keys)


def read_last_snapshot(run_dir: Path) -> tuple[int, np.ndarray] | None:
    """``(step, weights (H, T, T) float32)`` of the last snapshot in ``attention.npz``, or None
    when the run has none. Reads only that frame (the archive is stored uncompressed, as
    :func:`atomic_savez` and ``np.savez`` write it), so a summary over many runs with thousands
    of snapshots each does not load every (S, H, T, T) array
    (:func:`attnlab.saved.safe_read.read_last_snapshot`). Raises RunDirError."""
    return safe_read.read_last_snapshot(run_dir)
