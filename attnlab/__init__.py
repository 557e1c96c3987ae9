"""attnlab: learn how self-attention works by running it. In a notebook (or any Python)::

    import attnlab
    run = attnlab.train(lang="zh")       # tutorial §5: its five lines, then the figure and the report page
    attnlab.exercise(4)                  # §8's exercise 4: its sweep, its table
    attnlab.check(globals())             # your own §2–4, stage by stage

:mod:`attnlab.commands.api` documents the functions. They are imported at their first use (PEP 562): torch
and Hydra take a few seconds, ``import attnlab`` does not.
"""

__version__ = "0.1.0"

_API = ("compose", "train", "walkthrough", "sweep", "exercise", "check", "use_chinese_font", "Run", "SweepTable")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    from attnlab.commands import api

    globals()[name] = getattr(api, name)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
