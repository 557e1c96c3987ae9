"""A finished GPT run's trained model (model.npz), read as data: ``.hydra/config.yaml`` onto the
schema (nothing resolved or instantiated), model.npz through :mod:`attnlab.saved.npz`'s checks
(float32/64 members, ``allow_pickle=False``), every shape checked against the config's model."""
from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from attnlab.core import tokenizer
from attnlab.core.config import apply_schema, literal
from attnlab.core.files import RunFileError
from attnlab.core.i18n import _
from attnlab.core.model import GPT, build_gpt
from attnlab.core.training import model_spec
from attnlab.saved import npz, safe_read

MODEL = "model.npz"


def load_model(run_dir: Path) -> tuple[GPT, DictConfig]:
    """(the GPT with its trained weights, in eval mode; the run's config). RunFileError naming the
    file for a run that is not a GPT's, a damaged archive, or weights that do not fit the config."""
    run_dir = Path(run_dir)
    cfg = apply_schema(literal(safe_read.read_config(run_dir, resolve=False)))
    path = run_dir / MODEL
    if not cfg.model.n_layers:
        raise RunFileError(path, _("the tutorial's one layer (model.n_layers=0): only GPT runs save weights"))
    spec = model_spec(cfg)
    vocab_size = max(tokenizer.GPT2_VOCAB_SIZE, tokenizer.get_encoding(cfg.tokenizer.encoding).n_vocab)
    with torch.device("meta"):  # the names and ranks, no memory
        names = {k: v.ndim for k, v in build_gpt(spec, vocab_size, 2).stacked_state().items()}
    members = {k: npz.Member(tuple(f"{k}.{axis}" for axis in range(ndim)), "f") for k, ndim in names.items()}
    with npz.NpzArchive(path, members, root=run_dir) as archive:
        context = archive.infos["embedding.position_embedding.weight"].shape[0]
        model = build_gpt(spec, vocab_size, context)
        try:
            model.load_stacked({k: torch.from_numpy(archive.read(k)).float() for k in names})
        except RuntimeError as err:  # a shape the config's model does not have
            raise RunFileError(path, _("weights do not fit the run's config ({reason})").format(
                reason=str(err).splitlines()[-1].strip()))
    return model.eval(), cfg
