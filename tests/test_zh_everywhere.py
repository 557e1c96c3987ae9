"""Chinese everywhere a learner reads: under ``LANG=zh_CN.UTF-8`` every command's ``--help``, a sweep's
console, its report page and a run page (rendered in headless Chromium) hold no English word outside
config keys and values, tokens, file names and the field's terms; the helpers take ``--lang`` (and
``lang=``) over the locale, never a run's recorded language; README.zh-CN.md has README.md's commands."""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shlex

import pytest

from attnlab.commands import check, compare, generate, reproduce
from attnlab.commands import report as report_command
from attnlab.core import i18n
from attnlab.core.config import walk

from conftest import ROOT, run_here

HELPERS = {"attnlab-check": check.main, "attnlab-compare": compare.main, "attnlab-generate": generate.main,
           "attnlab-report": report_command.main, "attnlab-reproduce": reproduce.main}
ZH_ENV = {"LANG": "zh_CN.UTF-8", "LANGUAGE": "", "LC_ALL": "", "LC_MESSAGES": ""}
# the field's terms (docs/i18n.md), programs, formats and units a Chinese page keeps as they are
TERMS = set("""attnlab hydra HYDRA Hydra d_model d_k d_v seq_len Q K V Z X query key value token tokens softmax loss
MSE GPT UTF emoji PyTorch torch pytest TensorBoard tensorboard CSV csv JSON json YAML yaml HTML html PNG png npz
multirun sweep dir run overrides override zh en lang FILE PATH RUN_DIR PROMPT DIR COLUMN PRESET yaml N S T
template lr std init Adam AdamW SGD nats log seed MB kB max min sdpa explicit mse next_token LayerNorm MLP
Joblib Parallel backend loky prefer processes require None verbose timeout pre_dispatch n_jobs batch_size auto
temp_folder max_nbytes mmap_mode walkthrough id ids TIME cpu CPU BLAS AVX avx DEFAULT default locale experiment
Tokenization Token Embedding Positional Self Attention True False shape dtype scores embedding""".split())


def english_words(text: str, allowed: set[str] = frozenset()) -> set[str]:
    """The English words (3+ letters, not inside a path, key or number) of ``text`` not in ``allowed`` / TERMS."""
    words = set()
    for m in re.finditer(r"(?<![\w./=\-@'<])[A-Za-z][A-Za-z_]{2,}(?![\w./=\-(>])", text):
        word = m.group(0)
        if word not in TERMS and word not in allowed and word.lower() not in TERMS and not word.isupper() and "_" not in word:
            words.add(word)
    return words


@pytest.fixture
def chinese_locale(monkeypatch):
    for key, value in ZH_ENV.items():
        monkeypatch.setenv(key, value) if value else monkeypatch.delenv(key, raising=False)
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("command", sorted(HELPERS))
def test_every_helper_help_is_chinese_under_a_chinese_locale(command, chinese_locale):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        HELPERS[command](["--help"])
    assert done.value.code == 0
    text = out.getvalue()
    assert text.startswith("用法：") and "位置参数" in text and "--lang {zh,en}" in text
    assert english_words(text) == set(), text


def config_words(config) -> set[str]:
    """Every key part and value word of a config: what a page or help may show as it is."""
    return {part for k, v in walk(config) for part in [*k.split("."), *re.findall(r"[A-Za-z]+", str(v))]}


def test_attnlab_help_is_chinese_under_a_chinese_locale(cfg_of, chinese_locale):
    from omegaconf import OmegaConf

    proc = run_here("--help")
    assert proc.returncode == 0 and "attnlab" in proc.stdout
    options = {p.stem for folder in ("conf", "experiments") for p in (ROOT / folder).rglob("*.yaml")}
    allowed = config_words(OmegaConf.to_container(cfg_of())) | options | {
        "Hello", "world", "https", "tiktoken", "cuda", "mps", "matmul", "joblib", "basic", "shell", "hparams",
        "endoftext", "special", "gpt", "null", "none", "dampening", "momentum", "nesterov", "true", "false", "off", "seeds", "outputs", "job", "heads"}
    assert english_words(proc.stdout, allowed) == set(), proc.stdout


@pytest.mark.parametrize("lang,said", [("--lang=zh", "用法："), ("lang=zh", "用法："), ("--lang=en", "usage: ")])
def test_the_command_lines_lang_beats_the_locale(lang, said, chinese_locale, monkeypatch, capsys):
    monkeypatch.setenv("LANG", "en_US.UTF-8" if said == "用法：" else "zh_CN.UTF-8")
    assert compare.main([lang, str(ROOT / "no-such-folder")]) == 2
    assert capsys.readouterr().err.startswith("attnlab-compare: 错误" if said == "用法：" else "attnlab-compare: error")
    with pytest.raises(SystemExit):
        compare.main([lang, "--help"])
    assert capsys.readouterr().out.startswith(said)



@pytest.mark.parametrize("args,start,end", [
    (("seed=1", "--config-name", "nosuch"), "错误: nosuch: ", "配置搜索路径（attnlab 自带的、--config-dir 给的）里没有这个配置文件"),
    (("--config-dir", "nosuch"), "错误: --config-dir ", "nosuch: 没有这个文件夹"),
    (("train.loss_threshold=1" + "0" * 400,), "错误: train.loss_threshold=1000", ": 数值太大，浮点数放不下（最大 1.8e308）"),
    (("hydra.run.dir=afile/run",), "错误: hydra.run.dir='afile/run': ", "无法写入那里（不是文件夹）；请换一个 hydra.run.dir"),
])
def test_a_bad_input_is_one_chinese_line_under_a_chinese_locale(args, start, end, tmp_path, chinese_locale):
    (tmp_path / "afile").write_text("")
    proc = run_here(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(start) and proc.stderr.endswith(end + "\n"), proc.stderr
    assert proc.stderr.count("\n") == 1 and english_words(proc.stderr, {"nosuch", "afile", "chars"}) == set()  # printable()'s cut
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_the_common_os_reasons_are_chinese(chinese_locale):
    from attnlab.core.errors import OS_REASONS, as_write_error, os_reason

    i18n.set_language()
    assert os_reason(OSError(errno.ENOSPC, "x")) == "磁盘空间已满"
    assert all(english_words(os_reason(OSError(number, "x"))) == set() for number in OS_REASONS)
    assert str(as_write_error(OSError(errno.EROFS, "x"), 57, "metrics.csv")) == "写 metrics.csv 时只读文件系统（第 57 步）"
    assert os_reason(OSError(errno.ENOEXEC, "x")) == os.strerror(errno.ENOEXEC).lower()  # not in the catalog: the OS's

def test_a_sweep_its_page_and_a_run_page_speak_chinese(tmp_path, chinese_locale):
    browser = pytest.importorskip("test_report_browser")
    if why := browser._missing():
        pytest.skip(why)
    sweep = tmp_path / "ex5"
    proc = run_here("experiment=exercise5", f"hydra.sweep.dir={sweep}")  # (the locale: chinese_locale)
    assert proc.returncode == 0, proc.stderr
    summaries = [json.loads(job.read_text(encoding="utf-8")) for job in sweep.glob("*/summary.json")]
    allowed = {word for s in summaries for word in config_words(s["config"]) | config_words(s["versions"])}
    allowed |= {"Esc", "true", "false", "null"}  # a key on the keyboard, YAML's words
    console = proc.stdout + proc.stderr
    assert "练习 5 答：" in console
    assert english_words(console, allowed) == set(), console
    pages = [(sweep, tmp_path / "sweep.html"), (sweep / "1_model.positional=none", tmp_path / "run.html")]
    texts = []
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser.CHROMIUM, args=browser.ARGS)
        for folder, page in pages:
            assert report_command.main([str(folder), "-o", str(page)]) == 0
            tab = b.new_page()
            tab.goto(page.as_uri())
            texts.append(tab.inner_text("body"))
        b.close()
    for text in texts:
        assert english_words(text, allowed) == set(), text


def commands_of(markdown: str) -> set[str]:
    """Every ``attnlab...`` command line of a README's code (fenced blocks and inline), comments dropped."""
    code = re.findall(r"```[a-z]*\n(.*?)```", markdown, re.S) + re.findall(r"`(attnlab[^`]*)`", markdown)
    lines = {line.split("  #")[0].split(" # ")[0].strip() for block in code for line in block.splitlines()}
    return {" ".join(shlex.split(line, posix=False)) for line in lines if re.match(r"attnlab(-\w+)?( |$)", line)}


def test_readme_zh_has_every_command_of_readme():
    en, zh = ((ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "README.zh-CN.md"))
    assert commands_of(en) - commands_of(zh) == set()
    assert commands_of(zh) - commands_of(en) == set()


@pytest.mark.skipif(os.name != "posix", reason="LANG is how a POSIX shell sets the locale")
def test_attnlab_check_and_reproduce_take_lang(tmp_path, capsys, chinese_locale, monkeypatch):
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert check.main(["--lang", "zh", "--template", str(tmp_path / "mine.py")]) == 0
    assert re.search(r"[\u4e00-\u9fff]", capsys.readouterr().out)
    assert reproduce.main(["--lang", "zh", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("错误")


def test_reproduce_speaks_the_locale_not_the_runs_recorded_language(default_run, tmp_path, chinese_locale, capsys):
    """The run was made in English (lang=en recorded); a teacher in a Chinese locale reads Chinese."""
    assert json.loads((default_run / "summary.json").read_text(encoding="utf-8"))["config"]["lang"] == "en"
    assert reproduce.main([str(default_run), "--out", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"[\u4e00-\u9fff]", out.splitlines()[0]) and english_words(out) == set(), out


def test_the_processes_a_command_starts_speak_its_language(monkeypatch):
    """attnlab-check's child (spawn, as on Windows) and attnlab-reproduce's kernel workers say their lines in
    the command's language (--lang zh), not the locale's (LANG=en_US)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from attnlab.commands import learner

    monkeypatch.setenv("LANG", "en_US.UTF-8")
    i18n.set_language("zh")
    try:
        [loading] = learner.run_stages("def embed_tokens(:\n", "mine.py", [], method="spawn")
        assert loading.error == "mine.py 第 1 行: SyntaxError: invalid syntax"
        with ProcessPoolExecutor(1, multiprocessing.get_context("spawn"), initializer=reproduce._use_kernels,
                                 initargs=("", i18n.language())) as workers:
            assert workers.submit(i18n._, "reproduced exactly").result() == "完全复现"
    finally:
        i18n.set_language("en")
