"""Data-parallel training on torch.distributed (robolearn/runners/distributed.py), on this CPU with gloo.

Every process group here lives on 127.0.0.1 with a free port, and every child process runs under
a timeout (the collectives' own timeout is ROBOLEARN_DIST_TIMEOUT_S=60), so a hang fails the test.

* The averaged gradient is the gradient of the combined batch: two spawned ranks, each with its
  half of a batch, a PPO-like and a SAC-like loss (critic, actor through the critic, temperature),
  compared with one process on the whole batch (gradients before and after clipping, the
  optimiser step, normaliser moments, the reduced KL).
* ``torchrun --nproc_per_node 2 -m robolearn.cli train ... distributed=true``: rank 0's checkpoint
  and rank 1's shard hold the same learner, the run directory holds only rank 0's files, the
  metrics count both ranks' env steps.
* Slow: SAC resumed across a stop continues exactly as the uninterrupted run on both ranks; two
  torchrun "nodes" on loopback.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing as mp
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from robolearn.cli.commands import run_command
from robolearn.nn import EmpiricalNormalizer
from robolearn.runners import distributed
from robolearn.runners.base import BaseRunner, _Interrupt
from robolearn.runners.checkpoint import load_checkpoint
from robolearn.runners.train_config import train_config_from_dict
from robolearn.utils.config import ConfigError

TIMEOUT_S = 240
"""Wall-clock limit of one launch on a loaded machine (a healthy one takes 10-20 s)."""
BATCH = 16
WORLD = 2


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the averaged gradient is the combined batch's ---------------------------------------------
class ToyAgent:
    """An agent shaped like PPO and SAC for :func:`distributed.attach`: modules, a target network,
    a normaliser, a temperature tensor, an optimiser and a ``reduce_mean`` hook."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)  # a different init per rank: attach must broadcast rank 0's
        self.actor = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
        self.critic = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.normalizer = EmpiricalNormalizer(3)
        self.log_alpha = torch.tensor(math.log(0.1 + seed), requires_grad=True)
        self.reduce_mean: Any = None
        self.optimizer = torch.optim.Adam([*self.actor.parameters(), *self.critic.parameters(), self.log_alpha], lr=1e-2)


def batch() -> dict[str, torch.Tensor]:
    """The combined batch of both ranks (the same on every process)."""
    g = torch.Generator().manual_seed(123)
    return {
        "obs": torch.randn(BATCH, 3, generator=g) * 2 + 1,
        "act": torch.randn(BATCH, 2, generator=g),
        "adv": torch.randn(BATCH, generator=g),
        "ret": torch.randn(BATCH, generator=g),
    }


def grads(agent: ToyAgent) -> list[torch.Tensor]:
    params = [*agent.actor.parameters(), *agent.critic.parameters(), agent.log_alpha]
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]


def train_steps(agent: ToyAgent, data: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What PPO and SAC do in one update each, recording the gradients each backward leaves."""
    out: dict[str, Any] = {"init": [t.detach().clone() for t in distributed.learned_tensors(agent)]}
    agent.normalizer.update(data["obs"])
    obs = agent.normalizer(data["obs"])
    kl = (data["act"] ** 2).mean()
    out["kl"] = agent.reduce_mean(kl) if agent.reduce_mean is not None else kl
    # PPO-like: one backward over actor and critic, clipped, stepped.
    mean = agent.actor(obs)
    log_prob = -((data["act"] - mean) ** 2).sum(-1)
    value = agent.critic(torch.cat([obs, data["act"]], -1)).squeeze(-1)
    loss = -(log_prob * data["adv"]).mean() + ((value - data["ret"]) ** 2).mean()
    agent.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    out["ppo_grads"] = grads(agent)
    nn.utils.clip_grad_norm_([*agent.actor.parameters(), *agent.critic.parameters()], 0.05)
    out["ppo_clipped"] = grads(agent)
    agent.optimizer.step()
    # SAC-like: critic against the target, the actor through the critic, the temperature; the
    # actor and temperature losses accumulate into the same gradients (two backwards, one step).
    agent.optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        target = data["ret"] + 0.9 * agent.target_critic(torch.cat([obs, agent.actor(obs)], -1)).squeeze(-1)
    q = agent.critic(torch.cat([obs, data["act"]], -1)).squeeze(-1)
    ((q - target) ** 2).mean().backward()
    out["critic_grads"] = grads(agent)
    log_pi = -(agent.actor(obs) ** 2).sum(-1)
    actor_loss = (agent.log_alpha.exp().detach() * log_pi - agent.critic(torch.cat([obs, agent.actor(obs)], -1)).squeeze(-1)).mean()
    actor_loss.backward()
    (-(agent.log_alpha * (log_pi.detach() - 2.0)).mean()).backward()
    out["accumulated_grads"] = grads(agent)
    agent.optimizer.step()
    out["final"] = [p.detach().clone() for p in (*agent.actor.parameters(), *agent.critic.parameters(), agent.log_alpha)]
    out["normalizer"] = (agent.normalizer.mean.clone(), agent.normalizer.var.clone(), agent.normalizer.count.clone())
    return out


def after_a_failed_backward(agent: ToyAgent, rank: int) -> dict[str, Any]:
    """A backward that raises after a trained parameter's gradient arrived (its averaging callback is
    dropped by autograd), then an ordinary one: the second is still averaged over the ranks."""
    agent.optimizer.zero_grad(set_to_none=True)
    leaf = torch.ones(2, requires_grad=True)
    late = leaf * 2  # created first: autograd reaches it last, after the actor's parameters

    def fail(grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a backward that fails half-way")

    late.register_hook(fail)
    obs = torch.full((4, 3), 1.0 + rank)
    try:
        (agent.actor(obs).sum() + late.sum()).backward()
    except RuntimeError:
        pass
    reached = agent.actor[2].bias.grad is not None
    agent.optimizer.zero_grad(set_to_none=True)
    params = list(agent.actor.parameters())
    local = torch.autograd.grad(agent.actor(obs).square().sum(), params)  # no hooks: this rank's own gradient
    loss = agent.actor(obs).square().sum()
    with torch.no_grad():  # a backward called under no_grad still runs the hooks and the averaging
        loss.backward()
    return {"failed_pass_reached_a_parameter": reached, "local": list(local), "averaged": [p.grad.clone() for p in params]}


def grad_worker(rank: int, port: int, out_dir: str) -> None:
    """One rank: join the group, attach a toy agent initialised differently, train on its half."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank), ROBOLEARN_DIST_TIMEOUT_S="60",
    )
    torch.set_num_threads(1)
    distributed.join_group("cpu")
    try:
        agent = ToyAgent(seed=rank)
        averager = distributed.attach(agent)
        half = BATCH // WORLD
        data = {k: v[rank * half : (rank + 1) * half] for k, v in batch().items()}
        out = train_steps(agent, data)
        out["reductions"] = averager.reductions
        out.update(after_a_failed_backward(agent, rank))
        # The control-flow collectives: every rank gets the same answer.
        out["all_true"] = (distributed.all_true(True), distributed.all_true(rank == 0))
        out["all_max"] = distributed.all_max([rank, 5 - rank])
        out["broadcast"] = distributed.broadcast_object(f"rank {rank}")
        out["gathered"] = distributed.gather_objects(10 * rank)
        # The runner's per-iteration agreement: the worst divergence streak and a Ctrl-C of any rank count for all.
        runner = SimpleNamespace(_worst_streak=torch.tensor(3 * rank))
        interrupt = _Interrupt()
        interrupt.requested = rank == 1
        BaseRunner._agree(runner, interrupt)  # type: ignore[arg-type]
        out["agree"] = (int(runner._worst_streak), interrupt.requested)
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        distributed.finish()


def test_averaged_gradient_is_the_combined_batch_gradient(tmp_path: Path) -> None:
    port = free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=grad_worker, args=(r, port, str(tmp_path))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    reference = train_steps(ToyAgent(seed=0), batch())  # one process, the whole batch, rank 0's init

    def same(a: Any, b: Any, what: str, scale: float = 1.0) -> None:
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            torch.testing.assert_close(x, y * scale, rtol=1e-5, atol=1e-6, msg=lambda m, i=i: f"{what}[{i}]: {m}")

    for r, got in enumerate(ranks):
        same(got["init"], reference["init"], f"rank {r}: the learner after attach (rank 0's)")
        for key in ("ppo_grads", "ppo_clipped", "critic_grads", "accumulated_grads", "final"):
            same(got[key], reference[key], f"rank {r}: {key}")
        torch.testing.assert_close(got["kl"], reference["kl"])
        mean, var, count = got["normalizer"]
        torch.testing.assert_close(mean, reference["normalizer"][0])
        torch.testing.assert_close(var, reference["normalizer"][1])
        assert float(count) * WORLD == float(reference["normalizer"][2])
        # One bucket per backward pass: the PPO pass, the critic, actor and temperature passes.
        assert got["reductions"] == 4
    # A backward that raised half-way does not stop the averaging of the next one.
    for r, got in enumerate(ranks):
        assert got["failed_pass_reached_a_parameter"]
        expected = [(a + b) / WORLD for a, b in zip(ranks[0]["local"], ranks[1]["local"], strict=True)]
        same(got["averaged"], expected, f"rank {r}: the gradient after a failed backward")
        assert not torch.equal(ranks[0]["local"][0], ranks[1]["local"][0])  # the ranks' own gradients differ
        assert got["all_true"] == (True, False) and got["all_max"] == [1, 5]
        assert got["broadcast"] == "rank 0" and got["gathered"] == [0, 10]
        assert got["agree"] == (3, True)
    # The clipping acted on the averaged gradient (the clip is active: the norm exceeds 0.05).
    norm = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in reference["ppo_grads"][:-1]]))
    assert float(norm) > 0.05


# -- configuration -----------------------------------------------------------------------------
def test_distributed_outside_torchrun_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    cfg = train_config_from_dict({"task": "Pendulum-Swingup", "distributed": True, "algo": {"name": "ppo"}})
    with pytest.raises(ConfigError, match=r"not started by torchrun.*torchrun --nproc_per_node 2 -m robolearn.cli train"):
        distributed.prepare(cfg)
    assert distributed.context() is None
    # Without distributed=true nothing is joined and the config is unchanged.
    plain = train_config_from_dict({"task": "Pendulum-Swingup", "algo": {"name": "ppo"}})
    assert distributed.prepare(plain) is plain
    # torchrun without distributed=true: the processes would train separate runs into one run_dir.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"distributed=false, but this process is RANK=1 of WORLD_SIZE=2.*add distributed=true"):
        distributed.prepare(plain)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.prepare(plain) is plain


def test_bad_torchrun_values_and_algorithms_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "one", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    cfg = train_config_from_dict({"task": "Pendulum-Swingup", "distributed": True, "algo": {"name": "ppo"}})
    with pytest.raises(ConfigError, match=r"RANK='one' is not an integer"):
        distributed.prepare(cfg)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ConfigError, match=r"RANK=2, WORLD_SIZE=2.*inconsistent"):
        distributed.prepare(cfg)
    with pytest.raises(ConfigError, match=r"algo=dppo is not data-parallel; valid choices: ppo, sac"):
        train_config_from_dict({"task": "Pendulum-Swingup", "distributed": True, "algo": {"name": "dppo"}})
    with pytest.raises(ConfigError, match=r"algo.compile_mode: reduce-overhead captures CUDA graphs"):
        train_config_from_dict({"task": "Pendulum-Swingup", "distributed": True, "device": "cuda",
                                "algo": {"name": "sac", "compile": True, "compile_mode": "reduce-overhead"}})


def test_rank_config_shifts_the_seeds_and_drops_eval_off_rank_0() -> None:
    cfg = train_config_from_dict({"task": "Pendulum-Swingup", "seed": 3, "distributed": True, "algo": {"name": "ppo"}})
    zero, one = distributed.rank_config(cfg, 0, "cpu"), distributed.rank_config(cfg, 1, "cpu")
    assert (zero.seed, zero.algo.seed, zero.eval_num_envs) == (3, 3, cfg.eval_num_envs)
    assert (one.seed, one.algo.seed, one.eval_num_envs) == (3 + distributed.RANK_SEED_STRIDE,) * 2 + (0,)


# -- end to end under torchrun -----------------------------------------------------------------
TINY = [
    "task=Pendulum-Swingup", "num_envs=4", "torch_threads=1", "runner.video=false", "runner.console=false",
    "runner.tensorboard=false", "algo.actor_hidden=[16]", "algo.critic_hidden=[16]",
]
PPO = [*TINY, "algo=ppo", "algo.num_steps=16", "algo.num_epochs=2", "algo.num_minibatches=2", "eval_num_envs=2",
       "runner.checkpoint_interval=1", "runner.eval_interval=1"]
SAC = [*TINY, "algo=sac", "algo.batch_size=32", "algo.learning_starts=32", "algo.buffer_size=4000",
       "runner.steps_per_iteration=8", "runner.checkpoint_interval=1", "eval_num_envs=0"]


def torchrun(args: list[str], *, nnodes: int = 1, node_rank: int = 0, port: int | None = None,
             nproc: int = WORLD) -> subprocess.Popen[str]:
    """Start ``torchrun -m robolearn.cli train <args>`` on loopback (one node of ``nnodes``)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--node_rank={node_rank}",
        f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port or free_port()}",
        "-m", "robolearn.cli", "train", *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ROBOLEARN_DIST_TIMEOUT_S": "60"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish in {TIMEOUT_S} s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def agent_tensors(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's learner (weights, normalisers, optimiser moments), by path;
    per-rank parts (replay buffer, generators, sampler, hidden states) left out."""
    out: dict[str, torch.Tensor] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, torch.Tensor):
            out[path] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}")

    for key, value in state["agent"].items():
        if key not in ("replay", "generator", "sampler", "hidden", "inference_hidden"):
            walk(value, key)
    return out


def check_ranks_agree(run: Path, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank 0's checkpoint of ``step`` and rank 1's shard: the same learner, different worlds."""
    main = load_checkpoint(run / "checkpoints" / f"ckpt_{step:06d}.pt")
    shard = load_checkpoint(run / "ranks" / "1" / "checkpoints" / f"ckpt_{step:06d}.pt")
    a, b = agent_tensors(main), agent_tensors(shard)
    assert a.keys() == b.keys() and len(a) > 10
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs between rank 0 and rank 1 at step {step}"
    # Each rank stepped its own worlds (its own seed): the envs' states differ.
    assert not torch.equal(main["env"]["obs"]["policy"], shard["env"]["obs"]["policy"])
    assert main["counters"]["world_size"] == shard["counters"]["world_size"] == WORLD
    return main, shard


def test_ppo_two_ranks_train_one_learner_and_only_rank_0_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "ppo"
    out = finish(torchrun([*PPO, "distributed=true", "total_env_steps=256", f"run_dir={run}"]))
    per_iteration = WORLD * 4 * 16  # ranks x worlds x steps
    main, _ = check_ranks_agree(run, 2 * per_iteration)
    assert main["counters"]["update_idx"] == 2
    # The update moved the learner away from its (broadcast) initialisation: Adam has state.
    assert any(k.startswith("optimizer.state") for k in agent_tensors(main))
    # Only rank 0 wrote the run: its files, plus rank 1's shard; one metrics row per iteration,
    # counting the env steps of both ranks; rank 0 evaluated.
    found = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert found == [
        "checkpoints/ckpt_000128.pt", "checkpoints/ckpt_000256.pt", "checkpoints/latest", "config.json",
        "learning_curve.png", "metrics.csv", "policy_spec.json",
        "ranks/1/checkpoints/ckpt_000128.pt", "ranks/1/checkpoints/ckpt_000256.pt", "ranks/1/checkpoints/latest",
        "summary.json",
    ]
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    steps = [float(r.split(",")[header.index("env_steps")]) for r in rows[1:]]
    assert steps == [per_iteration, 2 * per_iteration]
    assert all(r.split(",")[header.index("eval/return")] != "" for r in rows[1:])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 2 * per_iteration and summary["updates"] == 2
    assert json.loads((run / "config.json").read_text())["seed"] == 0  # rank 0's, not a shifted one
    assert out.count("done:") == 1 and out.count("training ppo") == 1  # only rank 0 speaks
    # Resuming needs the processes it was trained with: outside torchrun the saved distributed=true
    # says how to launch; a single process is refused before it writes anything.
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    assert run_command("train", [f"resume={run}"]) == 2
    assert "not started by torchrun" in capsys.readouterr().err
    assert run_command("train", [f"resume={run}", "distributed=false"]) == 2
    assert "trained by 2 process(es), this run has 1" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_sac_two_ranks_resume_continues_exactly(tmp_path: Path) -> None:
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    per_iteration = WORLD * 4 * 8
    first = torchrun([*SAC, "distributed=true", f"total_env_steps={2 * per_iteration}", f"run_dir={stopped}"])
    uninterrupted = torchrun([*SAC, "distributed=true", f"total_env_steps={4 * per_iteration}", f"run_dir={whole}"])
    finish(first)
    check_ranks_agree(stopped, 2 * per_iteration)
    out = finish(torchrun([f"resume={stopped}", "distributed=true", f"total_env_steps={4 * per_iteration}"]))
    assert "resumed" in out
    finish(uninterrupted)
    for run in (stopped, whole):
        check_ranks_agree(run, 4 * per_iteration)
    # Every rank restored its worlds, replay and RNGs and rank 0's learner: the resumed run is the
    # uninterrupted one, on both ranks.
    for shard in ("", "ranks/1/"):
        a = load_checkpoint(stopped / f"{shard}checkpoints/ckpt_{4 * per_iteration:06d}.pt")
        b = load_checkpoint(whole / f"{shard}checkpoints/ckpt_{4 * per_iteration:06d}.pt")
        for key, value in agent_tensors(a).items():
            assert torch.equal(value, agent_tensors(b)[key]), f"{shard or 'rank 0 '}{key}"
        assert torch.equal(a["agent"]["replay"]["storage"]["obs"]["policy"], b["agent"]["replay"]["storage"]["obs"]["policy"])


@pytest.mark.slow
def test_resume_falls_back_to_the_newest_step_every_rank_has(tmp_path: Path) -> None:
    # Stopped while the ranks were saving: rank 0 wrote its checkpoint of step 256, rank 1 not yet.
    run, per_iteration = tmp_path / "torn", WORLD * 4 * 16
    finish(torchrun([*PPO, "distributed=true", f"total_env_steps={2 * per_iteration}", f"run_dir={run}"]))
    newest = run / "ranks" / "1" / "checkpoints" / f"ckpt_{2 * per_iteration:06d}.pt"
    newest.unlink()
    out = finish(torchrun([f"resume={run}", "distributed=true", f"total_env_steps={3 * per_iteration}"]))
    assert f"ckpt_{per_iteration:06d}.pt at iteration 1" in out  # rank 0 took the step rank 1 has
    main, _ = check_ranks_agree(run, 3 * per_iteration)
    assert main["counters"]["update_idx"] == 3 and newest.is_file()


def test_two_nodes_on_loopback_train_one_learner(tmp_path: Path) -> None:
    run, port = tmp_path / "nodes", free_port()
    args = [*PPO, "distributed=true", "total_env_steps=256", f"run_dir={run}"]
    nodes = [torchrun(args, nnodes=2, node_rank=r, port=port, nproc=1) for r in range(2)]
    for node in nodes:
        finish(node)
    check_ranks_agree(run, 256)
    assert not (run / "ranks" / "0").exists()


@pytest.mark.slow
def test_compiled_ppo_two_ranks_train_one_learner(tmp_path: Path) -> None:
    # torch.compile around PPO's gradient step: the backward still runs the averaging hooks.
    run = tmp_path / "compiled"
    finish(torchrun([*PPO, "algo.compile=true", "distributed=true", "total_env_steps=256", f"run_dir={run}"]))
    check_ranks_agree(run, 256)
