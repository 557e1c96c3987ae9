"""Text from a run dir made safe to show (:func:`printable`), and the one-line error every
reader raises (:class:`RunFileError`)."""
from __future__ import annotations

import re
from typing import Any

from attnlab.core.errors import RunDirError
from attnlab.saved.safe_read.limits import TEXT_LIMIT


class RunFileError(RunDirError):
    """A file of a run dir cannot be used: one line ``<file>: <reason>`` (``path``, ``reason``)."""

    def __init__(self, path: Any, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{printable(str(path), 300)}: {printable(reason, 1000)}")


class MissingRunFile(RunFileError):
    """The file does not exist (e.g. no summary.json: the run never started)."""


class ResolverInterpolation(RunFileError):
    """A config value is an interpolation that would run a resolver (``${oc.env:X}``, a preset's
    ``${attnlab.per_head:4,${model.n_heads}}``) or has text around it: never resolved here."""


_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ufeff\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` (``str()`` of anything else) safe to print to a terminal or write into a table
    cell or CSV: C0/C1 control characters (ESC, so CSI/OSC sequences; BEL; newlines), DEL,
    bidi overrides and isolates (U+202A-E, U+2066-9, LRM/RLM/ALM), line/paragraph separators,
    BOM and lone surrogates are written as ``\\x1b`` / ``\\n`` / ``\\u202e`` escapes; text
    longer than ``limit`` characters (after escaping) is cut and ends with ``…[+N chars]``
    (N = characters of ``text`` not shown). Work is O(limit) whatever the length of ``text``."""
    if not isinstance(text, str):
        text = str(text)
    head = text[: limit + 1]
    out: list[str] = []
    width = 0
    shown = 0
    for ch in head:
        piece = _escape(ch) if _UNSAFE.match(ch) else ch
        if width + len(piece) > limit:
            break
        out.append(piece)
        width += len(piece)
        shown += 1
    if shown == len(text):
        return "".join(out)
    return "".join(out) + f"…[+{len(text) - shown} chars]"

