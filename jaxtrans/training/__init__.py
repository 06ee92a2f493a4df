"""Training: optimizer and schedule, loss, state, sharding, steps, checkpoints, the loop."""

from jaxtrans.training.loop import train_and_evaluate

__all__ = ["train_and_evaluate"]
