"""Re-exported from :mod:`attnlab.core.files`."""
from attnlab.core.files import *  # noqa: F401,F403
from attnlab.core.files import _counters  # noqa: F401
