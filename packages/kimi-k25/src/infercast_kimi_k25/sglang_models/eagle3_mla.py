"""``Eagle3DeepseekV2ForCausalLM`` for sglang: sglang's own MLA draft implementation, with the
checkpoint's tensors checked and named by :func:`~infercast_kimi_k25.sglang_plugin.checked_weights`
as they stream into its ``load_weights``."""

from __future__ import annotations

import importlib
import logging
import pkgutil

from infercast_kimi_k25.eagle3 import ARCHITECTURE
from infercast_kimi_k25.sglang_plugin import checked_weights, register

logger = logging.getLogger(__name__)

UPSTREAM_MODULE = "sglang.srt.models.kimi_k25_eagle3"


def _class_in(module_name: str) -> type | None:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001  (sglang itself skips model modules that fail to import)
        logger.debug("infercast: skipped %s (%s)", module_name, exc)
        return None
    found = getattr(module, ARCHITECTURE, None)
    return found if isinstance(found, type) else None


def upstream_class() -> type | None:
    """The installed sglang's implementation: in ``kimi_k25_eagle3`` (sglang 0.5.23), else in
    any of its EAGLE model modules."""
    found = _class_in(UPSTREAM_MODULE)
    if found is not None:
        return found
    models = importlib.import_module("sglang.srt.models")
    for info in pkgutil.iter_modules(models.__path__, "sglang.srt.models."):
        if "eagle" in info.name and info.name != UPSTREAM_MODULE:
            found = _class_in(info.name)
            if found is not None:
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
            params = {name for name, _ in self.named_parameters()}
            return super().load_weights(checked_weights(self.config, weights, params), *args, **kwargs)

    EntryClass = [Eagle3DeepseekV2ForCausalLM]
