"""Fonts for every figure: with a CJK font installed (Noto Sans CJK, WenQuanYi, SimHei, ...) it is
the fallback after DejaVu Sans and the evolution figure has the tutorial's Chinese title; else the
English one, and a character no font can draw is shown escaped (``\\u4f60``), never as an empty
box with a "Glyph missing" warning."""
from __future__ import annotations

import functools
import re

TITLE_ZH = "注意力权重的训练演化"  # tutorial §5's figure title
TITLE_EN = "Attention weights during training"
_CJK_FONT = re.compile(r"CJK|WenQuanYi|WQY|SimHei|SimSun|Source Han|Microsoft YaHei|PingFang|Hiragino"
                       r"|Heiti|Songti|Arial Unicode|Droid Sans Fallback|AR PL|Unifont", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The family name of an installed CJK font, or None (first match in the font list)."""
    from matplotlib import font_manager

    names = sorted({f.name for f in font_manager.fontManager.ttflist if _CJK_FONT.search(f.name)})
    return names[0] if names else None


@functools.lru_cache(maxsize=None)
def _drawable() -> frozenset[int]:
    """Code points the fonts we use (DejaVu Sans + the CJK font, if any) have glyphs for."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    points: set[int] = set()
    for family in rc()["font.family"]:
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        points.update(FT2Font(path).get_charmap())
    return frozenset(points)


# rcParams that are not a figure's style (what matplotlib.style.use("default") leaves alone too)
_NOT_STYLE = frozenset({"backend", "backend_fallback", "interactive", "toolbar", "timezone", "figure.max_open_warning",
                        "figure.raise_window", "savefig.directory", "tk.window_focus", "docstring.hardcopy",
                        "date.epoch"})


def rc() -> dict:
    """rcParams for every figure (``matplotlib.rc_context(rc())``): matplotlib's own defaults, so no
    ``matplotlibrc`` or caller's rcParams changes what a run reproduces, plus attnlab's fonts: a list
    of concrete families gives per-glyph fallback (a generic "sans-serif" would use only the first)."""
    import matplotlib

    style = {k: v for k, v in matplotlib.rcParamsDefault.items() if k not in _NOT_STYLE and not k.startswith("webagg.")}
    return {**style, "font.family": ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else []), "axes.unicode_minus": False}


def drawable(text: str) -> str:
    """``text`` with each character no font here can draw escaped (``你`` -> ``\\u4f60``
    without a CJK font) and ``$`` escaped so it is never read as mathtext."""
    points = _drawable()
    return "".join(r"\$" if ch == "$" else ch if ord(ch) in points or ch in "\n\t"
                   else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}" for ch in text)


def label(token: str) -> str:
    """A tick label for one token: stripped like the tutorial's ``t.strip()`` (a token that is
    only whitespace is shown as its ``repr``, ``' '``), then made :func:`drawable`."""
    return drawable(token.strip() or repr(token))


def default_title() -> str:
    """The tutorial's Chinese title when a CJK font is installed, else the English one."""
    return TITLE_ZH if cjk_font() else TITLE_EN
