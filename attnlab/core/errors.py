"""attnlab's own errors: each carries one line that names the key, the value and what is allowed."""


class AttnlabError(Exception):
    """Base class: ``str(err)`` is one line meant for the user, no traceback needed."""


class ConfigError(AttnlabError, ValueError):
    """A config value is not allowed, e.g. ``model.d_model=0: must be a positive integer``."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")


class TokenizerError(AttnlabError):
    """An encoding cannot be loaded (offline, unknown name, corrupted ranks file)."""


class RunDirError(AttnlabError):
    """A run directory is missing, not a run, or would be overwritten."""


class WriteError(AttnlabError, OSError):
    """A run-dir file could not be written: ``no space left on device while writing metrics.csv
    at step 57``. ``file`` (name in the run dir), ``reason`` (the OS's, in words), ``step`` (the
    first step not written, None for a file that is no per-step record), ``errno``."""

    def __init__(self, file: str, reason: str, step: int | None = None, errno: int | None = None) -> None:
        self.file, self.reason, self.step = file, reason, step
        super().__init__(f"{reason} while writing {file}" + (f" at step {step}" if step is not None else ""))
        self.errno = errno

    @classmethod
    def from_os_error(cls, err: OSError, file: str, step: int | None = None) -> "WriteError":
        """``err`` (from writing ``file``) as a WriteError; a WriteError is returned as it is."""
        if isinstance(err, WriteError):
            return err
        return cls(file, os_reason(err), step, err.errno)


def os_reason(err: OSError) -> str:
    """The OS's reason for ``err`` in words, lower case: ``no space left on device``,
    ``file too large``, ``read-only file system`` (``str(err)`` when it has no errno)."""
    import os

    if err.errno is None:
        return str(err) or type(err).__name__
    text = os.strerror(err.errno)
    return text[:1].lower() + text[1:]


def as_write_error(err: BaseException, step: int | None = None) -> BaseException:
    """An OSError as a :class:`WriteError` naming the file (its filename, else the writer it came
    from: ``the TensorBoard event file`` or ``the run's files``) and ``step``; else ``err``."""
    if isinstance(err, WriteError) or not isinstance(err, OSError) or err.errno is None:
        return err
    from pathlib import Path

    if err.filename:
        what = Path(str(err.filename)).name
    elif any(_module(tb.tb_frame).startswith(("tensorboard.", "torch.utils.tensorboard", "attnlab.outputs.tensorboard"))
             for tb in _frames(err.__traceback__)):
        what = "the TensorBoard event file"
    else:
        what = "the run's files"
    return WriteError(what, os_reason(err), step, err.errno)


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _module(frame) -> str:
    return str(frame.f_globals.get("__name__", ""))


def describe(err: BaseException) -> str:
    """One line for a run's ``error``: attnlab's errors as they are, an OSError as
    :func:`as_write_error` words it, anything else ``TypeName: message``."""
    err = as_write_error(err)
    if isinstance(err, AttnlabError):
        return str(err)
    return f"{type(err).__name__}: {err}"
