"""Claiming a run dir (``hydra.run.dir``, a sweep's folders, ``attnlab-reproduce --out``) before anything
is written into it: one live attnlab process per folder, never someone else's files. The lock file
``.attnlab.lock`` (``O_EXCL``) is held with filelock's descriptor lock (on byte 0 on Windows) until the
process ends: a free lock is a killed run's. It holds the pid (from byte 1) and a disk reserve."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import lock_descriptor

from attnlab.core.errors import RunDirError, os_reason
from attnlab.core.files import SUMMARY_LIMIT, RunFileError, open_run_file, printable, read_text
from attnlab.core.i18n import _

LOCK = ".attnlab.lock"
RESERVE_BYTES = 1 << 20  # disk space held in the lock file while a run goes
LOCK_LIMIT = RESERVE_BYTES + 4096  # bytes of a lock file opened to read its pid or test its flock
FINISHED = ("completed", "diverged", "interrupted", "failed")
MAX_LISTED = 4  # names shown in a refusal
MAX_SCANNED = 1000  # entries of a folder looked at


@dataclass
class Claim:
    """A folder this process holds (its lock file's descriptor ``fd``)."""

    path: Path
    fd: int
    created: Path | None  # the outermost folder claim() created, None when it existed
    reserve: int = 0  # where the disk reserve starts in the lock file (its pid line's length); 0: none
    started: bool = False  # a job writes there: abandon() leaves it be


_claims: dict[str, Claim] = {}


def claimed(path: Path) -> Claim | None:
    return _claims.get(os.path.realpath(path))


def claims() -> list[Claim]:
    """This process's claims, oldest first."""
    return list(_claims.values())


def claim(path: Path, key: str = "hydra.run.dir", value: str | None = None) -> Claim:
    """Claim ``path`` (created when missing; ``value``: as the user gave it) for this process, or return
    its claim. RunDirError naming ``key`` (the folders made removed): the folder cannot be written, another
    process holds it, or it holds anything else."""
    path = Path(path)
    if (held := claimed(path)) is not None:
        return held
    shown = f"{key}={printable(str(path if value is None else value), 300)!r}"
    choose = _("choose another {key}").format(key=key)
    created = next((p for p in reversed([path.absolute(), *path.absolute().parents]) if not os.path.lexists(p)), None)
    try:
        path.mkdir(parents=True, exist_ok=True)
        # O_EXCL: never a file that exists (nor a link's target); a reader's probe may hold the lock a moment
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
        held = _claims[os.path.realpath(path)] = Claim(path, fd, created)
        lock_descriptor(held.fd, blocking=True, poll_interval=0.01)
        problem = _contents_problem(path, choose)
        if problem is None:
            line = os.write(held.fd, f"\n{os.getpid()}\n".encode())  # byte 0 (the locked one), then the pid
            # zeros (at most 1/8 of the free space): a full disk keeps room for the run's last writes
            with contextlib.suppress(OSError):  # no room, a file-size limit: no reserve
                if os.write(held.fd, bytes(min(RESERVE_BYTES, shutil.disk_usage(path).free // 8))):
                    held.reserve = line
    except FileExistsError:  # another process's lock, live or left by a killed run
        if not path.is_dir():
            problem = _("not a folder; {choose}").format(choose=choose)
        elif (pid := holder(path) or time.sleep(0.05) or holder(path)) is not None:  # (a claim flocks after creating)
            problem = _("another attnlab process{pid} is writing a run there; {choose}").format(pid=pid, choose=choose)
        else:
            problem = _contents_problem(path, choose, stale_lock=True)
    except OSError as err:
        problem = _("cannot write there ({reason}); {choose}").format(reason=os_reason(err), choose=choose)
    if problem is not None:
        release(path)
        _remove_created(path, created)
        raise RunDirError(f"{shown}: {problem}") from None
    return held


def _contents_problem(path: Path, choose: str, stale_lock: bool = False) -> str | None:
    """None when ``path`` holds nothing but the lock, else the refusal."""
    never = _("{choose} (runs are never overwritten)").format(choose=choose)
    with os.scandir(path) as it:
        names = {e.name for _, e in zip(range(MAX_SCANNED), it)} - {LOCK}
    if not stale_lock and not names:
        return None
    if "summary.json" in names:
        status = summary_status(path)
        if status in FINISHED:
            return _("already holds a {status} run; {never}").format(status=status, never=never)
        if status == "running":
            return _("holds a run that was killed (its summary.json says running and no process holds its lock); "
                     "{never}").format(never=never)
    if "multirun.yaml" in names:
        return _("already holds a sweep (its multirun.yaml and job folders); {choose} (runs are never overwritten; "
                 "attnlab-compare reads the sweep)").format(choose=choose)
    if stale_lock and os.path.isfile(path / LOCK) and not os.path.islink(path / LOCK):
        return _("holds a run that was killed before it wrote summary.json; {never}").format(never=never)
    listed = sorted(printable(n, 60) for n in names | ({LOCK} if stale_lock else set()))
    more = _(" and {count} more").format(count=len(listed) - MAX_LISTED) if len(listed) > MAX_LISTED else ""
    return _("holds files attnlab did not write ({files}{more}); a run dir must be new or empty; {choose}").format(
        files=", ".join(listed[:MAX_LISTED]), more=more, choose=choose)


def summary_status(path: Path) -> str | None:
    """The ``status`` of ``path``'s summary.json (a bounded read), or None when unreadable."""
    status = None
    with contextlib.suppress(RunFileError, ValueError, AttributeError, RecursionError):
        status = json.loads(read_text(path / "summary.json", SUMMARY_LIMIT)).get("status")
    return status if isinstance(status, str) else None


def _remove_created(path: Path, top: Path | None) -> None:
    """Remove the empty folders made for ``path`` up to ``top`` (nothing else)."""
    folder = path.absolute()
    while top is not None and folder.is_relative_to(top):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def release(path: Path) -> None:
    """Release this process's claim on ``path``, if any: its lock file closed, then deleted if still that file."""
    if (held := _claims.pop(os.path.realpath(path), None)) is None:
        return
    ours = False
    with contextlib.suppress(OSError):
        ours = os.path.samestat(os.stat(held.path / LOCK, follow_symlinks=False), os.fstat(held.fd))
    os.close(held.fd)
    if ours:
        with contextlib.suppress(OSError):
            os.unlink(held.path / LOCK)


def release_reserve(path: Path) -> None:
    """Give back the disk reserve in ``path``'s lock file (a write failed, or the last writes begin)."""
    if (held := claimed(path)) is not None and held.reserve:
        with contextlib.suppress(OSError):
            os.ftruncate(held.fd, held.reserve)
        held.reserve = 0


def abandon(path: Path) -> None:
    """:func:`release`; when no job started there, a sweep's ``multirun.yaml`` and the folders made go too."""
    if (held := claimed(path)) is None:
        return
    names = {"?"}
    with contextlib.suppress(OSError):
        names = set(os.listdir(held.path)) - {LOCK}
    unused = not held.started and names <= {"multirun.yaml"}
    for name in names if unused else ():
        (held.path / name).unlink(missing_ok=True)
    release(path)
    if unused:
        _remove_created(held.path, held.created)


def holder(run_dir: Path) -> str | None:
    """`` (pid N)`` (``""`` when its pid is unreadable) if a process holds ``run_dir``'s lock, else None."""
    try:
        with open_run_file(Path(run_dir) / LOCK, LOCK_LIMIT) as f:
            if lock_descriptor(f.fileno(), blocking=False):  # free (released when f closes)
                return None
            f.seek(1)
            pid = f.read(32).split(b"\n", 1)[0]
    except (OSError, RunFileError):
        return None
    return f" (pid {int(pid)})" if pid.isdigit() else ""


def run_is_live(run_dir: Path) -> bool:
    """Whether a process holds ``run_dir``'s lock; read before summary.json (``running``, lock free: killed)."""
    return holder(run_dir) is not None
