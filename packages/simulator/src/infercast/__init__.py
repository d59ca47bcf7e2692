"""infercast: predict what serving a large language model costs, before owning the hardware."""

from __future__ import annotations

__version__ = "0.1.0"
