"""The helper commands' command line (``attnlab-check``, ``-compare``, ``-generate``, ``-report``,
``-reproduce``) in the learner's language. One rule for every tool (docs/i18n.md): the command line's
language (``--lang zh``, or ``lang=zh`` as ``attnlab`` takes it), else the locale's; never a run's recorded
``lang``. :func:`speak` applies it before the parser is built: ``--help``, errors (argparse's words too) and
output all speak it."""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable, NoReturn, Sequence

from attnlab.core.i18n import LANGUAGES, N_, _, set_language
from attnlab.outputs import streams

# argparse's English (its own gettext msgids), translated where shown; %-placeholders as argparse fills them
ARGPARSE_ERRORS = [N_("the following arguments are required: %s"), N_("unrecognized arguments: %s"),
                   N_("argument %(argument_name)s: %(message)s"), N_("expected one argument"),
                   N_("invalid choice: %(value)r (choose from %(choices)s)"), N_("invalid %(type)s value: %(value)r"),
                   N_("one of the arguments %s is required"), N_("ignored explicit argument %r"),
                   N_("not allowed with argument %s")]
_PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?[rsd]")


def speak(argv: Sequence[str] | None = None) -> list[str]:
    """Set this command's language from ``argv`` (default ``sys.argv[1:]``) before a ``--``: its ``--lang X``,
    ``--lang=X`` or ``lang=X``, else the locale's; returns ``argv`` without ``lang=X`` (the parser checks
    ``--lang``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    lang = None
    for i, arg in enumerate(argv[:end]):
        if arg == "--lang" and i + 1 < len(argv):
            lang = argv[i + 1]
        elif arg.startswith("--lang=") or re.fullmatch(r"lang=(zh|en)", arg):
            lang = arg.partition("=")[2]
    set_language(lang if lang in LANGUAGES else None)
    return [a for i, a in enumerate(argv) if i >= end or not re.fullmatch(r"lang=(zh|en)", a)]


def console_script(main: Callable[[], int]) -> Callable[[], None]:
    """A helper command's console script: output that cannot stop it (:mod:`attnlab.outputs.streams`), then
    ``main()``'s exit status."""
    def console() -> None:
        streams.install()
        sys.exit(main())
    return console


def _translated_error(message: str) -> str:
    """An argparse error message in the learner's language (nested: ``argument X: invalid choice ...``)."""
    for template in ARGPARSE_ERRORS:
        parts = _PLACEHOLDER.split(template)  # text, placeholder name (None: positional), text, ...
        pattern = "".join(re.escape(p) if i % 2 == 0 else "(.*)" for i, p in enumerate(parts))
        if m := re.fullmatch(pattern, message, re.S):
            names = parts[1::2]
            said = _PLACEHOLDER.sub(lambda p: f"%({p.group(1)})s" if p.group(1) else "%s", _(template))
            if not all(names):
                return said % m.groups()
            return said % {n: _translated_error(v) if n == "message" else v for n, v in zip(names, m.groups())}
    return message


class HelperParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` in the learner's language, with ``--lang`` and ``-h``: arguments
    go into the groups "positional arguments" and "options" (translated), ``usage:`` and error lines too."""

    def __init__(self, prog: str, description: str, **kwargs: Any) -> None:
        super().__init__(prog=prog, description=description, add_help=False, **kwargs)
        self.positionals = self.add_argument_group(_("positional arguments"))
        self.options = self.add_argument_group(_("options"))
        self.options.add_argument("-h", "--help", action="help", help=_("show this help message and exit"))
        self.options.add_argument("--lang", choices=LANGUAGES,
                                  help=_("the language to speak: zh or en (default: the locale; lang=zh works too)"))

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        group = self.options if args and str(args[0]).startswith("-") else self.positionals
        return group.add_argument(*args, **kwargs)

    def format_usage(self) -> str:
        return self._usage_prefix(super().format_usage())

    def format_help(self) -> str:
        return self._usage_prefix(super().format_help())

    @staticmethod
    def _usage_prefix(text: str) -> str:
        return _("usage: ") + text[len("usage: "):] if text.startswith("usage: ") else text

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, _("{prog}: error: {message}").format(prog=self.prog, message=_translated_error(message)) + "\n")
