"""Adam, AdamW, SGD (:func:`build`); the fast path buys ~1 s of CPU per run and ~17 % per step (docs/benchmarks.md).
It calls torch's own ``adam`` / ``sgd`` with the state torch.optim's classes make, bit for bit (tests/test_optim.py)."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Iterable

import torch

# the keywords of torch's update functions this module calls them with (fast_path_ok)
_ADAM_KEYS = {"params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps", "foreach",
              "capturable", "differentiable", "fused", "grad_scale", "found_inf", "has_complex",
              "decoupled_weight_decay", "amsgrad", "beta1", "beta2", "lr", "weight_decay", "eps", "maximize"}
_SGD_KEYS = {"params", "d_p_list", "momentum_buffer_list", "has_sparse_grad", "foreach", "fused", "grad_scale",
             "found_inf", "weight_decay", "momentum", "lr", "dampening", "nesterov", "maximize"}


@functools.lru_cache(maxsize=None)
def fast_path_ok() -> bool:
    """True when this torch's ``adam`` and ``sgd`` take exactly these keywords (else the torch.optim classes)."""
    try:
        from torch.optim.adam import adam
        from torch.optim.sgd import sgd
        return (set(inspect.signature(adam).parameters) == _ADAM_KEYS
                and set(inspect.signature(sgd).parameters) == _SGD_KEYS)
    except (ImportError, ValueError, TypeError):
        return False


class _Direct:
    """One parameter group, its per-parameter ``state`` made at a parameter's first gradient."""

    def __init__(self, params: Iterable[torch.nn.Parameter], **hyper: Any) -> None:
        self.params, self.hyper = list(params), hyper
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class Adam(_Direct):
    """``torch.optim.Adam(params, lr, betas, eps, weight_decay)``; ``decoupled_weight_decay=True``: AdamW."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False) -> None:
        super().__init__(params, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.adam import adam

        params = [p for p in self.params if p.grad is not None]
        for p in params:  # Adam._init_group's lazy state (not fused, not capturable)
            if p not in self.state:
                step_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
                self.state[p] = {"step": torch.tensor(0.0, dtype=step_dtype),
                                 "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                 "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        s = [self.state[p] for p in params]
        adam(params=params, grads=[p.grad for p in params], exp_avgs=[x["exp_avg"] for x in s],
             exp_avg_sqs=[x["exp_avg_sq"] for x in s], max_exp_avg_sqs=[], state_steps=[x["step"] for x in s],
             foreach=None, capturable=False, differentiable=False, fused=None, grad_scale=None, found_inf=None,
             has_complex=any(torch.is_complex(p) for p in params), amsgrad=False, maximize=False, **self.hyper)


class SGD(_Direct):
    """``torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)``."""

    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov)

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.sgd import sgd

        params = [p for p in self.params if p.grad is not None]
        momentum = self.hyper["momentum"] != 0
        buffers = [self.state.get(p, {}).get("momentum_buffer") for p in params] if momentum else []
        sgd(params=params, d_p_list=[p.grad for p in params], momentum_buffer_list=buffers, has_sparse_grad=False,
            foreach=None, fused=None, grad_scale=None, found_inf=None, maximize=False, **self.hyper)
        for p, buffer in zip(params, buffers):  # sgd() filled the new buffers in
            self.state.setdefault(p, {})["momentum_buffer"] = buffer


def build(name: str, params: Iterable[torch.nn.Parameter], fast: bool | None = None, **kwargs: Any):
    """The optimizer ``name`` ("Adam", "AdamW" or "SGD") over ``params`` with torch.optim's keyword
    arguments. ``fast=None``: the direct update when :func:`fast_path_ok`, else the torch.optim
    class; ``fast=False`` forces the class. Raises KeyError for another name."""
    cls = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW, "SGD": torch.optim.SGD}[name]
    if not (fast_path_ok() if fast is None else fast):
        return cls(params, **kwargs)
    if name == "SGD":
        return SGD(params, **kwargs)
    if name == "AdamW":
        kwargs.setdefault("weight_decay", 0.01)  # torch.optim.AdamW's default, not Adam's 0
    return Adam(params, decoupled_weight_decay=name == "AdamW", **kwargs)

