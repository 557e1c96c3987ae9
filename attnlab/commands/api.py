"""The Python API that ``import attnlab`` offers, e.g. ``attnlab.train("model.d_model=16", optimizer__lr=0.01)``.

Overrides are the command line's ``key=value`` strings, or keywords with ``__`` for the dot; Python values
become Hydra's (``True`` true, ``None`` null, a list ``[a,b]``); a free-text key takes its text as typed.
``lang=`` is the session's language from then on. Nothing is written unless asked (:meth:`Run.save`,
:meth:`Run.report`, :func:`sweep`'s ``dir=``). Errors: :class:`AttnlabError` with the command's one line.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from attnlab.commands.argv import FREE_TEXT_KEYS, language, prepare, refusal
from attnlab.commands.cli import error_line
from attnlab.commands.config_folder import combinations
from attnlab.commands.display import Run, SweepTable
from attnlab.commands.hydra_config import VERSION_BASE, register_configs
from attnlab.commands.job import run_job
from attnlab.commands.learner import stage_outcomes
from attnlab.commands.sweep import job_dirname
from attnlab.core import checks, i18n, training
from attnlab.core.config import apply_schema, plain
from attnlab.core.errors import AttnlabError
from attnlab.core.exercises import observe
from attnlab.core.focus import FocusSink
from attnlab.core.i18n import LANGUAGES, _
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot
from attnlab.core.walkthrough import walkthrough as narrate
from attnlab.outputs import rundir
from attnlab.outputs.console import ConsoleSink
from attnlab.outputs.fonts import cjk_font
from attnlab.saved.report import write_sweep_report
from attnlab.saved.runs import collect_rows
from attnlab.saved.table import write_csv

__all__ = ["compose", "train", "walkthrough", "sweep", "exercise", "check", "use_chinese_font", "Run", "SweepTable",
           "RunResult", "Snapshot"]

# id(cfg) -> (the cfg, its preset's hydra.sweeper.params as key -> values text, the overrides it was composed with)
_sweeps: dict[int, tuple[weakref.ref, dict[str, str], tuple[str, ...]]] = {}


def sweep_of(cfg: Any) -> tuple[dict[str, str], tuple[str, ...]] | None:
    """(params, overrides) of the sweep the preset ``cfg`` was composed from describes, or None (one run)."""
    held = _sweeps.get(id(cfg))
    return held[1:] if held is not None and held[0]() is cfg else None


def _hydra_value(value: Any) -> str:
    """A Python value as the text of an override's value."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_hydra_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def overrides_of(overrides: Iterable[Any], options: dict[str, Any]) -> list[str]:
    """``key=value`` strings of ``overrides`` and keyword ``options`` (``model__d_model=16``); AttnlabError: refused."""
    if (bad := next((arg for arg in overrides if not isinstance(arg, str)), None)) is not None:
        raise AttnlabError(_("{arg!r}: an override is a string 'key=value' (or a keyword argument key=value)")
                           .format(arg=bad))
    keys = {key: key.replace("__", ".") for key in options}
    typed = [*overrides, *(f"{keys[k]}={v if keys[k] in FREE_TEXT_KEYS and isinstance(v, str) else _hydra_value(v)}"
                           for k, v in options.items())]
    if (refused := refusal(typed)) is not None:
        raise _one_line(refused)
    return typed


def _one_line(line: str) -> AttnlabError:
    """The command's error line without its ``error:`` prefix, as an AttnlabError."""
    return AttnlabError(line.removeprefix("error: ").removeprefix(_("error: {message}").format(message="")))


def compose(*overrides: str, config_name: str = "config", **options: Any) -> DictConfig:
    """The config that ``attnlab OVERRIDES`` would run; a preset that describes a sweep (``experiment=exercise4``)
    is remembered as one (:func:`sweep` runs it, :func:`train` refuses it)."""
    typed = overrides_of(overrides, options)
    return _compose(typed, prepare(typed), config_name)


def _compose(typed: list[str], given: list[str], config_name: str = "config") -> DictConfig:
    """:func:`compose` of the overrides ``given`` in Hydra's syntax (``typed``: as the user wrote them)."""
    if (lang := language(typed)) is not None:
        i18n.set_language(lang)  # as `attnlab lang=zh` speaks Chinese; then the session's language
    register_configs()
    inside = GlobalHydra.instance().is_initialized()  # e.g. inside a Hydra app or another compose
    try:
        with contextlib.nullcontext() if inside else initialize_config_module("attnlab.conf", **VERSION_BASE):
            session = [] if lang is not None else [f"lang={i18n.language()}"]  # the last lang= given, or the locale's
            cfg = hydra_compose(config_name, overrides=[*session, *given], return_hydra_config=not inside)
    except Exception as err:
        raise _one_line(error_line(err, typed)) from None
    if "hydra" not in cfg:
        return cfg
    hydra = cfg.hydra
    params = OmegaConf.to_container(hydra.sweeper.params, resolve=False) if hydra.sweeper.get("params") else {}
    with open_dict(cfg):
        del cfg["hydra"]  # as Hydra's compose leaves it without return_hydra_config
    if params or str(hydra.get("mode")) == "RunMode.MULTIRUN":
        key = id(cfg)
        _sweeps[key] = (weakref.ref(cfg, lambda _ref: _sweeps.pop(key, None)),
                        {str(k): str(v) for k, v in params.items()}, tuple(typed))
    return cfg


def _config(args: tuple, options: dict[str, Any], what: str) -> DictConfig:
    """The config of ``train(cfg)`` or ``train("key=value", key=value)``, whose ``lang`` speaks from now on; a
    sweep preset refused in one line."""
    if args and isinstance(args[0], DictConfig):
        if len(args) > 1 or options:
            raise AttnlabError(_("{what}(cfg, ...): give either a config (compose(...)) or overrides, not both")
                               .format(what=what))
        cfg = args[0]
    else:
        cfg = compose(*args, **options)
    if (lang := plain(OmegaConf.select(cfg, "lang", default=None))) in LANGUAGES:
        i18n.set_language(lang)  # _() in the config's language from now on (another lang: left as it is)
    if (described := sweep_of(cfg)) is None:
        return cfg
    params, overrides = described
    preset = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("experiment=")), None)
    number = re.fullmatch(r"exercise(\d+)", preset or "")
    how = f"attnlab.exercise({number[1]})" if number else "attnlab.sweep(" + ", ".join(map(repr, overrides)) + ")"
    raise AttnlabError(_("{preset} describes a sweep of {n} jobs ({keys}), not one run: run it with {how} "
                         "(on the command line: attnlab {args})").format(
        preset=f"experiment={preset}" if preset else _("this config"), n=math.prod(map(len, combinations((), params))),
        keys=" × ".join(params), how=how, args=" ".join(overrides)))


class _Start(Sink):
    info: RunInfo | None = None

    def on_start(self, info: RunInfo) -> None:
        self.info = info


def train(*args: Any, sinks: Iterable[Sink] = (), run_dir: Path | None = None, keep_snapshots: bool = True,
          keep_losses: bool = True, **options: Any) -> Run:
    """Tutorial §5 as ``attnlab OVERRIDES`` runs it, in this process, writing nothing: its lines printed, a
    :class:`Run` returned (``losses`` (steps,) float64). ``args``: a config (:func:`compose`) or overrides;
    ``sinks`` get every record too; the caller's torch thread count is kept."""
    cfg = _config(args, options, "train")
    if str(plain(OmegaConf.select(cfg, "task", default="train"))) == "walkthrough":
        raise AttnlabError(_("task=walkthrough: this config narrates §1–4 and trains nothing; "
                             "attnlab.walkthrough(...) runs it"))
    typed = apply_schema(cfg)
    tokens = checks.validated_tokens(typed)  # once: the run and exercise 5's permutation check
    focus, start = FocusSink(), _Start()
    shown = [ConsoleSink(progress=typed.logging.progress, notebook=_in_notebook())] if typed.logging.console else []
    caller = torch.get_num_threads()
    try:
        result = training.train(typed, [*sinks, focus, start, *shown], run_dir=run_dir,
                                keep_snapshots=keep_snapshots, keep_losses=keep_losses, tokens=tokens)
    finally:
        torch.set_num_threads(caller)
    observed = observe(typed, result.token_ids, result.tokens, tokens=tokens) if start.info is not None else {}
    return Run(**vars(result), info=start.info, recorded={**focus.summary(), **observed})


def walkthrough(*args: Any, print_line: Callable[[str], object] = print, **options: Any) -> dict:
    """Tutorial §1–4 narrated through ``print_line`` (default ``experiment=tutorial_walkthrough``); returns
    head 0's arrays (:func:`attnlab.core.walkthrough.walkthrough`). Writes nothing."""
    cfg = _config(args or ("experiment=tutorial_walkthrough",), options, "walkthrough")
    return narrate(cfg, print_line=print_line)


def sweep(*overrides: Any, dir: str | Path | None = None, **options: Any) -> SweepTable:
    """A sweep as ``attnlab -m OVERRIDES`` runs it, job by job: the table it ends with. ``dir``: the sweep folder
    to keep, as the command writes it; None: a temporary folder, no figures, removed at the end."""
    typed = overrides_of(overrides, options)
    prepared = prepare(typed)
    try:
        parsed = OverridesParser.create().parse_overrides(prepared)
    except Exception as err:
        raise _one_line(error_line(err, typed)) from None
    base = compose(*(t for t, o in zip(typed, parsed) if not o.is_sweep_override()))  # a bad one refused here
    described = sweep_of(base)
    params = described[0] if described else {}
    jobs = list(itertools.product(*combinations(prepared, params)))
    if len(jobs) < 2 and described is None:
        raise AttnlabError(_("no sweep: give a preset that describes one (experiment=exercise4) or values "
                             "separated by commas (optimizer.lr=0.005,0.05); attnlab.train runs one job"))
    # job folders named as the command names them: by the keys that vary (sweep.name_by_swept_keys)
    fixed = {o.get_key_element() for o in parsed if not o.is_sweep_override()}
    keep = dir is not None
    extra = [] if keep else ["logging.figures=false", "logging.tensorboard=false", "logging.report=false"]
    with contextlib.ExitStack() as stack:
        top = Path(dir) if keep else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="attnlab-sweep-")))
        if keep:
            rundir.claim(top, key="dir")
            stack.callback(rundir.release, top)
        for num, job in enumerate(jobs):
            print(f"#{num} : {' '.join(job)}", flush=True)  # as Hydra's basic launcher says it
            cfg = _compose([*job, *extra], [*job, *extra])  # in Hydra's syntax already: a\ b is "a b"
            name = job_dirname(num, ",".join(sorted(o for o in job if o.split("=", 1)[0] not in fixed)))
            result = run_job(cfg, top / name, overrides=job, key="dir", show_dir=keep)
            if result.status != "completed":
                print(_("{status}: {error}").format(status=result.status, error=result.error), flush=True)
            if result.status == "interrupted":
                break
        rows = collect_rows([top], sweep_end=True)
        if keep:
            write_csv(rows, top / "summary.csv")
            if base.logging.report:
                write_sweep_report(top)
        return SweepTable(rows, top if keep else None)


def exercise(n: int, *overrides: Any, dir: str | Path | None = None, **options: Any) -> SweepTable:
    """Tutorial §8's exercise ``n`` (1–5): its preset's sweep (:func:`sweep`), whose table answers it."""
    if n not in (1, 2, 3, 4, 5):  # tutorial §8 (conf/experiment/exerciseN.yaml)
        raise AttnlabError(_("exercise {n!r}: the tutorial has exercises 1 to 5").format(n=n))
    return sweep(f"experiment=exercise{n}", *overrides, dir=dir, **options)


def check(*functions: Callable | dict, **named: Callable) -> bool:
    """``attnlab-check`` on tutorial §2–4's six functions defined in notebook cells (or ``globals()``; ``named``:
    under a stage's name), in this process. True when every stage matches."""
    from attnlab.commands import check as checker

    learner: dict[str, Any] = {}
    for given in functions:
        if isinstance(given, dict):
            learner.update({k: v for k, v in given.items() if callable(v)})
        elif callable(given):
            learner[given.__name__] = given
        else:
            raise AttnlabError(_("check({arg!r}): give your functions, or globals()").format(arg=given))
    stages = checker.stages()
    outcomes = stage_outcomes({**learner, **named}, _("your notebook"), checker.specs(stages))
    return checker.report(outcomes, stages) == checker.EXIT_PASSED


def use_chinese_font() -> str:
    """Tutorial §5's SimHei tip, done once: Chinese in your own matplotlib figures. Returns the CJK font's name."""
    import matplotlib

    name = cjk_font()
    matplotlib.rcParams["font.family"] = ["DejaVu Sans", name]  # a list: glyph by glyph, the first that has it
    matplotlib.rcParams["font.sans-serif"] = ["DejaVu Sans", name,
                                              *[f for f in matplotlib.rcParams["font.sans-serif"] if f != name]]
    matplotlib.rcParams["axes.unicode_minus"] = False
    return name


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython imported only when it already is)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and type(shell).__name__ != "TerminalInteractiveShell"
