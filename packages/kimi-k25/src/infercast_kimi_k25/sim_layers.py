"""The simulator's engine view of Kimi-K2.5's MoonViT tower, built from its config.

Registered through ``infercast_register_sim_layers`` for model_type ``kimi_k25``; the simulator
is imported only when it calls the builder, so this adapter does not depend on it.
"""

from __future__ import annotations

from typing import Any

from infercast_adapters import ConfigError


def moonvit_tower(ctx: Any, config: Any, text_hidden: int, profile: Any) -> Any:
    """MoonViT and its projector for one rank: sizes, patch grid policy and position-embedding
    grid read from Kimi-K2.5's ``vision_config`` (transformers' ``Kimi_K25VisionConfig`` names,
    with the remote code's ``vt_*`` names accepted)."""
    from infercast.vision import ImagePolicy, SimVisionTower

    vision = config.vision_config

    def read(*names: str, default: Any = None) -> Any:
        for name in names:
            value = getattr(vision, name, None)
            if value is not None:
                return value
        if default is None:
            raise ConfigError(f"kimi_k25 vision_config has no {names[0]}")
        return default

    merge = read("merge_kernel_size", "spatial_merge_size")
    merge = int(list(merge)[0]) if isinstance(merge, (list, tuple)) else int(merge)
    policy = ImagePolicy(patch=int(read("patch_size")), merge=merge,
                         max_patches=getattr(vision, "max_patches", None),
                         max_patches_per_side=getattr(vision, "max_patches_per_side", None))
    pos_grid = (int(read("pos_emb_height", "init_pos_emb_height", default=64)),
                int(read("pos_emb_width", "init_pos_emb_width", default=64)))
    return SimVisionTower(hidden=read("hidden_size", "vt_hidden_size"),
                          heads=read("num_attention_heads", "vt_num_attention_heads"),
                          intermediate=read("intermediate_size", "vt_intermediate_size"),
                          num_blocks=read("num_hidden_layers", "vt_num_hidden_layers"), policy=policy,
                          channels=int(read("in_channels", "num_channels", default=3)), text_hidden=text_hidden,
                          tp=ctx.parallel.tp, pos_grid=pos_grid)
