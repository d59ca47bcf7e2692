"""Vision encoders: image sizes to patch grids, and simulator layers for a ViT tower plus projector.

The tower's sizes come from the adapter that owns it (Kimi-K2.5's registers a MoonViT builder);
layouts follow what an engine launches for a MoonViT-style tower: a patch embedding GEMM, then
per block LayerNorm, fused QKV GEMM, 2-D RoPE, variable-length attention within each image,
output GEMM, LayerNorm, MLP with GELU; a final LayerNorm, the spatial merge (a reshape) and
the projector (LayerNorm, GEMM, GELU, GEMM) into the language model's hidden size. Heads and
MLP columns split over the attention TP group, with an all-reduce after each row-parallel GEMM,
when the head count divides evenly; otherwise every rank runs the whole tower on its images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from infercast_adapters import InfercastError
from torch import nn

from infercast.layers import ACT_DTYPE, META, OPS, SimLinear, SimModule
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


@dataclass(frozen=True)
class ImagePolicy:
    """How a model's image processor turns pixels into patches (NaViT-style, as Kimi-K2.5's):
    scaled down (never up) to ``max_patches`` and ``max_patches_per_side`` when set, then
    padded up to a multiple of patch x merge pixels per side."""

    patch: int
    merge: int
    max_patches: int | None = None
    max_patches_per_side: int | None = None

    def grid(self, height: int, width: int) -> ImageGrid:
        for name, value in (("--image-height", height), ("--image-width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InfercastError(f"{name} must be a positive number of pixels, got {value!r}")
        patch, merge = self.patch, self.merge
        scale = 1.0
        if self.max_patches:
            current = max(1, height // patch) * max(1, width // patch)
            scale = min(scale, math.sqrt(self.max_patches / current))
        per_side = self.max_patches_per_side
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
        x = OPS.add(x, self._reduce(self.proj(out.reshape(T, self.heads * self.head_dim))))
        return OPS.add(x, self._reduce(self.fc2(OPS.gelu(self.fc1(self.norm2(x))))))


class SimVisionTower(SimModule):
    """One rank's ViT vision encoder and projector; ``policy`` says how images become patches.
    An adapter's vision builder reads its tower's config and constructs this."""

    def __init__(self, *, hidden: int, heads: int, intermediate: int, num_blocks: int, policy: ImagePolicy,
                 channels: int, text_hidden: int, tp: int, pos_grid: tuple[int, int] = (64, 64)) -> None:
        super().__init__()
        self.policy = policy
        self.tp = tp if heads % tp == 0 and intermediate % tp == 0 else 1
        merge, patch = policy.merge, policy.patch
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
        return OPS.add(x, x.new_empty(x.shape))  # interpolated position embedding

    def project(self, x: torch.Tensor) -> torch.Tensor:
        x = self.projector_norm(self.final_norm(x))
        tokens = x.reshape(-1, self.hidden * self.merge * self.merge)
        y = self.projector_out(OPS.gelu(self.projector_in(tokens)))
        return OPS.all_reduce(y, self.tp, "tp") if self.tp > 1 else y
