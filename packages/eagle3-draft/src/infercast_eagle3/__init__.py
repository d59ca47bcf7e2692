"""EAGLE3 draft models in plain PyTorch."""

__version__ = "0.1.0"
