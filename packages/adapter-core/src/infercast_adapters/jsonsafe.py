"""Strict JSON for the command lines' ``--json`` output."""

from __future__ import annotations

import math
from typing import Any


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (a cycle never measured, a queue that never
    drains) as ``None``, so that ``json.dumps(..., allow_nan=False)`` writes JSON that strict
    parsers accept."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value
