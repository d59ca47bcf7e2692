"""Image sizes to patch grids, and the vision tower's simulator layers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from infercast_adapters import InfercastError

from infercast.vision import image_grid

KIMI_VISION = SimpleNamespace(patch_size=14, merge_kernel_size=[2, 2], max_patches=16384, max_patches_per_side=512)


def test_grid_pads_each_side_up_to_patch_times_merge() -> None:
    grid = image_grid(1080, 1920, KIMI_VISION)
    # 1080 -> 1092 = 39 x 28 and 1920 -> 1932 = 69 x 28 pixels: 78 x 138 patches, 39 x 69 tokens
    assert (grid.grid_h, grid.grid_w, grid.patches, grid.tokens) == (78, 138, 10764, 2691)
    exact = image_grid(448, 448, KIMI_VISION)
    assert (exact.grid_h, exact.tokens) == (32, 256)


def test_grid_scales_large_images_down_to_the_patch_budget() -> None:
    grid = image_grid(4000, 6000, KIMI_VISION)
    scale = (16384 / (285 * 428)) ** 0.5  # 4000 // 14 = 285, 6000 // 14 = 428 patches before scaling
    h, w = int(4000 * scale), int(6000 * scale)
    assert (grid.grid_h, grid.grid_w) == (-(-h // 28) * 2, -(-w // 28) * 2)
    tall = image_grid(100_000, 28, KIMI_VISION)
    assert tall.grid_h <= 512 + 1 and tall.grid_w >= 2  # per-side limit, never below one merged token


def test_merge_size_read_through_the_generic_name() -> None:
    generic = SimpleNamespace(patch_size=16, spatial_merge_size=1)
    assert image_grid(64, 32, generic).tokens == 4 * 2


@pytest.mark.parametrize("height", [0, -5, 1.5])
def test_bad_sizes_are_named(height) -> None:
    with pytest.raises(InfercastError, match="--image-height"):
        image_grid(height, 100, KIMI_VISION)
