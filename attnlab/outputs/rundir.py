"""Claiming a run dir: one live attnlab process per folder, never someone else's files.

A run dir (``hydra.run.dir``, a sweep job's folder, ``attnlab-reproduce --out``) and a sweep
dir (``hydra.sweep.dir``) are *claimed* before anything is written into them:

- **The lock.** :func:`claim` creates ``.attnlab.lock`` in the folder and holds an exclusive
  ``fcntl.flock`` on it for as long as the process writes there; the OS drops the lock when the
  process ends, however it ends (``kill -9`` included). The file holds the process id and, while
  the run goes, a reserve of disk space (:data:`RESERVE_BYTES`, ``posix_fallocate``) that
  :func:`release_reserve` gives back when a write fails, so a full disk still leaves room to
  record the failure; when the run's last writes begin (``RunDirSink.on_end``) it gives back half
  of it (at most :data:`LAST_WRITES_BYTES`) already, for the writes that cannot give it back and
  try again (TensorBoard writes from its own thread), and keeps the rest for its own.
  :func:`release` deletes the file when the run has written its final ``summary.json``: a
  finished run dir holds no lock file. A second attnlab process asking for
  the same folder is refused while the first holds it.
- **New or empty.** The folder must not exist, be empty, or hold only what Hydra itself writes
  for this run (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``; only when the
  caller allows it, see :func:`claim`). Anything else is refused with one line naming what is
  there: a finished run (``already holds a completed run``), a run that was killed
  (``summary.json`` says ``running`` and no process holds its lock), a live run of another
  process, or files attnlab did not write (``hydra.run.dir=''`` in a folder with the user's own
  ``metrics.csv``).
- **Live or killed.** :func:`run_is_live` tells a run that is being written (its lock is held)
  from one whose process died: read it *before* ``summary.json``; a summary that says
  ``running`` while the lock is free belongs to a killed run.

Without ``fcntl`` (Windows) there is no lock: claims still refuse non-empty folders and
:func:`run_is_live` is always False.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import RunDirError, os_reason

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

LOCK = ".attnlab.lock"
HYDRA_FILES = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})  # what Hydra saves in .hydra/
RESERVE_BYTES = 1 << 20  # disk space held in the lock file while a run goes, freed when a write fails
LAST_WRITES_BYTES = 128 << 10  # of it, freed when the last writes begin: TensorBoard's thread cannot retry
LOCK_WAIT_S = 0.25  # a lock busy this long belongs to another writer (a reader holds it for microseconds)
MAX_LISTED = 4  # names shown in a refusal
MAX_SCANNED = 1000  # entries of a folder looked at to decide and to name what is there
PID_BYTES = 32  # bytes of the lock file read for the pid
FINISHED = ("completed", "diverged", "interrupted", "failed")


@dataclass
class Claim:
    """A folder this process holds: its lock file's descriptor (None without fcntl), the
    outermost folder :func:`claim` created for it (None when it existed), whether the lock
    file still holds its reserve, and whether a job has started writing into it."""

    path: Path
    fd: int | None
    created: Path | None
    reserve: bool = False
    started: bool = False
    shown: str = ""  # KEY='value' as the user gave it, for messages


_claims: dict[str, Claim] = {}


def _key(path: Path) -> str:
    return os.path.realpath(path)


def claimed(path: Path) -> Claim | None:
    """This process's claim on ``path``, or None."""
    return _claims.get(_key(path))


class _Named(str):
    """``KEY='value'`` as a refusal line starts; ``.name`` the key alone."""

    def __new__(cls, name: str, value) -> "_Named":
        from attnlab.core.files import printable

        text = super().__new__(cls, f"{name}={printable(str(value), 300)!r}")
        text.name = name
        return text


def claim(path: Path, key: str = "hydra.run.dir", hydra_subdir: str | None = None, value: str | None = None,
          hydra_log: str | None = None) -> Claim:
    """Claim ``path`` for this process (see the module docstring): create it when missing,
    take its lock, check it is new or empty. ``hydra_subdir`` (e.g. ``".hydra"``) allows a
    folder of that name holding only Hydra's saved files (:data:`HYDRA_FILES`), and
    ``hydra_log`` a file of that name (``<job name>.log``, Hydra's job log when Hydra's own
    logging config is used): what Hydra writes for a job before attnlab sees it. Claiming a
    folder this process already holds returns that claim. ``value`` is the folder as the user
    gave it (shown in messages; default ``path``).

    Raises RunDirError, one line naming ``key`` and the folder, after undoing what it made:
    the folder cannot be created or written (``cannot write there (read-only file system)``),
    another process holds it, or it holds something else.
    """
    path = Path(path)
    held = claimed(path)
    if held is not None:
        return held
    key = _Named(key, path if value is None else value)
    created = _top_missing(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_created(path, created)
        raise RunDirError(f"{key}: cannot write there ({os_reason(err)}); choose another {key.name}") from None
    if not path.is_dir():
        raise RunDirError(f"{key}: not a folder; choose another {key.name}")
    lock = path / LOCK
    existed = os.path.lexists(lock)
    if existed and not stat.S_ISREG(os.lstat(lock).st_mode):
        raise RunDirError(f"{key}: holds files attnlab did not write ({LOCK}); a run dir must be "
                          f"new or empty; choose another {key.name}")
    try:
        fd = _lock(lock, key, path)
    except OSError as err:
        _remove_created(path, created)
        raise RunDirError(f"{key}: cannot write there ({os_reason(err)}); choose another {key.name}") from None
    claim_ = Claim(path, fd, created, shown=key)
    try:
        problem = _contents_problem(path, key, hydra_subdir, hydra_log, stale_lock=existed)
    except OSError as err:
        problem = f"{key}: cannot read it ({os_reason(err)}); choose another {key.name}"
    if problem is not None:
        _drop(claim_, unlink=not existed)
        raise RunDirError(problem)
    try:
        _write_pid(claim_)
    except OSError as err:
        _drop(claim_, unlink=True)
        _remove_created(path, created)
        raise RunDirError(f"{key}: cannot write there ({os_reason(err)}); choose another {key.name}") from None
    _claims[_key(path)] = claim_
    return claim_


def _top_missing(path: Path) -> Path | None:
    top = None
    for folder in [path.absolute(), *path.absolute().parents]:
        if os.path.lexists(folder):
            break
        top = folder
    return top


def _remove_created(path: Path, top: Path | None) -> None:
    """Remove the empty folders made for ``path`` up to ``top`` (nothing else)."""
    if top is None:
        return
    folder = path.absolute()
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


def _lock(lock: Path, key: "_Named", path: Path) -> int | None:
    """Open ``lock`` (created when missing) and take its exclusive flock; the descriptor.
    Raises RunDirError when another process holds it, OSError when it cannot be created."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(5):
        fd = os.open(lock, flags, 0o644)
        if fcntl is None:
            return fd
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    pid = _read_pid(fd)
                    os.close(fd)
                    who = f"another attnlab process (pid {pid})" if pid else "another attnlab process"
                    raise RunDirError(f"{key}: {who} is writing a run there; choose another {key.name}") \
                        from None
                time.sleep(0.01)
        try:  # the file we locked must still be the one at that name (a finishing run deletes it)
            same = os.stat(lock, follow_symlinks=False)
            mine = os.fstat(fd)
            if (same.st_dev, same.st_ino) == (mine.st_dev, mine.st_ino):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise RunDirError(f"{key}: another attnlab process is starting and finishing runs there; "
                      f"choose another {key.name}")


def _read_pid(fd: int) -> int | None:
    from attnlab.outputs.npz_writer import _pread

    try:
        head = _pread(fd, PID_BYTES, 0).split(b"\n", 1)[0]
    except OSError:
        return None
    return int(head) if head.isdigit() and len(head) < 12 else None


def _write_pid(claim_: Claim) -> None:
    if claim_.fd is None:
        return
    from attnlab.outputs.npz_writer import write_all

    os.ftruncate(claim_.fd, 0)
    data = f"{os.getpid()}\n".encode()
    write_all(claim_.fd, data, 0)
    if not (hasattr(os, "posix_fallocate") and hasattr(os, "statvfs")):
        return
    try:
        fs = os.statvfs(claim_.path)
        reserve = min(RESERVE_BYTES, fs.f_bavail * fs.f_frsize // 8)
        if reserve > len(data):
            os.posix_fallocate(claim_.fd, len(data), reserve - len(data))
            claim_.reserve = True
    except OSError:  # no room, a file-size limit, or a filesystem without fallocate: no reserve
        os.ftruncate(claim_.fd, len(data))


def _contents_problem(path: Path, key: "_Named", hydra_subdir: str | None, hydra_log: str | None,
                      stale_lock: bool) -> str | None:
    """None when ``path`` holds nothing but the lock (and Hydra's files when allowed), else the
    refusal line."""
    import itertools

    with os.scandir(path) as it:
        entries = list(itertools.islice((e for e in it if e.name != LOCK), MAX_SCANNED + 1))
    if not entries:
        return None
    if hydra_subdir and not stale_lock and _only_hydras(entries, hydra_subdir, hydra_log):
        return None
    names = {e.name for e in entries}
    if "summary.json" in names:
        status = _status(path)
        if status in FINISHED:
            return (f"{key}: already holds a {status} run; choose another {key.name} "
                    "(runs are never overwritten)")
        if status == "running":  # we hold the lock, so the process that wrote it is gone
            return (f"{key}: holds a run that was killed (its summary.json says running and no "
                    f"process holds its lock); choose another {key.name} (runs are never overwritten)")
    if "multirun.yaml" in names:  # Hydra's record of a sweep: the sweep dir of an earlier sweep
        return (f"{key}: already holds a sweep (its multirun.yaml and job folders); choose another "
                f"{key.name} (runs are never overwritten; attnlab-compare reads the sweep)")
    if stale_lock:
        return (f"{key}: holds a run that was killed before it wrote summary.json; "
                f"choose another {key.name} (runs are never overwritten)")
    return (f"{key}: holds files attnlab did not write ({_list(entries)}); a run dir must be "
            f"new or empty; choose another {key.name}")


def _only_hydras(entries: list, hydra_subdir: str, hydra_log: str | None) -> bool:
    """True when ``entries`` are Hydra's saved-config folder (holding only Hydra's files) and
    perhaps Hydra's job log."""
    import itertools

    for e in entries:
        if e.name == hydra_log and e.is_file(follow_symlinks=False):
            continue
        if e.name != hydra_subdir or not e.is_dir(follow_symlinks=False):
            return False
        with os.scandir(e.path) as it:
            inner = list(itertools.islice(it, MAX_SCANNED + 1))
        if not all(i.name in HYDRA_FILES and i.is_file(follow_symlinks=False) for i in inner):
            return False
    return True


def _list(entries: list) -> str:
    from attnlab.core.files import printable

    names = sorted(e.name for e in entries[:MAX_SCANNED])
    shown = ", ".join(printable(n, 60) for n in names[:MAX_LISTED])
    more = len(entries) - MAX_LISTED
    return shown + (f" and {'more than ' if len(entries) > MAX_SCANNED else ''}{min(more, MAX_SCANNED - MAX_LISTED)}"
                    " more" if more > 0 else "")


def _status(path: Path) -> str | None:
    from attnlab.saved import safe_read

    try:
        status = safe_read.read_summary(path).get("status")
    except Exception:  # a damaged or hostile summary.json: not a run of ours
        return None
    return status if isinstance(status, str) else None


def mark_started(path: Path) -> None:
    """Record that a job started writing into the claimed ``path`` (:func:`abandon` then
    leaves its files alone)."""
    held = claimed(path)
    if held is not None:
        held.started = True


def release_reserve(path: Path, last_writes: bool = False) -> None:
    """Give back the disk space reserved in ``path``'s lock file (after a write failed, so the
    failure can still be recorded); with ``last_writes`` (when the run's last writes begin) only
    half of it, at most :data:`LAST_WRITES_BYTES`: room for TensorBoard's thread, which cannot
    give the reserve back and try again, the rest still reserved for the run's own writes. A
    no-op when this process holds no claim on it."""
    held = claimed(path)
    if held is None or not held.reserve or held.fd is None:
        return
    pid_bytes = len(f"{os.getpid()}\n")
    try:
        keep = 0
        if last_writes:
            reserved = os.fstat(held.fd).st_size - pid_bytes
            keep = reserved - min(reserved // 2, LAST_WRITES_BYTES)
        held.reserve = keep > 0
        os.ftruncate(held.fd, pid_bytes + keep)
    except OSError:
        held.reserve = False


def _drop(claim_: Claim, unlink: bool) -> None:
    if claim_.fd is None:
        if unlink:
            (claim_.path / LOCK).unlink(missing_ok=True)
        return
    if unlink:
        try:
            same = os.stat(claim_.path / LOCK, follow_symlinks=False)
            mine = os.fstat(claim_.fd)
            if (same.st_dev, same.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(claim_.path / LOCK)
        except OSError:
            pass
    os.close(claim_.fd)  # releases the flock


def release(path: Path) -> None:
    """Delete ``path``'s lock file and release the lock (the run wrote its last file); a
    no-op when this process holds no claim on it."""
    held = _claims.pop(_key(path), None)
    if held is not None:
        _drop(held, unlink=True)


def abandon(path: Path, extra: tuple[str, ...] = ()) -> None:
    """Undo this process's claim on ``path`` when nothing but the claim's own traces is there:
    the lock, Hydra's saved files in ``.hydra/`` and the files named in ``extra`` (e.g. a
    sweep's ``multirun.yaml``) are removed, then the folders the claim created, if empty. A
    folder holding anything else (a job started writing) is only released."""
    held = _claims.get(_key(path))
    if held is None:
        return
    try:
        names = {e.name for e in os.scandir(held.path)} - {LOCK}
        hydra = held.path / ".hydra"
        inner = set(os.listdir(hydra)) if ".hydra" in names and not hydra.is_symlink() else set()
    except OSError:
        names, inner = {"?"}, set()
    if held.started or not names <= {".hydra", *extra} or not inner <= HYDRA_FILES:
        release(path)
        return
    for name in names - {".hydra"}:
        (held.path / name).unlink(missing_ok=True)
    if ".hydra" in names:
        for name in inner:
            (hydra / name).unlink(missing_ok=True)
        try:
            hydra.rmdir()
        except OSError:
            pass
    release(path)
    _remove_created(held.path, held.created)


def claims() -> list[Claim]:
    """This process's claims, oldest first."""
    return list(_claims.values())


def abandon_all() -> None:
    """:func:`abandon` every claim of this process (the command is ending)."""
    for held in list(_claims.values()):
        abandon(held.path, extra=("multirun.yaml",))


def run_is_live(run_dir: Path) -> bool:
    """True when a process holds ``run_dir``'s lock (its run is being written right now).

    Safe on any folder: the lock file is opened only when it is a regular file (no symlink is
    followed, a FIFO or device is never opened) and nothing is read from it; a shared lock is
    tried and released at once. False without a lock file, on any error, and without fcntl.
    Read it before ``summary.json``: a summary that still says ``running`` afterwards belongs
    to a killed run."""
    if fcntl is None:
        return False
    lock = Path(run_dir) / LOCK
    try:
        if not stat.S_ISREG(os.lstat(lock).st_mode):
            return False
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            return err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
