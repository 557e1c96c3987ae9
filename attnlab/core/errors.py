"""attnlab's own errors: each carries one line that names the key, the value and what is allowed."""
import errno
import os
import re
import traceback
from pathlib import Path

from attnlab.core.i18n import N_, _


class AttnlabError(Exception):
    """Base class: ``str(err)`` is one line meant for the user, no traceback needed."""


class ConfigError(AttnlabError, ValueError):
    """A config value is not allowed, e.g. ``model.d_model=0: must be a positive integer``; ``allowed``
    is translated here (a template marked ``N_``, or a sentence already translated)."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {_(allowed)}")


class TokenizerError(AttnlabError):
    """An encoding cannot be loaded (offline, unknown name, corrupted ranks file)."""


class RunDirError(AttnlabError):
    """A run directory is missing, not a run, or would be overwritten."""


class WriteError(AttnlabError, OSError):
    """``no space left on device while writing metrics.csv at step 57``: ``file`` (in the run dir),
    ``reason`` (the OS's, in words), ``step`` (the first not written, or None), ``errno``."""

    def __init__(self, file: str, reason: str, step: int | None = None, errno: int | None = None) -> None:
        self.file, self.reason, self.step = file, reason, step
        super().__init__(_("{reason} while writing {file}").format(reason=reason, file=file)
                         + (_(" at step {step}").format(step=step) if step is not None else ""))
        self.errno = errno


# the common errnos' reasons in the catalog (os.strerror's words, lower case); another errno: os.strerror's
OS_REASONS = {
    errno.ENOENT: N_("no such file or directory"), errno.EACCES: N_("permission denied"),
    errno.EPERM: N_("operation not permitted"), errno.ENOSPC: N_("no space left on device"),
    errno.EROFS: N_("read-only file system"), errno.EEXIST: N_("file exists"), errno.EISDIR: N_("is a directory"),
    errno.ENOTDIR: N_("not a directory"), errno.ENAMETOOLONG: N_("file name too long"),
    errno.EDQUOT: N_("disk quota exceeded"), errno.EMFILE: N_("too many open files"),
    errno.ELOOP: N_("too many levels of symbolic links"), errno.EBUSY: N_("device or resource busy"),
    errno.EFBIG: N_("file too large"), errno.EIO: N_("input/output error"), errno.ENOTEMPTY: N_("directory not empty"),
}


# OmegaConf's type checks against the schema (attnlab.core.config), each as what the key allows
SCHEMA_TYPES = (
    (r"could not be converted to Integer", N_("must be an integer")),
    (r"could not be converted to Float", N_("must be a number")),
    (r"is not a valid bool|could not be converted to Boolean", N_("must be true or false")),
    (r"expected one of \[(?P<options>.*)\]", N_("must be one of: {options}")),
    (r"is not Optional|Non optional field|Incompatible value .None.", N_("must not be null")),
    (r"is not a ListConfig, list or tuple", N_("must be a list, e.g. [0,10,19]")),
    (r"length \d+ does not match type hint length (?P<n>\d+)", N_("must be a list of {n} values")),  # OmegaConf 2.4
)


def schema_allowed(message: str) -> str:
    """What the schema allows, translated, for OmegaConf's ValidationError ``message`` (``Value 'abc' of type
    'str' could not be converted to Integer``: ``must be an integer``); ``message``'s first line when it is
    none of :data:`SCHEMA_TYPES`."""
    first = message.strip().splitlines()[0] if message.strip() else message
    for pattern, allowed in SCHEMA_TYPES:
        if found := re.search(pattern, first):
            return _(allowed).format(**found.groupdict())
    return first


def os_reason(err: OSError) -> str:
    """The OS's reason for ``err`` in words, lower case (``no space left on device``), translated."""
    if err.errno is None:
        return str(err) or type(err).__name__
    if err.errno in OS_REASONS:
        return _(OS_REASONS[err.errno])
    text = os.strerror(err.errno)
    return text[:1].lower() + text[1:]


def as_write_error(err: BaseException, step: int | None = None, file: str | None = None) -> BaseException:
    """An OSError as a :class:`WriteError` naming ``file`` (else its filename, else the writer it came
    from: ``the TensorBoard event file`` or ``the run's files``) and ``step``; else ``err``."""
    if isinstance(err, WriteError) or not isinstance(err, OSError) or (err.errno is None and file is None):
        return err
    if file is None and err.filename:
        file = Path(str(err.filename)).name
    elif file is None:
        in_writer = any("tensorboard" in str(frame.f_globals.get("__name__", ""))  # tensorboard's, torch's, ours
                        for frame, _ in traceback.walk_tb(err.__traceback__))
        file = "the TensorBoard event file" if in_writer else "the run's files"
    return WriteError(file, os_reason(err), step, err.errno)


def describe(err: BaseException) -> str:
    """One line for a run's ``error``: attnlab's errors as they are, an OSError as
    :func:`as_write_error` words it, anything else ``TypeName: message``."""
    err = as_write_error(err)
    return str(err) if isinstance(err, AttnlabError) else f"{type(err).__name__}: {err}"
