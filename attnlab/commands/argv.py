"""The command line made friendly before Hydra parses it: free text as typed, and no silent keys.

Free-text keys (:data:`FREE_TEXT_KEYS`) take what the user typed as text: text Hydra's grammar
would refuse (Chinese, emoji, ``=``, quotes, ...) is quoted for Hydra; an ASCII comma still
separates values (with ``-m`` it sweeps); ``${...}`` is literal text, never an interpolation.
Values already in Hydra syntax (quoted strings, ``[...]``, ``{...}``, ``choice(...)``) are left
alone apart from the ``${`` escape. Refused before Hydra sees them: ``+key`` / ``~key`` outside
the schema, ``--experimental-rerun`` (it unpickles a file) and options Hydra does not have.
"""
from __future__ import annotations

import re
import string
from typing import Iterable

from attnlab.core.files import printable

FREE_TEXT_KEYS = ("sentence", "text_file", "analysis.compare_sentence", "analysis.prompt", "train.focus_token", "name",
                  "notes")
CONFIG_GROUPS = ("experiment", "model", "optimizer", "train", "logging")
_SAFE = set(string.ascii_letters + string.digits + " _.-")  # left unquoted, as Hydra reads them
_FUNCTION = re.compile(r"^\s*(choice|range|interval|glob|sort|shuffle|tag|int|float|str|bool|json_str)\s*\(")
# Hydra's command-line options (``attnlab --help``): those that take the next argument as a value, the others
FLAGS_WITH_VALUE = {"-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name",
                    "-cd", "--config-dir", "--experimental-rerun"}
FLAGS = {"-h", "--help", "--hydra-help", "--version", "--resolve", "-r", "--run", "-m", "--multirun",
         "-sc", "--shell-completion", "-i", "--info"}
_BACKSLASHES_BEFORE_QUOTE = re.compile(r'\\+(?="|\Z)')
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"?|\'(?:[^\'\\]|\\.)*\'?', re.S)  # an open quote runs to the end
_IN_QUOTES = re.compile(r"\\.|\$\{", re.S)
_OVERRIDE = re.compile(r"^(?P<prefix>\+{0,2}|~)(?P<key>[\w.\-/@]+)=(?P<value>.*)$", re.S)


def quote(text: str) -> str:
    """``text`` as one double-quoted Hydra value that reads back as exactly ``text``, with
    ``${`` escaped so OmegaConf keeps it literal."""
    body = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m[0] * 2, text)  # Hydra unescapes only these
    return '"' + body.replace('"', '\\"').replace("${", "\\${") + '"'


def _escape_interpolations_in_quotes(value: str) -> str:
    """``${`` inside the quoted strings of ``value`` preceded by a backslash (literal text)."""
    return _QUOTED.sub(lambda q: _IN_QUOTES.sub(lambda m: "\\${" if m[0] == "${" else m[0], q[0]), value)


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


def language(argv: Iterable[str]) -> str | None:
    """The last ``lang=VALUE`` typed when VALUE is one of attnlab's languages, else None (the locale's)."""
    from attnlab.core.i18n import LANGUAGES

    given = [a.split("=", 1)[1].strip("'\"") for a in argv if a.startswith("lang=")]
    return given[-1] if given and given[-1] in LANGUAGES else None


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
    ``schema_keys`` (dotted paths) nor a config group nor Hydra's own."""
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


def not_text(argv: list[str]) -> str | None:
    """The one-line error for the first argument holding bytes that are no UTF-8 (what a Latin-1
    terminal hands over for ``sentence=café``: Python's surrogate escapes), or None."""
    bad = next((a for a in argv if re.search("[\ud800-\udfff]", a)), None)
    if bad is None:
        return None
    shown = "".join(f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else c for c in bad)  # the byte
    return (f"error: '{printable(shown, 120)}': not UTF-8 text (the terminal's encoding is another); set a UTF-8 "
            "locale (e.g. LANG=C.UTF-8) or put the text in a UTF-8 file: text_file=FILE")


def overridden(argv: list[str], keys: list[str]) -> tuple[str, str] | None:
    """The first argument overriding one of ``keys`` or a key below it (``hydra/job_logging=x``,
    ``+hydra.job_logging.handlers.f=...``) and that key, or None."""
    below = {key: key.replace("/", ".") + "." for key in keys}
    return next(((arg, key) for arg in argv for key, prefix in below.items()
                 if (arg.split("=", 1)[0].lstrip("+~").replace("/", ".") + ".").startswith(prefix)), None)


def refused_option(argv: list[str]) -> str | None:
    """The one-line error for ``--experimental-rerun FILE`` in ``argv``, or None: Hydra would
    unpickle the file, and a pickle from someone else's run dir runs code."""
    if any(a == "--experimental-rerun" or a.startswith("--experimental-rerun=") for a in argv):
        return ("error: --experimental-rerun: refused: it unpickles .hydra/config.pickle, and a pickle from a "
                "run dir runs code; use attnlab-reproduce RUN_DIR (it reads the config as data)")
    return None


def unknown_option(argv: list[str]) -> str | None:
    """The one-line error for the first option-like argument that is none of Hydra's (a long
    option may be cut short, as argparse allows: ``--multi``), or None."""
    skip = False
    for arg in argv:
        if skip or not arg.startswith("-") or arg == "-":  # an option's value, or not an option
            skip = False
            continue
        name = arg.split("=", 1)[0]
        matches = {f for f in FLAGS | FLAGS_WITH_VALUE
                   if f == name or (name.startswith("--") and len(name) > 2 and f.startswith(name))}
        if not matches:
            return f"error: {printable(arg, 120)}: no such option (`attnlab --help` lists the options)"
        skip = "=" not in arg and bool(matches & FLAGS_WITH_VALUE)
    return None
