"""attnlab: learn how self-attention works by running it (tutorial: ../shared/seed)."""

__version__ = "0.1.0"
