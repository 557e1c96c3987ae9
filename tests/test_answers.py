"""Each exercise's answer (attnlab.saved.answers): computed from its sweep's rows, in en and zh, every
number in it a cell of the table printed above it or a value the sweep set; the one column spec.
The presets' jobs run in-process (as test_exercises expands them), each into its own job folder."""
from __future__ import annotations

import re

import pytest

from attnlab.commands.job import run_job
from attnlab.core import i18n
from attnlab.saved import answers, columns, table
from attnlab.saved.runs import collect_rows

from conftest import compose_cfg, sweep_jobs

NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]\d+)?")


@pytest.fixture(autouse=True)
def english():
    i18n.set_language("en")  # whatever a test before left


@pytest.fixture(scope="module")
def exercise_rows(tmp_path_factory):
    """``{n: rows}`` of each exercise's sweep (exercise 4 with 30 and 60 steps: the same grid, cheaper)."""
    out = {}
    for n in (1, 2, 3, 4, 5):
        sweep = tmp_path_factory.mktemp(f"ex{n}")
        for num, job in enumerate(sweep_jobs(n)):
            job = [o.replace("train.steps=120", "train.steps=60") for o in job]
            cfg = compose_cfg(f"experiment=exercise{n}", *job, "logging=off", "logging.console=false")
            assert run_job(cfg, sweep / f"{num}_{'_'.join(job)}", overrides=[*job, f"experiment=exercise{n}"]
                           ).status == "completed"
        out[n] = collect_rows([sweep])
    return out


@pytest.fixture
def zh(english):
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_number_of_an_answer_is_in_its_table_or_the_sweep(exercise_rows, n):
    rows = exercise_rows[n]
    text = answers.answer(rows)
    assert answers.exercise_of(rows) == n and text.startswith(f"Exercise {n}, answer: ")
    shown = table.format_table(rows, answers.table_columns(rows)) + " ".join(" ".join(r["override_list"]) for r in rows)
    fractions = {f"{1 / r['n_tokens']:.3f}" for r in rows if r.get("n_tokens")}  # exercise 3's 1/T
    pieces = {str(len(answers.PIECE.findall(r["tokens"]))) for r in rows if r.get("tokens")}  # exercise 2's count
    said = numbers(text.split(": ", 1)[1].replace("UTF-8", ""))
    assert said - numbers(shown) - fractions - pieces - {"0.9", "1", "2", "3"} == set()


def test_the_answers_say_what_the_runs_measured(exercise_rows):
    text = {n: answers.answer(exercise_rows[n]) for n in exercise_rows}
    assert "with d_model 6 → 16: X 6x6 → 6x16 change; Q 6x4, K 6x4, V 6x4, weights 6x6, Z 6x4 stay." in text[1]
    assert "'你的旅程从一步开始' is 17 tokens (15 of them pieces of a character)" in text[2]
    assert "你 = 你(1/2) + 你(2/2)" in text[2]
    assert "with init std 0.02 every weight is within 7.10e-05 of 1/6 = 0.167: still uniform" in text[3]
    assert "with init std 1.0 a weight is up to 0.1853 away from 1/6 (' journey' gives ' step' 0.215)" in text[3]
    assert "lr 0.5: loss 1.1658; ' journey' passes 0.9 at step 10 (on ' starts')" in text[4]
    assert text[4].splitlines()[1].startswith("in 60 steps, lr 0.005: loss ")
    assert "In 60 steps the lowest loss is lr 0.05's. The largest lr, 0.5, focuses first" in text[4]
    assert "with model.positional=none the context vectors Z of the two orders are the same rows" in text[5]
    assert "cannot tell 'one step' from 'step one'" in text[5]
    learned = next(r for r in exercise_rows[5] if r["config"]["model"]["positional"] == "learned")
    assert f"differ by up to {table.cell_text('perm_z_max_abs_diff', learned['perm_z_max_abs_diff'])}" in text[5]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_in_chinese_the_answer_and_its_table_have_no_english_sentence(exercise_rows, zh, n):
    rows = exercise_rows[n]
    text = answers.answer(rows)
    assert text.startswith(f"练习 {n} 答：")
    printed = table.format_table(rows, answers.table_columns(rows))
    for line in [text, *printed.splitlines()[:1]]:  # the answer and the headers
        words = re.findall(r"[A-Za-z]{3,}", line)
        allowed = {"positional", "none", "learned", "model", "init", "std", "loss", "weights", "token", "journey",
                   "starts", "Your", "step", "one", "Attention", "all", "you", "need", "One", "small", "time",
                   "emoji", "GPT", "UTF", "job", "key", "softmax", "d_model"}  # keys, values, tokens, the field's terms
        assert set(words) <= allowed, (line, set(words) - allowed)
    assert "完成" in printed and "completed" not in printed


def test_another_sweep_gets_no_answer_and_every_column(exercise_rows):
    rows = [{**r, "override_list": ["model.d_model=6"]} for r in exercise_rows[1]]
    assert answers.answer(rows) is None and answers.table_columns(rows) is None


def test_one_column_spec_names_every_column_once():
    keys = [c.key for c in columns.SPEC]
    assert len(keys) == len(set(keys))
    assert columns.ROW_KEYS[:5] == ["job", "name", "differs", "overrides", "status"]
    assert {c.hide for c in columns.SPEC} <= {"never", "empty", "same", "csv"}
    assert table.columns_of([{"job": "a", "status": "completed"}]) == [*columns.ROW_KEYS, "path"]  # the CSV's
    rows = [{"job": "a", "status": "completed", "n_tokens": 6, "tokens": "x", "path": "p", "steps_run": 3},
            {"job": "b", "status": "failed", "n_tokens": 6, "tokens": "y", "error": "e", "path": "q"}]
    assert table.columns_of(rows, table=True) == ["job", "status", "tokens", "error"]  # same n_tokens: hidden


@pytest.mark.parametrize("positional,claim", [
    ("learned", "X[0] == token_embeddings[0] + pos_embeddings[0]? True"),
    ("none", "no positions: X == token_embeddings? True")])
def test_the_walkthrough_claims_what_holds_for_its_positions(positional, claim):
    from attnlab.core.walkthrough import walkthrough

    lines: list[str] = []
    arrays = walkthrough(compose_cfg("experiment=tutorial_walkthrough", f"model.positional={positional}"),
                         print_line=lines.append)
    assert claim in lines and sum("X[0]" in line or "X ==" in line for line in lines) == 1
    with_positions = arrays["token_embeddings"] + arrays["pos_embeddings"]
    assert (arrays["X"] == (with_positions if positional == "learned" else arrays["token_embeddings"])).all()


def test_the_sweep_page_shows_the_same_answer(exercise_rows, tmp_path):
    from report_helpers import page_data

    from attnlab.saved import report
    from attnlab.saved.report_data import collect_records

    rows = exercise_rows[5]
    folder = {r["root"] for r in rows}.pop()
    data = page_data(report.write_page(collect_records([folder]), tmp_path / "page.html"))
    assert data["answer"] == answers.answer(rows)


def test_exercise4_curves_get_a_colour_per_lr_and_a_line_style_per_steps(exercise_rows):
    from attnlab.saved.swept import run_styles

    rows = exercise_rows[4]
    styles = run_styles(rows)
    pairs = [(r["config"]["optimizer"]["lr"], r["config"]["train"]["steps"], s["color"], s["linestyle"])
             for r, s in zip(rows, styles)]
    assert len({(c, ls) for *_, c, ls in pairs}) == 6  # six curves, six styles: none hides another
    assert all(len({c for lr, _, c, _ in pairs if lr == x}) == 1 for x, *_ in pairs)  # one colour per lr
    assert all(len({ls for _, st, _, ls in pairs if st == y}) == 1 for _, y, *_ in pairs)  # one line style per steps
    assert run_styles(exercise_rows[1]) is None  # one swept key: a style per run
