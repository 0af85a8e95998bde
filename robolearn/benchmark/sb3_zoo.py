"""RL Baselines3 Zoo hyperparameter blocks as Stable-Baselines3 constructor arguments.

The Zoo (``hyperparams/<algo>.yml`` of DLR-RM/rl-baselines3-zoo) writes its hyperparameters in a
spelling of its own, which its ``ExpManager`` turns into SB3 arguments before building a model:

* ``learning_rate``, ``clip_range``, ``clip_range_vf``: a number, or ``"lin_<x>"`` for a linear
  schedule from ``x`` at the start of training to 0 at the end (SB3 calls a schedule with the
  *remaining* progress, 1.0 at the start and 0.0 at the end);
* ``policy_kwargs``: a string of Python such as ``"dict(log_std_init=-2, ortho_init=False,
  activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256]))"``;
* ``normalize``: ``true`` (or a dict / ``dict(...)`` string of ``VecNormalize`` arguments) wraps
  the training env in ``VecNormalize`` (observations *and* rewards by default) with the
  algorithm's ``gamma``;
* ``n_envs`` (training worlds), ``n_timesteps`` (the Zoo's budget) and ``policy`` are not model
  arguments.

The Zoo evaluates its strings with ``eval``; this module never does: :func:`parse_python_literal` reads the
few forms the Zoo uses (``dict(...)`` calls, lists, tuples, dict displays, numbers, strings,
booleans, ``None``, ``nn.<Activation>``) from the syntax tree and rejects anything else
(``__import__``, attribute chains, other calls), so a table file cannot run code.
"""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

ALGOS: tuple[str, ...] = ("ppo", "sac")
"""The algorithms the benchmark runs on the SB3 side."""

SCHEDULE_KEYS: frozenset[str] = frozenset({"learning_rate", "clip_range", "clip_range_vf"})
"""Arguments the Zoo may write as ``lin_<x>`` (the Zoo also schedules ARS' ``delta_std``: not used here)."""

INT_KEYS: frozenset[str] = frozenset({
    "n_steps", "batch_size", "n_epochs", "buffer_size", "learning_starts", "gradient_steps",
    "sde_sample_freq", "target_update_interval", "stats_window_size",
})
"""Integer arguments: YAML's ``!!float 1e6`` spelling of an integral value is accepted and converted."""

NOT_MODEL_KEYS: frozenset[str] = frozenset({"n_envs", "n_timesteps", "normalize", "policy"})
"""Zoo keys that configure the run or the env, not the model constructor."""

UNSUPPORTED_KEYS: frozenset[str] = frozenset({
    "env_wrapper", "vec_env_wrapper", "frame_stack", "callback", "env_kwargs", "monitor_kwargs",
    "replay_buffer_class", "replay_buffer_kwargs", "device", "seed", "env", "tensorboard_log",
    "verbose", "_init_setup_model",
})
"""Zoo or SB3 keys the benchmark does not take from a table: wrappers and callbacks (robolearn's
tasks are not Gymnasium envs to wrap), and what the runner itself sets (seed, device, logging)."""

ACTIVATIONS: dict[str, type[nn.Module]] = {
    name: getattr(nn, name)
    for name in ("ReLU", "Tanh", "ELU", "GELU", "SiLU", "LeakyReLU", "Sigmoid", "Softplus", "Mish", "SELU")
}
"""``nn.<Name>`` values a ``policy_kwargs`` string may name."""

POLICY = "MlpPolicy"
"""The only policy class the benchmark builds (observations are flat vectors)."""


class ZooError(ValueError):
    """A Zoo block or value the translation does not accept (the message names the field)."""


@dataclass(frozen=True)
class LinearSchedule:
    """SB3 schedule from ``initial`` (remaining progress 1.0) down to 0 (remaining progress 0.0).

    A module-level dataclass rather than a closure so a saved model (``model.zip``) pickles it by
    reference and a resumed run gets the same schedule back.
    """

    initial: float

    def __call__(self, progress_remaining: float) -> float:
        """The value at ``progress_remaining`` (1.0 at the start of training, 0.0 at the end)."""
        return self.initial * progress_remaining

    def __str__(self) -> str:
        """The Zoo's spelling, ``lin_<initial>``."""
        return f"lin_{self.initial!r}"


@dataclass
class Translation:
    """One Zoo block as what the SB3 runner needs."""

    kwargs: dict[str, Any]
    """SB3 constructor keyword arguments (schedules as callables, activations as classes)."""
    n_envs: int | None = None
    """Training worlds the block asks for (``None``: not said)."""
    normalize: dict[str, Any] | None = None
    """``VecNormalize`` keyword arguments, or ``None`` for no normalisation."""
    n_timesteps: float | None = None
    """The Zoo's own budget, recorded only: the benchmark table's ``env_steps`` rules."""
    described: dict[str, Any] = field(default_factory=dict)
    """The block as JSON (schedules as ``lin_<x>``, classes as ``nn.<Name>``), for ``config.json``."""


# -- the safe literal parser -------------------------------------------------------------------
def parse_python_literal(text: str, where: str = "value") -> Any:
    """Read the Python expression ``text`` built only of the forms the Zoo writes.

    Accepted: numbers (with unary ``-``/``+``), strings, ``True``/``False``/``None``, lists, tuples,
    dict displays with string keys, ``dict(key=value, ...)`` and ``nn.<Activation>`` (returned as
    the ``torch.nn`` class). Anything else raises: the text is never evaluated.

    Raises:
        ZooError: a syntax error or a form outside the list, naming ``where`` and the offending code.
    """
    if not isinstance(text, str):
        raise ZooError(f"{where}: expected a string of Python, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ZooError(f"{where}: not a Python expression ({err.msg}): {text!r}") from err
    return _literal(tree.body, where)


def _literal(node: ast.AST, where: str) -> Any:
    """The value of one accepted syntax node (see :func:`parse_python_literal`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ZooError(f"{where}: a sign applies to numbers only, got {ast.unparse(node)!r}")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List):
        return [_literal(item, where) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(item, where) for item in node.elts)
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # ``{**other}``
                raise ZooError(f"{where}: dict unpacking is not accepted: {ast.unparse(node)!r}")
            name = _literal(key, where)
            if not isinstance(name, str):
                raise ZooError(f"{where}: dict keys must be strings, got {name!r}")
            out[name] = _literal(value, where)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        if node.args:
            raise ZooError(f"{where}: dict(...) takes keyword arguments only: {ast.unparse(node)!r}")
        kw: dict[str, Any] = {}
        for item in node.keywords:
            if item.arg is None:
                raise ZooError(f"{where}: dict(**...) is not accepted: {ast.unparse(node)!r}")
            kw[item.arg] = _literal(item.value, where)
        return kw
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "nn"
        and node.attr in ACTIVATIONS
    ):
        return ACTIVATIONS[node.attr]
    raise ZooError(
        f"{where}: {ast.unparse(node)!r} is not accepted (only numbers, strings, booleans, None, lists, "
        f"tuples, dicts, dict(...) and nn.<{'|'.join(ACTIVATIONS)}>)"
    )


# -- the translation ---------------------------------------------------------------------------
def schedule(value: Any, where: str) -> float | LinearSchedule:
    """A number as ``float``, or ``"lin_<x>"`` as :class:`LinearSchedule` ``(x)``.

    Raises:
        ZooError: another string (the Zoo's other schedule names are not used by these tables), or
            a non-number.
    """
    if isinstance(value, bool):
        raise ZooError(f"{where}: expected a number or 'lin_<number>', got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        prefix, _, number = value.partition("_")
        if prefix == "lin":
            try:
                initial = float(number)
            except ValueError:
                initial = math.nan
            if math.isfinite(initial):
                return LinearSchedule(initial)
        raise ZooError(f"{where}: expected a number or 'lin_<number>' (a linear schedule), got {value!r}")
    raise ZooError(f"{where}: expected a number or 'lin_<number>', got {value!r}")


def activation(value: Any, where: str) -> type[nn.Module]:
    """``"nn.ReLU"``, ``"ReLU"`` or the class itself as the ``torch.nn`` class."""
    if isinstance(value, type) and value in ACTIVATIONS.values():
        return value
    if isinstance(value, str):
        name = value.removeprefix("nn.").removeprefix("torch.nn.")
        if name in ACTIVATIONS:
            return ACTIVATIONS[name]
    raise ZooError(f"{where}: expected one of nn.{', nn.'.join(ACTIVATIONS)}, got {value!r}")


def policy_kwargs(value: Any, where: str = "policy_kwargs") -> dict[str, Any]:
    """``policy_kwargs`` given as a Zoo string or a mapping, with ``activation_fn`` as a class."""
    parsed = parse_python_literal(value, where) if isinstance(value, str) else value
    if not isinstance(parsed, Mapping):
        raise ZooError(f"{where}: expected dict(...) or a mapping, got {value!r}")
    out = dict(parsed)
    if "activation_fn" in out:
        out["activation_fn"] = activation(out["activation_fn"], f"{where}.activation_fn")
    if "net_arch" in out:
        out["net_arch"] = _net_arch(out["net_arch"], f"{where}.net_arch")
    return out


def _net_arch(value: Any, where: str) -> list[int] | dict[str, list[int]]:
    """``[64, 64]`` or ``dict(pi=[...], vf=[...])`` / ``dict(pi=[...], qf=[...])``, widths checked."""

    def widths(layers: Any, at: str) -> list[int]:
        if not isinstance(layers, (list, tuple)) or not all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in layers
        ):
            raise ZooError(f"{at}: expected a list of positive layer widths, got {layers!r}")
        return list(layers)

    if isinstance(value, Mapping):
        unknown = set(value) - {"pi", "vf", "qf"}
        if unknown:
            raise ZooError(f"{where}: keys must be among pi, vf, qf, got {sorted(unknown)}")
        return {key: widths(layers, f"{where}.{key}") for key, layers in value.items()}
    return widths(value, where)


def normalize_kwargs(value: Any, gamma: float | None, where: str = "normalize") -> dict[str, Any] | None:
    """The Zoo's ``normalize`` as ``VecNormalize`` arguments (``None``: off).

    ``true`` normalises observations and rewards (``VecNormalize``'s defaults, as the Zoo does);
    a mapping or ``dict(...)`` string picks. The reward statistics use the algorithm's ``gamma``
    when the block sets one, as the Zoo's ``ExpManager`` does.
    """
    if value is None or value is False:
        return None
    if value is True:
        out: dict[str, Any] = {}
    elif isinstance(value, str):
        parsed = parse_python_literal(value, where)
        if not isinstance(parsed, Mapping):
            raise ZooError(f"{where}: expected true, false or dict(...) of VecNormalize arguments, got {value!r}")
        out = dict(parsed)
    elif isinstance(value, Mapping):
        out = dict(value)
    else:
        raise ZooError(f"{where}: expected true, false or dict(...) of VecNormalize arguments, got {value!r}")
    allowed = {"norm_obs", "norm_reward", "clip_obs", "clip_reward", "epsilon", "gamma", "norm_obs_keys"}
    unknown = set(out) - allowed
    if unknown:
        raise ZooError(f"{where}: unknown VecNormalize arguments {sorted(unknown)} (expected among {sorted(allowed)})")
    if gamma is not None:
        out["gamma"] = gamma
    return out


def constructor_params(algo: str) -> frozenset[str]:
    """The keyword arguments the SB3 class of ``algo`` accepts."""
    cls = sb3_class(algo)
    return frozenset(inspect.signature(cls.__init__).parameters) - {"self", "policy", "env"}


def sb3_class(algo: str) -> Callable[..., Any]:
    """``stable_baselines3.PPO`` or ``SAC``.

    Raises:
        ZooError: ``algo`` is not ``ppo`` or ``sac``.
    """
    if algo not in ALGOS:
        raise ZooError(f"algo: expected one of {', '.join(ALGOS)}, got {algo!r}")
    import stable_baselines3  # here: the sb3 extra is needed only by the SB3 side of the table

    return stable_baselines3.PPO if algo == "ppo" else stable_baselines3.SAC


def translate(algo: str, block: Mapping[str, Any] | None, where: str = "kwargs") -> Translation:
    """Translate one Zoo hyperparameter block (or plain SB3 kwargs) for ``algo``.

    Raises:
        ZooError: an unknown or unsupported key, a value of the wrong kind, a policy other than
            ``MlpPolicy``, or code in a string (each message names the field and the value).
    """
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        raise ZooError(f"{where}: expected a mapping of SB3/Zoo hyperparameters, got {block!r}")
    params = constructor_params(algo)
    kwargs: dict[str, Any] = {}
    described: dict[str, Any] = {}
    for key, value in block.items():
        at = f"{where}.{key}"
        if not isinstance(key, str):
            raise ZooError(f"{where}: keys must be strings, got {key!r}")
        if key in UNSUPPORTED_KEYS:
            raise ZooError(f"{at}: not supported by the benchmark's SB3 runner (got {value!r})")
        if key in NOT_MODEL_KEYS:
            described[key] = _describe(value)
            continue
        if key not in params:
            raise ZooError(f"{at}: not an argument of stable_baselines3.{algo.upper()} (got {value!r})")
        if key in SCHEDULE_KEYS and value is not None:
            kwargs[key] = schedule(value, at)
        elif key == "policy_kwargs":
            kwargs[key] = policy_kwargs(value, at)
        elif key == "train_freq":
            kwargs[key] = _train_freq(value, at)
        elif key in INT_KEYS:
            kwargs[key] = _integer(value, at)
        else:
            kwargs[key] = value
        described[key] = _describe(kwargs[key])
    policy = block.get("policy", POLICY)
    if policy != POLICY:
        raise ZooError(f"{where}.policy: only {POLICY!r} is supported (flat observations), got {policy!r}")
    gamma = block.get("gamma")
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float))):
        raise ZooError(f"{where}.gamma: expected a number, got {gamma!r}")
    n_envs = block.get("n_envs")
    if n_envs is not None:
        n_envs = _integer(n_envs, f"{where}.n_envs")
        if n_envs < 1:
            raise ZooError(f"{where}.n_envs: expected an integer >= 1, got {n_envs!r}")
    n_timesteps = block.get("n_timesteps")
    if n_timesteps is not None and (isinstance(n_timesteps, bool) or not isinstance(n_timesteps, (int, float))):
        raise ZooError(f"{where}.n_timesteps: expected a number, got {n_timesteps!r}")
    norm = normalize_kwargs(block.get("normalize"), None if gamma is None else float(gamma), f"{where}.normalize")
    return Translation(kwargs, n_envs, norm, n_timesteps, described)


def _integer(value: Any, where: str) -> int:
    """An int, or an integral float (YAML's ``!!float 1e6``) as int."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ZooError(f"{where}: expected an integer, got {value!r}")
    return int(value)


def _train_freq(value: Any, where: str) -> int | tuple[int, str]:
    """``train_freq``: an integer (steps) or ``[n, "step"|"episode"]`` as SB3's tuple."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[1] not in ("step", "episode"):
            raise ZooError(f"{where}: expected an integer or [n, 'step'|'episode'], got {value!r}")
        return (_integer(value[0], where), str(value[1]))
    return _integer(value, where)


def _describe(value: Any) -> Any:
    """``value`` as JSON: schedules as ``lin_<x>``, activation classes as ``nn.<Name>``."""
    if isinstance(value, LinearSchedule):
        return str(value)
    if isinstance(value, type):
        return f"nn.{value.__name__}"
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    return value
