"""``python -m attnlab...`` for the tests without paying Python's and torch's start each time.

Most of the ~100 ``attnlab`` commands the suite runs spend ~3 s of CPU importing torch, Hydra and
attnlab before they do a few hundred milliseconds of work. :func:`run` is ``subprocess.run`` for
such a command: it asks a fork server (this file run as a script, one per test process, started
at first use) that has imported those modules once to ``fork()``; the forked copy takes the
test's stdin (``/dev/null``), stdout and stderr pipes, working directory, environment and argv and
runs the module as ``python -m`` would (``runpy``; sys.path[0] the working directory), then
exits through Python's normal shutdown (atexit, flushing). The server reports the exit status
(a signal death as a negative code, as subprocess does); :func:`run` returns a
``subprocess.CompletedProcess`` with text output decoded as ``subprocess.run(text=True)`` does,
and kills the process at ``timeout`` (``subprocess.TimeoutExpired``).

A forked copy differs from a fresh process in what was already imported and in anything read at
import time, so :func:`run` starts a real subprocess instead whenever that could matter:
- the command is not ``[sys.executable, "-m", "attnlab..."]`` or has a ``preexec_fn``;
- the environment differs from the server's in any variable other than attnlab's run-time ones
  (``ATTNLAB_*``, ``HYDRA_FULL_ERROR``, ``PYTEST_CURRENT_TEST``, ``TORCHINDUCTOR_*``: read when
  used, never at import) - e.g. PYTHONPATH,
  PYTHONIOENCODING, OMP_NUM_THREADS, LANG;
- the working directory holds Python code (a ``*.py`` file or a package) that could shadow a
  module (the server has imported those modules already);
- the server is unusable (it printed a warning while importing, started a thread, imported
  matplotlib or torch's compiler, or failed): ``ATTNLAB_TEST_FORKSERVER=0`` forces subprocesses.
Tests about a process's start itself (imports, signals to a process group, closed descriptors,
resource limits) start their own subprocesses and never come here.
"""
from __future__ import annotations

import atexit
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# read when used (attnlab.interrupts, attnlab.cli, hydra_errors, a test's oc.env), never at import;
# TORCHINDUCTOR_*: set in this process by torch's compiler once a test imports it, read only by that
# compiler, which the server has not imported (NOT_PRELOADED, checked)
RUNTIME_ENV_PREFIXES = ("ATTNLAB_", "TORCHINDUCTOR_")
RUNTIME_ENV = {"HYDRA_FULL_ERROR", "PYTEST_CURRENT_TEST"}  # pytest sets the last for each test
MODULES = ("attnlab.cli", "attnlab.launch", "attnlab.reproduce")
# what those commands import (not the MODULES themselves: runpy runs them as __main__, fresh)
PRELOAD = ("torch", "numpy", "tiktoken", "hydra", "omegaconf", "attnlab.argv", "attnlab.callbacks",
           "attnlab.interrupts", "attnlab.streams", "attnlab.rundir", "attnlab.config", "attnlab.errors",
           "attnlab.fastexit", "attnlab.hydra_errors", "attnlab.job", "attnlab.console", "attnlab.verdict",
           "attnlab.runs", "attnlab.safe_read", "attnlab.artifacts", "attnlab.training", "attnlab.model",
           "attnlab.tensorboard", "attnlab.npz_writer", "attnlab.render_process", "attnlab.compare",
           "attnlab.report", "attnlab.sweep", "attnlab.swept",
           "hydra_plugins.attnlab_sweeper", "torch.utils.tensorboard", "tensorboard.plugins.hparams.plugin_data_pb2",
           "hydra._internal.core_plugins.basic_launcher", "hydra._internal.core_plugins.basic_sweeper",
           "hydra._internal.utils", "hydra.core.override_parser.overrides_parser")
NOT_PRELOADED = ("matplotlib", "torch._dynamo", "torch._inductor")  # a default run never imports them
STATUS = struct.Struct("!i")  # a wait status

_server: dict = {}
COUNTS: dict[str, int] = {}  # commands forked, and started fresh by reason, in this process
_lock = threading.Lock()
# the server's environment: this process's at import (conftest sets OMP_NUM_THREADS=1 first) with
# the figures' backend the tests' helpers set, without the run-time variables
BASE_ENV = {**{k: v for k, v in os.environ.items() if k not in RUNTIME_ENV and not k.startswith(RUNTIME_ENV_PREFIXES)},
            "MPLBACKEND": "Agg"}


def _shadows(cwd: Path) -> bool:
    """Whether ``cwd`` (sys.path[0] of ``python -m``) holds a module or package that a fresh
    process would import instead of one the server imported from elsewhere (a ``numpy.py``, an
    ``attnlab/`` copy); attnlab's own checkout is the code the server imported."""
    import importlib.util

    try:
        entries = list(cwd.iterdir())
    except OSError:
        return True
    for entry in entries:
        name = entry.name.split(".")[0]
        if entry.suffix in (".py", ".pyc", ".so") or (entry / "__init__.py").exists():
            if name in sys.stdlib_module_names:
                return True
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                return True
            origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
            if spec is not None and origin not in (entry.resolve(), (entry / "__init__.py").resolve()):
                return True
    return False


def _fresh_because(cmd: list[str], cwd: Path, env: dict[str, str], preexec_fn) -> str | None:
    """Why ``cmd`` needs a fresh process (module docstring), or None."""
    if os.environ.get("ATTNLAB_TEST_FORKSERVER") == "0":
        return "ATTNLAB_TEST_FORKSERVER=0"
    if preexec_fn is not None:
        return "preexec_fn"
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] != "-m" or cmd[2] not in MODULES:
        return "not python -m attnlab"
    differs = sorted(k for k in set(env) | set(BASE_ENV) if env.get(k) != BASE_ENV.get(k)
                     and k not in RUNTIME_ENV and not k.startswith(RUNTIME_ENV_PREFIXES))
    if differs:
        return f"environment: {', '.join(differs)}"
    return "the working directory holds Python code" if _shadows(cwd) else None


def _start() -> str | None:
    """The fork server's socket for this process (the server started at the first call; None
    when it could not start)."""
    with _lock:
        if _server.get("pid") != os.getpid():
            _server.clear()
            _server["pid"] = os.getpid()
            _server["socket"] = _spawn(BASE_ENV)
        return _server["socket"]


def _spawn(env: dict[str, str]) -> str | None:
    folder = tempfile.mkdtemp(prefix="attnlab-forkserver-")
    path, log_path = os.path.join(folder, "socket"), os.path.join(folder, "log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, __file__, path, str(os.getpid())], cwd=folder, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    _server["proc"], _server["folder"] = proc, folder
    atexit.register(_stop)
    end = time.monotonic() + 120
    while not os.path.exists(path + ".ready"):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            proc.wait()
            with open(log_path, "rb") as log:
                sys.stderr.write(f"tests/forkserver: not used ({log.read().decode(errors='replace')[-400:]})\n")
            return None
        time.sleep(0.02)
    return path


def _stop() -> None:
    """End this process's server and remove its folder (socket, log)."""
    proc = _server.get("proc")
    if proc is not None and _server.get("pid") == os.getpid():
        proc.kill()
        proc.wait()
        shutil.rmtree(_server["folder"], ignore_errors=True)


def run(cmd: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, cwd=, env=, timeout=, preexec_fn=, capture_output=True, text=True)``,
    forked from the server when that gives the same result (module docstring), else exactly that."""
    cwd = Path(cwd or os.getcwd())
    env = dict(os.environ if env is None else env)
    why = _fresh_because(cmd, cwd, env, preexec_fn)
    path = _start() if why is None else None
    if path is not None:
        try:
            result = _forked(path, cmd, cwd, env, timeout)
            COUNTS["forked"] = COUNTS.get("forked", 0) + 1
            return result
        except _NoServer:  # the server is gone (killed): fresh from now on
            with _lock:
                _server["socket"] = None
    why = f"fresh ({why or 'no server'})"
    COUNTS[why] = COUNTS.get(why, 0) + 1
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, preexec_fn=preexec_fn,
                          capture_output=True, text=True)


class _NoServer(Exception):
    """The server's socket refused the connection: nothing was started."""


def _forked(path: str, cmd: list[str], cwd: Path, env: dict[str, str], timeout: float | None):
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            conn.connect(path)
        except OSError as err:
            conn.close()
            os.close(out_r)
            os.close(err_r)
            raise _NoServer(path) from err
        request = json.dumps({"module": cmd[2], "argv": cmd[3:], "orig_argv": cmd, "cwd": str(cwd), "env": env})
        socket.send_fds(conn, [request.encode()], [devnull, out_w, err_w])
    finally:
        for fd in (devnull, out_w, err_w):
            os.close(fd)
    pid = _unpack(conn.recv(STATUS.size))
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    end = None if timeout is None else time.monotonic() + timeout
    try:
        while sel.get_map():
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                _kill(pid)
                raise subprocess.TimeoutExpired(cmd, timeout, b"".join(chunks[out_r]), b"".join(chunks[err_r]))
            for key, _ in sel.select(left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
        conn.settimeout(None if end is None else max(end - time.monotonic(), 1.0))
        try:
            reply = conn.recv(STATUS.size)
        except socket.timeout:
            _kill(pid)
            raise subprocess.TimeoutExpired(cmd, timeout) from None
    finally:
        sel.close()
        os.close(out_r)
        os.close(err_r)
        conn.close()
    code = os.waitstatus_to_exitcode(_unpack(reply))
    return subprocess.CompletedProcess(cmd, code, _text(b"".join(chunks[out_r])), _text(b"".join(chunks[err_r])))


def _unpack(reply: bytes) -> int:
    if len(reply) != STATUS.size:
        raise RuntimeError("tests/forkserver: the server ended before it answered (see its log)")
    return STATUS.unpack(reply)[0]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True)`` decodes them (locale encoding, universal newlines)."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


# ----------------------------------------------------------------------------- the server
def _serve(path: str, owner: int) -> dict:
    """Import PRELOAD, then fork a copy per request; returns the request in the copy."""
    import importlib
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        for name in PRELOAD:
            importlib.import_module(name)
    if caught:
        raise SystemExit(f"importing printed warnings: {[str(w.message) for w in caught]}")
    if threading.active_count() != 1:
        raise SystemExit(f"threads after importing: {threading.enumerate()}")
    loaded = [m for m in NOT_PRELOADED if m in sys.modules]
    if loaded:
        raise SystemExit(f"imported {loaded}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    Path(path + ".ready").touch()
    waiting: dict[int, socket.socket] = {}
    while True:
        if os.getppid() != owner:
            raise SystemExit(0)  # the test process is gone
        listener.settimeout(0.05)
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            conn = None
        if conn is not None:
            conn.settimeout(None)
            msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 22, 3)
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                request = json.loads(msg)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            conn.sendall(STATUS.pack(pid))
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in waiting:
                done = waiting.pop(pid)
                try:
                    done.sendall(STATUS.pack(status))
                except OSError:
                    pass
                done.close()


def _become(request: dict) -> None:
    """In the forked copy: the request's process, as ``python -m MODULE ARGV`` would start."""
    import runpy

    import numpy as np

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["orig_argv"][0], *request["argv"]]
    sys.orig_argv = list(request["orig_argv"])
    sys.path.insert(0, os.getcwd())
    for name in MODULES:
        assert name not in sys.modules, name
    np.random.seed()  # a fresh process's numpy seeds itself from the OS (random reseeds itself at fork)
    runpy._run_module_as_main(request["module"], alter_argv=True)


if __name__ == "__main__":
    sys.path.pop(0)  # tests/ (this file's folder) is not on a real run's path
    _become(_serve(sys.argv[1], int(sys.argv[2])))
