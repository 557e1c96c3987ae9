"""``attnlab-compare PATH... [--sort COLUMN] [--reverse] [--csv FILE] [--plot FILE]``: one table
over saved runs.

A PATH is a run dir (``.hydra/config.yaml`` inside) or a sweep dir (run dirs anywhere below
it). The rows (:mod:`attnlab.saved.runs`, columns described there) are built by the same code as the
end-of-sweep table, so ``summary.csv`` and this table always agree; :mod:`attnlab.saved.table` prints
and writes them, :func:`attnlab.saved.compare_figure.comparison_figure` draws ``--plot``.

A run whose files cannot be read (a damaged archive, a ``metrics.csv`` with a garbage row, a
``summary.json`` that is not an object, a symbolic link, ...) is still a row: its status
(``unreadable`` when summary.json itself cannot be used, ``missing`` without one) and, in
``error``, one line per file naming it and what is wrong; the other rows, the CSV and the figure
are written as usual, and a warning line per such run goes to stderr (the reason in full).

Exit status: 0; 1 when some run cannot be read completely (see above); 2 with one line on
stderr for a PATH that is not a run/sweep dir, an unknown ``--sort`` column, or a figure that
cannot be written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from attnlab.core.errors import AttnlabError
from attnlab.saved.compare_figure import comparison_figure
from attnlab.saved.runs import broken, collect_rows
from attnlab.saved.safe_read import printable
from attnlab.saved.table import format_table, sort_rows, write_csv


def main(argv: Sequence[str] | None = None) -> int:
    """``attnlab-compare PATH... [--sort COLUMN] [--reverse] [--csv FILE] [--plot FILE]``."""
    parser = argparse.ArgumentParser(
        prog="attnlab-compare",
        description="One table over saved attnlab runs: run dirs, or sweep dirs (every job below them).")
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="run dir or sweep dir")
    parser.add_argument("--sort", metavar="COLUMN", help="sort rows by this column (e.g. final_loss)")
    parser.add_argument("--reverse", action="store_true", help="sort descending")
    parser.add_argument("--csv", metavar="FILE", type=Path, help="also write the table as CSV")
    parser.add_argument("--plot", metavar="FILE", type=Path,
                        help="write one figure: loss curves (log y) + last-snapshot heatmaps")
    args = parser.parse_args(argv)
    try:
        rows = collect_rows(args.paths)
        if args.sort:
            rows = sort_rows(rows, args.sort, reverse=args.reverse)
        print(format_table(rows))
        if args.csv:
            write_csv(rows, args.csv)
            print(f"csv: {printable(str(args.csv), 300)}")
        if args.plot:
            comparison_figure(rows, args.plot)
            print(f"figure: {printable(str(args.plot), 300)}")
    except KeyError as err:
        print(f"attnlab-compare: error: {err.args[0]}", file=sys.stderr)
        return 2
    except (AttnlabError, OSError, ValueError) as err:
        print(f"attnlab-compare: error: {printable(str(err), 1500)}", file=sys.stderr)
        return 2
    bad = [r for r in rows if broken(r)]
    for r in bad:
        print(f"attnlab-compare: warning: {printable(r['job'], 300)}: {printable('; '.join(r['problems']), 1500)}",
              file=sys.stderr)
    return 1 if bad else 0


def cli() -> None:
    """Console-script entry point."""
    from attnlab.outputs import streams

    streams.install()
    sys.exit(main())


if __name__ == "__main__":
    cli()
