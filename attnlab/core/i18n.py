"""The learner's language. ``_(message)`` returns ``message`` in the language chosen for this
process; every sentence attnlab says to a user goes through it, written as an English template
with named placeholders and formatted after translation: ``_("step {step} of {steps}").format(...)``.
Keys, values, file names and numbers stay as typed."""
from __future__ import annotations


def _(message: str) -> str:
    """``message`` translated into the current language (English: ``message`` itself)."""
    return message
