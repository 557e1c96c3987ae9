"""The command line made friendly before Hydra parses it: free text as typed, and no silent keys.

Free-text keys (:data:`FREE_TEXT_KEYS`) take what the user typed as text: text Hydra's grammar
would refuse (Chinese, emoji, ``=``, quotes, ...) is quoted for Hydra; an ASCII comma still
separates values (with ``-m`` it sweeps); ``${...}`` is literal text, never an interpolation.
Values already in Hydra syntax (quoted strings, ``[...]``, ``{...}``, ``choice(...)``) are left
alone apart from the ``${`` escape. Arguments that would do something silent are refused (:func:`refusal`).
"""
from __future__ import annotations

import argparse
import re
import string
from importlib import resources
from typing import Iterable, NoReturn

from attnlab.core.config import did_you_mean, schema_keys
from attnlab.core.files import printable
from attnlab.core.i18n import LANGUAGES, _

FREE_TEXT_KEYS = ("sentence", "text_file", "analysis.compare_sentence", "analysis.prompt", "train.focus_token", "name",
                  "notes")
CONFIG_GROUPS = ("experiment", "model", "optimizer", "train", "logging")
# Hydra saves no .hydra/ and no job log into a run dir, whatever the config (also --config-path);
# overriding these (or keys below them) is refused: attnlab saves .hydra/ once it holds the folder
HYDRA_WRITES_NOTHING = ("hydra.output_subdir=null", "hydra/job_logging=none")
_SAFE = set(string.ascii_letters + string.digits + " _.-")  # left unquoted, as Hydra reads them
_FUNCTION = re.compile(r"^\s*(choice|range|interval|glob|sort|shuffle|tag|int|float|str|bool|json_str)\s*\(")
# Hydra's command-line options (``attnlab --help``): those that take the next argument as a value, the others
OPTIONS_WITH_VALUE = (("-c", "--cfg"), ("-p", "--package"), ("-cp", "--config-path"), ("-cn", "--config-name"),
                      ("-cd", "--config-dir"), ("--experimental-rerun",))
FLAGS = (("-h", "--help"), ("--hydra-help",), ("--version",), ("--resolve",), ("-r", "--run"), ("-m", "--multirun"),
         ("-sc", "--shell-completion"), ("-i", "--info"))
_BACKSLASHES_BEFORE_QUOTE = re.compile(r'\\+(?="|\Z)')
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"?|\'(?:[^\'\\]|\\.)*\'?', re.S)  # an open quote runs to the end
_IN_QUOTES = re.compile(r"\\.|\$\{", re.S)
_OVERRIDE = re.compile(r"^(?P<prefix>\+{0,2}|~)(?P<key>[\w.\-/@]+)=(?P<value>.*)$", re.S)
_REMOVAL = re.compile(r"^(?P<prefix>~)(?P<key>[\w.\-/@]+)$")


def quote(text: str) -> str:
    """``text`` as one double-quoted Hydra value that reads back as exactly ``text``, with
    ``${`` escaped so OmegaConf keeps it literal."""
    body = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m[0] * 2, text)  # Hydra unescapes only these
    return '"' + body.replace('"', '\\"').replace("${", "\\${") + '"'


def language(argv: Iterable[str]) -> str | None:
    """The last ``lang=VALUE`` typed when VALUE is one of attnlab's languages, else None (the locale's)."""
    given = [a.split("=", 1)[1].strip("'\"") for a in argv if a.startswith("lang=")]
    return given[-1] if given and given[-1] in LANGUAGES else None


def _free_text(arg: str) -> str:
    """``arg`` with a free-text value made Hydra syntax (see the module docstring); any other as typed."""
    match = _OVERRIDE.match(arg)
    if not match or match["prefix"] == "~" or match["key"] not in FREE_TEXT_KEYS or not match["value"].strip():
        return arg
    value, head = match["value"], f"{match['prefix']}{match['key']}="
    if value.strip()[0] in "'\"[{" or _FUNCTION.match(value):  # ${ inside its quoted strings made literal
        return head + _QUOTED.sub(lambda q: _IN_QUOTES.sub(lambda m: "\\${" if m[0] == "${" else m[0], q[0]), value)
    items = [item.strip() for item in value.split(",")]
    if all(item and set(item) <= _SAFE for item in items):
        return arg
    return head + ",".join(quote(item) for item in items)  # an empty item too: "Hello," is "Hello" and ""


def prepare(argv: Iterable[str]) -> list[str]:
    """``argv`` (the command's arguments) with every free-text override made Hydra syntax."""
    return [_free_text(arg) for arg in argv]


def multirun_flag(argv: list[str]) -> list[str]:
    """``["-m"]`` when an ``experiment=NAME`` in ``argv`` (or ``NAME,NAME``) is a shipped preset whose ``hydra.mode``
    is MULTIRUN and no ``-m``/``--multirun``/``hydra.mode`` is given, else ``[]``: Hydra >= 1.4 chooses run or
    sweep before it composes the config and refuses a preset that changes the mode (1.3 reads the preset's)."""
    import yaml

    if any(a in ("-m", "--multirun") or a.lstrip("+").startswith("hydra.mode=") for a in argv):
        return []
    names = [name.strip() for a in argv if (m := _OVERRIDE.match(a)) and m["key"] == "experiment"
             for name in m["value"].split(",")]
    presets = resources.files("attnlab.conf") / "experiment"
    for name in names:
        if re.fullmatch(r"[\w-]+", name) and (preset := presets / f"{name}.yaml").is_file():
            doc = yaml.safe_load(preset.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and isinstance(doc.get("hydra"), dict) and doc["hydra"].get("mode") == "MULTIRUN":
                return ["-m"]
    return []


class HydraOptions(argparse.ArgumentParser):
    """Hydra's command-line options as its argparse reads them (``--multi`` too), and the overrides;
    ValueError where Hydra's parser would end the command (an ambiguous option, a missing value)."""

    def __init__(self) -> None:
        super().__init__(add_help=False)
        for flags in OPTIONS_WITH_VALUE + FLAGS:
            self.add_argument(*flags, action="store" if flags in OPTIONS_WITH_VALUE else "store_true")
        self.add_argument("overrides", nargs="*")

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def _hydra_args(argv: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    """Hydra's options and overrides in ``argv``, and the arguments no option of Hydra's names; ``(None, [])``
    where Hydra's own parser ends the command (an ambiguous option, a missing value)."""
    try:
        return HydraOptions().parse_known_intermixed_args(argv)
    except ValueError:
        return None, []


def overrides_first(argv: list[str]) -> list[str]:
    """``argv`` with the overrides before Hydra's options and their values, each in the order typed: Hydra's
    argparse takes the overrides in one piece (else ``name=x -m seed=1,2`` is refused)."""
    if (args := _hydra_args(argv)[0]) is None:
        return argv
    overrides, options = [o for o in args.overrides if o[:1] != "-"], list(argv)
    for override in overrides:
        options.remove(override)
    return [*overrides, *options]


def refusal(typed: list[str]) -> str | None:
    """The one-line error for the arguments refused before Hydra reads them, or None: bytes that are
    no UTF-8 (what a Latin-1 terminal hands over for ``sentence=café``: Python's surrogate escapes),
    ``--experimental-rerun`` (Hydra would unpickle a file, and a pickle from a run dir runs code), an
    option Hydra does not have, a setting of :data:`HYDRA_WRITES_NOTHING` (or a key below it) or of
    Hydra's log handlers, ``+key`` / ``~key`` outside the schema."""
    if (bad := next((a for a in typed if re.search("[\ud800-\udfff]", a)), None)) is not None:
        shown = "".join(f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else c for c in bad)  # the byte
        return _("error: '{arg}': not UTF-8 text (the terminal's encoding is another); set a UTF-8 locale "
                 "(e.g. LANG=C.UTF-8) or put the text in a UTF-8 file: text_file=FILE").format(
            arg=printable(shown, 120))
    args, unknown = _hydra_args(typed)
    if args is not None and args.experimental_rerun is not None:  # (``--experimental-r FILE`` too)
        return _("error: --experimental-rerun: refused: it unpickles .hydra/config.pickle, and a pickle from a "
                 "run dir runs code; use attnlab-reproduce RUN_DIR (it reads the config as data)")
    if option := next((a for a in [*unknown, *(args.overrides if args else [])] if a[:1] == "-" and a != "-"), None):
        return _("error: {option}: no such option (`attnlab --help` lists the options)").format(
            option=printable(option, 120))
    for arg in typed:
        key = arg.split("=", 1)[0].lstrip("+~").replace("/", ".") + "."
        for ours in (setting.split("=")[0] for setting in HYDRA_WRITES_NOTHING):
            if key.startswith(ours.replace("/", ".") + "."):
                return _("error: {arg}: attnlab sets {ours} (Hydra writes nothing into a run dir; attnlab saves "
                         ".hydra/ itself once it holds the folder)").format(arg=printable(arg, 120), ours=ours)
    for arg in typed:  # Hydra's own log: its options (hydra/hydra_logging=disabled) only, never a handler
        if (arg.split("=", 1)[0].lstrip("+~") + ".").startswith("hydra.hydra_logging."):
            return _("error: {arg}: refused: a handler of Hydra's log could write a file before attnlab holds the "
                     "folder; choose hydra/hydra_logging=default, disabled or none").format(arg=printable(arg, 120))
    for match in filter(None, (_OVERRIDE.match(arg) or _REMOVAL.match(arg) for arg in typed)):
        key = match["key"]  # +key, ++key, ~key: Hydra's own and the groups', else the schema's only
        if not match["prefix"] or key.startswith(("hydra.", "hydra/")) or key.split("@")[0] in CONFIG_GROUPS:
            continue
        if match["prefix"] == "~" or key not in schema_keys():
            line = _("error: {key}: no such config key; attnlab's keys are fixed by its schema and cannot be added "
                     "or removed (`attnlab --help` lists them)").format(key=match[0])
            close = did_you_mean(key) if key not in schema_keys() else None
            return line + (_("; did you mean {key}?").format(key=close) if close else "")
    return None
