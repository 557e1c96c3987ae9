"""A finished GPT run's trained model (model.npz), read as data: ``.hydra/config.yaml`` onto the
schema (nothing resolved or instantiated), model.npz through :class:`attnlab.saved.safe_read.NpzArchive`
(float32/64 members, ``allow_pickle=False``), every shape checked against the config's model."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from attnlab.core import tokenizer
from attnlab.core.config import apply_schema, literal
from attnlab.core.files import RunFileError
from attnlab.core.i18n import _
from attnlab.core.model import GPT
from attnlab.core.training import model_spec
from attnlab.outputs.artifacts import MODEL
from attnlab.saved import safe_read

POSITIONS = "embedding.position_embedding.weight"


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
    with torch.device("meta"):  # one block's names and shapes, no memory, whatever n_layers the config says
        one = {k: tuple(v.shape) for k, v in GPT(dataclasses.replace(spec, n_layers=1), vocab_size,
                                                       2).stacked_state().items()}
    members = {k: safe_read.Member(tuple(f"{k}.{axis}" for axis in range(len(shape))), "f") for k, shape in one.items()}
    with safe_read.NpzArchive(path, members, root=run_dir) as archive:
        context = archive.shapes[POSITIONS][0]
        for name, shape in one.items():  # the config's model, before one byte of it is allocated
            want = ((cfg.model.n_layers, *shape[1:]) if name.startswith("blocks.") else
                    (context, *shape[1:]) if name == POSITIONS else shape)
            if archive.shapes[name] != want:
                raise RunFileError(path, _("weights do not fit the run's config ({name} has shape {got}, the config's "
                                           "model {want})").format(name=name, got=archive.shapes[name], want=want))
        weights = {k: archive.read(k) for k in one}
    if (bad := next((k for k, v in weights.items() if not np.isfinite(v).all()), None)) is not None:
        raise RunFileError(path, _("{name} holds NaN or infinite weights: the run diverged, there is no model to "
                                   "continue a prompt with").format(name=bad))
    model = GPT(spec, vocab_size, context)
    model.load_stacked({k: torch.from_numpy(v).float() for k, v in weights.items()})
    return model.eval(), cfg
