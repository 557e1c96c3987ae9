"""Every file a command writes where the user points it (``attnlab-report -o``, ``--csv``, ``--plot``,
``attnlab-check --template``), under one rule, checked before any work (:func:`refusal`) and as it writes
(:func:`write`): attnlab writes a **regular file** only (a link, device, FIFO, socket or folder is refused,
``--force`` or not); a file that exists is replaced only when **attnlab wrote it** (its first bytes carry a
mark of :data:`MARKS`) or with ``--force``, a file of no ``kind`` (the learner's ``--template`` code) never;
nothing is written inside a run dir the command ``reads``, but the names in ``allow``."""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterable, Sequence

from attnlab.core.errors import AttnlabError, as_write_error
from attnlab.core.files import printable
from attnlab.core.i18n import N_, _
from attnlab.outputs.artifacts import atomic_write

HEAD = 4096  # bytes of an existing file looked at for the mark
# the first bytes of the files attnlab writes (a PNG figure: its text chunk, before the image data)
MARKS = {"page": b"<!doctype html>\n<!-- attnlab report", "figure": b"tEXtSoftware\x00attnlab", "csv": b"job,"}
_KINDS = {stat.S_IFDIR: N_("a folder"), stat.S_IFLNK: N_("a symbolic link"), stat.S_IFIFO: N_("a FIFO (named pipe)"),
          stat.S_IFSOCK: N_("a socket"), stat.S_IFCHR: N_("a device"), stat.S_IFBLK: N_("a device")}


class OutputRefused(AttnlabError):
    """An output path attnlab does not write (one line naming the option and the path)."""


def refusal(path: Path | str, *, key: str, kind: str | None, force: bool = False, reads: Iterable[Path] = (),
            allow: Sequence[str] = ()) -> str | None:
    """Why attnlab must not write ``path``, one line naming ``key``, or None."""
    path = Path(path)
    shown = printable(str(path), 300)
    target = Path(os.path.realpath(path))
    for run in reads:
        run = Path(os.path.realpath(run))
        if (target == run or run in target.parents) and not (target.parent == run and target.name in allow):
            return _("{key} {path}: inside the run dir {run} it reads; choose a path outside it").format(
                key=key, path=shown, run=printable(str(run), 300))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not path.parent.is_dir():
            return _("{key} {path}: the folder {folder} does not exist").format(
                key=key, path=shown, folder=printable(str(path.parent), 300))
        return None
    except OSError as err:
        return f"{key} {shown}: {printable(err.strerror or type(err).__name__, 200)}"
    if not stat.S_ISREG(st.st_mode):
        what = _KINDS.get(stat.S_IFMT(st.st_mode), N_("not a regular file"))
        return _("{key} {path}: is {what}; attnlab writes a regular file only: choose a file path").format(
            key=key, path=shown, what=_(what))
    if force and kind is not None:
        return None
    head = b""
    with contextlib.suppress(OSError), open(path, "rb", buffering=0) as f:
        head = f.read(HEAD)
    mark = MARKS.get(kind)
    if mark is not None and (mark in head if kind == "figure" else head.lstrip(b"\xef\xbb\xbf").startswith(mark)):
        return None
    if kind is None:
        return _("{key} {path}: exists; attnlab writes a new file only").format(key=key, path=shown)
    return _("{key} {path}: exists and attnlab did not write it; it is kept (--force replaces it)").format(
        key=key, path=shown)


def write(path: Path | str, data: bytes, *, key: str, kind: str | None, force: bool = False,
          reads: Iterable[Path] = (), allow: Sequence[str] = ()) -> Path:
    """``data`` into ``path`` under the module's rule (atomically; a new file only without ``kind``);
    OutputRefused (one line), WriteError."""
    path = Path(path)
    if (problem := refusal(path, key=key, kind=kind, force=force, reads=reads, allow=allow)) is not None:
        raise OutputRefused(problem)
    if kind is None:
        try:
            with open(path, "xb") as f:
                f.write(data)
        except FileExistsError:  # made since refusal() looked
            raise OutputRefused(refusal(path, key=key, kind=None)) from None
        except OSError as err:
            raise as_write_error(err, file=printable(str(path), 300)) from err
    else:
        atomic_write(path, data)
    return path
