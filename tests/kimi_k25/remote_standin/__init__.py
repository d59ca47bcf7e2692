"""STAND-IN for Kimi-K2.5's remote code (``trust_remote_code``), which cannot be downloaded here.

Not the published code: a small re-creation of its *interface* from the facts in
shared/reference/kimi-k25.md and the published class and argument names (KimiK25Config with
``vt_*`` vision fields and ``flash_attention_2``; KimiK25ForConditionalGeneration.forward taking
``grid_thws``; MoonViT3dPretrainedModel / MoonViT3dEncoder / MoonViTEncoderLayer /
MoonVision3dPatchEmbed; PatchMergerMLP; a 4.x-style DeepSeek-V3 text model). It reproduces the
behaviours the adapter's patches fix: the ``is_torch_fx_available`` import, a flash-only vision
attention, the missing ``use_deterministic_attn`` attribute, ``.item()`` in the image merge,
data-dependent MoE dispatch and attention modules returning three values.
"""
