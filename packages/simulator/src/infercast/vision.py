"""Vision encoders: image sizes to patch grids, and simulator layers for a ViT tower plus projector.

Layouts follow what an engine launches for a MoonViT-style tower: a patch embedding GEMM, then
per block LayerNorm, fused QKV GEMM, 2-D RoPE, variable-length attention within each image,
output GEMM, LayerNorm, MLP with GELU; a final LayerNorm, the spatial merge (a reshape) and
the projector (LayerNorm, GEMM, GELU, GEMM) into the language model's hidden size. Heads and
MLP columns split over the attention TP group, with an all-reduce after each row-parallel GEMM,
when the head count divides evenly; otherwise every rank runs the whole tower on its images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from infercast_adapters import InfercastError
from torch import nn

from infercast.layers import ACT_DTYPE, META, OPS, SimContext, SimLinear, SimModule
from infercast.quant import BF16


@dataclass(frozen=True)
class ImageGrid:
    """One image as the vision tower sees it."""

    height: int
    width: int
    """Pixels as given."""
    grid_h: int
    grid_w: int
    """Patches per column and row after the processor's resize and padding."""
    merge: int

    @property
    def patches(self) -> int:
        return self.grid_h * self.grid_w

    @property
    def tokens(self) -> int:
        """Tokens the image puts into the language model after the merge."""
        return self.patches // (self.merge * self.merge)


def vision_sizes(vision_config: Any) -> tuple[int, int]:
    """(patch size, spatial merge) read through the generic names a vision config carries."""
    patch = getattr(vision_config, "patch_size", None)
    merge = getattr(vision_config, "spatial_merge_size", None)
    if merge is None:
        kernel = getattr(vision_config, "merge_kernel_size", None)
        merge = int(list(kernel)[0]) if kernel is not None else 1
    if not isinstance(patch, int) or patch < 1:
        raise InfercastError(f"vision config has no usable patch_size ({patch!r})")
    return patch, int(merge)


def image_grid(height: int, width: int, vision_config: Any) -> ImageGrid:
    """Patch grid of an ``height`` x ``width`` image: scaled down (never up) to the config's
    ``max_patches`` / ``max_patches_per_side`` when it has them, then padded up to a multiple of
    patch x merge pixels per side, as NaViT-style processors (Kimi-K2.5's among them) do."""
    for name, value in (("--image-height", height), ("--image-width", width)):
        if not isinstance(value, int) or value < 1:
            raise InfercastError(f"{name} must be a positive number of pixels, got {value!r}")
    patch, merge = vision_sizes(vision_config)
    scale = 1.0
    max_patches = getattr(vision_config, "max_patches", None)
    if max_patches:
        current = max(1, height // patch) * max(1, width // patch)
        scale = min(scale, math.sqrt(max_patches / current))
    per_side = getattr(vision_config, "max_patches_per_side", None)
    if per_side:
        scale = min(scale, per_side * patch / height, per_side * patch / width)
    h, w = max(1, int(height * scale)), max(1, int(width * scale))
    if per_side:
        h, w = min(h, per_side * patch), min(w, per_side * patch)
    factor = patch * merge
    h, w = -(-h // factor) * factor, -(-w // factor) * factor
    return ImageGrid(height, width, h // patch, w // patch, merge)


class SimLayerNorm(SimModule):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.logical_params = 2 * hidden_size
        self.weight("weight", (hidden_size,))
        self.weight("bias", (hidden_size,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OPS.layer_norm(x, self.weights["weight"], self.weights["bias"])


class SimBiasLinear(SimLinear):
    """A bf16 linear with bias; the bias rides in the GEMM epilogue (no kernel of its own)."""

    def __init__(self, in_features: int, out_features: int, *, shard: str = "replicated", tp: int = 1) -> None:
        super().__init__(in_features, out_features, BF16, shard=shard, tp=tp)
        self.logical_params += out_features
        self.weight("bias", (out_features // tp if shard == "column" else out_features,))


class SimVisionBlock(SimModule):
    def __init__(self, hidden: int, heads: int, intermediate: int, tp: int) -> None:
        super().__init__()
        self.tp, self.heads, self.head_dim = tp, heads // tp, hidden // heads
        self.norm1 = SimLayerNorm(hidden)
        self.qkv = SimBiasLinear(hidden, 3 * hidden, shard="column", tp=tp)
        self.proj = SimBiasLinear(hidden, hidden, shard="row", tp=tp)
        self.norm2 = SimLayerNorm(hidden)
        self.fc1 = SimBiasLinear(hidden, intermediate, shard="column", tp=tp)
        self.fc2 = SimBiasLinear(intermediate, hidden, shard="row", tp=tp)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        return OPS.all_reduce(x, self.tp, "tp") if self.tp > 1 else x

    def forward(self, x: torch.Tensor, images: int, patches: int) -> torch.Tensor:
        T = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(T, 3, self.heads, self.head_dim).unbind(1)
        q, k = OPS.rope(q, k)
        out = OPS.attention(q, k, v, images, patches, patches, False)
        x = x + self._reduce(self.proj(out.reshape(T, self.heads * self.head_dim)))
        return x + self._reduce(self.fc2(OPS.gelu(self.fc1(self.norm2(x)))))


class SimVisionTower(SimModule):
    """One rank's vision encoder and projector."""

    def __init__(self, *, hidden: int, heads: int, intermediate: int, num_blocks: int, patch: int, channels: int,
                 merge: int, text_hidden: int, tp: int, pos_grid: tuple[int, int] = (64, 64)) -> None:
        super().__init__()
        self.tp = tp if heads % tp == 0 and intermediate % tp == 0 else 1
        self.hidden, self.merge, self.patch_dim = hidden, merge, channels * patch * patch
        self.patch_embed = SimBiasLinear(self.patch_dim, hidden)
        self.weight("pos_emb", (pos_grid[0] * pos_grid[1], hidden))
        self.logical_params = pos_grid[0] * pos_grid[1] * hidden
        self.blocks = nn.ModuleList([SimVisionBlock(hidden, heads, intermediate, self.tp) for _ in range(num_blocks)])
        self.final_norm = SimLayerNorm(hidden)
        merged = hidden * merge * merge
        self.projector_norm = SimLayerNorm(hidden)
        self.projector_in = SimBiasLinear(merged, merged, shard="column", tp=self.tp)
        self.projector_out = SimBiasLinear(merged, text_hidden, shard="row", tp=self.tp)

    def embed(self, patches: int) -> torch.Tensor:
        pixels = torch.empty(patches, self.patch_dim, dtype=ACT_DTYPE, device=META)
        x = self.patch_embed(pixels)
        return x + torch.empty_like(x)  # interpolated position embedding

    def project(self, x: torch.Tensor) -> torch.Tensor:
        x = self.projector_norm(self.final_norm(x))
        tokens = x.reshape(-1, self.hidden * self.merge * self.merge)
        y = self.projector_out(OPS.gelu(self.projector_in(tokens)))
        return OPS.all_reduce(y, self.tp, "tp") if self.tp > 1 else y


def convert_vision(blocks: nn.ModuleList, projector: nn.Module | None, config: Any,
                   text_hidden: int, ctx: SimContext) -> SimVisionTower:
    """A :class:`SimVisionTower` sized from the transformers vision config, checked against the
    built modules (block count, projector output width)."""
    vision = config.vision_config
    patch, merge = vision_sizes(vision)
    hidden = getattr(vision, "hidden_size", None) or getattr(vision, "vt_hidden_size")
    heads = getattr(vision, "num_attention_heads", None) or getattr(vision, "vt_num_attention_heads")
    intermediate = getattr(vision, "intermediate_size", None) or getattr(vision, "vt_intermediate_size")
    if len(blocks) != (getattr(vision, "num_hidden_layers", None) or len(blocks)):
        raise InfercastError(f"vision tower has {len(blocks)} blocks, config says {vision.num_hidden_layers}")
    if projector is not None:
        out = [m.out_features for m in projector.modules() if isinstance(m, nn.Linear)]
        if out and out[-1] != text_hidden:
            raise InfercastError(f"projector ends at width {out[-1]}, the language model is {text_hidden} wide")
    return SimVisionTower(hidden=hidden, heads=heads, intermediate=intermediate, num_blocks=len(blocks), patch=patch,
                          channels=getattr(vision, "in_channels", 3) or 3, merge=merge, text_hidden=text_hidden,
                          tp=ctx.parallel.tp, pos_grid=_pos_grid(vision))


def _pos_grid(vision: Any) -> tuple[int, int]:
    h = getattr(vision, "pos_emb_height", None) or getattr(vision, "init_pos_emb_height", None) or 64
    w = getattr(vision, "pos_emb_width", None) or getattr(vision, "init_pos_emb_width", None) or 64
    return int(h), int(w)
