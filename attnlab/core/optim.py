"""The shipped optimizers (Adam, AdamW, SGD) as torch's own update functions, without the
``torch.optim`` classes around them.

Why: building any ``torch.optim.Optimizer`` imports ``torch._dynamo``, torch's compiler stack
(its ``add_param_group``, ``zero_grad`` and ``step`` are wrapped to disable dynamo, and the
wrapper imports it). On the 2-core machines of docs/benchmarks.md that import took 2.3 s of a
4.6-s tutorial run (201 steps: 2.0–2.5 s without it), for a compiler the toy training never
uses. The updates here are the functions the classes' ``step()`` calls —
``torch.optim.adam.adam`` (Adam; AdamW with ``decoupled_weight_decay``) and
``torch.optim.sgd.sgd`` — given the state the classes create (same tensors, dtypes and order)
and the same arguments, so every parameter is bit-for-bit what the class would give
(tests/test_optim.py steps both side by side and compares every tensor).

Only what attnlab's training uses is here: one parameter group, ``zero_grad()`` setting
gradients to None (the classes' default) and ``step()`` without a closure.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch.optim.adam import adam as adam_update
from torch.optim.sgd import sgd as sgd_update


def _scalar_dtype() -> torch.dtype:
    """The dtype of Adam's ``step`` counter: torch.optim.optimizer._get_scalar_dtype (not fused)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


class _Optimizer:
    """One parameter group: ``params`` in order, per-parameter ``state`` created at the first
    step a parameter has a gradient (as torch.optim does)."""

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
        self.params = list(params)
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        """Gradients to None (``torch.optim.Optimizer.zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    def _with_grad(self) -> list[torch.nn.Parameter]:
        for p in self.params:
            if p.grad is not None and p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
        return [p for p in self.params if p.grad is not None]


class Adam(_Optimizer):
    """``torch.optim.Adam(params, lr, betas, eps, weight_decay)``; with
    ``decoupled_weight_decay=True`` it is ``torch.optim.AdamW`` (Kingma & Ba 2015, Algorithm 1;
    Loshchilov & Hutter 2019 for the decoupled decay). Arguments are checked beforehand
    (:func:`attnlab.core.checks.resources`), not here."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled_weight_decay: bool = False) -> None:
        super().__init__(params)
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay, self.decoupled_weight_decay = weight_decay, decoupled_weight_decay

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (Adam.step / Adam._init_group)."""
        params = self._with_grad()
        for p in params:
            if p not in self.state:
                self.state[p] = {
                    "step": torch.tensor(0.0, dtype=_scalar_dtype(), device="cpu"),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        states = [self.state[p] for p in params]
        adam_update(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                    [s["exp_avg_sq"] for s in states], [], [s["step"] for s in states],
                    foreach=None, capturable=False, differentiable=False, fused=None, grad_scale=None,
                    found_inf=None, has_complex=any(torch.is_complex(p) for p in params),
                    decoupled_weight_decay=self.decoupled_weight_decay, amsgrad=False,
                    beta1=self.betas[0], beta2=self.betas[1], lr=self.lr, weight_decay=self.weight_decay,
                    eps=self.eps, maximize=False)


class SGD(_Optimizer):
    """``torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)`` (momentum as
    in Sutskever et al. 2013, torch's formulation)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params)
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (SGD.step / SGD._init_group)."""
        params = self._with_grad()
        buffers = [self.state.get(p, {}).get("momentum_buffer") for p in params] if self.momentum != 0 else []
        sgd_update(params, [p.grad for p in params], buffers, has_sparse_grad=False, foreach=None, fused=None,
                   grad_scale=None, found_inf=None, weight_decay=self.weight_decay, momentum=self.momentum,
                   lr=self.lr, dampening=self.dampening, nesterov=self.nesterov, maximize=False)
        if self.momentum != 0:
            for p, buffer in zip(params, buffers, strict=True):
                self.state.setdefault(p, {})["momentum_buffer"] = buffer


OPTIMIZERS = {"Adam": Adam, "AdamW": Adam, "SGD": SGD}
