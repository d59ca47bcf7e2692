"""``Eagle3DeepseekV2ForCausalLM`` for sglang: sglang's own MLA draft implementation, with
checkpoint tensors checked by infercast's mapping before sglang loads them."""

from __future__ import annotations

import importlib
import logging
import pkgutil

from infercast_kimi_k25.eagle3 import ARCHITECTURE
from infercast_kimi_k25.sglang_plugin import checked_weights, register

logger = logging.getLogger(__name__)


def upstream_class() -> type | None:
    """The installed sglang's implementation, found among its EAGLE model modules."""
    models = importlib.import_module("sglang.srt.models")
    for info in pkgutil.iter_modules(models.__path__, "sglang.srt.models."):
        if "eagle" not in info.name:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:  # noqa: BLE001  (sglang itself skips model modules that fail to import)
            logger.debug("infercast: skipped %s (%s)", info.name, exc)
            continue
        found = getattr(module, ARCHITECTURE, None)
        if isinstance(found, type):
            return found
    return None


register()
_Upstream = upstream_class()
if _Upstream is None:
    logger.warning("infercast: this sglang has no %s implementation; upgrade sglang to serve the MLA draft",
                   ARCHITECTURE)
    EntryClass: list[type] = []
else:

    class Eagle3DeepseekV2ForCausalLM(_Upstream):  # type: ignore[misc, valid-type]
        def load_weights(self, weights, *args, **kwargs):
            return super().load_weights(checked_weights(self.config, weights), *args, **kwargs)

    EntryClass = [Eagle3DeepseekV2ForCausalLM]
