"""Vmapped ensembles: E copies of one network run as a single batched call.

The members' parameters are stacked along a leading ``[E]`` dimension
(``torch.func.stack_module_state``) and evaluated with ``torch.vmap`` over ``functional_call``,
so a 10-critic REDQ ensemble costs one kernel per layer instead of ten, and nothing on the hot
path loops in Python or syncs with the host. Target copies follow the online ensemble with
``torch._foreach_lerp_`` (Polyak averaging in one fused call).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

from robolearn.nn.mlp import MLP


def _key(name: str) -> str:
    # Module attribute names may not contain dots, parameter paths do ("0.weight").
    return name.replace(".", "__")


class VmapEnsemble(nn.Module):
    """E members of one architecture with stacked parameters ``[E, ...]``, evaluated by ``torch.vmap``.

    The parameters live in :attr:`params` (one ``nn.Parameter`` per member parameter path, stacked),
    so optimisers, ``state_dict`` and ``.to()`` treat the ensemble as one ordinary module.
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        """Stack ``members`` (all the same architecture, without buffers) into one ensemble."""
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("VmapEnsemble needs at least one member")
        params, buffers = stack_module_state(members)
        if buffers:
            raise ValueError(f"VmapEnsemble members may not hold buffers, got {sorted(buffers)}")
        self.num_members = len(members)
        self._names = list(params)
        self.params = nn.ParameterDict({_key(n): nn.Parameter(p.detach().clone()) for n, p in params.items()})
        # A weightless template for functional_call; kept out of the module tree so its meta
        # tensors never reach state_dict, .to() or an optimiser.
        self._template: tuple[nn.Module, ...] = (copy.deepcopy(members[0]).to("meta"),)

    def _stacked(self, index: torch.Tensor | None = None, detach: bool = False) -> dict[str, torch.Tensor]:
        out = {}
        for name in self._names:
            p = self.params[_key(name)]
            if index is not None:
                p = p.index_select(0, index)
            out[name] = p.detach() if detach else p
        return out

    def _call(self, params: dict[str, torch.Tensor], x: torch.Tensor, shared_input: bool) -> torch.Tensor:
        template = self._template[0]

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
            return functional_call(template, p, (xi,))

        return torch.vmap(one, in_dims=(0, None if shared_input else 0))(params, x)

    def forward(
        self, x: torch.Tensor, shared_input: bool = True, detach_params: bool = False
    ) -> torch.Tensor:
        """Evaluate every member: ``x[B, ...]`` (or ``x[E, B, ...]`` with ``shared_input=False``) -> ``[E, B, ...]``.

        ``detach_params`` evaluates with the parameters cut from the graph, so a loss that only
        wants gradients through ``x`` (the SAC actor loss) leaves the members' gradients untouched.
        """
        return self._call(self._stacked(detach=detach_params), x, shared_input)

    def forward_subset(
        self, index: torch.Tensor, x: torch.Tensor, detach_params: bool = False
    ) -> torch.Tensor:
        """Evaluate only members ``index[M]`` (a long tensor on the parameters' device) -> ``[M, B, ...]``."""
        return self._call(self._stacked(index, detach=detach_params), x, shared_input=True)

    def member(self, i: int) -> nn.Module:
        """A plain, independent copy of member ``i`` (for export, inspection and tests)."""
        module = copy.deepcopy(self._template[0]).to_empty(device=self._device())
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.copy_(self.params[_key(name)][i])
        return module

    def _device(self) -> torch.device:
        return next(iter(self.params.values())).device

    @torch.no_grad()
    def lerp_(self, source: VmapEnsemble, tau: float) -> None:
        """Polyak update in place: ``self <- (1 - tau) * self + tau * source`` (fused, no host sync)."""
        soft_update_(self, source, tau)


class CriticEnsemble(VmapEnsemble):
    """E state-action value networks ``Q(obs, action)`` in one vmapped call; the SAC/REDQ/CQL critic."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: Sequence[int] = (256, 256),
        layer_norm: bool = False,
        activation: str = "relu",
        num_outputs: int = 1,
    ) -> None:
        """Build ``num_critics`` independently initialised ``MLP(obs_dim + action_dim -> num_outputs)`` members.

        ``num_outputs > 1`` makes each member emit a vector (e.g. HL-Gauss logits over value bins);
        the default of 1 gives scalar Q-values.
        """
        if num_critics < 1:
            raise ValueError(f"num_critics: expected >= 1, got {num_critics}")
        if num_outputs < 1:
            raise ValueError(f"num_outputs: expected >= 1, got {num_outputs}")
        members = [
            MLP(obs_dim + action_dim, num_outputs, hidden, activation, layer_norm) for _ in range(num_critics)
        ]
        super().__init__(members)
        self.obs_dim, self.action_dim, self.num_outputs = obs_dim, action_dim, num_outputs

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        # Scalar critics drop the trailing 1; multi-output critics keep ``[..., num_outputs]``.
        return y.squeeze(-1) if self.num_outputs == 1 else y

    def forward(self, obs: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:  # type: ignore[override]
        """Q-values of every critic, ``[E, B]`` (``[E, B, num_outputs]`` for a multi-output critic)."""
        x = torch.cat([obs, action], dim=-1)
        return self._out(super().forward(x, detach_params=detach_params))

    def forward_subset(  # type: ignore[override]
        self, index: torch.Tensor, obs: torch.Tensor, action: torch.Tensor, detach_params: bool = False
    ) -> torch.Tensor:
        """Q-values of critics ``index[M]`` only, ``[M, B]`` (REDQ's random target subset)."""
        x = torch.cat([obs, action], dim=-1)
        return self._out(super().forward_subset(index, x, detach_params=detach_params))


def soft_update_(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` over matching parameters, in one fused call."""
    tgt = list(target.parameters())
    src = list(source.parameters())
    if len(tgt) != len(src):
        raise ValueError(f"soft_update_: {len(tgt)} target vs {len(src)} source parameters")
    with torch.no_grad():
        torch._foreach_lerp_(tgt, src, tau)


def make_target(module: nn.Module) -> nn.Module:
    """A frozen deep copy of ``module`` to serve as its target network."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


__all__: list[str] = ["CriticEnsemble", "VmapEnsemble", "make_target", "soft_update_"]
