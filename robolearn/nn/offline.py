"""Building blocks the offline learners share (BC, TD3+BC, IQL, CQL, Cal-QL), kept in ``nn`` so
that no algorithm imports another:

* :class:`DeterministicActor`: a tanh-squashed MLP policy (BC, TD3+BC, IQL's deterministic option).
* :class:`ObsNormalization`: fixed per-group dataset statistics, applied inside acting and the
  losses, and *folded* into the first layer of each network when a checkpoint is written, so the
  checkpoint's ``actor``/``critic`` entries are networks of raw observations (what SAC, export and
  evaluation expect) while training keeps the exact normalised weights alongside.
* :func:`q_from_output` / :func:`regression_loss`: one code path for scalar and HL-Gauss critics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from robolearn.nn.hlgauss import HLGauss
from robolearn.nn.mlp import MLP
from robolearn.types import Batch

FIRST_LAYER: dict[str, str] = {
    "actor": "net.0.",
    "critic": "params.0__",
    "value": "0.",
}
"""State-dict prefix of the first linear layer by network kind: ``TanhGaussianActor`` and
:class:`DeterministicActor` keep their trunk in ``net``, ``CriticEnsemble`` stacks ``0.weight`` as
``params.0__weight``, a bare ``MLP`` value network starts at ``0``."""


def action_bounds(
    low: torch.Tensor | Sequence[float] | float, high: torch.Tensor | Sequence[float] | float, action_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated float32 ``(low[A], high[A])``: finite, ``high > low``, scalars broadcast."""
    out = []
    for name, value in (("action_low", low), ("action_high", high)):
        t = torch.as_tensor(value, dtype=torch.float32).flatten()
        if t.numel() == 1:
            t = t.expand(action_dim).clone()
        if t.numel() != action_dim:
            raise ValueError(f"{name}: expected {action_dim} values, got {t.numel()}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: a tanh-squashed actor needs finite action bounds, got {t.tolist()}")
        out.append(t)
    if not bool((out[1] > out[0]).all()):
        raise ValueError(
            f"action_high must exceed action_low, got low={out[0].tolist()} high={out[1].tolist()}"
        )
    return out[0], out[1]


class DeterministicActor(nn.Module):
    """``a = offset + scale * tanh(MLP(obs))``: always inside ``[action_low, action_high]``.

    CORL's BC/TD3+BC actor (``max_action * tanh(net(s))``) generalised to asymmetric bounds.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        layer_norm: bool = False,
        action_low: torch.Tensor | Sequence[float] | float = -1.0,
        action_high: torch.Tensor | Sequence[float] | float = 1.0,
    ) -> None:
        """Build the trunk ``MLP(obs_dim -> action_dim)`` and the squash's scale and offset."""
        super().__init__()
        low, high = action_bounds(action_low, action_high, action_dim)
        self.net = MLP(obs_dim, action_dim, hidden, activation, layer_norm)
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_offset", (high + low) / 2.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[..., A]`` for observations ``[..., obs_dim]``."""
        return self.action_offset + self.action_scale * torch.tanh(self.net(obs))

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Same as :meth:`forward`; named like ``TanhGaussianActor``'s so agents act uniformly."""
        return self(obs)


def fold_first_layer(
    state: Mapping[str, torch.Tensor],
    prefix: str,
    mean: torch.Tensor,
    std: torch.Tensor,
    inverse: bool = False,
) -> dict[str, torch.Tensor]:
    """Fold ``x_n = (x - mean) / std`` into the first linear layer of a state dict (or undo it).

    ``W x_n + b = (W / std) x + (b - W (mean / std))``; only the first ``len(mean)`` input columns
    (the observation; a critic's action columns follow) change. Works for a plain layer
    (``weight[H, D]``) and a stacked ensemble (``weight[E, H, D]``). ``inverse`` maps a raw-
    observation layer back: ``W = W' * std``, ``b = b' + W' mean``. Exact up to float rounding.
    """
    w, b = state[prefix + "weight"], state[prefix + "bias"]
    d = mean.shape[-1]
    w_obs = w[..., :d]
    if inverse:
        new_w_obs, new_b = w_obs * std, b + (w_obs * mean).sum(-1)
    else:
        new_w_obs, new_b = w_obs / std, b - (w_obs * (mean / std)).sum(-1)
    out = dict(state)
    out[prefix + "weight"] = torch.cat([new_w_obs, w[..., d:]], dim=-1)
    out[prefix + "bias"] = new_b
    return out


NetSpec = tuple[nn.Module, str, str]
"""``(module, observation group, first-layer prefix)`` of one network an agent checkpoints."""


class ObsNormalization:
    """Fixed per-group observation statistics ``(x - mean) / std`` (CORL normalises states with
    the dataset's mean and std); groups without statistics pass through untouched.
    """

    def __init__(self, obs_dims: Mapping[str, int], device: torch.device) -> None:
        """Statistics may be set for any of ``obs_dims``' groups; none are set initially."""
        self.obs_dims = dict(obs_dims)
        self.device = device
        self.stats: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def set(self, mean: Mapping[str, torch.Tensor], std: Mapping[str, torch.Tensor]) -> None:
        """Set ``mean[g]``/``std[g]`` (``[D_g]``, std > 0) for each group in ``mean``; others keep theirs."""
        if set(mean) != set(std):
            raise ValueError(f"set_obs_normalization: mean groups {sorted(mean)} != std groups {sorted(std)}")
        for group in mean:
            if group not in self.obs_dims:
                raise ValueError(
                    f"set_obs_normalization: unknown group {group!r}; expected one of {sorted(self.obs_dims)}"
                )
            m = torch.as_tensor(mean[group], dtype=torch.float32, device=self.device).flatten()
            s = torch.as_tensor(std[group], dtype=torch.float32, device=self.device).flatten()
            dim = self.obs_dims[group]
            if m.numel() != dim or s.numel() != dim:
                raise ValueError(
                    f"set_obs_normalization: group {group!r} expects {dim} values, got {m.numel()}/{s.numel()}"
                )
            if not bool((s > 0).all()) or not bool(torch.isfinite(m).all() & torch.isfinite(s).all()):
                raise ValueError(f"set_obs_normalization: group {group!r} needs finite mean and std > 0")
            self.stats[group] = (m, s)

    def __call__(self, group: str, x: torch.Tensor) -> torch.Tensor:
        """Normalise one group's observations ``[..., D]``."""
        if group not in self.stats:
            return x
        mean, std = self.stats[group]
        return (x - mean) / std

    def obs(self, obs: Mapping[str, torch.Tensor], groups: Sequence[str]) -> dict[str, torch.Tensor]:
        """The normalised ``groups`` of ``obs`` (moved to the device)."""
        return {g: self(g, obs[g].to(self.device)) for g in dict.fromkeys(groups)}

    def batch(self, batch: Batch, groups: Sequence[str]) -> Batch:
        """``batch`` with ``obs``/``next_obs`` normalised (only ``groups`` kept); other fields shared."""
        return Batch(
            obs=self.obs(batch.obs, groups),
            action=batch.action,
            reward=batch.reward,
            next_obs=self.obs(batch.next_obs, groups),
            terminated=batch.terminated,
            truncated=batch.truncated,
            extras=batch.extras,
        )

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """``{group: {"mean", "std"}}`` for the groups with statistics."""
        return {g: {"mean": m.clone(), "std": s.clone()} for g, (m, s) in self.stats.items()}

    def load_state_dict(self, state: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        """Replace all statistics by ``state`` (an empty mapping means identity everywhere)."""
        self.stats = {}
        if state:
            self.set({g: v["mean"] for g, v in state.items()}, {g: v["std"] for g, v in state.items()})

    # -- checkpoints: networks of raw observations -------------------------------------------------
    def export_networks(self, nets: Mapping[str, NetSpec]) -> dict[str, Any]:
        """Each network's state dict with the statistics folded in (a network of raw observations).

        When any statistics are set, the exact normalised weights also go under
        ``"normalized_networks"`` so that resuming reproduces training bit for bit.
        """
        out: dict[str, Any] = {}
        for name, (module, group, prefix) in nets.items():
            state = module.state_dict()
            if group in self.stats:
                state = fold_first_layer(state, prefix, *self.stats[group])
            out[name] = state
        if self.stats:
            out["normalized_networks"] = {name: module.state_dict() for name, (module, _, _) in nets.items()}
        return out

    def import_networks(
        self, nets: Mapping[str, NetSpec], state: Mapping[str, Any], fallback: Mapping[str, str] | None = None
    ) -> None:
        """Load networks written by :meth:`export_networks` (or by SAC: raw-observation networks).

        Exact normalised weights are taken when present; otherwise raw-observation weights are
        unfolded into the current statistics. ``fallback`` names an entry to use for a missing one
        (a checkpoint without ``target_critic`` starts the target from ``critic``).
        """
        exact = state.get("normalized_networks", {})
        for name, (module, group, prefix) in nets.items():
            if name in exact:
                module.load_state_dict(exact[name])
                continue
            key = name if name in state else (fallback or {}).get(name, name)
            if key in exact:
                module.load_state_dict(exact[key])
                continue
            sd = state[key]
            if group in self.stats:
                sd = fold_first_layer(sd, prefix, *self.stats[group], inverse=True)
            module.load_state_dict(sd)


def q_from_output(out: torch.Tensor, hl: HLGauss | None) -> torch.Tensor:
    """Scalar Q-values from a critic's output: itself (``[E, ...]``), or the HL-Gauss expectation of logits."""
    return out if hl is None else hl.value(out)


def regression_loss(out: torch.Tensor, target: torch.Tensor, hl: HLGauss | None) -> torch.Tensor:
    """Unreduced per-critic TD loss ``[E, ...]`` of outputs ``out`` towards ``target`` ``[...]``.

    Squared error for a scalar critic; the HL-Gauss cross-entropy for logits ``[E, ..., K]``.
    ``target`` is treated as a constant.
    """
    target = target.detach()
    if hl is None:
        return (out - target).square()
    return hl.loss(out, target)


CRITIC_TYPES: tuple[str, ...] = ("mse", "hl_gauss")
"""Critic heads a Q-learning config may choose: a scalar with squared TD error, or HL-Gauss logits."""


def check_critic_fields(critic_type: str, num_bins: int, v_min: float | None, v_max: float | None) -> None:
    """Validate a config's ``critic_type``/``num_bins``/``v_min``/``v_max``; a bad value names the field."""
    if critic_type not in CRITIC_TYPES:
        raise ValueError(f"critic_type: expected one of {', '.join(CRITIC_TYPES)}, got {critic_type!r}")
    if critic_type == "hl_gauss":
        if num_bins < 2:
            raise ValueError(f"num_bins: expected >= 2, got {num_bins}")
        if v_min is None or v_max is None:
            raise ValueError(
                "v_min, v_max: critic_type='hl_gauss' needs the value range (e.g. r_min/(1-gamma), r_max/(1-gamma))"
            )
        if not v_max > v_min:
            raise ValueError(f"v_max: expected > v_min ({v_min}), got {v_max}")


def make_hl_gauss(
    critic_type: str, num_bins: int, v_min: float | None, v_max: float | None, device: torch.device
) -> HLGauss | None:
    """The HL-Gauss transform for ``critic_type="hl_gauss"``, ``None`` for a scalar critic."""
    check_critic_fields(critic_type, num_bins, v_min, v_max)
    if critic_type == "mse":
        return None
    assert v_min is not None and v_max is not None
    return HLGauss(num_bins, v_min, v_max).to(device)


__all__: list[str] = [
    "CRITIC_TYPES",
    "FIRST_LAYER",
    "DeterministicActor",
    "NetSpec",
    "ObsNormalization",
    "action_bounds",
    "check_critic_fields",
    "fold_first_layer",
    "make_hl_gauss",
    "q_from_output",
    "regression_loss",
]


def check_groups(obs_dims: Mapping[str, int], *groups: str) -> None:
    """Raise naming the group when a learner's observation group is not among the env's."""
    for group in groups:
        if group not in obs_dims:
            raise ValueError(f"observation group {group!r} not among the groups {sorted(obs_dims)}")


def build_critic(obs_dim: int, action_dim: int, cfg: Any, hl: HLGauss | None) -> nn.Module:
    """The Q ensemble of an offline config (``num_critics``, ``critic_hidden``, ``layer_norm``,
    ``activation``): scalar outputs, or ``hl.num_bins`` logits for an HL-Gauss critic.
    """
    from robolearn.nn.ensemble import CriticEnsemble

    return CriticEnsemble(
        obs_dim,
        action_dim,
        cfg.num_critics,
        cfg.critic_hidden,
        cfg.layer_norm,
        cfg.activation,
        num_outputs=1 if hl is None else hl.num_bins,
    )
