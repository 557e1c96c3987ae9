"""The rule for the output projection W_out (``model.out_proj``), without torch: shared by the
model (:mod:`attnlab.core.model`) and the config checks (:mod:`attnlab.core.checks`), which answer a bad
value before torch is imported."""
from __future__ import annotations

from attnlab.core.errors import ConfigError


def resolve_out_proj(out_proj: bool | str, n_heads: int, d_v: int, d_model: int, *, z_in_d_model: bool) -> bool:
    """Whether the attention gets an output projection W_out (H·d_v → d_model).

    ``z_in_d_model``: something downstream needs Z in d_model columns (§5 training: the MSE
    compares Z with X, the next-token head reads d_model); the walkthrough (§4) does not, its Z
    is the context vectors (T, d_v).

    - ``"auto"``: W_out when H > 1 (it mixes the heads, Vaswani et al. 2017 §3.2.2), or when
      ``z_in_d_model`` and H·d_v ≠ d_model (it brings Z back to d_model). So the tutorial's
      configurations (H = 1, and d_v = d_model in §5) get none.
    - ``True``: always; ``False``: never, and then raises ConfigError("out_proj", False, ...)
      when ``z_in_d_model`` and H·d_v ≠ d_model.

    Raises ConfigError("out_proj", value, ...) for any other value.
    """
    mismatch = z_in_d_model and n_heads * d_v != d_model
    if out_proj == "auto":
        return n_heads > 1 or mismatch
    if not isinstance(out_proj, bool):
        raise ConfigError("out_proj", out_proj, "must be auto, true or false")
    if not out_proj and mismatch:
        raise ConfigError("out_proj", out_proj,
                          f"Z has n_heads·d_v = {n_heads}·{d_v} = {n_heads * d_v} columns but the loss needs "
                          f"d_model = {d_model}; use out_proj=auto or true (a W_out brings Z to d_model), "
                          f"or make n_heads·d_v = d_model")
    return out_proj
