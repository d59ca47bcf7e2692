"""Phase-1 patches: make a Kimi-K2.5 config usable before any model class is touched.

Each function fixes one problem and says which in its docstring. They only add what is
missing or replace what cannot work here; a value the user's config already holds is kept.
:func:`patch_config` runs them all and is what the adapter's ``infercast_patch_config`` calls
for configs of model_type ``kimi_k25`` (and nothing else).
"""

from __future__ import annotations

from typing import Any

FALLBACK_ATTENTION = "sdpa"
"""What replaces ``flash_attention_2`` where transformers cannot use flash-attn 2."""

VISION_NAME_BRIDGE = {
    # remote-code name      native / generic name
    "vt_hidden_size": "hidden_size",
    "vt_num_hidden_layers": "num_hidden_layers",
    "vt_num_attention_heads": "num_attention_heads",
    "vt_intermediate_size": "intermediate_size",
    "init_pos_emb_height": "pos_emb_height",
    "init_pos_emb_width": "pos_emb_width",
    "init_pos_emb_time": "pos_emb_time",
}

EXPERT_COUNT_KEYS = {
    # root key             text_config keys tried in order, then the default
    "n_routed_experts": (("n_routed_experts", "num_experts", "num_local_experts"), None),
    "n_shared_experts": (("n_shared_experts", "num_shared_experts"), 0),
    "num_experts_per_tok": (("num_experts_per_tok", "moe_topk"), None),
}
"""Expert counts the root config gets from ``text_config``. Fallbacks: the first key present in
``text_config`` wins; with none present, ``n_shared_experts`` is 0 (no shared expert) and the
other two stay unset, so a text-only config that is not MoE is not made to look like one."""


def provide_is_torch_fx_available() -> bool:
    """Kimi-K2.5's remote code (written for transformers 4.x) imports
    ``transformers.utils.is_torch_fx_available``, which transformers 5 removed; the import
    fails before any class exists. Provide it (torch.fx ships with every torch 2), once.
    Returns True when it had to be added."""
    import transformers.utils

    if hasattr(transformers.utils, "is_torch_fx_available"):
        return False

    def is_torch_fx_available() -> bool:
        return True

    transformers.utils.is_torch_fx_available = is_torch_fx_available
    import_utils = getattr(transformers.utils, "import_utils", None)
    if import_utils is not None and not hasattr(import_utils, "is_torch_fx_available"):
        import_utils.is_torch_fx_available = is_torch_fx_available
    return True


def flash_attention_2_available() -> bool:
    """Whether transformers can build a model with ``flash_attention_2``: asked of transformers,
    not of the import system, because flash-attn 4 (pulled in by sglang) installs a
    ``flash_attn`` namespace package that imports while transformers still refuses FA2."""
    from transformers.utils import is_flash_attn_2_available

    return bool(is_flash_attn_2_available())


def replace_flash_attention(config: Any, fallback: str = FALLBACK_ATTENTION) -> list[str]:
    """The published config asks for ``flash_attention_2`` in its text and vision configs;
    where transformers cannot use flash-attn 2 (CPU, meta device, most CI, or flash-attn 4
    only) it refuses to build the model. Use ``fallback`` instead wherever flash attention is
    requested. Returns the names of the configs changed."""
    asking = [(name, sub) for name, sub in _configs(config)
              if getattr(sub, "_attn_implementation", None) == "flash_attention_2"]
    if not asking or flash_attention_2_available():  # transformers is asked only when it matters
        return []
    for _, sub in asking:
        sub._attn_implementation = fallback
    return sorted({name for name, _ in asking})


def bridge_vision_names(vision: Any) -> dict[str, Any]:
    """A generic vision input generator reads ``spatial_merge_size``, ``temporal_patch_size``,
    ``in_channels`` and the plain ``hidden_size`` family, while Kimi-K2.5's config spells them
    ``merge_kernel_size`` ([2, 2]), not at all (images are single frames, RGB) and ``vt_*``
    (remote code). Add the missing spellings in both directions; where a ``vt_*`` value from the
    checkpoint differs from the native name's class default, the checkpoint's value is copied
    over it. Returns what was added or copied."""
    added: dict[str, Any] = {}

    def add(name: str, value: Any) -> None:
        if value is not None and getattr(vision, name, None) is None:
            setattr(vision, name, value)
            added[name] = value

    merge = getattr(vision, "merge_kernel_size", None)
    if merge is not None:
        add("spatial_merge_size", int(list(merge)[0]))
    add("temporal_patch_size", 1)
    add("in_channels", 3)
    for remote, native in VISION_NAME_BRIDGE.items():
        remote_value = getattr(vision, remote, None)
        if remote_value is not None and getattr(vision, native, None) not in (None, remote_value):
            # A ``vt_*`` value can only come from the checkpoint's file, while the native class
            # fills its own names with defaults: the file's value is the real one.
            setattr(vision, native, remote_value)
            added[native] = remote_value
        add(native, remote_value)
        add(remote, getattr(vision, native, None))
    return added


def copy_expert_counts(config: Any) -> dict[str, Any]:
    """Tools that look for MoE fields on the root config (``config.n_routed_experts``) find
    nothing on a multimodal config, where they live in ``text_config``. Copy them up, with the
    fallbacks in :data:`EXPERT_COUNT_KEYS`. Returns what was copied."""
    text = getattr(config, "text_config", None)
    if text is None:
        return {}
    copied = {}
    for root_key, (text_keys, default) in EXPERT_COUNT_KEYS.items():
        if getattr(config, root_key, None) is not None:
            continue
        value = next((getattr(text, k) for k in text_keys if getattr(text, k, None) is not None), default)
        if value is not None:
            setattr(config, root_key, value)
            copied[root_key] = value
    return copied


def _configs(config: Any) -> list[tuple[str, Any]]:
    found = [("config", config)]
    for name in ("text_config", "vision_config"):
        sub = getattr(config, name, None)
        if sub is not None:
            found.append((name, sub))
    return found


def _is_remote(config: Any) -> bool:
    """Whether ``config``'s class is the checkpoint's remote code, whose modeling code imports
    ``is_torch_fx_available`` (not transformers' own class, not plain values)."""
    return not type(config).__module__.startswith(("transformers.models.", "infercast_adapters."))


def patch_config(config: Any) -> dict[str, Any]:
    """Run every phase-1 patch on a ``kimi_k25`` config, in place; returns what each changed."""
    report: dict[str, Any] = {"is_torch_fx_available": provide_is_torch_fx_available() if _is_remote(config) else False}
    report["attention"] = replace_flash_attention(config)
    vision = getattr(config, "vision_config", None)
    report["vision_names"] = bridge_vision_names(vision) if vision is not None else {}
    report["expert_counts"] = copy_expert_counts(config)
    return report
