"""Fonts for every figure: DejaVu Sans, then a CJK font (an installed one, else the shipped Noto Sans
CJK SC cut to GB 2312, ``attnlab/data/fonts``, docs/i18n.md). A character no font can draw is shown
escaped (``\\u4f60``), never as an empty box."""
from __future__ import annotations

import functools
import logging
import re
from importlib import resources

SHIPPED_FONT = resources.files("attnlab.data") / "fonts" / "NotoSansCJKsc-Regular-GB2312.otf"
# fontTools logs each table it cuts at INFO (matplotlib's PDF/SVG fonts, the report's @font-face)
logging.getLogger("fontTools").setLevel(logging.WARNING)
_CJK_FONT = re.compile(r"CJK|WenQuanYi|WQY|SimHei|SimSun|Source Han|Microsoft YaHei|PingFang|Hiragino"
                       r"|Heiti|Songti|Arial Unicode|Droid Sans Fallback|AR PL|Unifont", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The family name of an installed CJK font (first match in the font list), else the shipped one's."""
    from matplotlib import font_manager

    names = sorted({f.name for f in font_manager.fontManager.ttflist if _CJK_FONT.search(f.name)})
    if not names:
        font_manager.fontManager.addfont(str(SHIPPED_FONT))
        names = [font_manager.FontProperties(fname=str(SHIPPED_FONT)).get_name()]
    return names[0]


@functools.lru_cache(maxsize=None)
def _drawable() -> frozenset[int]:
    """Code points the fonts we use (DejaVu Sans + the CJK font, if any) have glyphs for."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    points: set[int] = set()
    for family in ("DejaVu Sans", cjk_font()):
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        points.update(FT2Font(path).get_charmap())
    return frozenset(points)


def style():
    """``matplotlib.style.context``: matplotlib's own defaults (no ``matplotlibrc`` changes what a run
    reproduces) and attnlab's fonts, a list for per-glyph fallback. Draw every figure inside it."""
    import matplotlib.style

    return matplotlib.style.context(["default", {"font.family": ["DejaVu Sans", cjk_font()],
                                                 "axes.unicode_minus": False}])


def drawable(text: str) -> str:
    """``text`` with each character no font here can draw escaped (``你`` -> ``\\u4f60``), ``$`` -> ``\\$``."""
    points = _drawable()
    return "".join(r"\$" if ch == "$" else ch if ord(ch) in points or ch in "\n\t"
                   else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}" for ch in text)


def label(token: str) -> str:
    """A tick label: the token stripped as in the tutorial (only whitespace: its ``repr``), :func:`drawable`."""
    return drawable(token.strip() or repr(token))

