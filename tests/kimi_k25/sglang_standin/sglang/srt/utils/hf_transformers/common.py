"""Stand-in for ``sglang.srt.utils.hf_transformers.common`` (sglang 0.5.23): its config registry,
which carries sglang's own ``kimi_k2`` alias and registers it with ``AutoConfig`` on import."""

from transformers import AutoConfig, DeepseekV3Config


class _KimiK2ConfigAlias(DeepseekV3Config):
    model_type = "kimi_k2"


_CONFIG_REGISTRY = {"kimi_k2": _KimiK2ConfigAlias}

for _name, _cls in _CONFIG_REGISTRY.items():
    try:
        AutoConfig.register(_name, _cls)
    except ValueError:
        pass
