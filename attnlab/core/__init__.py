"""attnlab.core."""
