"""``attnlab-compare PATH... [--sort COLUMN] [--reverse] [--csv FILE] [--plot FILE] [--against PRESET]``:
one table over saved runs (:func:`attnlab.saved.runs.collect_rows`, as at a sweep's end; a run that
cannot be read is still a row, plus a warning line). Exit status 0; 1 when some run cannot be read
completely; 2 with one line for a PATH that is no run/sweep dir, an unknown ``--sort`` column, a
``--csv`` / ``--plot`` inside a folder it reads, or a figure that cannot be written.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from attnlab.commands.arguments import HelperParser, console_script, speak
from attnlab.commands.argv import CONFIG_GROUPS
from attnlab.core.config import apply_schema, literal, resolve
from attnlab.core.errors import AttnlabError, ConfigError, RunDirError
from attnlab.core.i18n import _
from attnlab.core.tokenizer import tokenize
from attnlab.outputs import destination
from attnlab.saved import safe_read
from attnlab.saved.compare_figure import comparison_figure
from attnlab.saved.runs import broken, collect_rows, named_runs
from attnlab.saved.safe_read import printable
from attnlab.saved.table import csv_text, distribution, format_table, sort_rows

GROUPS = "|".join(g for g in CONFIG_GROUPS if g != "experiment")
GROUP_OPTION = re.compile(rf"^(override )?/?(?P<group>{GROUPS}): *(?P<option>\w+)$")  # a preset's defaults entry


def preset_config(path: Path) -> dict[str, Any]:
    """The config ``experiment=PRESET`` runs, from the preset file ``path`` read as data: attnlab's config
    with the preset's ``defaults`` options (``override /optimizer: sgd``), its keys (not ``hydra``) on
    top. Raises RunDirError or ConfigError (one line)."""
    data = safe_read.read_yaml_data(path)
    if not isinstance(data, dict):
        raise ConfigError(printable(str(path), 300), type(data).__name__, _("a preset must be a mapping of keys"))
    options = []
    for entry in data.pop("defaults", None) or []:
        item = " ".join(f"{k}: {v}" for k, v in entry.items()) if isinstance(entry, dict) else str(entry)
        if item != "_self_" and not (match := GROUP_OPTION.match(item)):
            raise ConfigError("defaults", item, _("a preset may choose options of attnlab's groups only, "
                                                  "e.g. override /optimizer: sgd"))
        options += [f"{match['group']}={match['option']}"] if item != "_self_" else []
    data.pop("hydra", None)
    from attnlab.commands.api import compose  # Hydra and torch only with --against

    merged = OmegaConf.merge(OmegaConf.to_container(compose(*options)), literal(data))
    cfg = apply_schema(merged)  # onto the schema: a wrong key or type is one line
    config = resolve(cfg)
    config["train"]["focus_token"] = tokenize(cfg).focus  # the position a run records, whatever names it
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status of ``attnlab-compare ARGV`` (module docstring)."""
    argv = speak(argv)
    parser = HelperParser("attnlab-compare",
                          _("One table over saved attnlab runs: run dirs, or sweep dirs (every job below them)."))
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help=_("run dir or sweep dir"))
    parser.add_argument("--sort", metavar="COLUMN", help=_("sort rows by this column (e.g. final_loss)"))
    parser.add_argument("--reverse", action="store_true", help=_("sort descending"))
    parser.add_argument("--csv", metavar="FILE", type=Path, help=_("also write the table as CSV"))
    parser.add_argument("--plot", metavar="FILE", type=Path,
                        help=_("write one figure: loss curves (log y) + last-snapshot heatmaps"))
    parser.add_argument("--against", metavar="PRESET.yaml", type=Path,
                        help=_("show per run the keys whose values differ from this preset (an experiment file, "
                               "read as data) instead of from the other runs"))
    parser.add_argument("--force", action="store_true",
                        help=_("replace a --csv / --plot file that attnlab did not write"))
    args = parser.parse_args(argv)
    try:
        against = preset_config(args.against) if args.against else None
        found = named_runs(args.paths)
        read = [run for run, _, _ in found]
        for key, out, kind in (("--csv", args.csv, "csv"), ("--plot", args.plot, "figure")):
            if out is not None and (problem := destination.refusal(out, key=key, kind=kind, force=args.force,
                                                                   reads=read)) is not None:
                raise RunDirError(problem)
        rows = collect_rows(args.paths, against=against, found=found)
        if args.sort:
            rows = sort_rows(rows, args.sort, reverse=args.reverse)
        print(format_table(rows))
        if line := distribution(rows):
            print(line)
        if against is not None:
            off = sum(r["differs"] is not None for r in rows)
            print(_("{n} of {total} runs differ from {preset}").format(n=off, total=len(rows),
                                                                      preset=printable(str(args.against), 300)))
        if args.csv:
            destination.write(args.csv, csv_text(rows).encode("utf-8"), key="--csv", kind="csv", force=args.force,
                              reads=read)
            print(_("csv: {file}").format(file=printable(str(args.csv), 300)))
        if args.plot:
            comparison_figure(rows, args.plot, force=args.force)
            print(_("figure: {file}").format(file=printable(str(args.plot), 300)))
    except (KeyError, AttnlabError, OSError, ValueError) as err:  # KeyError: an unknown --sort column
        print(_("{prog}: error: {message}").format(
            prog="attnlab-compare", message=printable(str(err.args[0] if isinstance(err, KeyError) else err), 1500)),
              file=sys.stderr)
        return 2
    bad = [r for r in rows if broken(r)]
    for r in bad:
        print(_("{prog}: warning: {message}").format(
            prog="attnlab-compare", message=f"{printable(r['job'], 300)}: {printable('; '.join(r['problems']), 1500)}"),
              file=sys.stderr)
    return 1 if bad else 0


cli = console_script(main)
