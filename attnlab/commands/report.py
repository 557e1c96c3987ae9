"""``attnlab-report PATH... [-o FILE] [--force] [--lang zh|en] [--verdicts CSV] [--against PRESET]``: one
offline HTML page of attention over training (:mod:`attnlab.saved.report`): a run dir gives its detail
view, several runs or a sweep dir a comparison (``--verdicts``: attnlab-reproduce's verdict per run, runs
sorted by student; ``--against``: the keys each run changed from that preset). Exit 0; 1 when a run has
an unreadable file (page written, a warning per run); 2 with one line for a bad PATH or an output that
cannot be written or is inside a run."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from attnlab.commands.arguments import HelperParser, console_script, speak
from attnlab.commands.compare import preset_config
from attnlab.core.errors import AttnlabError, RunDirError
from attnlab.core.i18n import _
from attnlab.outputs import destination
from attnlab.saved.report import REPORT, collect_records, render
from attnlab.saved.runs import named_runs
from attnlab.saved.safe_read import printable
from attnlab.saved.verdict import read_verdicts


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status of ``attnlab-report ARGV`` (module docstring)."""
    argv = speak(argv)
    parser = HelperParser("attnlab-report", _("One offline HTML page of attention over training: a run dir gives "
                                              "its detail view, several runs or a sweep dir a comparison."))
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help=_("run dir or sweep dir"))
    parser.add_argument("-o", "--out", metavar="FILE", type=Path, default=Path(REPORT),
                        help=_("the page to write (default: ./{name})").format(name=REPORT))
    parser.add_argument("--force", action="store_true", help=_("replace a file attnlab did not write"))
    parser.add_argument("--verdicts", metavar="CSV", type=Path,
                        help=_("attnlab-reproduce's --csv of these runs: a verdict column, runs sorted by student"))
    parser.add_argument("--against", metavar="PRESET.yaml", type=Path,
                        help=_("show per run the keys whose values differ from this preset (an experiment file, "
                               "read as data) instead of from the other runs"))
    args = parser.parse_args(argv)
    out = args.out / REPORT if args.out.is_dir() else args.out
    try:
        found = named_runs(args.paths)
        rule = {"key": "-o", "kind": "page", "force": args.force, "reads": [r for r, _n, _p in found],
                "allow": (REPORT,)}
        if problem := destination.refusal(out, **rule):
            raise RunDirError(problem)
        verdicts = read_verdicts(args.verdicts) if args.verdicts is not None else None
        against = preset_config(args.against) if args.against is not None else None
        records = collect_records(args.paths, found=found, verdicts=verdicts, against=against)
        destination.write(out, render(records).encode("utf-8"), **rule)
    except (AttnlabError, OSError) as err:
        print(_("attnlab-report: error: {message}").format(message=printable(str(err), 1500)), file=sys.stderr)
        return 2
    for rec in records:  # names and problems are printable already (load_run)
        if rec["problems"]:
            print(_("attnlab-report: warning: {name}: {problems}").format(name=rec["name"],
                                                                          problems="; ".join(rec["problems"])),
                  file=sys.stderr)
    shown = sum(len(r["steps"]) for r in records)
    total = sum(r["snapshots_total"] for r in records)
    runs = (_("1 run") if len(records) == 1 else _("{n} runs")).format(n=len(records))
    more = _(", showing {shown} of {total} snapshots").format(shown=shown, total=total) if shown < total else ""
    print(_("report: {path} ({runs}{more}, {size} MB)").format(path=printable(str(out), 300), runs=runs, more=more,
                                                             size=f"{out.stat().st_size / 1e6:.2f}"))
    return 1 if any(rec["problems"] for rec in records) else 0


cli = console_script(main)
