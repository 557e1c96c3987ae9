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
