"""Busy processes for the benchmark's "loaded machine" cases, started and ended by the benchmark.

    with busy_processes(2, max_seconds=600):
        ...  # measure here: two extra processes each spin one core

Each busy process is a plain Python loop that stops by itself after ``max_seconds`` (so a
benchmark that dies cannot leave them behind for long); leaving the block terminates them
(SIGTERM, then SIGKILL after 5 s) and reaps them. Only the processes started here are touched.
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Iterator

# spins one core until its deadline; no imports beyond time, so it starts in ~20 ms
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def busy_processes(n: int = 2, max_seconds: float = 900.0) -> Iterator[list[subprocess.Popen]]:
    """Run ``n`` CPU-bound processes for at most ``max_seconds`` while the block runs."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=float(max_seconds))],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
