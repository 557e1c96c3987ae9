"""``metrics.csv`` of a run dir: header ``step,loss``, every row checked, lines bounded; errors
name the line."""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

from attnlab.saved.safe_read.files import decode_utf8, read_bytes
from attnlab.saved.safe_read.limits import METRICS_LIMIT, METRICS_LINE_LIMIT
from attnlab.saved.safe_read.text import RunFileError, printable

_INT = re.compile(r"\+?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)


def read_metrics(path: Path, limit: int = METRICS_LIMIT, *, root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)``. Line 1 must start with
    ``step,loss`` (more columns are allowed and ignored); every other non-empty line must have
    a non-negative integer step, larger than the line before, and a float loss (``nan``/``inf``
    as Python writes a diverged loss; spaces around a number and ``\r\n`` are accepted).
    Raises RunFileError naming the file and the line, e.g. ``metrics.csv: line 7: loss 'abc'
    is not a number``; lines longer than :data:`METRICS_LINE_LIMIT` bytes are refused before
    anything is parsed. Rows are parsed by numpy's C reader (~1 s a million rows here); a file
    it rejects is walked line by line to name the first bad line."""
    import warnings

    path = Path(path)
    raw = read_bytes(path, limit, root=root)
    if raw.strip() == b"":
        raise RunFileError(path, "empty (no step,loss header)")
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    bounds = np.concatenate(([-1], ends, [len(raw)]))
    lengths = np.diff(bounds) - 1
    if lengths.max() > METRICS_LINE_LIMIT:
        line = int(np.argmax(lengths > METRICS_LINE_LIMIT)) + 1
        raise RunFileError(path, f"line {line}: longer than {METRICS_LINE_LIMIT} bytes")
    text = decode_utf8(raw, path)
    header = text.split("\n", 1)[0].removesuffix("\r")
    if header.split(",")[:2] != ["step", "loss"]:
        raise RunFileError(path, f"line 1: header must start with step,loss (found '{printable(header, 60)}')")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" for a header-only file
            rows = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=(0, 1), comments=None,
                              dtype=[("step", np.int64), ("loss", np.float64)], ndmin=1, quotechar=None)
        steps, losses = rows["step"].copy(), rows["loss"].copy()
        if steps.size and (steps[0] < 0 or (np.diff(steps) <= 0).any()):
            raise ValueError("steps not increasing")
        return steps, losses
    except (ValueError, OverflowError) as err:
        _first_bad_line(path, text)
        raise RunFileError(path, f"not a step,loss table ({printable(str(err), 120)})") from None


def _first_bad_line(path: Path, text: str) -> None:
    """Raise RunFileError for the first line of ``text`` that is not a valid row (slow path)."""
    previous = None
    for n, line in enumerate(text.split("\n")[1:], start=2):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) < 2:
            raise RunFileError(path, f"line {n}: {len(fields)} field, expected at least 2 (step,loss)")
        step_text, loss_text = fields[0].strip(), fields[1].strip()
        if not _INT.fullmatch(step_text) or int(step_text) >= 2 ** 63:
            raise RunFileError(path, f"line {n}: step '{printable(fields[0], 40)}' is not a non-negative integer")
        if not _FLOAT.fullmatch(loss_text):
            raise RunFileError(path, f"line {n}: loss '{printable(fields[1], 40)}' is not a number")
        if previous is not None and int(step_text) <= previous:
            raise RunFileError(path, f"line {n}: step {int(step_text)} after step {previous} (steps must increase)")
        previous = int(step_text)

