"""Phase-2 patches: the native and remote-code paths fail on meta without them, run with them,
and each replacement computes what the code it replaces computes."""

from __future__ import annotations

import pytest
import torch
import transformers.utils
from infercast_adapters import patched
from transformers import AutoModelForImageTextToText
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi

from infercast_kimi_k25 import class_patches as cp
from infercast_kimi_k25 import config_patches

from .conftest import IMAGE_TOKEN, tiny_native_config, tiny_remote_config

GRID = torch.tensor([[1, 4, 6], [1, 2, 2]])  # two images: 24 and 4 patches -> 6 and 1 tokens


def _inputs(device: str):
    ids = [5, 6] + [IMAGE_TOKEN] * 6 + [7] + [IMAGE_TOKEN] * 1 + [8]
    pixels = torch.randn(28, 3 * 14 * 14) if device == "cpu" else torch.empty(28, 3 * 14 * 14, device="meta")
    return torch.tensor([ids], device=device), pixels.to(torch.float32)


def _native_model(manager, device: str):
    config = tiny_native_config()
    manager.patch_config(config)
    patches = manager.class_patches(config)
    return config, patches


def test_native_vl_forward_fails_on_meta_without_the_patches_and_runs_with_them(kimi_manager) -> None:
    config, patches = _native_model(kimi_manager, "meta")
    ids, pixels = _inputs("meta")
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    with pytest.raises(Exception):
        model(input_ids=ids, pixel_values=pixels.view(28, 3, 14, 14), image_grid_thw=GRID)
    with patched(patches, config.model_type) as applied:
        assert len(applied) == len(patches)
        out = model(input_ids=ids, pixel_values=pixels, grid_thws=GRID, num_images=2)  # flat patches, remote spelling
    assert out.logits.shape == (1, ids.shape[1], 300) and out.logits.device.type == "meta"


def test_native_vl_forward_on_cpu_places_image_features_at_the_placeholders(kimi_manager) -> None:
    config, patches = _native_model(kimi_manager, "cpu")
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    ids, pixels = _inputs("cpu")
    with torch.no_grad():
        features = torch.cat(model.model.get_image_features(pixels.view(28, 3, 14, 14), GRID).pooler_output)
        with patched(patches, config.model_type):
            captured = {}
            hook = model.model.language_model.register_forward_pre_hook(
                lambda m, a, kw: captured.update(embeds=kw["inputs_embeds"]), with_kwargs=True)
            model(input_ids=ids, pixel_values=pixels, grid_thws=GRID)
            hook.remove()
    positions = (ids[0] == IMAGE_TOKEN).nonzero().flatten()
    torch.testing.assert_close(captured["embeds"][0, positions], features)


def test_flat_patch_embedding_equals_the_conv2d() -> None:
    config = tiny_native_config()
    torch.manual_seed(0)
    embed = kimi.Kimi_K25VisionPatchEmbed(config.vision_config)
    pixels = torch.randn(24, 3, 14, 14)
    expected = embed(pixels, GRID[:1])
    wrapped = cp.flat_patch_embed(kimi.Kimi_K25VisionPatchEmbed.forward)
    torch.testing.assert_close(wrapped(embed, pixels.reshape(24, -1), GRID[:1]), expected)
    with pytest.raises(ValueError, match="588 wide"):
        wrapped(embed, torch.randn(24, 100), GRID[:1])


def test_varlen_sdpa_equals_attention_within_each_image_only() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(10, 2, 8) for _ in range(3))
    out = cp.varlen_sdpa(q, k, v, torch.tensor([0, 4, 10]))
    for start, end in ((0, 4), (4, 10)):
        scores = torch.einsum("qhd,khd->hqk", q[start:end], k[start:end]) / 8 ** 0.5
        ref = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v[start:end]).reshape(end - start, -1)
        torch.testing.assert_close(out[start:end], ref)
    with pytest.raises(ValueError, match="CPU tensor"):
        cp.varlen_sdpa(q, k, v, cp._host_cu_seqlens(torch.empty(3, device="meta")))


def test_patched_vision_tower_matches_the_unpatched_one_on_cpu(kimi_manager) -> None:
    config, patches = _native_model(kimi_manager, "cpu")
    config.vision_config._attn_implementation = "eager"
    torch.manual_seed(0)
    tower = kimi.Kimi_K25VisionModel(config.vision_config).eval()
    pixels = torch.randn(28, 3, 14, 14)
    with torch.no_grad():
        expected = tower(pixels, GRID).pooler_output
        with patched(patches, config.model_type):
            assert kimi.Kimi_K25VisionEncoderLayer.use_deterministic_attn is False
            got = tower(pixels, GRID).pooler_output
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert "use_deterministic_attn" not in kimi.Kimi_K25VisionEncoderLayer.__dict__  # restored (removed)


def test_balanced_assignment_spreads_tokens_evenly_and_ignores_data() -> None:
    assign = cp.balanced_assignment(num_tokens=10, top_k=3, num_experts=8)
    counts = torch.bincount(assign.flatten(), minlength=8)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 30
    assert all(len(set(row.tolist())) == 3 for row in assign)  # k distinct experts per token (k <= E)


def test_balanced_moe_equals_the_experts_applied_by_hand() -> None:
    config = tiny_native_config().text_config
    torch.manual_seed(0)
    moe = ds.DeepseekV3MoE(config).eval()
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randn(1, 5, 64)
    with torch.no_grad():
        got = cp.balanced_moe_forward(moe, x)
        flat = x.view(5, 64)
        expected = torch.zeros_like(flat)
        for t, row in enumerate(cp.balanced_assignment(5, 2, 8)):
            for e in row.tolist():
                gate, up = torch.nn.functional.linear(flat[t], moe.experts.gate_up_proj[e]).chunk(2)
                expected[t] += torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, moe.experts.down_proj[e]) / 2
        expected = expected.view(1, 5, 64) + moe.shared_experts(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    meta = cp.balanced_moe_forward(moe.to("meta"), torch.empty(1, 5, 64, device="meta"))
    assert meta.shape == (1, 5, 64)


def test_mla_given_only_position_ids_equals_mla_given_cos_sin() -> None:
    config = tiny_native_config().text_config
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    attn = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    x = torch.randn(1, 5, 64)
    position_ids = torch.arange(5).unsqueeze(0)
    cos_sin = ds.DeepseekV3RotaryEmbedding(config)(x, position_ids)
    wrapped = cp.mla_with_position_ids(ds.DeepseekV3Attention.forward, ds.DeepseekV3RotaryEmbedding)
    with torch.no_grad():
        expected = ds.DeepseekV3Attention.forward(attn, x, cos_sin, None)[0]
        got = wrapped(attn, x, None, None, position_ids=position_ids)[0]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("returns", [2, 3, 4])
def test_decoder_layer_takes_attention_returning_two_or_three_values(returns: int) -> None:
    config = tiny_native_config().text_config
    layer = ds.DeepseekV3DecoderLayer(config, layer_idx=0).eval()

    class Attention(torch.nn.Module):
        def forward(self, **kwargs):
            return (kwargs["hidden_states"] * 2,) + (None,) * (returns - 1)

    layer.self_attn = Attention()
    x = torch.randn(1, 3, 64)
    if returns == 4:
        with pytest.raises(ValueError, match="returned 4 values"):
            cp.decoder_layer_forward(layer, x)
        return
    with torch.no_grad():
        got = cp.decoder_layer_forward(layer, x)
        h = x + layer.input_layernorm(x) * 2
        expected = h + layer.mlp(layer.post_attention_layernorm(h))
    torch.testing.assert_close(got, expected)


def test_extra_kwargs_are_dropped_and_grid_names_mapped() -> None:
    seen = {}

    def forward(self, input_ids=None, grid_thws=None):
        seen.update(input_ids=input_ids, grid_thws=grid_thws)

    wrapped = cp.accept_extra_kwargs(forward, "grid_thws")
    wrapped(None, input_ids=1, image_grid_thw="grid", num_images=3, image_size=(1, 2))
    assert seen == {"input_ids": 1, "grid_thws": "grid"}


# -- the remote-code path, against the stand-in ---------------------------------------------


def _remote_model(kimi_manager, configuration, monkeypatch, device):
    monkeypatch.delattr(transformers.utils, "is_torch_fx_available", raising=False)
    config = tiny_remote_config(configuration)
    kimi_manager.patch_config(config)  # phase 1 first: provides is_torch_fx_available, drops flash-attn
    assert config.vision_config._attn_implementation == "sdpa" or config_patches.flash_attention_2_available()
    patches = kimi_manager.class_patches(config)
    modeling = __import__("remote_standin.modeling_kimi_k25", fromlist=["x"])
    assert {p.owner.__name__ for p in patches} >= {
        "KimiK25ForConditionalGeneration", "MoonViTEncoderLayer", "MoonViT3dEncoder", "MoonVision3dPatchEmbed",
        "DeepseekV3MoE", "DeepseekV3DecoderLayer"}
    with torch.device(device):
        model = modeling.KimiK25ForConditionalGeneration(config)
    return config, patches, model


def test_remote_code_stand_in_runs_on_meta_only_with_the_patches(kimi_manager, remote_standin, monkeypatch) -> None:
    config, patches, model = _remote_model(kimi_manager, remote_standin, monkeypatch, "meta")
    ids, pixels = _inputs("meta")
    with pytest.raises(Exception):
        model(input_ids=ids, pixel_values=pixels.view(28, 3, 14, 14), grid_thws=GRID)
    with patched(patches, config.model_type):
        logits = model(input_ids=ids, pixel_values=pixels, image_grid_thw=GRID, num_images=2)
    assert logits.shape == (1, ids.shape[1], 300) and logits.device.type == "meta"
    assert "use_deterministic_attn" not in type(model.vision_tower.encoder.blocks[0]).__dict__


def test_remote_code_stand_in_merges_image_rows_in_order_on_cpu(kimi_manager, remote_standin, monkeypatch) -> None:
    config, patches, model = _remote_model(kimi_manager, remote_standin, monkeypatch, "cpu")
    ids, _ = _inputs("cpu")
    embeds = torch.zeros(1, ids.shape[1], 64)
    features = [torch.full((6, 64), 1.0), torch.full((1, 64), 2.0)]
    merged, *_ = cp.merge_image_features(model, features, embeds, ids)
    positions = (ids[0] == IMAGE_TOKEN).nonzero().flatten().tolist()
    assert merged[0, positions, 0].tolist() == [1.0] * 6 + [2.0]
    assert merged[0, [0, 1, 8, 10], 0].tolist() == [0.0] * 4
