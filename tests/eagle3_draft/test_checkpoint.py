"""Draft checkpoints: every published naming loads, saved drafts load in sglang 0.5.10 / 0.5.23
and SpecForge's exporter, the fused MLA projection, clear errors."""

from __future__ import annotations

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import (
    FUSED,
    SPLIT,
    canonical_name,
    checkpoint_to_module,
    load_weights,
    module_to_checkpoint,
    save_weights,
)
from safetensors.torch import load_file, save_file

from .test_loop import tiny_llama_draft

LAYER = ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
         "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
         "mlp.up_proj.weight", "mlp.down_proj.weight")


def sglang_llama_param(name: str, params: set[str], legacy_names: bool) -> str | None:
    """The parameter ``LlamaForCausalLMEagle3.load_weights`` loads ``name`` into, None when it
    skips it (silently), written from sglang 0.5.23 (``legacy_names``: its midlayer/aux_norm
    renames) and 0.5.10 (none) ``python/sglang/srt/models/llama_eagle3.py``."""
    if legacy_names:
        for old, new in (("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
                         ("aux_norm_high", "fc_norm.2")):
            if old in name:
                name = name.replace(old, new)
    if "d2t" in name or "t2d" in name:
        return "(vocabulary map)"
    for packed, shard in ((".qkv_proj", ".q_proj"), (".qkv_proj", ".k_proj"), (".qkv_proj", ".v_proj"),
                          (".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")):
        if shard in name:
            name = name.replace(shard, packed)
            break
    param = name if name in params else f"model.{name}"
    return param if param in params else None


def sglang_llama_params(layer_prefix: str) -> set[str]:
    """The parameters of sglang's Llama EAGLE3 draft (0.5.23: ``layers.0``, 0.5.10: ``midlayer``)."""
    layer = {"input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
             "self_attn.qkv_proj.weight", "self_attn.o_proj.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight"}
    return {f"model.{layer_prefix}.{n}" for n in layer} | {"model.embed_tokens.weight", "model.fc.weight",
                                                            "model.norm.weight", "lm_head.weight"}


def test_round_trip_keeps_every_tensor(tmp_path) -> None:
    draft = tiny_llama_draft(0, draft_vocab_size=50)
    kept = torch.randperm(97, generator=torch.Generator().manual_seed(0))[:50].sort().values  # the target ids drafted
    draft.d2t.copy_(kept - torch.arange(50))
    path = save_weights(draft, tmp_path)
    stored = load_file(str(path))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.hidden_norm.weight"} <= set(stored)
    assert not any(name.startswith("layers.") for name in stored) and "embed_tokens.weight" not in stored
    assert stored["t2d"].dtype == torch.bool and stored["t2d"].shape == (97,) and stored["d2t"].dtype == torch.long
    assert torch.equal(stored["t2d"].nonzero().flatten(), kept)  # SpecForge's invariant: nonzero(t2d) = arange + d2t
    fresh = tiny_llama_draft(1, draft_vocab_size=50)
    with pytest.warns(UserWarning, match="not loaded .*t2d"):
        assert load_weights(fresh, tmp_path) == ["t2d"]
    for (name, a), (_, b) in zip(draft.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b) or name == "embed_tokens.weight", name  # the target's, not saved


def test_a_full_vocabulary_draft_saves_no_vocabulary_map_and_an_embedding_only_when_unshareable(tmp_path) -> None:
    stored = load_file(str(save_weights(tiny_llama_draft(0), tmp_path / "a")))
    assert not {"d2t", "t2d", "embed_tokens.weight"} & set(stored)
    wide = tiny_llama_draft(0, target_hidden=48)  # the target's embedding is 48 wide: the draft keeps its own
    assert "embed_tokens.weight" in load_file(str(save_weights(wide, tmp_path / "b")))


@pytest.mark.parametrize("layer_prefix, legacy_names", [("layers.0", True), ("midlayer", False)],
                         ids=["sglang-0.5.23", "sglang-0.5.10"])
def test_saved_drafts_load_whole_in_sglang(tmp_path, layer_prefix, legacy_names) -> None:
    draft = tiny_llama_draft(0, draft_vocab_size=50)
    params = sglang_llama_params(layer_prefix)
    stored = load_file(str(save_weights(draft, tmp_path)))
    loaded = {name: sglang_llama_param(name, params, legacy_names) for name in stored}
    assert None not in loaded.values(), [name for name, param in loaded.items() if param is None]
    assert set(loaded.values()) - {"(vocabulary map)"} == params - {"model.embed_tokens.weight"}  # that one: the target's


def test_saved_drafts_are_what_specforges_exporter_expects(tmp_path) -> None:
    """SpecForge's ``materialize_draft`` fails on unexpected names and on missing ones other than the embedding."""
    specforge = ({f"midlayer.{n}" for n in LAYER} | {"embed_tokens.weight", "fc.weight", "norm.weight",
                                                     "lm_head.weight", "t2d", "d2t"})
    stored = load_file(str(save_weights(tiny_llama_draft(0, draft_vocab_size=50), tmp_path)))
    assert set(stored) == specforge - {"embed_tokens.weight"}


@pytest.mark.parametrize("spelling", [
    lambda name: name,                                           # sglang 0.5.23 (layers.0)
    lambda name: name.replace("layers.0.", "midlayer."),         # SpecForge export, EAGLE cnets.py
    lambda name: "model." + name,                                # a model. prefix
    lambda name: "model." + name.replace("layers.0.", "midlayer."),
], ids=["layers.0", "midlayer", "model.layers.0", "model.midlayer"])
def test_every_published_naming_loads_the_same_draft(tmp_path, spelling) -> None:
    draft = tiny_llama_draft(0)
    tensors = {spelling(name): t.contiguous() for name, t in draft.state_dict().items() if name != "embed_tokens.weight"}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    fresh = tiny_llama_draft(1)
    assert load_weights(fresh, tmp_path) == []
    for name, value in draft.state_dict().items():
        if name != "embed_tokens.weight":
            assert torch.equal(value, fresh.state_dict()[name]), name


def test_canonical_names() -> None:
    assert canonical_name("midlayer.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert canonical_name("model.layers.0.mlp.up_proj.weight") == "layers.0.mlp.up_proj.weight"
    assert canonical_name("model.fc.weight") == "fc.weight"
    assert [canonical_name(f"aux_norm_{n}.weight") for n in ("low", "mid", "high")] == [
        "fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight"]


def test_mla_down_projections_fuse_on_load_and_split_on_save() -> None:
    q_a, kv_a, q_bias, kv_bias = torch.randn(6, 16), torch.randn(5, 16), torch.randn(6), torch.randn(5)
    names = {part: [name + f".{part}" for name in SPLIT] for part in ("weight", "bias")}
    state = checkpoint_to_module({names["weight"][0]: q_a, names["weight"][1]: kv_a, names["bias"][0]: q_bias,
                                  names["bias"][1]: kv_bias, "t2d": torch.ones(3)})
    assert set(state) == {FUSED + ".weight", FUSED + ".bias"}
    assert torch.equal(state[FUSED + ".weight"], torch.cat([q_a, kv_a]))
    assert torch.equal(state[FUSED + ".bias"], torch.cat([q_bias, kv_bias]))
    back = module_to_checkpoint(state, q_lora_rank=6)
    saved = {part: [n.replace("layers.0.", "midlayer.") for n in names[part]] for part in names}
    assert torch.equal(back[saved["weight"][0]], q_a) and torch.equal(back[saved["weight"][1]], kv_a)
    assert torch.equal(back[saved["bias"][0]], q_bias) and torch.equal(back[saved["bias"][1]], kv_bias)
    with pytest.raises(ConfigError, match="q_lora_rank"):
        module_to_checkpoint(state)


def test_missing_unexpected_and_misshaped_tensors_are_named(tmp_path) -> None:
    draft = tiny_llama_draft(0)
    path = save_weights(draft, tmp_path)
    tensors = load_file(str(path))
    cases = {
        "missing": ({k: v for k, v in tensors.items() if k != "fc.weight"}, r"missing tensor\(s\).*fc.weight \(32, 96\)"),
        "unexpected": ({**tensors, "layers.1.mlp.up_proj.weight": torch.zeros(1)}, "unexpected.*layers.1.mlp.up_proj"),
        "shape": ({**tensors, "fc.weight": torch.zeros(32, 64)}, r"fc.weight has shape \(32, 64\), expected \(32, 96\)"),
        "renamed": ({**tensors, "model.midlayer.mlp.bogus.weight": torch.zeros(1)},
                    r"model.midlayer.mlp.bogus.weight \(read as layers.0.mlp.bogus.weight\)"),
    }
    for name, (content, message) in cases.items():
        bad = tmp_path / f"{name}.safetensors"
        save_file(content, str(bad))
        with pytest.raises(ConfigError, match=message):
            load_weights(tiny_llama_draft(0), bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_weights(draft, tmp_path / "nope.safetensors")
