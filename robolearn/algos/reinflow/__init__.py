"""ReinFlow and DPPO: PPO over the denoising chain of a pre-trained flow or diffusion chunk policy."""

from robolearn.algos.reinflow.agent import ReinFlow, load_pretrained
from robolearn.algos.reinflow.config import DPPOConfig, ReinFlowConfig

__all__ = ["DPPOConfig", "ReinFlow", "ReinFlowConfig", "load_pretrained"]
