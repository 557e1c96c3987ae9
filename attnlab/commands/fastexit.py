"""Ending the ``attnlab`` process without Python's interpreter teardown.

After a run everything attnlab writes is closed and renamed (sinks' ``close``, atomic writes),
yet a normal exit still tears down every module torch loaded (~2,100 modules and torch's C++
state): 0.7 s on an idle core, 2–3 s on a busy machine, longer than the whole tutorial training.
:func:`exit_now` runs what a normal exit must (``atexit`` callbacks: logging handlers,
``weakref.finalize``, multiprocessing's clean-up), flushes stdout and stderr, then ends the
process with ``os._exit``. It does so only when nothing else runs in the process (one thread,
no child process started by ``multiprocessing``, e.g. a launcher's workers); otherwise it
raises ``SystemExit`` as ``sys.exit`` does.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def _alone() -> bool:
    """True when the main thread is the only thread and no multiprocessing child is alive."""
    if threading.active_count() > 1:
        return False
    mp = sys.modules.get("multiprocessing")
    return not (mp is not None and mp.active_children())


def exit_now(status: int | None = 0) -> NoReturn:
    """End the process with ``status`` (None = 0), skipping the interpreter's teardown when
    :func:`_alone`; see the module docstring. Raises ``SystemExit(status)`` otherwise."""
    if not isinstance(status, (int, type(None))) or not _alone():
        raise SystemExit(status)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython: what a normal exit runs
    if run_exitfuncs is None:
        raise SystemExit(status)
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more can be written anyway
            pass
    os._exit(int(status or 0))
