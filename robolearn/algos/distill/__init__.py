"""Teacher-student distillation: a student on deployable observations taught by a privileged teacher
(DAgger, or asymmetric actor-critic distillation); config, pure losses, agent.
"""

from robolearn.algos.distill.agent import CRITIC_KINDS, Distill, TeacherAct
from robolearn.algos.distill.config import DistillConfig

__all__ = ["CRITIC_KINDS", "Distill", "DistillConfig", "TeacherAct"]
