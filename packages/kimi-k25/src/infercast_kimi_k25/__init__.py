"""infercast adapter for Kimi-K2.5."""

__version__ = "0.1.0"
