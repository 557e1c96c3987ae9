"""Hydra's own error reports made one line: the config-composition errors Hydra prints in several
lines (a mistyped key, a wrong type, an unknown option, override syntax) before any job starts.

:class:`StderrGate` holds stderr while Hydra composes the config; :func:`release_stderr` (called
by the callbacks and the task function once the config exists) lets it through; when Hydra exits
with its report instead, :func:`hydra_error_line` turns the held report into attnlab's one line.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Callable, Iterator

HYDRA_ERROR_HINT = "Set the environment variable HYDRA_FULL_ERROR=1"
CANNOT_WRITE = "error: cannot write"  # how hydra_error_line starts for Hydra's own failed writes
EXIT_BAD_INPUT = 2


class StderrGate:
    """A stand-in for ``sys.stderr`` while Hydra composes the config: writes are held until
    :meth:`release` (called when the task function starts), then pass straight through.

    Hydra reports a composition error (a mistyped key, a wrong type, an unknown option) in
    several lines and exits with status 1 before any job starts; :func:`main` turns the held
    report into one line (:func:`hydra_error_line`, via :func:`one_line_errors`)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self._held: list[str] | None = []

    def write(self, text: str) -> int:
        if self._held is None:
            return self.stream.write(text)
        self._held.append(text)
        return len(text)

    def flush(self) -> None:
        if self._held is None:
            self.stream.flush()

    def held(self) -> str:
        return "".join(self._held or [])

    def discard(self) -> None:
        """Drop what is held and pass later writes through."""
        self._held = None

    def release(self) -> None:
        held, self._held = self.held(), None
        if held:
            self.stream.write(held)
            self.stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding ... of the real stream
        return getattr(self.stream, name)


def release_stderr() -> None:
    """Let held and further stderr output through (a no-op unless :func:`main` set a gate)."""
    if isinstance(sys.stderr, StderrGate):
        sys.stderr.release()


def hydra_error_line(report: str, argv: list[str] | None = None) -> str:
    """Hydra's multi-line composition error as one line naming the key, the value and what is
    allowed, e.g. ``error: model.positional='sin': Invalid value 'sin', expected one of
    [learned, none]`` or ``error: optimizer=adamm: no such option; allowed: adam, adamw, sgd``.
    ``argv`` (the command's arguments) supplies the value of a mistyped key."""
    lines = [ln.strip() for ln in report.splitlines() if ln.strip() and HYDRA_ERROR_HINT not in ln]
    text = "\n".join(lines)
    oserror = re.search(r"^\w*(?:Error|Exception): \[Errno (\d+)\] [^\n]*?(?:: '([^'\n]*)')?$", text, re.M)
    if oserror:  # Hydra could not save its config into the output folder (disk full, file-size limit)
        from attnlab.core.errors import os_reason

        reason = os_reason(OSError(int(oserror.group(1)), ""))
        where = f" {oserror.group(2)}" if oserror.group(2) else " the output folder"
        return f"{CANNOT_WRITE}{where}: {reason}"
    options = re.search(r"Could not find '([^']+)/([^'/]+)'.*?Available options in '[^']+':\n"
                        r"(.*?)(?:\nConfig search path|$)",
                        text, re.S)
    if options:
        group, option, allowed = options.group(1), options.group(2), options.group(3).split()
        return f"error: {group}={option}: no such option; allowed: {', '.join(allowed)}"
    override = re.search(r"Could not override '([^']+)'", text)
    if override:
        key = override.group(1)
        given = next((a for a in (argv or []) if a.split("=", 1)[0].lstrip("+~") == key), key)
        return f"error: {given}: no such config key (`attnlab --help` lists every key)"
    ambiguous = re.match(r"Ambiguous value for argument '([^=']+)=(.*)'$", lines[0]) if lines else None
    if ambiguous:
        key, value = ambiguous.groups()
        value = next((a.split("=", 1)[1] for a in argv or [] if a.split("=", 1)[0].lstrip("+") == key), value)
        quoted = '"' + value.replace('"', '\\"') + '"'
        return (f"error: {key}={value!r}: a comma separates values; to keep it in the value, quote it for Hydra "
                f"and the shell: '{key}={quoted}'; with -m (--multirun) the commas sweep over the values")
    merging = re.match(r"Error merging override ([^=\s]+)=(.*)", lines[0]) if lines else None
    if merging and len(lines) > 1:
        return f"error: {merging.group(1)}={merging.group(2)!r}: {lines[1]}"
    syntax = ("error parsing override", "mismatched input", "extraneous input", "no viable", "noviable",
              "token recognition error", "missing equal")
    if lines and any(k in lines[0].lower() for k in syntax):
        return syntax_error_line(lines, argv or [])
    details = [ln for ln in lines if not ln.startswith(("full_key:", "reference_type=", "object_type=",
                                                        "See https", "provider=", "Config search path"))]
    return "error: " + "; ".join(details[:2])


def traceback_line(report: str, argv: list[str]) -> str | None:
    """Hydra's report of an exception it did not expect while it set a config key from an
    override (a Python traceback ending in OmegaConf's ``full_key: KEY`` lines, e.g. an integer
    too large for a float key) as one line naming the argument and what went wrong, e.g.
    ``error: train.loss_threshold=1000…: too large for a float (at most 1.8e308)``; None for any
    other report."""
    if "Traceback (most recent call last)" not in report:
        return None
    key = re.search(r"^\s*full_key: (\S+)\s*$", report, re.M)
    raised = re.findall(r"^(\w+(?:Error|Exception)): (.+)$", report, re.M)
    if not key or not raised:
        return None
    given = next((a for a in argv if a.split("=", 1)[0].lstrip("+~") == key.group(1)), key.group(1))
    name, message = raised[-1]
    if name == "OverflowError":
        message = "too large for a float (at most 1.8e308)"
    from attnlab.saved.safe_read import printable

    return f"error: {printable(given, 120)}: {printable(message, 300)}"


# Hydra's options that take the next argument as their value (not an override)
_FLAGS_WITH_VALUE = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg",
                     "-p", "--package", "--info", "--experimental-rerun", "-sc", "--shell-completion"}


def bad_override(argv: list[str]) -> str | None:
    """The first argument of ``argv`` (as typed) that Hydra's override grammar refuses once
    :func:`attnlab.commands.argv.prepare` has made free text Hydra syntax; None when each parses alone."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from attnlab.commands.argv import prepare

    parser = OverridesParser.create()
    skip = False
    for arg in argv:
        if skip or arg.startswith("-"):
            skip = not skip and arg in _FLAGS_WITH_VALUE
            continue
        try:
            parser.parse_overrides(prepare([arg]))
        except Exception:  # Hydra's OverrideParseException, or anything its grammar raises
            return arg
    return None


def syntax_error_line(lines: list[str], argv: list[str]) -> str:
    """Hydra's override-grammar error (``lines``, its report) as one line naming the argument it
    refused and what to type instead: a word without ``=`` is the rest of an unquoted text
    split by the shell; free text (``sentence`` ...) needs only the shell's quotes; other values
    need Hydra's quotes around = , [ ] { } ( ) : and non-ASCII text."""
    from attnlab.commands.argv import FREE_TEXT_KEYS

    what = re.sub(r"^Error parsing override '.*'$", "", lines[0]).strip() or (lines[1] if len(lines) > 1 else "")
    what = re.sub(r" expecting \{.*\}$", "", what)  # the grammar's token list says nothing to a user
    arg = bad_override(argv)
    if arg is None:
        return (f"error: {what} in the overrides (Hydra's override syntax): quote values that contain "
                "= , [ ] { } ( ) : or non-ASCII text for Hydra, e.g. 'model.positional=\"learned\"'")
    shown = arg if len(arg) <= 80 else arg[:77] + "..."
    key = arg.split("=", 1)[0].lstrip("+") if "=" in arg else None
    if key is None:
        return (f"error: {shown!r}: not an override (key=value); a text with spaces must be one argument: "
                "quote the whole override for the shell, e.g. 'sentence=Your journey starts'")
    if key in FREE_TEXT_KEYS:
        return (f"error: {shown!r}: not valid override syntax ({what}); {key} takes text as typed unless it "
                f"starts with a quote, [ or {{, which must then be closed: '{key}=\"[a] b\"' keeps them as text")
    return (f"error: {shown!r}: not valid override syntax ({what}); quote values that contain "
            f"= , [ ] {{ }} ( ) : or non-ASCII text for Hydra, e.g. '{key}=\"a=b\"'")


@contextlib.contextmanager
def one_line_errors(argv: list[str], on_error: Callable[[str], str | None] | None = None) -> Iterator[None]:
    """Run Hydra inside this block: a composition error Hydra reports in several lines (exit
    status 1) becomes :func:`hydra_error_line` on stderr and ``SystemExit(2)``, and an option its
    argument parser refuses (a usage block, exit status 2) the parser's error line, after
    ``on_error(line)`` (e.g. removing the empty folder of a sweep that never started), which may
    return a better line to print instead; everything else passes through unchanged. With
    ``HYDRA_FULL_ERROR=1`` Hydra's full report is kept."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        yield
        return
    gate = sys.stderr = StderrGate(sys.stderr)
    try:
        yield
    except SystemExit as exit_:
        report = gate.held()
        if exit_.code == 2 and report.startswith("usage:"):  # Hydra's argparse: a usage block, then the error
            gate.discard()
            last = report.strip().splitlines()[-1]
            print("error: " + last.split(": error: ", 1)[-1] + " (`attnlab --help` lists the options)",
                  file=gate.stream)
            raise SystemExit(EXIT_BAD_INPUT) from None
        line = traceback_line(report, argv) if exit_.code == 1 else None
        if line is not None or (exit_.code == 1 and HYDRA_ERROR_HINT in report):
            gate.discard()
            line = line or hydra_error_line(report, argv)
            if on_error is not None:
                line = on_error(line) or line
            print(line, file=gate.stream)
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise
    finally:
        gate.release()
        sys.stderr = gate.stream
