"""``attnlab-generate RUN_DIR PROMPT``: a finished GPT run continues PROMPT, each new token printed with its
probability (:mod:`attnlab.saved.trained` reads the run as data). Exit 2, one line, for a bad option or a
run dir that holds no usable model."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from attnlab.commands.arguments import HelperParser, console_script, speak
from attnlab.core import checks
from attnlab.core.errors import AttnlabError
from attnlab.core.i18n import _
from attnlab.outputs.console import generation_lines
from attnlab.saved.safe_read import printable


def main(argv: Sequence[str] | None = None) -> int:
    argv = speak(argv)
    parser = HelperParser("attnlab-generate", _("A finished GPT run continues a prompt."))
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help=_("a finished GPT run (model.n_layers >= 1)"))
    parser.add_argument("prompt", metavar="PROMPT", help=_("the text to continue"))
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help=_("default: the run's analysis.max_new_tokens"))
    parser.add_argument("--temperature", type=float, metavar="T", help=_("0: greedy (default: the run's)"))
    parser.add_argument("--top-k", type=int, metavar="K", help=_("sample among the k most probable tokens"))
    parser.add_argument("--seed", type=int, metavar="S", help=_("the sampling seed (default: the run's seed)"))
    args = parser.parse_args(argv)
    from attnlab.core.generate import continuation  # torch after --help
    from attnlab.saved.trained import load_model

    try:
        model, cfg = load_model(args.run_dir)
        cfg.analysis.prompt = args.prompt
        for key in ("max_new_tokens", "temperature", "top_k"):
            if getattr(args, key) is not None:
                cfg.analysis[key] = getattr(args, key)
        if args.seed is not None:
            cfg.seed = args.seed
        cfg.device = "cpu"
        checks.validate(cfg)
        lines = generation_lines(continuation(model, cfg))
    except (AttnlabError, OSError) as err:
        print(_("{prog}: error: {message}").format(prog="attnlab-generate", message=printable(str(err), 1500)),
              file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


cli = console_script(main)
