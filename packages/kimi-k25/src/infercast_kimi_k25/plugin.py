"""Entry point of the Kimi-K2.5 adapter (hooks arrive with the adapter issue)."""
