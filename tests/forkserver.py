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
and kills the process at ``timeout`` (``subprocess.TimeoutExpired``). :func:`Popen` is
``subprocess.Popen`` the same way, for tests that signal, read or kill a running command (a
:class:`Forked`: pid, pipes, poll/wait/communicate, signals); ``rlimits=`` sets resource limits
in the command's process (forked: before the module runs; fresh: before Python starts).

A forked copy differs from a fresh process in what was already imported and in anything read at
import time, so :func:`run` starts a real subprocess instead whenever that could matter:
- the command is not ``[sys.executable, "-m", "attnlab..."]`` or has a ``preexec_fn``;
- the environment differs from the server's in any variable other than attnlab's run-time ones
  (``ATTNLAB_*``, ``HYDRA_FULL_ERROR``, ``PYTEST_CURRENT_TEST``, ``TORCHINDUCTOR_*``: read when
  used, never at import) - e.g. PYTHONPATH,
  PYTHONIOENCODING, OMP_NUM_THREADS, LANG;
- the working directory holds Python code (a module file, a package, a namespace package: one
  could shadow a module the server imported, or be imported where the server found nothing),
  unless it is attnlab's own checkout;
- the request does not fit one message (~128 KB of argv and environment), or the server is gone;
- the server is unusable (it printed a warning while importing, started a thread, imported
  matplotlib or torch's compiler, or failed): ``ATTNLAB_TEST_FORKSERVER=0`` forces subprocesses.
Tests about a process's start itself (imports, signals to a process group, closed descriptors,
resource limits) start their own subprocesses and never come here. The copy gets the caller's
umask; it does not get resource limits or signal dispositions the caller set after the server
started (a test passes ``rlimits=``, a ``preexec_fn`` or starts its own process), its string hash
seed is the server's, and a traceback it prints shows two frames of this file above the module's.
A timeout, a Ctrl-C or any other exception in the caller kills the copy, as subprocess.run does;
a copy also ends with its server (``PR_SET_PDEATHSIG``: a server killed mid-command leaves no
orphan, and the caller's wait() raises RuntimeError, as it cannot know the status).
"""
from __future__ import annotations

import atexit
import errno
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
MAX_REQUEST = 1 << 17  # bytes of one request (argv and environment); a larger one runs fresh

_server: dict = {}
COUNTS: dict[str, int] = {}  # commands forked, and started fresh by reason, in this process
_lock = threading.Lock()
# the server's environment: this process's at import (conftest sets OMP_NUM_THREADS=1 first) with
# the figures' backend the tests' helpers set, without the run-time variables
BASE_ENV = {**{k: v for k, v in os.environ.items() if k not in RUNTIME_ENV and not k.startswith(RUNTIME_ENV_PREFIXES)},
            "MPLBACKEND": "Agg"}


def _shadows(cwd: Path) -> bool:
    """Whether ``cwd`` (sys.path[0] of ``python -m``) holds Python code a fresh process could
    import instead of what the server imported, or import where the server found nothing (an
    optional dependency a library tries): any module file (``.py``, ``.pyc``, ``.so``, ``.pth``)
    or folder holding one (a package, a namespace package). attnlab's own checkout, the code the
    server imported, is the exception."""
    import importlib.util

    spec = importlib.util.find_spec("attnlab")
    checkout = Path(spec.origin).resolve().parent.parent if spec is not None and spec.origin else None
    try:
        if cwd.resolve() == checkout:
            return False
        entries = list(cwd.iterdir())
    except OSError:
        return True

    def code(path: Path, depth: int) -> bool:  # a module file, or a folder holding one (3 levels)
        if path.suffix in (".py", ".pyc", ".so", ".pth") or path.name == "__pycache__":
            return True
        return depth > 0 and path.is_dir() and any(code(p, depth - 1) for p in path.iterdir())

    try:
        return any(code(entry, 3) for entry in entries)
    except OSError:
        return True


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
        timeout: float | None = None, preexec_fn=None, rlimits: dict[int, tuple[int, int]] | None = None
        ) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, cwd=, env=, timeout=, preexec_fn=, capture_output=True, text=True)``,
    forked from the server when that gives the same result (module docstring), else exactly that.
    ``rlimits`` ({resource.RLIMIT_*: (soft, hard)}) are set in the process before the module runs
    (a fresh one: before Python starts)."""
    with Popen(cmd, cwd=cwd, env=env, preexec_fn=preexec_fn, rlimits=rlimits, stdout=subprocess.PIPE,
               stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:  # a timeout, a Ctrl-C, anything: the process ends with its caller, as with subprocess.run
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def Popen(cmd: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None, preexec_fn=None,
          rlimits: dict[int, tuple[int, int]] | None = None, stdout=None, stderr=None, text: bool = False):
    """``subprocess.Popen(cmd, cwd=, env=, preexec_fn=, stdout=, stderr=, text=)`` (stdin: /dev/null),
    forked from the server when that gives the same process (module docstring; ``stdout`` and
    ``stderr`` each PIPE, DEVNULL, None or a file), else exactly that. A forked one is a
    :class:`Forked`: the same ``pid``, ``stdout``/``stderr`` pipes, ``poll``/``wait``/
    ``communicate``/``send_signal``/``terminate``/``kill`` and ``returncode``."""
    cwd = Path(cwd or os.getcwd())
    env = dict(os.environ if env is None else env)
    why = _fresh_because(cmd, cwd, env, preexec_fn)
    path = _start() if why is None else None
    if path is not None:
        try:
            proc = Forked(path, cmd, cwd, env, rlimits or {}, stdout, stderr, text)
            COUNTS["forked"] = COUNTS.get("forked", 0) + 1
            return proc
        except _NoServer as err:  # fresh: this command, or from now on when the server is gone (killed)
            why = err.why
            if err.gone:
                with _lock:
                    _server["socket"] = None
    why = f"fresh ({why or 'no server'})"
    COUNTS[why] = COUNTS.get(why, 0) + 1
    if rlimits:
        preexec_fn = _setting(rlimits, preexec_fn)
    return subprocess.Popen(cmd, cwd=cwd, env=env, preexec_fn=preexec_fn, stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, text=text)


def _setting(rlimits: dict[int, tuple[int, int]], then=None):
    def preexec() -> None:
        import resource

        for which, limits in rlimits.items():
            resource.setrlimit(which, limits)
        if then is not None:
            then()
    return preexec


class _NoServer(Exception):
    """Nothing was started: the request did not fit one message, or the server is ``gone``."""

    def __init__(self, why: str, gone: bool) -> None:
        super().__init__(why)
        self.why, self.gone = why, gone


class Forked:
    """A command forked from the server (see :func:`Popen`): its exit status comes from the
    server, which is its parent, over the request's socket."""

    def __init__(self, path: str, cmd: list[str], cwd: Path, env: dict[str, str], rlimits: dict, stdout, stderr,
                 text: bool) -> None:
        self.args, self.returncode, self.text = cmd, None, text
        import resource

        for which, (soft, hard) in rlimits.items():  # what setrlimit would refuse, refused here as it would be
            if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
                raise ValueError(f"rlimits: soft limit {soft} of {which} above its hard limit {hard}")
        umask = os.umask(0)
        os.umask(umask)
        argv = [os.fsdecode(a) for a in cmd]  # str, bytes or a path, as subprocess takes them
        request = json.dumps({"module": argv[2], "argv": argv[3:], "orig_argv": argv, "cwd": str(cwd), "env": env,
                              "umask": umask, "rlimits": [[k, *v] for k, v in rlimits.items()]}).encode()
        if len(request) > MAX_REQUEST:
            raise _NoServer("the request does not fit one message", gone=False)
        ours: list[int] = []  # the read ends of PIPEs (kept), then what only the child needs (closed)
        theirs: list[int] = [os.open(os.devnull, os.O_RDONLY)]
        conn = None
        try:
            for target, stream in ((1, stdout), (2, stderr)):
                if stream == subprocess.PIPE:
                    r, w = os.pipe()
                    ours.append(r)
                    theirs.append(w)
                elif stream == subprocess.DEVNULL:
                    ours.append(-1)
                    theirs.append(os.open(os.devnull, os.O_WRONLY))
                else:
                    ours.append(-1)
                    theirs.append(os.dup(target if stream is None else stream if isinstance(stream, int)
                                         else stream.fileno()))  # None: this process's, as subprocess
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                conn.connect(path)
                socket.send_fds(conn, [request], theirs)
            except OSError as err:  # nothing was started
                raise _NoServer("the request does not fit one message" if err.errno == errno.EMSGSIZE
                                else "no server", gone=err.errno != errno.EMSGSIZE) from err
            for fd in theirs:  # the copy has its own: a pipe ends when the copy's end closes
                os.close(fd)
            theirs = []
            conn.settimeout(60)
            self.pid = _unpack(conn.recv(STATUS.size))
        except BaseException:
            if conn is not None:
                conn.close()
            for fd in [*ours, *theirs]:
                if fd >= 0:
                    os.close(fd)
            raise
        self._conn = conn
        self._chunks: tuple[list[bytes], list[bytes]] = ([], [])
        self.stdin = None
        self.stdout, self.stderr = (None if fd < 0 else
                                    open(fd, "r", encoding=locale.getpreferredencoding(False)) if text else
                                    open(fd, "rb") for fd in ours)

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                self._status(self._conn.recv(STATUS.size))
            except BlockingIOError:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._status(self._conn.recv(STATUS.size))
            except (socket.timeout, BlockingIOError):  # timeout 0 makes the socket non-blocking
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def _status(self, reply: bytes) -> None:
        self.returncode = os.waitstatus_to_exitcode(_unpack(reply))
        self._conn.close()

    def communicate(self, timeout: float | None = None):
        """Read stdout and stderr to their ends and wait (``subprocess.TimeoutExpired`` at
        ``timeout``; the process goes on, as with subprocess)."""
        end = None if timeout is None else time.monotonic() + timeout
        piped = [s for s in (self.stdout, self.stderr) if s is not None and not s.closed]
        if timeout is None and len(piped) == 1 and not any(self._chunks):  # as subprocess: the file's read()
            data = piped[0].read()
            piped[0].close()
            self.wait()
            return tuple(data if s is piped[0] else None for s in (self.stdout, self.stderr))
        open_fds = {s.fileno(): i for i, s in enumerate((self.stdout, self.stderr)) if s is not None and not s.closed}
        chunks = self._chunks  # [stdout's, stderr's]: what an earlier call read before its timeout is kept
        with selectors.DefaultSelector() as sel:
            for fd in open_fds:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout, *(b"".join(c) for c in chunks))
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[open_fds[key.fd]].append(data)
                    else:
                        sel.unregister(key.fd)
        for s in (self.stdout, self.stderr):
            if s is not None:
                s.close()
        self.wait(None if end is None else max(end - time.monotonic(), 1.0))
        return tuple(None if s is None else _text(b"".join(c)) if self.text else b"".join(c)
                     for s, c in zip((self.stdout, self.stderr), chunks))

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as subprocess: never a signal to a pid the server has reaped
            _kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _unpack(reply: bytes) -> int:
    if len(reply) != STATUS.size:
        raise RuntimeError("tests/forkserver: the server ended before it answered (see its log)")
    return STATUS.unpack(reply)[0]


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
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
            fds: list[int] = []
            try:  # a request that is incomplete or not ours is dropped; the server goes on
                conn.settimeout(10)
                msg, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
                request = json.loads(msg)
                if len(fds) != 3 or not isinstance(request, dict):
                    raise ValueError("not a request")
            except (OSError, ValueError):
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            server = os.getpid()
            pid = os.fork()
            if pid == 0:
                import ctypes

                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with the server
                if os.getppid() != server:  # the server ended before that
                    os._exit(1)
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(STATUS.pack(pid))
                waiting[pid] = conn
            except OSError:  # the caller is gone: so is what it asked for
                _kill(pid)
                conn.close()
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
    import resource
    import runpy
    import types

    import numpy as np

    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.modules["__main__"] = types.ModuleType("__main__")  # the module runs in a namespace of its own
    sys.argv = [request["orig_argv"][0], *request["argv"]]
    sys.orig_argv = list(request["orig_argv"])
    sys.path.insert(0, os.getcwd())
    for name in MODULES:
        assert name not in sys.modules, name
    np.random.seed()  # a fresh process's numpy seeds itself from the OS (random reseeds itself at fork)
    for which, soft, hard in request.get("rlimits", []):
        resource.setrlimit(which, (soft, hard))
    runpy._run_module_as_main(request["module"], alter_argv=True)


if __name__ == "__main__":
    sys.path.pop(0)  # tests/ (this file's folder) is not on a real run's path
    _become(_serve(sys.argv[1], int(sys.argv[2])))
