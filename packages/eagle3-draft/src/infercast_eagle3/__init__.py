"""EAGLE3 draft models in plain PyTorch: config, model shell, checkpoints, draft/verify loop."""

__version__ = "0.1.0"
