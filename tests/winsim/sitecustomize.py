"""The Windows simulation (tests/test_windows_sim.py; docs/compat.md): with this folder first on
PYTHONPATH, every Python process started (attnlab's commands, a launcher's workers) begins without the
POSIX-only modules and names that Windows lacks, so attnlab's feature detection takes its Windows paths.

Removed: the modules ``fcntl``, ``resource``, ``termios`` (importing one raises ImportError);
``signal.SIGHUP``, ``SIGQUIT``; ``os.O_NOFOLLOW``, ``O_NONBLOCK``, ``O_DIRECTORY``, ``O_CLOEXEC``,
``posix_fallocate``, ``statvfs``, ``fstatvfs``, ``sysconf``; multiprocessing's ``fork`` and ``forkserver``
(``spawn`` only). Added: ``signal.SIGBREAK`` (Ctrl-Break). Kept as Windows has them: ``shutil.disk_usage``
(on Windows a call of its own, here bound to the real statvfs) and filelock's descriptor lock (on Windows
``LockFileEx``, here the real ``flock`` underneath, as filelock itself cannot see it). ``os.name``,
path syntax and the file system stay Linux's."""
import os
import shutil
import signal
import sys
import warnings

_statvfs = os.statvfs


def _disk_usage(path):
    st = _statvfs(path)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    return shutil._ntuple_diskusage(total, (st.f_blocks - st.f_bfree) * st.f_frsize, free)


shutil.disk_usage = _disk_usage

import fcntl as _fcntl  # noqa: E402  (the real one, for the stand-in of LockFileEx below)

for _name in ("fcntl", "resource", "termios"):
    sys.modules[_name] = None
for _name in ("SIGHUP", "SIGQUIT"):
    if hasattr(signal, _name):
        delattr(signal, _name)
    signal.Signals._member_map_.pop(_name, None)
signal.SIGBREAK = 21  # Windows' Ctrl-Break (its number there; here SIGTTIN's, which no test sends otherwise)
for _name in ("O_NOFOLLOW", "O_NONBLOCK", "O_DIRECTORY", "O_CLOEXEC", "posix_fallocate", "statvfs", "fstatvfs",
              "sysconf"):
    if hasattr(os, _name):
        delattr(os, _name)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # filelock: "only soft file lock is available" (no fcntl here)
    import filelock
_descriptor = sys.modules[filelock.lock_descriptor.__module__]  # (filelock._native._descriptor in 4.3)


def _lock_fd_nonblocking(fd):
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


for _prefix in ("", "_"):  # the primitive's name differs between filelock versions
    if hasattr(_descriptor, f"{_prefix}lock_fd_nonblocking"):
        setattr(_descriptor, f"{_prefix}lock_fd_nonblocking", _lock_fd_nonblocking)
        setattr(_descriptor, f"{_prefix}unlock_fd", lambda fd: _fcntl.flock(fd, _fcntl.LOCK_UN))

import multiprocessing  # noqa: E402

multiprocessing.set_start_method("spawn")  # Windows has no fork, no forkserver
multiprocessing.get_all_start_methods = lambda: ["spawn"]
