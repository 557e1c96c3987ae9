"""The command line made friendly before Hydra parses it: free text as typed, and no silent keys.

Free-text keys (:data:`FREE_TEXT_KEYS`: ``sentence``, ``text_file``,
``analysis.compare_sentence``) take what the user typed as text:

- unquoted text that Hydra's override grammar would refuse (Chinese, emoji, ``<|endoftext|>``,
  ``=``, quotes, ...) is quoted for Hydra (``sentence=你的旅程`` works as typed);
- an ASCII comma still separates values, as everywhere in Hydra: with ``-m`` it sweeps
  (``-m sentence=你好,世界`` is two jobs); in a single run it is refused with a hint on quoting;
- ``${...}`` is literal text, never an interpolation or a resolver (``sentence="costs ${x}"``
  trains on the characters ``$``, ``{``, ``x``, ``}``), quoted or not.

Values that are already Hydra syntax are left alone apart from the ``${`` escape: quoted
strings, lists ``[...]``, dicts ``{...}`` and sweep functions (``choice(...)``, ``glob(...)``).

:func:`unknown_added_keys` refuses ``+key=value`` / ``++key=value`` for a key attnlab's schema
does not have (Hydra would add it silently and the run would ignore it); :func:`refused_option`
refuses the Hydra option that would run code from a file; :func:`unknown_option` an option
Hydra does not have (one line instead of argparse's usage block).
"""
from __future__ import annotations

import re
import string
from typing import Iterable

from attnlab.core.files import printable

FREE_TEXT_KEYS = ("sentence", "text_file", "analysis.compare_sentence")
CONFIG_GROUPS = ("experiment", "model", "optimizer", "train", "logging")
_SAFE = set(string.ascii_letters + string.digits + " _.-")  # left unquoted, as Hydra reads them
_FUNCTION = re.compile(r"^\s*(choice|range|interval|glob|sort|shuffle|tag|int|float|str|bool|json_str)\s*\(")
# Hydra's command-line options (``attnlab --help``): those that take the next argument as a value, the others
FLAGS_WITH_VALUE = {"-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name",
                    "-cd", "--config-dir", "--experimental-rerun"}
FLAGS = {"-h", "--help", "--hydra-help", "--version", "--resolve", "-r", "--run", "-m", "--multirun",
         "-sc", "--shell-completion", "-i", "--info"}
_OVERRIDE = re.compile(r"^(?P<prefix>\+{0,2}|~)(?P<key>[\w.\-/@]+)=(?P<value>.*)$", re.S)


def quote(text: str) -> str:
    """``text`` as one double-quoted Hydra value that reads back as exactly ``text``, with
    ``${`` escaped so OmegaConf keeps it literal."""
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == "\\":
            j += 1
        if j > i:  # a run of backslashes: doubled only where it ends at a quote or the end
            run = j - i
            out.append("\\" * (2 * run if j == len(text) or text[j] == '"' else run))
            i = j
            continue
        ch = text[i]
        if ch == '"':
            out.append('\\"')
        elif text.startswith("${", i):
            out.append("\\$")
        else:
            out.append(ch)
        i += 1
    return '"' + "".join(out) + '"'


def _escape_interpolations_in_quotes(value: str) -> str:
    """``${`` inside the quoted strings of ``value`` preceded by a backslash (literal text)."""
    out, quote_char, i = [], None, 0
    while i < len(value):
        ch = value[i]
        if quote_char is None:
            if ch in "'\"":
                quote_char = ch
        elif ch == "\\" and i + 1 < len(value):
            out.append(value[i:i + 2])
            i += 2
            continue
        elif ch == quote_char:
            quote_char = None
        elif value.startswith("${", i):
            out.append("\\")
        out.append(ch)
        i += 1
    return "".join(out)


def free_text_value(value: str) -> str:
    """One free-text override value made Hydra syntax (see the module docstring)."""
    stripped = value.strip()
    if not stripped:
        return value
    if stripped[0] in "'\"[{" or _FUNCTION.match(stripped):
        return _escape_interpolations_in_quotes(value)
    items = [item.strip() for item in value.split(",")]
    if all(item and set(item) <= _SAFE for item in items):
        return value
    return ",".join(quote(item) for item in items)  # an empty item too: "Hello," is "Hello" and ""


def prepare(argv: Iterable[str]) -> list[str]:
    """``argv`` (the command's arguments) with every free-text override made Hydra syntax."""
    out = []
    for arg in argv:
        match = _OVERRIDE.match(arg)
        if match and match["prefix"] != "~" and match["key"] in FREE_TEXT_KEYS:
            arg = f"{match['prefix']}{match['key']}={free_text_value(match['value'])}"
        out.append(arg)
    return out


def unknown_added_keys(argv: Iterable[str], schema_keys: set[str]) -> list[str]:
    """The arguments ``+key=value``, ``++key=value`` or ``~key`` whose key is neither in
    ``schema_keys`` (dotted paths of attnlab's schema) nor a config group nor Hydra's own."""
    bad = []
    for arg in argv:
        match = _OVERRIDE.match(arg) or re.match(r"^(?P<prefix>~)(?P<key>[\w.\-/@]+)$", arg)
        if not match or not match["prefix"]:
            continue
        key = match["key"]
        if key.startswith(("hydra.", "hydra/")) or key.split("@")[0] in CONFIG_GROUPS:
            continue
        if match["prefix"] == "~" or key not in schema_keys:
            bad.append(arg)
    return bad


def refused_option(argv: list[str]) -> str | None:
    """The one-line error for ``--experimental-rerun FILE`` in ``argv``, or None: Hydra would
    unpickle the file, and a pickle from someone else's run dir runs code."""
    if any(a == "--experimental-rerun" or a.startswith("--experimental-rerun=") for a in argv):
        return ("error: --experimental-rerun: refused: it unpickles .hydra/config.pickle, and a pickle from a "
                "run dir runs code; use attnlab-reproduce RUN_DIR (it reads the config as data)")
    return None


def unknown_option(argv: list[str]) -> str | None:
    """The one-line error for the first argument of ``argv`` that looks like an option
    (``-x``, ``--xyz``) but is none of Hydra's (a long option may be cut short, as argparse
    allows: ``--multi``), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        name = arg.split("=", 1)[0]
        matches = {f for f in FLAGS | FLAGS_WITH_VALUE
                   if f == name or (name.startswith("--") and len(name) > 2 and f.startswith(name))}
        if not matches:
            return f"error: {printable(arg, 120)}: no such option (`attnlab --help` lists the options)"
        skip = "=" not in arg and bool(matches & FLAGS_WITH_VALUE)
    return None
