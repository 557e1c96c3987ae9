"""The learner's language: every sentence attnlab says (each ``_()`` / ``N_()`` msgid of attnlab/
and each ``tr("...")`` of the report page, as Babel extracts them) has a zh translation in the
shipped catalog, with the same placeholders; the compiled .mo is the .po's; ``lang`` comes from
the locale as gettext reads it; with lang=zh the run prints tutorial §5's lines character for
character, and the README.zh-CN commands are README's."""
from __future__ import annotations

import ast
import gettext
import locale
import re
import string

import pytest

from attnlab.core import i18n
from attnlab.saved.report import TEMPLATE, page_messages

from conftest import ROOT, run_here

babel = pytest.importorskip("babel")
from babel.messages.extract import extract_from_dir  # noqa: E402
from babel.messages.frontend import parse_mapping_cfg  # noqa: E402
from babel.messages.pofile import read_po  # noqa: E402

PO = ROOT / "attnlab/locale/zh_CN/LC_MESSAGES/attnlab.po"
MO = PO.with_suffix(".mo")
TUTORIAL = next((ROOT.parent.parent / "shared/seed").glob("*.txt"), None) if (ROOT.parent.parent / "shared/seed").is_dir() else None


@pytest.fixture(scope="module")
def catalog():
    with open(PO, "rb") as f:
        return {m.id: m for m in read_po(f) if m.id}


def extracted() -> set[str]:
    """The msgids ``make i18n`` extracts (babel.cfg, keywords _ N_ tr)."""
    with open(ROOT / "babel.cfg") as f:
        method_map, options_map = parse_mapping_cfg(f)
    keywords = {"_": None, "N_": None, "tr": None}
    return {msg for _, _, msg, *_ in extract_from_dir(str(ROOT), method_map, options_map, keywords=keywords)
            if isinstance(msg, str) and msg}


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_sentence_has_a_zh_translation_with_its_placeholders(catalog):
    ids = extracted()
    assert {"Attention weights during training", "step {step:3d}  loss={loss:.4f}  |  {focus} attends: {targets}",
            "Attention weights", "must be a positive integer"} <= ids  # python, N_, and the page's tr()
    assert set(page_messages(TEMPLATE.read_text(encoding="utf-8"))) <= ids  # the page asks for what Babel extracts
    missing = sorted(m for m in ids if m not in catalog or not catalog[m].string or catalog[m].fuzzy)
    assert missing == [], f"untranslated (run `make i18n`, fill msgstr): {missing}"
    for m in ids:  # a translation uses only fields the English formats with (zh may name {bare} for the focus)
        assert fields(catalog[m].string) <= fields(m) | {"bare"}, m


def test_every_error_and_warning_line_goes_through_the_catalog():
    """A literal or f-string of attnlab/ that starts ``error:`` / ``warning:`` (more than the bare prefix) is
    the argument of ``_()`` / ``N_()``: else a zh learner reads an English line."""
    english = []
    for path in sorted((ROOT / "attnlab").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        marked = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and getattr(node.func, "id", None) in ("_", "N_") for arg in ast.walk(node)}
        for node in ast.walk(tree):
            first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
            if (isinstance(first, ast.Constant) and isinstance(first.value, str) and id(node) not in marked
                    and first.value.startswith(("error:", "warning:"))
                    and (node is not first or first.value.rstrip() not in ("error:", "warning:"))):  # a bare prefix
                english.append(f"{path.relative_to(ROOT)}:{node.lineno}: {first.value[:50]!r}")
    assert english == [], "wrap in _() and run `make i18n`: " + "; ".join(english)


def test_the_mo_is_compiled_from_the_po(catalog):
    with open(MO, "rb") as f:
        compiled = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 (a dict of msgid -> msgstr)
    assert {k: v for k, v in compiled.items() if k} == {k: m.string for k, m in catalog.items() if m.string}, \
        "attnlab.mo is stale: run `make i18n`"


@pytest.mark.parametrize("env, lang", [({"LANGUAGE": "zh_CN:en"}, "zh"), ({"LC_ALL": "zh_CN.UTF-8"}, "zh"),
                                       ({"LANG": "zh_TW.UTF-8"}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"),
                                       ({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"), ({}, "en")])
def test_default_language_is_the_locale_gettext_reads(monkeypatch, env, lang):
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(locale, "getlocale", lambda: ("zh_CN", "UTF-8") if env else (None, None))  # env wins
    assert i18n.default_language() == lang


@pytest.mark.parametrize("os_locale, lang", [
    (("Chinese (Simplified)_China", "936"), "zh"),  # Windows, Simplified Chinese
    (("Chinese (Traditional)_Taiwan", "950"), "zh"), (("zh_CN", "UTF-8"), "zh"),  # macOS / Linux names
    (("English_United States", "1252"), "en"), (("en_GB", "UTF-8"), "en"), ((None, None), "en")])
def test_without_locale_variables_the_os_locale_decides(monkeypatch, os_locale, lang):
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(locale, "getlocale", lambda: os_locale)
    assert i18n.default_language() == lang


def test_set_language_switches_every_sentence():
    try:
        assert i18n.set_language("zh") == "zh" and i18n._("completed") == "完成"
        assert i18n.translations(["Attention weights", "not a msgid"]) == {"Attention weights": "注意力权重",
                                                                          "not a msgid": "not a msgid"}
        with pytest.raises(ValueError, match="lang='fr'"):
            i18n.set_language("fr")
    finally:
        i18n.set_language("en")
    assert i18n._("completed") == "completed"


@pytest.fixture
def english_after():
    yield
    i18n.set_language("en")


def test_lang_zh_prints_the_tutorials_section5_lines_exactly(monkeypatch, tmp_path, english_after, figure_worker):
    monkeypatch.delenv("LANGUAGE")
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")  # no lang=: the locale's
    # figures, TensorBoard and the report page (its font cut by fontTools) too, drawn beside the loop as the
    # command does (drawn in it, a loaded machine's slower steps could add the time-to-go line)
    proc = run_here(cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 6, lines[6:]  # attnlab's lines only: no library's log
    expected = [
        "step   0  loss=2.3566  |  journey关注: 'Your'=0.22 'journey'=0.12 'starts'=0.13 'with'=0.14 'one'=0.19 'step'=0.21",
        "step  20  loss=0.2104  |  journey关注: 'Your'=0.57 'journey'=0.21 'starts'=0.07 'with'=0.14 'one'=0.01 'step'=0.00",
        "step  50  loss=0.0465  |  journey关注: 'Your'=0.84 'journey'=0.09 'starts'=0.03 'with'=0.04 'one'=0.00 'step'=0.00",
        "step 100  loss=0.0005  |  journey关注: 'Your'=0.99 'journey'=0.01 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00",
        "step 200  loss=0.0000  |  journey关注: 'Your'=0.99 'journey'=0.00 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00"]
    assert lines[:5] == expected
    assert re.fullmatch(r"完成: 201 步，最终 loss \S+，\d+\.\d\d 秒  ->  outputs/.+", lines[5])
    if TUTORIAL is not None:  # the tutorial's own printout
        assert all(line in TUTORIAL.read_text(encoding="utf-8") for line in expected)
    assert all(line in (ROOT / "README.zh-CN.md").read_text(encoding="utf-8") for line in expected)


def test_lang_zh_help_and_errors_are_chinese(english_after, tmp_path):
    proc = run_here("lang=zh", "--help")
    assert proc.returncode == 0 and "== 用法 ==" in proc.stdout and "train.focus_token" in proc.stdout
    bad = run_here("lang=zh", "model.d_model=0", cwd=tmp_path)  # (its failed run goes to tmp_path/outputs)
    assert (bad.returncode, bad.stderr) == (2, "错误: model.d_model=0: 必须是正整数\n")
    en = run_here("lang=en", "model.d_model=0", cwd=tmp_path)
    assert en.stderr == "error: model.d_model=0: must be a positive integer\n"


def test_readme_zh_commands_are_readmes():
    """Each ``attnlab...`` command of README.zh-CN.md is one README.md gives, and every preset is in both."""
    command = re.compile(r"`(attnlab[^`]*)`|^(attnlab[-\w]* [ -~]*?)(?:\s+#.*)?$", re.M)
    zh, en = ((ROOT / name).read_text(encoding="utf-8") for name in ("README.zh-CN.md", "README.md"))
    zh_commands = {(a or b).strip() for a, b in command.findall(zh)} - {"attnlab lang=zh --help"}
    assert len(zh_commands) >= 12
    assert sorted(c for c in zh_commands if c not in en) == []
    presets = set(re.findall(r"experiment=(\w+)", en))
    assert presets - {"NAME"} <= set(re.findall(r"experiment=(\w+)", zh)) | {"heads", "causal", "dropout", "objective"}
    assert "README.zh-CN.md" in en.splitlines()[2]


def test_zh_help_lists_what_the_english_help_lists():
    """Every key, group option and preset of conf/hydra/help/attnlab.yaml (tests/test_help.py) in the zh page too."""
    import yaml

    pages = [yaml.safe_load((ROOT / "conf/hydra/help" / name).read_text(encoding="utf-8"))["template"]
             for name in ("attnlab.yaml", "attnlab_zh.yaml")]
    first_words = [set(re.findall(r"^  ([\w./_]+):?\s", page, re.M)) for page in pages]
    assert len(first_words[0]) > 60 and first_words[0] - {"key"} == first_words[1] - {"配置项"}


def test_report_page_carries_its_chinese_glyphs():
    """The page's Chinese shows without a system CJK font: an @font-face cut to exactly its characters."""
    import base64
    import io

    from fontTools.ttLib import TTFont

    from attnlab.saved.report import cjk_font_face

    assert cjk_font_face("step 0 loss ' journey'") == ""
    face = cjk_font_face('{"tr":{"Attention weights":"注意力权重"},"tokens":["你","的","😀"]}')
    font = TTFont(io.BytesIO(base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)\)", face)[1])))
    assert {chr(c) for c in font.getBestCmap()} == set("注意力权重你的")


def test_reproduce_table_speaks_zh_aligned_by_display_width(tmp_path, english_after):
    """attnlab-reproduce's verdict table: its verdicts, headers and count line in zh, columns aligned
    by display width (a hanzi is two columns); the rows keep the English verdict keys (the CSV's)."""
    from attnlab.commands.reproduce import VERDICTS, verdict_table

    rows = [{"job": "0_seed=1", "name": "alice", "verdict": VERDICTS[0], "differs": None},
            {"job": "1_seed=2", "name": "bob", "verdict": VERDICTS[2], "differs": "loss"},
            {"job": "2_seed=3", "name": "carol", "verdict": VERDICTS[0], "differs": None}]
    i18n.set_language("zh")
    assert verdict_table(rows, tmp_path / "r").splitlines() == [
        "任务      名字   结论      不同之处",
        "--------  -----  --------  --------",
        "0_seed=1  alice  完全复现  -",
        "1_seed=2  bob    未复现    loss",
        "2_seed=3  carol  完全复现  -",
        f"3 个运行：2 个完全复现，1 个未复现；复现结果在 {tmp_path / 'r'}"]
    assert [r["verdict"] for r in rows] == ["reproduced exactly", "not reproduced", "reproduced exactly"]
    i18n.set_language("en")
    assert verdict_table(rows, tmp_path / "r").splitlines()[-1] == (
        f"3 runs: 2 reproduced exactly, 1 not reproduced; reproductions in {tmp_path / 'r'}")
