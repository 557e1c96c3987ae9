"""A learner's code run where it cannot end, hang or fake attnlab-check: :func:`run_stages` runs the source
in a child process (``forkserver``, else ``spawn`` as on Windows), bounded in time and, where
``resource.RLIMIT_AS`` exists, in memory; its exit, an endless loop or a crash is that stage's failure in one
line. Values come back as ``.npy`` bytes (``allow_pickle=False``): the command's process, which compares
them with the tutorial's numbers, unpickles nothing the child sends.
"""
from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from attnlab.core.i18n import _, language, set_language
from attnlab.outputs.drawing import end_with_parent

TIME_LIMIT = 30.0  # seconds the learner's file may take to load, and each stage to return
MEMORY_LIMIT = 4 * 1024 ** 3  # bytes of address space the child may add, where the platform allows

Stages = Sequence[tuple[str, tuple, Sequence[str]]]  # (function name, inputs, output names) per stage


@dataclass
class Outcome:
    """What one stage (``stage`` -1: the loading) gave: ``values`` (one array per output) or ``error``
    (one line, with the learner's file and line when known)."""

    stage: int
    values: list[np.ndarray] = field(default_factory=list)
    error: str | None = None


def start_method() -> str:
    """``forkserver`` where the platform has it (a clean process, torch imported once), else ``spawn``."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _where(err: BaseException, filename: str) -> str:
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if f.filename == filename]
    return _(" ({file}, line {line})").format(file=os.path.basename(filename), line=lines[-1]) if lines else ""


def _array(value: Any) -> np.ndarray | None:
    """A returned value as a numpy array of its own dtype (a tensor detached; bfloat16 as float32), or None."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = (value.float() if value.dtype == torch.bfloat16 else value).resolve_conj()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return None if array.dtype.hasobject else array


def stage_outcomes(names: dict[str, Any], filename: str, stages: Stages) -> Iterator[Outcome]:
    """Each of ``stages`` run with the learner's ``names`` (name -> object), up to the first that fails: its
    values, or its failure in one line (``sys.exit`` and ``KeyboardInterrupt`` too; ``filename``'s line)."""
    for number, stage in enumerate(stages):
        yield (outcome := _outcome(number, names.get(stage[0]), filename, *stage))
        if outcome.error is not None:
            return


def _outcome(number: int, fn: Any, filename: str, function: str, inputs: tuple, outputs: Sequence[str]) -> Outcome:
    if not callable(fn):
        return Outcome(number, error=_("{file} has no function {fn}(); `attnlab-check --template NEW.py` writes "
                                       "the six to fill in").format(file=os.path.basename(filename), fn=function))
    try:
        returned = fn(*inputs)
    except NotImplementedError as err:
        return Outcome(number, error=_("{fn}() is not written yet: it raises NotImplementedError{at}").format(
            fn=function, at=_where(err, filename)))
    except BaseException as err:  # SystemExit and KeyboardInterrupt too: the stage's failure
        fault = (_("called sys.exit({code}): a stage returns its values, it never ends the program{at}").format(
            code=err.code, at=_where(err, filename)) if isinstance(err, SystemExit) else
            _("raised {kind}: {message}{at}").format(kind=type(err).__name__, message=str(err)[:300],
                                                     at=_where(err, filename)))
        return Outcome(number, error=_("{fn}() {fault}").format(fn=function, fault=fault))
    values = returned if len(outputs) > 1 else [returned]
    if not (isinstance(values, (tuple, list)) and len(values) == len(outputs)):
        got = len(returned) if isinstance(returned, (tuple, list)) else type(returned).__name__
        return Outcome(number, error=_("{fn}() must return {n} values ({names}), it returned {got}").format(
            fn=function, n=len(outputs), names=", ".join(outputs), got=got))
    arrays = [_array(value) for value in values]
    for name, value, array in zip(outputs, values, arrays):
        if array is None:
            return Outcome(number, error=_("{name}: {fn}() returned {kind}, not a tensor").format(
                name=name, fn=function, kind=type(value).__name__))
    return Outcome(number, arrays)


def _child(conn, source: str, filename: str, stages: Stages, memory_limit: int | None, lang: str) -> None:
    """The child process, speaking the command's ``lang``: run ``source``, then each stage; one JSON message per
    outcome, its values as ``.npy``."""
    set_language(lang)

    def send(error: str | None, arrays: Sequence[np.ndarray] = ()) -> None:
        conn.send_bytes(json.dumps({"error": error, "values": len(arrays)}).encode("utf-8"))
        for array in arrays:
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=False)
            conn.send_bytes(buf.getvalue())

    end_with_parent()  # the command killed: the learner's code ends too
    with contextlib.suppress(ImportError, OSError, ValueError, AttributeError):  # where the platform allows
        import resource

        with open("/proc/self/statm", encoding="ascii") as f:  # (Linux) the address space in use now
            in_use = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (in_use + memory_limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if os.path.isfile(filename):
        sys.path.insert(0, os.path.dirname(os.path.abspath(filename)))  # as `python FILE.py` has it
    names: dict[str, Any] = {"__name__": "attnlab_check_learner", "__file__": filename, "__builtins__": __builtins__}
    try:
        exec(compile(source, filename, "exec"), names)
    except SyntaxError as err:
        return send(_("{file}, line {line}: SyntaxError: {message}").format(
            file=os.path.basename(filename), line=err.lineno, message=err.msg))
    except BaseException as err:
        return send(_("{file} cannot be loaded: {kind}: {message}{at}").format(
            file=os.path.basename(filename), kind=type(err).__name__, message=str(err)[:300],
            at=_where(err, filename)))
    send(None)
    for outcome in stage_outcomes(names, filename, stages):
        send(outcome.error, outcome.values)


def run_stages(source: str, filename: str, stages: Stages, *, time_limit: float = TIME_LIMIT,
               memory_limit: int | None = MEMORY_LIMIT, method: str | None = None) -> Iterator[Outcome]:
    """The learner's ``source`` (``filename`` names it) run in a child process: the loading's :class:`Outcome`
    (stage -1), then one per stage up to the first that fails. The child is ended when the caller stops reading."""
    ctx = multiprocessing.get_context(method or start_method())
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["numpy", "torch", __name__])
    mine, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(theirs, source, filename, list(stages), memory_limit, language()),
                        daemon=True)
    child.start()
    theirs.close()
    try:
        for number in range(-1, len(stages)):
            what = _("the file cannot be loaded: it {reason}") if number < 0 else stages[number][0] + "() {reason}"
            try:
                if not mine.poll(time_limit):
                    yield Outcome(number, error=what.format(reason=_(
                        "did not return within {s:g} s (an endless loop?); it was stopped").format(s=time_limit)))
                    return
                message = json.loads(mine.recv_bytes(64 * 1024).decode("utf-8"))
                values = [np.load(io.BytesIO(mine.recv_bytes()), allow_pickle=False)
                          for _ in range(int(message.get("values") or 0))]
            except (EOFError, OSError, ValueError):  # the child ended without a word: os._exit, a crash, a kill
                child.join(5)
                yield Outcome(number, error=what.format(reason=_(
                    "ended the process (exit code {code}: os._exit, a crash or the memory limit) instead of "
                    "returning").format(code=child.exitcode)))
                return
            yield Outcome(number, values, message.get("error"))
            if message.get("error") is not None:
                return
    finally:
        mine.close()
        if child.is_alive():
            child.kill()
        child.join(5)
