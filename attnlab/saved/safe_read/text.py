"""Re-exported from :mod:`attnlab.core.files`."""
from attnlab.core.files import MissingRunFile, ResolverInterpolation, RunFileError, printable  # noqa: F401
