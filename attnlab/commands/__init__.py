"""attnlab.commands."""
