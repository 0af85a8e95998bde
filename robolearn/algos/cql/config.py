"""CQL and Cal-QL configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass

from robolearn.algos.common import OfflineCriticConfig, check_count


@dataclass
class CQLConfig(OfflineCriticConfig):
    """Conservative Q-Learning, CQL(H) (Kumar et al., 2020), and Cal-QL (Nakamoto et al., 2023) with
    ``calibrated=True``.

    Defaults follow CORL's ``cql.py`` with its D4RL locomotion configs
    (``configs/offline/cql/{halfcheetah,hopper,walker2d}/*.yaml``). Other domains there: Adroit uses
    ``cql_alpha=1.0, actor_lr=1e-4``; AntMaze ``cql_alpha=5.0, cql_lagrange=True,
    cql_target_action_gap=0.8, cql_max_target_backup=True, cql_clip_diff_min=-200, actor_lr=1e-4``
    and five 256-wide critic layers. The fields every offline actor-critic shares (batch, discount,
    critic learning rate, ensemble size, observation groups, the HL-Gauss head) are
    :class:`OfflineCriticConfig`'s; this class redeclares those whose CORL default differs.
    """

    target_update_period: int = 1
    """Target critics are lerped every this many updates (CORL: 1)."""
    actor_lr: float = 3e-5
    """Adam learning rate of the actor (CORL ``policy_lr``, locomotion: 3e-5)."""
    alpha_lr: float = 3e-5
    """Adam learning rate of ``log_alpha`` (CORL reuses ``policy_lr``)."""
    init_alpha: float = 1.0
    """Initial entropy temperature (CORL: ``log_alpha = 0``)."""
    autotune_alpha: bool = True
    """Learn alpha towards ``target_entropy`` (CORL ``use_automatic_entropy_tuning``); if False alpha stays ``init_alpha``."""
    alpha_multiplier: float = 1.0
    """Scale on alpha wherever it weighs an entropy term (CORL: 1.0); the temperature loss uses ``log_alpha`` itself."""
    target_entropy: float | None = None
    """Entropy the temperature steers to; ``None`` means ``-action_dim`` (CORL)."""
    backup_entropy: bool = False
    """Subtract ``alpha * log pi(a'|s')`` in the TD target (soft backup); CORL: off."""
    bc_steps: int = 0
    """Initial updates whose actor loss is ``alpha * log pi(a~|s) - log pi(a|s)`` (BC warm-up; CORL: 0)."""
    cql_n_actions: int = 10
    """Actions per state of each kind (uniform, pi(s), pi(s')) in the logsumexp (CORL: 10)."""
    cql_alpha: float = 10.0
    """Weight of the conservative gap. CORL's locomotion configs use 10.0 (the CQL paper's 5.0 with
    Lagrange on AntMaze; Adroit 1.0); we take CORL's tuned locomotion value as the default since the
    rest of these defaults are its locomotion settings."""
    cql_temp: float = 1.0
    """Temperature of the logsumexp: ``temp * logsumexp(Q / temp)`` (CORL: 1.0)."""
    cql_importance_sample: bool = True
    """CQL(H) with importance weights: subtract each sampler's log-density (uniform: ``-sum log(high - low)``,
    policy: ``log pi``) and leave out the data action (CORL: on). Off: the plain logsumexp over all
    samples and the data action."""
    cql_lagrange: bool = False
    """Tune the gap's weight ``alpha' * cql_alpha`` by dual descent so the gap approaches ``cql_target_action_gap``."""
    cql_target_action_gap: float = -1.0
    """Lagrange target for the gap (CORL: -1.0 default, 0.8 on AntMaze); only with ``cql_lagrange``."""
    init_log_alpha_prime: float = 1.0
    """Initial ``log alpha'`` of the Lagrange multiplier (CORL's ``Scalar(1.0)``)."""
    alpha_prime_lr: float = 3e-4
    """Adam learning rate of ``log alpha'`` (CORL reuses ``qf_lr``)."""
    cql_max_target_backup: bool = False
    """TD target from the best of ``cql_n_actions`` policy actions at s' (CORL: off; AntMaze on)."""
    cql_clip_diff_min: float = -math.inf
    """Lower clip of the per-sample gap (CORL: -inf; AntMaze -200)."""
    cql_clip_diff_max: float = math.inf
    """Upper clip of the per-sample gap (CORL: +inf)."""
    calibrated: bool = False
    """Cal-QL: policy-action Q-values in the gap become ``max(Q, mc_return)``; reads
    ``batch.extras["mc_return"]`` ``[B]`` (Monte-Carlo discounted return-to-go of the data)."""
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    """Actor hidden layer widths (CORL: three layers of 256)."""
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    """Critic hidden layer widths (CORL ``q_n_hidden_layers``: 3 of 256 on locomotion)."""
    orthogonal_init: bool = True
    """CORL's init: critic hidden layers orthogonal (gain sqrt 2, zero bias), critic output layer
    orthogonal with gain 1e-2, actor output layer Xavier-uniform with gain 1e-2 (zero bias), so
    initial Q-values are ~0 and the initial policy is near-centred. False: torch defaults (as SAC)."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        super().__post_init__()
        for name in ("target_update_period", "cql_n_actions"):
            check_count(name, getattr(self, name))
        for name in ("init_alpha", "cql_temp"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"{name}: expected > 0, got {getattr(self, name)}")
        for name in ("cql_alpha", "alpha_multiplier", "bc_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if not self.cql_clip_diff_min < self.cql_clip_diff_max:
            raise ValueError(
                f"cql_clip_diff_max: expected > cql_clip_diff_min ({self.cql_clip_diff_min}), got {self.cql_clip_diff_max}"
            )


@dataclass
class CalQLConfig(CQLConfig):
    """Cal-QL: :class:`CQLConfig` with the calibrated lower bound on (CORL's ``cal_ql.py`` defaults
    otherwise match its ``cql.py``).
    """

    calibrated: bool = True
    """Cal-QL's ``max(Q, mc_return)`` on the policy-action Q-values of the conservative term."""
