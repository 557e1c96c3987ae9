"""``attnlab-check FILE.py``: a learner's own tutorial §2–4, stage by stage, against the tutorial's numbers
(``experiment=tutorial_walkthrough``: seed 123, std 0.02); ``--template FILE.py`` writes the six functions
(:mod:`attnlab.commands.check_template`). Each stage gets the reference inputs (fresh copies), so a mistake
shows at its own stage: expected vs got, the typical mistake it equals. FILE.py runs in a child process
(:mod:`attnlab.commands.learner`). Exit status 0 every stage matches, 1 a stage differs, 2 FILE cannot be
loaded (or ``--template``'s FILE exists).
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TextIO

import numpy as np

from attnlab.commands import learner
from attnlab.commands.arguments import HelperParser, console_script, speak
from attnlab.core.errors import AttnlabError
from attnlab.core.files import RunFileError, read_own_file
from attnlab.core.i18n import N_, _
from attnlab.outputs import destination

EXIT_PASSED, EXIT_DIFFERS, EXIT_NOT_LOADED = 0, 1, 2
TEMPLATE = Path(__file__).with_name("check_template.py")
TOLERANCE = 1e-5  # of the reference's largest |value|: float32 reorderings differ by ~1e-7, the mistakes by > 1e-4


@dataclass
class Stage:
    """One function of the learner's: called as ``function(*inputs())``; ``outputs`` are (name,
    reference, [(likely mistake, the array that mistake gives)]), one per returned array."""

    function: str
    title: str
    inputs: Callable[[], tuple]
    outputs: list[tuple[str, Any, list[tuple[str, Any]]]]  # the tensors: torch.Tensor


@functools.cache
def reference() -> tuple[dict[str, np.ndarray], Any]:
    """The tutorial's §1–4 arrays (:func:`attnlab.core.walkthrough.walkthrough`) and its model (nn.Module)."""
    from attnlab.commands.api import compose  # torch and Hydra: not for --help
    from attnlab.core.checks import validated_tokens
    from attnlab.core.training import build_model
    from attnlab.core.walkthrough import walkthrough

    cfg = compose("experiment=tutorial_walkthrough")
    tokens = validated_tokens(cfg)
    return walkthrough(cfg, print_line=lambda line: None, tokens=tokens), build_model(cfg, tokens, order="walkthrough")


def stages() -> list[Stage]:
    """The six stages of tutorial §2–4, with their typical mistakes computed from the reference inputs."""
    import torch

    ref, model = reference()
    t = {k: torch.from_numpy(v) for k, v in ref.items()}
    emb, att = model.embedding, model.attention
    table, positions = emb.token_embedding.weight.detach(), emb.position_embedding.weight.detach()
    tok, Q, K, V, S, W = t["token_embeddings"], t["Q"], t["K"], t["V"], t["scores"], t["weights"]
    seq_len, d_model, d_k = tok.shape[0], tok.shape[1], K.shape[-1]
    raw = Q @ K.T  # (seq_len, seq_len), not scaled
    layers = {"W_query": att.W_query, "W_key": att.W_key, "W_value": att.W_value}
    fresh = lambda *xs: tuple(copy.deepcopy(x) for x in xs)  # noqa: E731  a learner may change its inputs in place
    qkv = [(n, t[n], [(_("{wrong} instead of {name}: {name} = {layer}(X)").format(wrong=m, name=n, layer=w), t[m])
                      for m in "QKV" if m != n]) for n, w in zip("QKV", layers)]
    return [
        Stage("embed_tokens", _("§2 token embedding"), lambda: (ref["token_ids"].tolist(), *fresh(emb.token_embedding)),
              [("token_embeddings", tok, [
                  (_("the first seq_len rows of the table, not the rows of token_ids"), table[:seq_len]),
                  (_("the whole table, not the rows of token_ids"), table)])]),
        Stage("add_positions", _("§3 positional embedding"), lambda: fresh(tok, emb.position_embedding),
              [("X", t["X"], [
                  (_("positions not added: X = token_embeddings + pos_emb_layer(torch.arange(seq_len))"), tok),
                  (_("only the position embeddings: the token embeddings are not added"), positions[:seq_len]),
                  (_("the positions concatenated, not added"), torch.cat([tok, positions[:seq_len]], -1))])]),
        Stage("project_qkv", _("§4.1 Q, K, V"), lambda: fresh(t["X"], *layers.values()), qkv),
        Stage("attention_scores", _("§4.2 scaled attention scores"), lambda: fresh(Q, K),
              [("attn_scores_scaled", S, [
                  (_("not scaled by √d_k: divide Q @ K.T by d_k ** 0.5"), raw),
                  (_("divided by d_k, not by √d_k"), raw / d_k),
                  (_("divided by √{n} (d_model or seq_len), not by √d_k = √{d_k}").format(n=d_model, d_k=d_k),
                   raw / d_model ** 0.5),
                  (_("multiplied by √d_k, not divided"), raw * d_k ** 0.5),
                  (_("softmax already applied: this stage returns the scores, §4.3 makes them weights"),
                   torch.softmax(S, -1)),
                  (_("K @ Q.T, not Q @ K.T (the scores transposed)"), S.T)])]),
        Stage("attention_weights", _("§4.3 softmax: attention weights"), lambda: fresh(S),
              [("attn_weights", W, [
                  (_("softmax over the wrong axis (dim=0: each column sums to 1); use dim=-1, each row"),
                   torch.softmax(S, 0)),
                  (_("no softmax: the scores returned as they are"), S),
                  (_("scaled by √d_k again: the scores come in scaled already"), torch.softmax(S / d_k ** 0.5, -1)),
                  (_("exp(scores) not divided by each row's sum"), S.exp())])]),
        Stage("context_vectors", _("§4.4 context vectors Z"), lambda: fresh(W, V),
              [("Z", t["Z"], [
                  (_("the weights transposed: attn_weights.T @ V"), W.T @ V),
                  (_("V returned, not weighted by attn_weights"), V),
                  (_("a plain average of V's rows (every weight 1/seq_len)"), V.mean(0).expand_as(V))])]),
    ]


def close(got: np.ndarray, want: Any) -> bool:
    """``got`` has ``want``'s shape and is within :data:`TOLERANCE` of its largest |value| (NaN never is)."""
    want = np.asarray(want, dtype=np.float64)
    scale = max(np.abs(want).max(initial=0), 1e-30)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= TOLERANCE * scale))


def few(a: np.ndarray) -> str:
    """Shape and the first (up to) 6 values, e.g. ``(6, 6) [0.166687 0.166618 ...]``."""
    return f"{tuple(a.shape)} [{' '.join(f'{v:.6g}' for v in a.reshape(-1)[:6])}{' ...' if a.size > 6 else ''}]"


def stage_problem(stage: Stage, values: list[np.ndarray]) -> list[str]:
    """[] when the arrays a stage returned (``values``, one per output) are the tutorial's, else why not, as
    lines: a float dtype, the shape, the values (expected vs got, the largest difference, the likely mistake)."""
    for (name, want, mistakes), got in zip(stage.outputs, values):
        if got.dtype.kind != "f":
            return [_("  {name}: {fn}() returned {dtype} values; {name} holds real numbers (torch.float32)").format(
                name=name, fn=stage.function, dtype=got.dtype)]
        got, want = got.astype(np.float64), np.asarray(want, dtype=np.float64)
        if close(got, want):
            continue
        lines = [_("  {name}: expected {values}").format(name=name, values=few(want)),
                 _("  {pad}  got      {values}").format(pad=" " * len(name), values=few(got))]
        if got.shape == want.shape:
            i = np.unravel_index(np.nanargmax(np.where(np.isnan(got), np.inf, np.abs(got - want))), want.shape)
            lines.append(_("  largest difference at {index}: expected {want:.6g}, got {got:.6g}").format(
                index=list(map(int, i)), want=want[i], got=got[i]))
        candidates = [*mistakes, (_("transposed: rows and columns swapped"), want.T)] if want.ndim == 2 else mistakes
        likely = next((text for text, wrong in candidates if close(got, wrong)), None)
        return [*lines, _("  likely mistake: {mistake}").format(mistake=likely) if likely else
                _("  likely mistake: none of the usual ones; compare your code with the tutorial's lines")]
    return []


def specs(all_stages: list[Stage]) -> list[tuple[str, tuple, list[str]]]:
    """What :mod:`attnlab.commands.learner` runs: each stage's function name, fresh inputs, output names."""
    return [(s.function, s.inputs(), [name for name, _want, _m in s.outputs]) for s in all_stages]


def check_source(source: str, filename: str, *, time_limit: float = learner.TIME_LIMIT,
                 memory_limit: int | None = learner.MEMORY_LIMIT, out: TextIO | None = None,
                 err: TextIO | None = None) -> int:
    """The exit status of the learner's ``source`` checked in a child process (:func:`learner.run_stages`:
    ``time_limit`` s to load and per stage, ``memory_limit`` bytes more); the lines to ``out``, ``err``."""
    all_stages = stages()
    with contextlib.closing(learner.run_stages(source, filename, specs(all_stages), time_limit=time_limit,
                                               memory_limit=memory_limit)) as outcomes:
        if (loading := next(outcomes)).error is not None:
            print(_("attnlab-check: error: {message}").format(message=loading.error), file=err or sys.stderr)
            return EXIT_NOT_LOADED
        return report(outcomes, all_stages, out)


# an error a learner's code raised, and what it usually means (tutorial §2's 新手常见报错 first)
HINTS = [(re.compile(r"'indices'.*(Long|Int).*but got \S*(Float|Double|Half)"),
          N_("likely mistake: token ids as floats; Embedding uses each id as a row number, which must be an "
             "integer: torch.tensor(token_ids) (int64), not dtype=torch.float (tutorial §2, 新手常见报错)")),
         (re.compile(r"shapes cannot be multiplied \((\d+)x(\d+) and \1x\2\)"),
          N_("likely mistake: Q @ K multiplies two (seq_len, d_k) matrices; the scores are Q @ K.T, K transposed "
             "to (d_k, seq_len) (tutorial §4.2)"))]


def report(outcomes: Iterator[learner.Outcome], all_stages: list[Stage], out: TextIO | None = None) -> int:
    """Each stage's line (passed, or differs and why) to ``out``, up to the first that differs; the exit status."""
    out = out or sys.stdout
    for number, (stage, outcome) in enumerate(zip(all_stages, outcomes), 1):
        head = _("stage {n}/{total} {title}, {fn}()").format(n=number, total=len(all_stages), title=stage.title,
                                                               fn=stage.function)
        error = outcome.error
        problem = (["  " + error, *("  " + _(said) for pattern, said in HINTS if pattern.search(error))]
                   if error is not None else stage_problem(stage, outcome.values))
        if problem:
            print(_("{stage}: differs").format(stage=head), *problem, sep="\n", file=out)
            print(_("fix this stage and run attnlab-check again: the stages after it are checked once it passes"),
                  file=out)
            return EXIT_DIFFERS
        print(_("{stage}: passed").format(stage=head), file=out)
    print(_("all {n} stages match the tutorial's numbers").format(n=len(all_stages)), file=out)
    return EXIT_PASSED


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status of ``attnlab-check ARGV`` (module docstring)."""
    argv = speak(argv)
    parser = HelperParser("attnlab-check", _(
        "Check your own code for the tutorial's §2–4 (embedding, positions, Q/K/V, scaled scores, softmax, Z) "
        "against the tutorial's numbers, stage by stage: the first stage that differs, expected vs got, the "
        "likely mistake. It imports and runs FILE.py, your own code, as pytest would: run it on files you "
        "trust. Teachers verify students' run dirs with attnlab-reproduce, never their code."))
    parser.add_argument("file", metavar="FILE.py", type=Path, help=_("your file (start with --template)"))
    parser.add_argument("--template", action="store_true",
                        help=_("write the six functions to fill in to FILE.py (never over an existing file)"))
    args = parser.parse_args(argv)
    if args.template:
        try:  # a new regular file only: never over the learner's code, a link or a device
            destination.write(args.file, TEMPLATE.read_bytes(), key="--template", kind=None)
        except AttnlabError as err:
            print(_("attnlab-check: error: {message}").format(message=err), file=sys.stderr)
            return EXIT_NOT_LOADED
        print(_("wrote {file}: fill in the six functions, then run attnlab-check {file}").format(file=args.file))
        return EXIT_PASSED
    try:
        source = read_own_file(args.file)
    except RunFileError as err:
        missing = not os.path.lexists(args.file)
        print(_("attnlab-check: error: {file} cannot be loaded: {reason}").format(
            file=args.file, reason="FileNotFoundError: " + _("no such file") if missing else err.reason),
            file=sys.stderr)
        return EXIT_NOT_LOADED
    try:
        return check_source(source, str(args.file))
    except KeyboardInterrupt:  # Ctrl-C: the learner's process ends with the check
        print(_("attnlab-check: interrupted"), file=sys.stderr)
        return 130


cli = console_script(main)
