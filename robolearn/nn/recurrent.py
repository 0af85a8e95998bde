"""Recurrent and history networks: GRU/LSTM memories, a temporal-conv history encoder, and the
deployable recurrent policy.

Hidden states are batch-first everywhere outside ``nn.GRU``/``nn.LSTM`` (one row per world,
``[B, num_layers, hidden]`` per state tensor), so a rollout buffer, a checkpoint and every input of
an exported graph have the batch first. A new episode starts from the zero state; resetting is a
``torch.where`` on a done mask, never a host-side selection of rows.

The deployable contract (:class:`RecurrentPolicy`) is what export and the deploy runtime code
against; see its docstring.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robolearn.nn.mlp import ACTIVATIONS

MEMORY_KINDS: tuple[str, ...] = ("gru", "lstm")
"""Recurrent cells a :class:`Memory` can be."""

State = tuple[torch.Tensor, ...]
"""A memory's hidden state: one tensor ``[B, num_layers, hidden]`` per name in ``state_names``."""


class Memory(nn.Module):
    """A GRU or LSTM stepped one control step at a time, with batch-first hidden states.

    ``state_names`` is ``("h",)`` for a GRU and ``("h", "c")`` for an LSTM; every state tensor has the
    per-world shape ``(num_layers, hidden_size)``.
    """

    def __init__(self, kind: str, input_size: int, hidden_size: int, num_layers: int = 1) -> None:
        """Build the cell; an unknown ``kind`` or a non-positive size is refused, naming the field."""
        super().__init__()
        if kind not in MEMORY_KINDS:
            raise ValueError(f"memory: unknown {kind!r}; expected one of {', '.join(MEMORY_KINDS)}")
        for name, value in (("input_size", input_size), ("memory_hidden", hidden_size), ("memory_layers", num_layers)):
            if int(value) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value}")
        self.kind = kind
        self.hidden_size, self.num_layers = int(hidden_size), int(num_layers)
        cell = nn.GRU if kind == "gru" else nn.LSTM
        self.rnn = cell(int(input_size), self.hidden_size, self.num_layers)
        self.state_names: tuple[str, ...] = ("h",) if kind == "gru" else ("h", "c")
        self.state_shapes: tuple[tuple[int, ...], ...] = tuple(
            (self.num_layers, self.hidden_size) for _ in self.state_names
        )

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> State:
        """The state a new episode starts from: zeros ``[batch, num_layers, hidden]`` per name."""
        weight = self.rnn.weight_ih_l0
        return tuple(
            torch.zeros(batch, *shape, device=device if device is not None else weight.device, dtype=weight.dtype)
            for shape in self.state_shapes
        )

    def step(self, x: torch.Tensor, state: Sequence[torch.Tensor]) -> tuple[torch.Tensor, State]:
        """One control step: ``x[B, in]`` and the state before it -> output ``[B, hidden]`` and the state after."""
        # nn.GRU/LSTM want [layers, B, H]; the transposes are views until .contiguous() copies.
        layer_first = tuple(s.transpose(0, 1).contiguous() for s in state)
        if self.kind == "gru":
            out, h = self.rnn(x.unsqueeze(0), layer_first[0])
            return out.squeeze(0), (h.transpose(0, 1),)
        out, (h, c) = self.rnn(x.unsqueeze(0), (layer_first[0], layer_first[1]))
        return out.squeeze(0), (h.transpose(0, 1), c.transpose(0, 1))

    def sequence(
        self, x: torch.Tensor, state: Sequence[torch.Tensor], resets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        """Run ``x[L, B, in]`` from ``state`` (the state before step 0); return outputs ``[L, B, hidden]``
        and the final state. ``resets[L, B]`` (bool) restarts a row from the zero state *before* that
        step: a chunk that crosses an episode end sees the same states as the rollout did.

        Stepping once per time step (not one cuDNN call over the chunk) is what makes the chunk
        re-run equal the rollout's step-by-step states exactly, resets included.
        """
        # Layer-first once for the whole chunk (not a transpose and a copy per step).
        hidden = [s.transpose(0, 1).contiguous() for s in state]
        keep = None if resets is None else (~resets).to(x.dtype).unsqueeze(-1)  # [L, B, 1]
        outs = []
        for t in range(x.shape[0]):
            if keep is not None:
                # Multiplying by 0/1 is exact: a kept row's state is bit-for-bit unchanged.
                hidden = [h * keep[t] for h in hidden]
            if self.kind == "gru":
                y, h = self.rnn(x[t : t + 1], hidden[0])
                hidden = [h]
            else:
                y, (h, c) = self.rnn(x[t : t + 1], (hidden[0], hidden[1]))
                hidden = [h, c]
            outs.append(y)
        return torch.cat(outs), tuple(h.transpose(0, 1) for h in hidden)


def reset_state(state: Sequence[torch.Tensor], done: torch.Tensor) -> State:
    """``state`` with the rows where ``done[B]`` is true set to the initial (zero) state; others kept."""
    return tuple(torch.where(done.reshape(-1, *([1] * (s.dim() - 1))), torch.zeros_like(s), s) for s in state)


class HistoryEncoder(nn.Module):
    """``[policy | history] -> [policy | conv(history)]``: a temporal convolution over the history frames.

    The input row is the ``policy`` group's ``policy_dim`` features followed by the ``history``
    group, ``frames`` frames of ``frame_dim`` features, oldest first (as
    :class:`robolearn.spec.processors.History` stacks them). The frames go through ``Conv1d`` layers
    over time (channels = features), are flattened and concatenated with the policy features.
    """

    def __init__(
        self,
        policy_dim: int,
        frames: int,
        frame_dim: int,
        channels: Sequence[int] = (32, 32),
        kernel_size: int = 3,
        activation: str = "elu",
    ) -> None:
        """Build the convolutions; a kernel longer than what is left of the history is refused."""
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: unknown {activation!r}; expected one of {', '.join(ACTIVATIONS)}")
        if frames < 1 or frame_dim < 1 or policy_dim < 0:
            raise ValueError(f"HistoryEncoder: frames and frame_dim must be >= 1, got {frames}, {frame_dim}")
        if not channels:
            raise ValueError("history_channels: expected at least one convolution width")
        self.policy_dim, self.frames, self.frame_dim = int(policy_dim), int(frames), int(frame_dim)
        layers: list[nn.Module] = []
        last, length = self.frame_dim, self.frames
        for width in channels:
            if kernel_size > length:
                raise ValueError(
                    f"history_kernel: {kernel_size} is longer than the {length} frames left for a convolution "
                    f"(history_frames={frames}, history_channels={tuple(channels)}); expected <= {length}"
                )
            layers += [nn.Conv1d(last, int(width), int(kernel_size)), ACTIVATIONS[activation]()]
            last, length = int(width), length - int(kernel_size) + 1
        self.conv = nn.Sequential(*layers)
        self.out_dim = self.policy_dim + last * length
        """Width of the encoded row."""
        self.in_dim = self.policy_dim + self.frames * self.frame_dim
        """Width of the input row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode ``x[..., policy_dim + frames * frame_dim]`` to ``[..., out_dim]``."""
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        history = flat[:, self.policy_dim :].reshape(-1, self.frames, self.frame_dim).transpose(1, 2)
        encoded = self.conv(history).flatten(1)
        return torch.cat([flat[:, : self.policy_dim], encoded], dim=-1).reshape(*lead, self.out_dim)


class RecurrentPolicy(nn.Module):
    """The deployable recurrent policy: one control step ``(obs, *state) -> (action, *new_state)``.

    Contract (what export, the manifest and the deploy runtime code against):

    * ``state_names: tuple[str, ...]`` -- ``("h",)`` for a GRU, ``("h", "c")`` for an LSTM.
    * ``state_shapes: tuple[tuple[int, ...], ...]`` -- the per-world shape of each state,
      ``(num_layers, hidden)``.
    * ``initial_state(batch) -> tuple[Tensor, ...]`` -- zeros ``[batch, *shape]`` per state: what a
      new episode starts from (the deploy runtime resets to it at every episode start).
    * ``forward(obs[B, D], *states[B, *shape]) -> (action[B, A], *new_states[B, *shape])`` -- batch
      first, so every input and output of an exported graph has the batch as its first axis.
      ``obs`` is the raw actor input (normalisation is folded in): the ``policy`` group, followed
      by the ``history`` group when the policy has a history encoder (PPO sets the module's
      ``obs_groups`` attribute to those group names, in order).

    ``forward`` has no data-dependent Python control flow, so ``torch.jit.trace`` and ONNX export
    record it as one graph.
    """

    def __init__(self, normalizer: nn.Module, encoder: nn.Module, memory: Memory, head: nn.Module) -> None:
        """Assemble ``head(memory(encoder(normalizer(obs))))``; the parts are used as given (copy them first)."""
        super().__init__()
        self.normalizer, self.encoder, self.memory, self.head = normalizer, encoder, memory, head
        self.state_names: tuple[str, ...] = memory.state_names
        self.state_shapes: tuple[tuple[int, ...], ...] = memory.state_shapes

    def initial_state(self, batch: int) -> State:
        """Zeros ``[batch, *shape]`` for each state, on the module's device."""
        return self.memory.initial_state(batch)

    def forward(self, obs: torch.Tensor, *states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One step: the deterministic action and the state to feed the next step."""
        features = self.encoder(self.normalizer(obs))
        out, new_states = self.memory.step(features, states)
        return (self.head(out), *new_states)


__all__ = ["MEMORY_KINDS", "HistoryEncoder", "Memory", "RecurrentPolicy", "State", "reset_state"]
