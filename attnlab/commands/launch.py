"""The ``attnlab`` console script: signals deferred and console output made safe *before*
anything heavy is imported, then :func:`attnlab.commands.cli.main`.

Importing torch, Hydra and matplotlib takes seconds; a Ctrl-C meanwhile used to end in a
``KeyboardInterrupt`` traceback. Here the first thing the process does is
:func:`attnlab.core.interrupts.install`, so such a Ctrl-C is recorded and :mod:`attnlab.commands.cli` stops
with one line before any folder is made. A second Ctrl-C while importing ends the process at
once, with one line too.
"""
from __future__ import annotations

import sys


def main() -> None:
    """Console-script entry point (``attnlab [overrides]``)."""
    from attnlab.core import interrupts
    from attnlab.outputs import streams

    interrupts.install()
    streams.install()
    try:
        interrupts.pause_point("startup")
        from attnlab.commands import cli
    except KeyboardInterrupt:
        print("interrupted: while starting; nothing was written", file=sys.stderr)
        sys.exit(1)
    cli.main()


if __name__ == "__main__":
    main()
