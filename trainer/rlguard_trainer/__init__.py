"""rlguard's bundled GRPO trainer (Accelerate + transformers + torch), with rlguard in the loop."""
from .config import FAULTS, TrainConfig

__all__ = ["TrainConfig", "FAULTS", "train"]


def train(cfg: TrainConfig) -> dict:
    from .loop import train as _train

    return _train(cfg)
