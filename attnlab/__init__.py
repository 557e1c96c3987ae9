"""attnlab: learn how self-attention works by running it.

In a notebook (or any Python)::

    import attnlab
    run = attnlab.train(lang="zh")       # tutorial §5: its five lines, then the figure and the report page
    attnlab.walkthrough()                # §1–4 printed, their arrays returned
    attnlab.exercise(4)                  # §8's exercise 4: its sweep, its table
    attnlab.check(embed_tokens, ...)     # your own §2–4, stage by stage
    attnlab.use_chinese_font()           # Chinese in your own matplotlib figures

Overrides as on the command line (``attnlab.train("model.d_model=16")``) or as keyword arguments
(``attnlab.train(model__d_model=16, lang="zh")``); :mod:`attnlab.commands.api` documents them. The
functions are imported at their first use (torch and Hydra take a few seconds), not by ``import attnlab``.
"""

__version__ = "0.1.0"

# name -> the module that holds it (imported on first access, PEP 562)
_API = {name: "attnlab.commands.api" for name in
        ("compose", "train", "walkthrough", "sweep", "exercise", "check", "use_chinese_font", "Run", "SweepTable")}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
