"""The run-dir files attnlab writes (docs/reference.md), each atomically: ``metrics.csv`` (``step,loss``,
losses as ``repr``; a GPT's also ``val_loss``), ``attention.npz`` (``steps`` (S,) int64, ``weights`` (S, H, T, T)
float32, ``tokens`` (T,) str, ``token_ids`` (T,) int64; a GPT's ``layers`` (S, L, H, T, T)), ``model.npz`` (a
GPT's float32 weights by state_dict name), ``summary.json`` and ``walkthrough.npz``. A running run's records
reach the OS at every batch and snapshot (``kill -9`` keeps them) in ``.metrics.csv.partial`` and
``.attention.npy.partial``."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core import interrupts
from attnlab.core.errors import WriteError, as_write_error
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot
from attnlab.outputs import rundir

SUMMARY = "summary.json"
METRICS = "metrics.csv"
ATTENTION = "attention.npz"
WALKTHROUGH = "walkthrough.npz"
MODEL = "model.npz"


def atomic_write(path: Path, data: bytes | str | dict[str, Any]) -> None:
    """``data`` into ``path`` through a temporary file and a rename: a str as UTF-8, a dict of arrays as
    ``np.savez`` writes them. WriteError (``path`` untouched, no temporary left)."""
    path = Path(path)
    tmp = path.with_name(f".{os.getpid()}.{path.name}")
    try:
        if isinstance(data, dict):
            np.savez(tmp, **data)
        else:
            tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):  # (a read-only file system refuses even a missing file's unlink)
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise as_write_error(err, file=path.name) from err
        raise


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``summary`` as ``run_dir``'s ``summary.json``, atomically; raises WriteError."""
    atomic_write(Path(run_dir) / SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")


def update_summary(run_dir: Path, **fields: Any) -> None:
    """Update this process's own ``summary.json`` (new when missing) with ``fields``; raises WriteError."""
    path = Path(run_dir) / SUMMARY
    write_summary(run_dir, {**(json.loads(path.read_bytes()) if path.exists() else {}), **fields})


def environment(device: str = "cpu") -> dict[str, Any]:
    """What a reproduction depends on: library versions, platform, device, torch's threads and kernels
    (``cpu_capability``, ``blas``), attnlab's git commit (or None)."""
    import torch

    return {**_static_environment(), "device": device, "torch_threads": torch.get_num_threads()}


@functools.lru_cache(maxsize=1)
def _static_environment() -> dict[str, Any]:
    from importlib import metadata

    import torch

    def version(dist: str) -> str | None:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)

    here, commit = Path(__file__).resolve().parents[2], None
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # attnlab's commit in a git checkout
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip() or None if (here / ".git").exists() else None
    return {"python": platform.python_version(), "attnlab": version("attnlab"), "git_commit": commit,
            "torch": torch.__version__, "numpy": np.__version__, "tiktoken": version("tiktoken"),
            "hydra-core": version("hydra-core"), "omegaconf": version("omegaconf"),
            "platform": platform.platform(), "machine": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "blas": next(iter(re.findall(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())), None)}


class RunDirSink(Sink):
    """Writes ``metrics.csv`` and ``attention.npz`` (a GPT's ``model.npz``) into ``run_dir``; ``on_end`` keeps
    ``steps_run`` rows and their snapshots whatever the status. A refused write raises WriteError (``no space
    left on device while writing metrics.csv at step 57``), which the status records. :attr:`summary`: the run's
    fields as the files have them, for the job's summary.json, written once every other file is written (a run
    killed while drawing reads as killed)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.summary: dict[str, Any] = {}
        self._metrics_tmp = self.run_dir / f".{METRICS}.partial"
        self._weights_tmp = self.run_dir / ".attention.npy.partial"
        self._metrics = None  # the open partial metrics file (binary)
        self._rows: list[tuple[int, int, float | None]] = []  # (rows, bytes, last loss) after each batch
        self._weights: np.ndarray | None = None  # (S_planned, H, T, T) float32 memmap
        self._steps: list[int] = []  # steps of the snapshots written
        self._layers: list[np.ndarray] = []  # a GPT's (L, H, T, T) per snapshot
        self._val: dict[int, float] = {}  # step -> validation loss
        self._info: RunInfo | None = None
        self.failure: WriteError | None = None  # the first write that failed

    def _fail(self, err: OSError, file: str, step: int | None) -> WriteError:
        rundir.release_reserve(self.run_dir)  # room to record the failure
        if self.failure is None:
            self.failure = as_write_error(err, step, file)
        return self.failure

    def on_start(self, info: RunInfo) -> None:
        self._info = info
        heads = int((info.config.get("model") or {}).get("n_heads", 1) or 1)
        file = METRICS
        try:
            self._metrics = open(self._metrics_tmp, "wb")
            self._metrics.write(b"step,loss\n")
            self._metrics.flush()
            self._rows = [(0, self._metrics.tell(), None)]
            file = ATTENTION
            shape = (len(info.snapshot_steps), heads, info.seq_len, info.seq_len)
            self._weights = np.lib.format.open_memmap(self._weights_tmp, "w+", np.float32, shape)
            if hasattr(os, "posix_fallocate"):  # (Linux) allocate now: a full disk fails here, never as SIGBUS
                with open(self._weights_tmp, "r+b") as f:
                    os.posix_fallocate(f.fileno(), 0, os.path.getsize(self._weights_tmp))
        except OSError as err:
            self.close()  # nothing recorded yet: no partial file left
            self._metrics_tmp.unlink(missing_ok=True)
            raise self._fail(err, file, 0) from err

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        if not len(steps):
            return
        data = "".join(f"{step},{loss!r}\n" for step, loss in zip(steps.tolist(), losses.tolist())).encode("ascii")
        rows, end, _ = self._rows[-1]
        try:
            self._metrics.write(data)
            self._metrics.flush()  # to the OS: kill -9 keeps it
        except OSError as err:
            with contextlib.suppress(OSError):  # no half-written batch: on_end promotes the rows before it
                self._metrics.close()
            raise self._fail(err, METRICS, int(steps[0])) from err
        self._rows.append((rows + len(steps), end + len(data), float(losses[-1])))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        if self._weights is None or len(self._steps) >= len(self._weights):
            return
        self._weights[len(self._steps)] = snapshot.weights
        self._steps.append(snapshot.step)
        if snapshot.layers is not None:
            self._layers.append(snapshot.layers)
        if snapshot.val_loss is not None:
            self._val[snapshot.step] = snapshot.val_loss
        if len(self._steps) == 1:
            interrupts.pause_point("first_snapshot")  # a test hook (a fault made real at this moment)

    def on_end(self, result: RunResult) -> None:
        if self._info is None:
            return
        interrupts.pause_point("finishing")  # a test hook: the run's last writes begin
        rundir.release_reserve(self.run_dir)  # the last writes (figures, TensorBoard, summary) get the reserve
        failure = self.failure
        # a later sink may have failed on a batch this one wrote: cut off what the run did not count
        n, end, final_loss = max((r for r in self._rows if r[0] <= result.steps_run), default=(0, 0, None))
        if self._rows:
            try:
                self._metrics.close()  # (a second close does nothing)
                os.truncate(self._metrics_tmp, end)
                if self._val:
                    self._add_val_column()
                os.replace(self._metrics_tmp, self.run_dir / METRICS)
            except OSError as err:
                failure = self._fail(err, METRICS, None)
        if self._weights is not None:
            kept = sum(1 for s in self._steps if s < n)
            try:
                self._write_attention(kept)
            except WriteError as err:  # no room for the whole archive: as many snapshots as fit, then the reason
                failure = failure or err
                fit = (_room(self.run_dir) - 4096 - 8 * kept - 64 * self._info.seq_len) // self._weights[0].nbytes
                if 0 <= fit < kept:
                    with contextlib.suppress(WriteError):
                        self._write_attention(int(fit))
            self.close()
        threshold = result.steps_to_threshold
        if result.parameters is not None:
            try:
                atomic_write(self.run_dir / MODEL, result.parameters)
            except WriteError as err:
                failure = failure or err
        kept_val = [v for s, v in self._val.items() if s < n]
        self.summary = {"status": result.status, "final_loss": final_loss, "steps_run": n,
                        **({"val_loss": kept_val[-1]} if kept_val else {}),
                        **({"generation": result.generation} if result.generation else {}),
                        "steps_to_threshold": threshold if threshold is not None and threshold < n else None,
                        "wall_time_s": round(result.wall_time_s, 6), "error": result.error}
        if failure is not None and result.status != "failed":
            self.summary.update(status="failed", error=str(failure))
            raise failure  # the sinks after this one record the failure too

    def _write_attention(self, kept: int) -> None:
        layers = {"layers": np.stack(self._layers[:kept])} if self._layers and kept else {}
        atomic_write(self.run_dir / ATTENTION, dict(weights=self._weights[:kept],
                     steps=np.asarray(self._steps[:kept], dtype=np.int64),
                     tokens=np.asarray(self._info.tokens, dtype=str),
                     token_ids=np.asarray(self._info.token_ids, dtype=np.int64), **layers))

    def _add_val_column(self) -> None:
        """metrics.csv's rows with a third column, ``val_loss`` (empty between snapshots)."""
        rows = ["step,loss,val_loss"]
        for line in self._metrics_tmp.read_text(encoding="ascii").splitlines()[1:]:
            val = self._val.get(int(line.split(",", 1)[0]))
            rows.append(f"{line},{'' if val is None else repr(val)}")
        self._metrics_tmp.write_text("\n".join([*rows, ""]), encoding="ascii")

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        self._weights = None  # the memmap is unmapped with its last reference
        self._weights_tmp.unlink(missing_ok=True)


def _room(folder: Path) -> int:
    """Bytes a new file in ``folder`` may take: the free space, at most POSIX's ``RLIMIT_FSIZE``."""
    room = shutil.disk_usage(folder).free
    with contextlib.suppress(ImportError):  # (no resource module on Windows)
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        room = room if soft == resource.RLIM_INFINITY else min(room, soft)
    return room


def close_orphans(error: str) -> list[Path]:
    """The job folders below this process's claims whose process died mid-run (summary.json running, lock
    free), each now ``failed`` with ``error`` and unlocked; by name."""
    closed = []
    for held in rundir.claims():
        with contextlib.suppress(OSError), os.scandir(held.path) as it:
            jobs = sorted(Path(e.path) for _, e in zip(range(rundir.MAX_SCANNED), it)
                          if e.is_dir(follow_symlinks=False))
            for job in jobs:
                if (os.path.isfile(job / rundir.LOCK) and not rundir.run_is_live(job)
                        and rundir.summary_status(job) == "running"):
                    update_summary(job, status="failed", error=error)
                    os.unlink(job / rundir.LOCK)
                    closed.append(job)
    return closed
