"""attnlab.saved."""
