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
    """A file of a run dir could not be written (disk full, file-size limit, read-only folder,
    I/O error), e.g. ``no space left on device while writing metrics.csv at step 57``.

    ``file`` is the file's name in the run dir, ``step`` the first step whose record was not
    written (None when the file is not a per-step record), ``reason`` the OS's reason in
    words and ``errno`` its number (``OSError.errno``)."""

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


def describe(err: BaseException, step: int | None = None) -> str:
    """One line for a run's ``error`` field: attnlab's own errors as they stand; an OSError
    as its reason, the file when known and ``step`` (``no space left on device while writing
    the run's files at step 40``); anything else as ``TypeName: message``."""
    if isinstance(err, AttnlabError):
        return str(err)
    if isinstance(err, OSError) and err.errno is not None:
        from pathlib import Path

        what = Path(str(err.filename)).name if err.filename else "the run's files"
        return f"{os_reason(err)} while writing {what}" + (f" at step {step}" if step is not None else "")
    return f"{type(err).__name__}: {err}"
