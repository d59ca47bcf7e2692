"""Image sizes to patch grids, and the vision tower's simulator layers."""

from __future__ import annotations

import pytest
from infercast_adapters import InfercastError

from infercast.vision import ImagePolicy

KIMI = ImagePolicy(patch=14, merge=2, max_patches=16384, max_patches_per_side=512)


def image_grid(height, width, policy=KIMI):
    return policy.grid(height, width)


def test_grid_pads_each_side_up_to_patch_times_merge() -> None:
    grid = image_grid(1080, 1920)
    # 1080 -> 1092 = 39 x 28 and 1920 -> 1932 = 69 x 28 pixels: 78 x 138 patches, 39 x 69 tokens
    assert (grid.grid_h, grid.grid_w, grid.patches, grid.tokens) == (78, 138, 10764, 2691)
    exact = image_grid(448, 448)
    assert (exact.grid_h, exact.tokens) == (32, 256)


def test_grid_scales_large_images_down_to_the_patch_budget() -> None:
    grid = image_grid(4000, 6000)
    scale = (16384 / (285 * 428)) ** 0.5  # 4000 // 14 = 285, 6000 // 14 = 428 patches before scaling
    h, w = int(4000 * scale), int(6000 * scale)
    assert (grid.grid_h, grid.grid_w) == (-(-h // 28) * 2, -(-w // 28) * 2)
    tall = image_grid(100_000, 28)
    assert tall.grid_h <= 512 + 1 and tall.grid_w >= 2  # per-side limit, never below one merged token


def test_a_policy_without_limits_only_pads() -> None:
    assert image_grid(64, 32, ImagePolicy(patch=16, merge=1)).tokens == 4 * 2


def test_the_kimi_adapter_reads_moonvit_sizes_from_its_config() -> None:
    """The tower's config reading lives in the adapter that owns it (MoonViT in kimi-k25)."""
    from infercast_kimi_k25.architecture import kimi_k25_config
    from infercast_kimi_k25.sim_layers import moonvit_tower

    from infercast.layers import SimContext
    from infercast.parallel import Parallel, Workload
    from infercast.quant import BF16, QuantPlan

    ctx = SimContext(Parallel(8, 8, 1, 1), Workload(1, 1, 0, False), QuantPlan(BF16, BF16))
    tower = moonvit_tower(ctx=ctx, config=kimi_k25_config(), text_hidden=7168, profile=None)
    assert tower.policy == KIMI and len(tower.blocks) == 27 and tower.hidden == 1152


@pytest.mark.parametrize("height", [0, -5, 1.5])
def test_bad_sizes_are_named(height) -> None:
    with pytest.raises(InfercastError, match="--image-height"):
        image_grid(height, 100)
