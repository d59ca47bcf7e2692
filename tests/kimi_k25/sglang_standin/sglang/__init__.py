"""A stand-in for the parts of sglang 0.5.23 the infercast glue touches (tests only)."""
