"""Data-parallel training on ``torch.distributed`` (issue 15): one process per rank, launched by ``torchrun``.

``robolearn train ... distributed=true`` under ``torchrun`` runs the same training loop in every
process. Each rank steps its own worlds with its own seed (``seed + rank * RANK_SEED_STRIDE``) and
keeps one copy of the learner; the copies stay identical because

* :func:`attach` broadcasts every learned tensor of the agent (network parameters and buffers,
  normaliser statistics, target networks, SAC's ``log_alpha``, PPO's learning rate) from rank 0
  before the first step;
* after every ``backward()`` the gradients of the trained parameters are averaged over the ranks
  (:class:`GradientAverager`), *before* the agent clips them and steps its optimiser, so every
  rank takes the same step: the gradient of the loss over the combined batch of all ranks;
* PPO's adaptive learning rate reads the mean KL over the ranks (``agent.reduce_mean``) and every
  observation normaliser folds in the combined batch's moments (``EmpiricalNormalizer.reduce_mean``).

Rank 0 logs, evaluates and checkpoints (:mod:`robolearn.runners.base`); the other ranks write
only their own shard, ``<run_dir>/ranks/<rank>/checkpoints``: their env, replay buffer, RNG and
generator state, so a resumed run continues every rank exactly. On resume every rank then takes
the learner (weights and optimiser state) from rank 0.

``prepare`` is called by ``robolearn train`` before anything is built; ``finish`` after the run.
The agents are not edited: everything here works through their public attributes (their modules,
optimisers and ``reduce_mean`` hooks) and autograd hooks on their parameters.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from robolearn.utils.config import ConfigError

log = logging.getLogger(__name__)

RANK_SEED_STRIDE = 1_000_000
"""Rank ``r`` trains with ``seed + r * RANK_SEED_STRIDE``: far enough apart that the ranks of runs
seeded 0, 1, 2... never share worlds, and no rank's worlds are rank 0's evaluation worlds
(``seed + 10,000``)."""

SUPPORTED_ALGOS: tuple[str, ...] = ("ppo", "sac")
"""Algorithms whose every collective the data-parallel path covers (PPO's KL and normalisers, SAC's
critic, actor and temperature steps); the others refuse ``distributed=true``."""

CUDA_GRAPH_MODES: tuple[str, ...] = ("reduce-overhead", "max-autotune")
"""``torch.compile`` modes that capture CUDA graphs on CUDA (refused with ``distributed=true`` there)."""

TORCHRUN_VARS: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""Environment variables ``torchrun`` sets for every process it starts."""

DEFAULT_TIMEOUT_S = 1800
"""Seconds a collective waits for the other ranks before failing (torch's own default); set
``ROBOLEARN_DIST_TIMEOUT_S`` to change it (tests use a short one so a hang fails quickly)."""

LAUNCH_HINT = (
    "launch it with torchrun, e.g. `torchrun --nproc_per_node 2 -m robolearn.cli train ... distributed=true` "
    "(2 nodes: add --nnodes 2 --node_rank <0|1> --master_addr <host of node 0> --master_port <port>)"
)


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the process group."""

    rank: int
    """Global rank, 0 .. world_size - 1."""
    world_size: int
    """Number of training processes."""
    local_rank: int
    """Rank within this node (picks the GPU: ``cuda:local_rank``)."""
    backend: str
    """``gloo`` (CPU) or ``nccl`` (CUDA)."""
    device: torch.device
    """Where collectives run: CPU for gloo, ``cuda:local_rank`` for nccl."""

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the rank that logs, evaluates and checkpoints."""
        return self.rank == 0


_CONTEXT: DistContext | None = None
_ATTACHED: weakref.WeakKeyDictionary[Any, GradientAverager] = weakref.WeakKeyDictionary()


def context() -> DistContext | None:
    """The process group this process joined through :func:`prepare`, or ``None`` (a single process)."""
    return _CONTEXT


def is_main() -> bool:
    """Whether this process logs and checkpoints: rank 0, or a process that is not distributed."""
    return _CONTEXT is None or _CONTEXT.is_main


def _env_int(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"distributed=true: environment variable {name}={value!r} is not an integer; {LAUNCH_HINT}") from None


def prepare(cfg: Any) -> Any:
    """Join the process group when ``cfg.distributed`` is set; return the config this rank trains with.

    The group is read from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``/``MASTER_PORT``): gloo on the CPU, nccl with ``device=cuda:LOCAL_RANK`` on
    GPUs. The returned config carries this rank's seed (``seed + rank * RANK_SEED_STRIDE``, in the
    algorithm's section too) and device; the ranks other than 0 build no evaluation env.

    Raises:
        ConfigError: ``distributed=true`` outside torchrun, ``distributed=false`` in one of several
            torchrun processes, an algorithm or mode the data-parallel path does not cover, or a
            device this rank cannot use. Nothing is written before.
    """
    if not getattr(cfg, "distributed", False):
        world = os.environ.get("WORLD_SIZE", "1")
        if world not in ("", "1") and "RANK" in os.environ:
            # Each of torchrun's processes would train its own run into the same run_dir: one
            # fails on the run's lock and torchrun then stops the others.
            raise ConfigError(
                f"distributed=false, but this process is RANK={os.environ['RANK']} of WORLD_SIZE={world} (started by "
                "torchrun): add distributed=true to train data-parallel, or start a single process"
            )
        return cfg
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise ConfigError(
            f"distributed=true: this process was not started by torchrun ({', '.join(missing)} not set); {LAUNCH_HINT}"
        )
    check_config(cfg)
    ctx = join_group(cfg.device)
    device = f"cuda:{ctx.local_rank}" if ctx.backend == "nccl" else "cpu"
    return rank_config(cfg, ctx.rank, device)


def join_group(device: str = "cpu") -> DistContext:
    """Join the process group torchrun's environment describes, for training on ``device``.

    ``cpu``: gloo; ``cuda`` (any index: each rank takes ``cuda:LOCAL_RANK``): nccl. Collectives
    time out after ``ROBOLEARN_DIST_TIMEOUT_S`` seconds (default :data:`DEFAULT_TIMEOUT_S`).

    Raises:
        ConfigError: a torchrun variable is missing or not an integer, or ``device`` cannot be used here.
    """
    global _CONTEXT
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise ConfigError(f"distributed: {', '.join(missing)} not set; {LAUNCH_HINT}")
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    if not (world >= 1 and 0 <= rank < world and local >= 0):
        raise ConfigError(f"distributed=true: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local} are inconsistent; {LAUNCH_HINT}")
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ConfigError(f"device: expected cpu or cuda, got {device!r}") from None
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device: {device!r} but CUDA is not available on this machine; use device=cpu (gloo)")
        if local >= torch.cuda.device_count():
            raise ConfigError(
                f"device: rank {rank} has LOCAL_RANK={local} but this node has {torch.cuda.device_count()} GPU(s); "
                "start at most one process per GPU (--nproc_per_node)"
            )
        comm, backend = torch.device("cuda", local), "nccl"
        torch.cuda.set_device(comm)
    elif kind == "cpu":
        comm, backend = torch.device("cpu"), "gloo"
    else:
        raise ConfigError(f"device: distributed=true runs on cpu (gloo) or cuda (nccl), got {device!r}")
    if not dist.is_available():
        raise ConfigError("distributed=true: this torch build has no torch.distributed")
    raw = os.environ.get("ROBOLEARN_DIST_TIMEOUT_S", str(DEFAULT_TIMEOUT_S))
    try:
        timeout = datetime.timedelta(seconds=float(raw))
    except ValueError:
        raise ConfigError(f"ROBOLEARN_DIST_TIMEOUT_S: expected a number of seconds, got {raw!r}") from None
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": comm} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **kwargs)
    _CONTEXT = DistContext(rank, world, local, backend, comm)
    log.info("rank %d of %d (local rank %d) joined the %s process group", rank, world, local, backend)
    return _CONTEXT


def check_config(cfg: Any) -> None:
    """Refuse what the data-parallel path does not cover (named, with the valid choices)."""
    name = cfg.algo_name
    if getattr(cfg, "o2o", None) is not None or getattr(cfg, "offline", False):
        raise ConfigError(
            f"distributed: offline and offline-to-online runs are not data-parallel; distributed=true trains "
            f"{', '.join(SUPPORTED_ALGOS)} online"
        )
    if name not in SUPPORTED_ALGOS:
        raise ConfigError(f"distributed: algo={name} is not data-parallel; valid choices: {', '.join(SUPPORTED_ALGOS)}")
    mode = getattr(cfg.algo, "compile_mode", "default")
    if getattr(cfg.algo, "compile", False) and mode in CUDA_GRAPH_MODES and str(cfg.device).startswith("cuda"):
        # The gradient all-reduce runs from autograd hooks between the captured kernels; capturing
        # NCCL collectives in a CUDA graph this way is untested. Compiled without graphs it works
        # (checked on CPU: ranks identical, within 1e-6 of eager).
        raise ConfigError(
            f"algo.compile_mode: {mode} captures CUDA graphs, which distributed=true does not support; "
            "use compile_mode=default or max-autotune-no-cudagraphs"
        )


def rank_config(cfg: Any, rank: int, device: str) -> Any:
    """``cfg`` for ``rank``: its own seed (the algorithm's too), its device, no eval env off rank 0."""
    seed = cfg.seed + rank * RANK_SEED_STRIDE
    changes: dict[str, Any] = {"seed": seed, "device": device}
    if hasattr(cfg.algo, "seed"):
        changes["algo"] = dataclasses.replace(cfg.algo, seed=cfg.algo.seed + rank * RANK_SEED_STRIDE)
    if rank != 0:
        changes["eval_num_envs"] = 0  # rank 0 evaluates; the others would build worlds nobody reads
    return dataclasses.replace(cfg, **changes)


def finish() -> None:
    """Leave the process group, if this process joined one."""
    global _CONTEXT
    if _CONTEXT is not None and dist.is_initialized():
        dist.destroy_process_group()
    _CONTEXT = None


def _require() -> DistContext:
    if _CONTEXT is None:
        raise RuntimeError("not in a process group: call robolearn.runners.distributed.prepare first")
    return _CONTEXT


# -- collectives ------------------------------------------------------------------------------
def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of ``tensor`` over the ranks (a new tensor; ``tensor`` itself outside a group)."""
    ctx = _CONTEXT
    if ctx is None or ctx.world_size == 1:
        return tensor
    out = tensor.detach().to(ctx.device, copy=True)
    dist.all_reduce(out)
    out /= ctx.world_size
    return out.to(tensor.device)


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (one collective): control flow that must agree."""
    ctx = _CONTEXT
    if ctx is None or ctx.world_size == 1:
        return flag
    t = torch.tensor([int(bool(flag))], device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def all_max(values: Sequence[int]) -> list[int]:
    """The element-wise maximum of ``values`` over the ranks (one collective)."""
    ctx = _CONTEXT
    if ctx is None or ctx.world_size == 1:
        return list(values)
    t = torch.tensor(list(values), dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def broadcast_object(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a small picklable object: a status, a step count)."""
    ctx = _CONTEXT
    if ctx is None or ctx.world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=ctx.device)
    return box[0]


def gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    ctx = _CONTEXT
    if ctx is None or ctx.world_size == 1:
        return [value]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, value)
    return out


def _broadcast_tensors(tensors: Iterable[torch.Tensor]) -> None:
    """Overwrite ``tensors`` in place with rank 0's values: one flat collective per (device, dtype)."""
    ctx = _require()
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    for (_, dtype), group in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        # Staged through the communication device: nccl takes CUDA tensors only (Adam's step
        # counters live on the CPU), gloo is happiest with CPU ones.
        flat = torch.cat([t.detach().reshape(-1).to(ctx.device, dtype) for t in group])
        dist.broadcast(flat, src=0)
        offset = 0
        with torch.no_grad():
            for t in group:
                n = t.numel()
                t.copy_(flat[offset : offset + n].view_as(t))
                offset += n


# -- the agent --------------------------------------------------------------------------------
def _modules(agent: Any) -> list[nn.Module]:
    """The agent's modules (attributes that are ``nn.Module``), in attribute-name order on every rank."""
    return [value for _, value in sorted(vars(agent).items()) if isinstance(value, nn.Module)]


def _tensor_attributes(agent: Any) -> list[torch.Tensor]:
    """Floating-point tensors held directly by the agent (SAC's ``log_alpha``, PPO's learning rate)."""
    return [v for _, v in sorted(vars(agent).items()) if isinstance(v, torch.Tensor) and v.is_floating_point()]


def learned_tensors(agent: Any) -> list[torch.Tensor]:
    """Every tensor that must be equal on all ranks: the parameters and buffers of the agent's
    modules (normaliser statistics and target networks included) and its own floating-point
    tensors, each once, in the same order on every rank.
    """
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for module in _modules(agent):
        for t in (*module.parameters(), *module.buffers()):
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    for t in _tensor_attributes(agent):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def trained_parameters(agent: Any) -> list[torch.Tensor]:
    """The tensors an optimiser of the agent steps (``requires_grad``): those whose gradients are averaged."""
    return [t for t in learned_tensors(agent) if t.requires_grad]


def _optimizers(agent: Any) -> list[torch.optim.Optimizer]:
    return [v for _, v in sorted(vars(agent).items()) if isinstance(v, torch.optim.Optimizer)]


def optimizer_tensors(agent: Any) -> list[torch.Tensor]:
    """The state tensors of the agent's optimisers (Adam's moments and step counts), in parameter order."""
    out: list[torch.Tensor] = []
    for optimizer in _optimizers(agent):
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state.get(p, {})
                out.extend(state[k] for k in sorted(state) if isinstance(state[k], torch.Tensor))
    return out


class GradientAverager:
    """Averages the gradients of ``params`` over the ranks at the end of every ``backward()``.

    Each parameter's post-accumulate-grad hook marks it ready and, the first time in a backward
    pass, queues a callback on the autograd engine that runs once the whole pass has finished
    (the mechanism FSDP uses; DDP's reducer does the same in C++). The callback all-reduces the
    ready gradients in one flat bucket per (device, dtype) and divides by the number of ranks, so
    by the time ``backward()`` returns every rank holds the same averaged gradient, before the
    agent clips it or steps its optimiser. Only parameters that received a gradient in this pass
    are reduced; the ranks run the same code on the same graph, so the sets agree.

    Gradients that accumulate over several backward passes stay correct: the part already averaged
    is equal on every rank, and the mean over ranks of ``g_avg + g_r`` is ``g_avg + mean(g_r)``.
    """

    def __init__(self, params: Sequence[torch.Tensor], world_size: int, device: torch.device) -> None:
        self.params = list(params)
        self.world_size = world_size
        self.device = device
        self._index = {id(p): i for i, p in enumerate(self.params)}
        # Parameters whose gradient arrived, per backward pass (autograd graph task) with a flush
        # queued. Keyed by the pass, not one flag: a backward that raised half-way never runs its
        # callback, and a single "queued" flag left set by it would stop all later averaging.
        self._pending: dict[int, list[torch.Tensor]] = {}
        self.reductions = 0
        """Buckets all-reduced so far (one per backward pass, per device and dtype)."""
        self.handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    def _on_grad(self, param: torch.Tensor) -> None:
        task = _graph_task_id()
        ready = self._pending.get(task)
        if ready is None:
            # A pass that raised before its end leaves its entry behind (its callback was dropped;
            # its gradients are the caller's to discard). Entries are not purged here: a backward
            # nested in another (reentrant checkpointing) must not drop the outer pass's list.
            ready = self._pending[task] = []
            # Private but stable since torch 1.x: FSDP and DDP's Python paths rely on it.
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self._flush(task))
        ready.append(param)

    def _flush(self, task: int) -> None:
        # Hook order is not guaranteed: rank-independent parameter order for the bucket.
        ready = sorted(self._pending.pop(task, []), key=lambda p: self._index[id(p)])
        groups: dict[tuple[str, torch.dtype], list[torch.Tensor]] = {}
        for p in ready:
            groups.setdefault((str(p.grad.device), p.grad.dtype), []).append(p)
        for key in sorted(groups, key=str):
            group = groups[key]
            grads = [p.grad for p in group]
            flat = torch.cat([g.reshape(-1) for g in grads]).to(self.device)
            dist.all_reduce(flat)
            flat /= self.world_size
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset : offset + n].view_as(g))
                offset += n
            self.reductions += 1

    def remove(self) -> None:
        """Unregister the hooks."""
        for handle in self.handles:
            handle.remove()
        self.handles = []


def _graph_task_id() -> int:
    """The running backward pass (autograd graph task) id; 0 where this torch build does not expose it."""
    current = getattr(torch._C, "_current_graph_task_id", None)
    return int(current()) if current is not None else 0


def attach(agent: Any) -> GradientAverager:
    """Make ``agent`` data-parallel over the process group (once per agent; later calls return the same averager).

    Broadcasts every learned tensor from rank 0 (:func:`learned_tensors`), averages the gradients
    of the trained parameters after each backward pass (:class:`GradientAverager`), and points
    every ``reduce_mean`` hook (the agent's, e.g. PPO's KL, and any module's, e.g. the observation
    normalisers') at :func:`all_reduce_mean`.
    """
    ctx = _require()
    if agent in _ATTACHED:
        return _ATTACHED[agent]
    _broadcast_tensors(learned_tensors(agent))
    averager = GradientAverager(trained_parameters(agent), ctx.world_size, ctx.device)
    if hasattr(agent, "reduce_mean"):
        agent.reduce_mean = all_reduce_mean
    for module in _modules(agent):
        for sub in module.modules():
            if hasattr(sub, "reduce_mean"):
                sub.reduce_mean = all_reduce_mean
    _ATTACHED[agent] = averager
    return averager


def sync_learner(agent: Any) -> None:
    """Give every rank rank 0's learner: the learned tensors and the optimisers' state (after a resume)."""
    _broadcast_tensors([*learned_tensors(agent), *optimizer_tensors(agent)])


__all__ = [
    "CUDA_GRAPH_MODES",
    "DEFAULT_TIMEOUT_S",
    "RANK_SEED_STRIDE",
    "SUPPORTED_ALGOS",
    "TORCHRUN_VARS",
    "DistContext",
    "GradientAverager",
    "all_max",
    "all_reduce_mean",
    "all_true",
    "attach",
    "broadcast_object",
    "check_config",
    "context",
    "finish",
    "gather_objects",
    "is_main",
    "join_group",
    "learned_tensors",
    "optimizer_tensors",
    "prepare",
    "rank_config",
    "sync_learner",
    "trained_parameters",
]
