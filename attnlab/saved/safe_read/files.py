"""Re-exported from :mod:`attnlab.core.files`."""
from attnlab.core.files import decode_utf8, open_run_file, read_bytes, read_text  # noqa: F401
