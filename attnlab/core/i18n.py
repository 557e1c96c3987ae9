"""The learner's language (``lang``: ``zh`` or ``en``): ``_(message)`` translates through the stdlib gettext
catalog ``attnlab/locale/zh_CN/LC_MESSAGES/attnlab.mo``; templates are formatted after translation
(``_("step {step} of {steps}").format(...)``); keys, values, file names and numbers stay as typed."""
from __future__ import annotations

import gettext
import locale
import os
from importlib import resources

LANGUAGES = ("zh", "en")
LOCALE_DIR = resources.files("attnlab") / "locale"
_translation: gettext.NullTranslations = gettext.NullTranslations()


def default_language() -> str:
    """``zh`` when the first set of LANGUAGE, LC_ALL, LC_MESSAGES, LANG is Chinese (``zh_CN.UTF-8``); with none
    set (Windows, a macOS app), when ``locale.getlocale()`` is (``zh_CN``, ``Chinese (Simplified)_China``)."""
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        if value := os.environ.get(var):
            return "zh" if value.split(":")[0].lower().startswith("zh") else "en"
    try:
        name = locale.getlocale()[0] or ""
    except ValueError:  # a locale name Python cannot parse
        name = ""
    return "zh" if name.lower().startswith(("zh", "chinese")) else "en"


def set_language(lang: str | None = None) -> str:
    """Make ``_()`` speak ``lang`` (None: :func:`default_language`) in this process; returns it. ValueError
    for a value not in :data:`LANGUAGES`."""
    lang = default_language() if lang is None else lang
    if lang not in LANGUAGES:
        raise ValueError(f"lang={lang!r}: must be one of {', '.join(LANGUAGES)}")
    global _translation
    _translation = (gettext.translation("attnlab", str(LOCALE_DIR), languages=["zh_CN"]) if lang == "zh"
                    else gettext.NullTranslations())
    return lang


def language() -> str:
    """The language ``_()`` speaks now."""
    return "en" if type(_translation) is gettext.NullTranslations else "zh"


def _(message: str) -> str:
    """``message`` translated into the current language (English: ``message`` itself)."""
    return _translation.gettext(message)


def N_(message: str) -> str:
    """``message`` itself, marked for the catalog: a table's text translated where it is shown."""
    return message


def translations(messages: list[str]) -> dict[str, str]:
    """``{message: translation}`` for the current language (the report page's ``tr()``)."""
    return {m: _(m) for m in messages}


set_language()
