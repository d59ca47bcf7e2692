"""Kimi-K2.5's MLA EAGLE3 draft: shapes on meta and CPU, checkpoints, errors, a lossless loop
against a tiny DeepSeek-V3 target."""

from __future__ import annotations

import json

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import load_weights, save_weights
from infercast_eagle3.config import (
    ADD_ONE,
    ADD_ONE_IF_FIRST_IS_ONE,
    from_transformers,
    target_capture_rule,
)
from infercast_eagle3.layers import LlamaDraftLayer
from infercast_eagle3.loop import (
    DraftInput,
    Eagle3Drafter,
    SpecSettings,
    Target,
    greedy_reference,
    speculative_generate,
)
from infercast_eagle3.model import Eagle3Draft, build_draft
from infercast_kimi_k25.architecture import kimi_k25_config
from infercast_kimi_k25.eagle3 import (
    MLADraftLayer,
    eagle3_mla_config,
)
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, DeepseekV3Config, LlamaConfig

from ..grids import grid

VOCAB = 97
TINY_MLA = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16,
                qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, vocab_size=VOCAB, max_position_embeddings=256)


def tiny_deepseek_target(seed: int):
    torch.manual_seed(seed)
    config = DeepseekV3Config(**TINY_MLA, num_hidden_layers=6, intermediate_size=64, moe_intermediate_size=16,
                              n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                              n_group=1, topk_group=1, rope_theta=50000.0)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # random routing biases would leave the tiny MoE near-degenerate
        for name, param in model.named_parameters():
            if "e_score_correction_bias" in name:
                param.normal_(0, 0.02)
    return model


def tiny_mla_config(**overrides):
    """The published draft's config at toy width (yarn rope and all), default aux layers."""
    fields = dict(TINY_MLA, intermediate_size=64, draft_vocab_size=VOCAB, target_hidden_size=32, eagle_config={})
    fields.update(overrides)
    return eagle3_mla_config(**fields)


def tiny_mla_draft(seed: int, manager, **overrides):
    torch.manual_seed(seed + 1000)
    return build_draft(from_transformers(tiny_mla_config(**overrides)), "deepseek_v3", manager)


def test_the_plugin_registers_the_mla_layer_by_draft_architecture(kimi_manager) -> None:
    assert kimi_manager.draft_layers() == {"Eagle3DeepseekV2ForCausalLM": MLADraftLayer}


def test_the_plugin_says_kimi_targets_use_sglangs_deepseek_capture_rule(kimi_manager) -> None:
    assert kimi_manager.eagle3_capture_rule("kimi_k25") == ADD_ONE_IF_FIRST_IS_ONE
    assert kimi_manager.eagle3_capture_rule("kimi_k2") == ADD_ONE_IF_FIRST_IS_ONE
    assert kimi_manager.eagle3_capture_rule("llama") is None  # not its family
    assert target_capture_rule(kimi_k25_config(), kimi_manager) == ADD_ONE_IF_FIRST_IS_ONE


def test_the_published_drafts_ids_read_the_layers_sglang_reads(kimi_manager) -> None:
    config = from_transformers(eagle3_mla_config())
    assert config.aux_layer_ids == [2, 30, 58]
    rule = target_capture_rule(kimi_k25_config(), kimi_manager)
    assert config.capture_indices(61, rule) == [2, 30, 58]  # the inputs of layers 2, 30, 58, as given
    assert config.capture_indices(61, ADD_ONE) == [3, 31, 59]  # the Llama rule: a layer late


def test_a_llama_style_draft_for_kimi_is_a_llama_layer(kimi_manager) -> None:
    """lightseekorg/kimi-k2.5-eagle3 is LlamaForCausalLMEagle3: sglang's registry picks the Llama
    draft by architecture, whatever the target."""
    config = from_transformers(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=4, architectures=["LlamaForCausalLMEagle3"],
                                           draft_vocab_size=VOCAB))
    draft = build_draft(config, "kimi_k25", kimi_manager)
    assert type(draft.layers[0]) is LlamaDraftLayer and type(draft) is Eagle3Draft


def test_kimi_k2_is_read_as_deepseek_v3_through_the_adapters_alias(kimi_manager, tmp_path) -> None:
    from infercast_adapters.config import load_config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    assert kimi_manager.config_aliases() == {"kimi_k2": "deepseek_v3"}
    kimi_manager.draft_layers()
    assert "kimi_k2" not in CONFIG_MAPPING._extra_content  # no AutoConfig registration as a side effect
    (tmp_path / "config.json").write_text(json.dumps(tiny_mla_config().to_dict()))
    config = load_config(str(tmp_path), manager=kimi_manager)
    assert type(config) is DeepseekV3Config
    assert config.architectures == ["Eagle3DeepseekV2ForCausalLM"] and config.q_lora_rank == 24
    assert config.eagle_config == {} and config.draft_vocab_size == VOCAB


def test_the_published_draft_on_meta_has_the_doubled_width_fused_projection(kimi_manager) -> None:
    config = from_transformers(eagle3_mla_config())
    with torch.device("meta"):
        draft = build_draft(config, "kimi_k25", kimi_manager).to(torch.bfloat16)
    assert type(draft.layers[0]) is MLADraftLayer
    attn = draft.layers[0].self_attn
    assert tuple(attn.fused_qkv_a_proj_with_mqa.weight.shape) == (1536 + 512 + 64, 2 * 7168)
    assert tuple(attn.q_b_proj.weight.shape) == (64 * (128 + 64), 1536)
    assert tuple(attn.kv_b_proj.weight.shape) == (64 * (128 + 128), 512)
    assert tuple(draft.fc.weight.shape) == (7168, 3 * 7168) and tuple(draft.lm_head.weight.shape) == (163840, 7168)
    seq = 5
    logits, hidden = draft(torch.zeros(seq, dtype=torch.long, device="meta"),
                           draft.project_aux(torch.empty(seq, 3 * 7168, device="meta", dtype=torch.bfloat16)),
                           torch.arange(seq, device="meta"), torch.ones(seq, seq, dtype=torch.bool, device="meta").tril())
    assert logits.shape == (seq, 163840) and hidden.shape == (seq, 7168)
    assert logits.dtype == hidden.dtype == torch.bfloat16 and logits.device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiny_draft_forward_on_cpu(kimi_manager, dtype) -> None:
    draft = tiny_mla_draft(0, kimi_manager).to(dtype)
    seq = 7
    logits, hidden = draft(torch.arange(seq), draft.project_aux(torch.randn(seq, 96, dtype=dtype)), torch.arange(seq),
                           torch.ones(seq, seq, dtype=torch.bool).tril())
    assert logits.shape == (seq, VOCAB) and hidden.shape == (seq, 32)
    assert logits.dtype == hidden.dtype == dtype and torch.isfinite(logits.float()).all()
    # causal: the first position's output does not depend on later tokens
    later = torch.arange(seq).flip(0)
    later[0] = 0
    again, _ = draft(later, draft.project_aux(torch.randn(seq, 96, dtype=dtype)), torch.arange(seq),
                     torch.ones(seq, seq, dtype=torch.bool).tril())
    assert not torch.equal(again[1:], logits[1:])


def test_the_fused_projection_equals_the_two_down_projections_it_replaces(kimi_manager) -> None:
    """Split the fused weight as a checkpoint stores it and apply q_a / kv_a separately."""
    attn = tiny_mla_draft(0, kimi_manager).layers[0].self_attn
    x = torch.randn(3, 64)
    q_a, kv_a = attn.fused_qkv_a_proj_with_mqa.weight.split([24, 16 + 4], 0)
    fused = attn.fused_qkv_a_proj_with_mqa(x)
    assert torch.allclose(fused, torch.cat([x @ q_a.T, x @ kv_a.T], -1), atol=1e-6)


def test_yarn_scales_the_softmax_like_the_target(kimi_manager) -> None:
    attn = tiny_mla_draft(0, kimi_manager).layers[0].self_attn
    mscale = 0.1 * 1.0 * torch.log(torch.tensor(64.0)).item() + 1.0  # factor 64, mscale_all_dim 1
    assert attn.scale == pytest.approx((8 + 4) ** -0.5 * mscale ** 2)
    plain = tiny_mla_draft(0, kimi_manager, rope_scaling=None).layers[0].self_attn
    assert plain.scale == pytest.approx((8 + 4) ** -0.5)


def test_a_draft_config_without_q_lora_rank_is_an_error(kimi_manager) -> None:
    with pytest.raises(ConfigError, match="needs q_lora_rank.*q_lora_rank=None"):
        tiny_mla_draft(0, kimi_manager, q_lora_rank=None)


def test_checkpoints_store_q_a_and_kv_a_separately_and_round_trip(kimi_manager, tmp_path) -> None:
    draft = tiny_mla_draft(0, kimi_manager)
    path = save_weights(draft, tmp_path)
    stored = load_file(str(path))
    assert tuple(stored["midlayer.self_attn.q_a_proj.weight"].shape) == (24, 64)
    assert tuple(stored["midlayer.self_attn.kv_a_proj_with_mqa.weight"].shape) == (16 + 4, 64)
    assert not any("fused" in name for name in stored)
    assert {f"midlayer.self_attn.{n}.weight" for n in ("q_a_layernorm", "q_b_proj", "kv_a_layernorm", "kv_b_proj",
                                                         "o_proj")} <= set(stored)
    fresh = tiny_mla_draft(1, kimi_manager)
    load_weights(fresh, tmp_path)
    for (name, a), (_, b) in zip(draft.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b) or name == "embed_tokens.weight", name  # the target's, never saved


def test_attention_bias_is_refused_as_sglangs_mla_layer_has_none(kimi_manager) -> None:
    with pytest.raises(ConfigError, match="attention_bias is true, but sglang's Eagle3DeepseekV2ForCausalLM"):
        tiny_mla_draft(0, kimi_manager, attention_bias=True)


SETTINGS = {"chain-s3": SpecSettings(3, 1), "tree-s3k2n5": SpecSettings(3, 2, 5), "tree-s2k3n6": SpecSettings(2, 3, 6),
            "tree-s3k2n7": SpecSettings(3, 2, 7)}


@pytest.mark.parametrize(("seed", "prompt_length", "name"), grid([0, 1, 2], [1, 6, 11], list(SETTINGS),
                                                                  name=lambda s, p, n: f"{n}-{p}-{s}"))
def test_deepseek_v3_target_with_the_mla_draft_is_lossless(kimi_manager, seed, prompt_length, name) -> None:
    settings = SETTINGS[name]
    model = tiny_deepseek_target(seed)
    draft = tiny_mla_draft(seed, kimi_manager)
    prompt = torch.randint(0, VOCAB, (prompt_length,), generator=torch.Generator().manual_seed(seed)).tolist()
    target = Target(model, draft.config.capture_indices(model.config.num_hidden_layers, ADD_ONE_IF_FIRST_IS_ONE))
    out = speculative_generate(target, Eagle3Drafter(draft), prompt, 12, settings)
    assert out.tokens == greedy_reference(model, prompt, 12)
    assert all(1 <= c.accept_length <= settings.num_steps + 1 for c in out.cycles)


def test_the_mla_draft_over_its_cache_gives_the_logits_of_the_whole_sequence(kimi_manager) -> None:
    draft = tiny_mla_draft(3, kimi_manager)
    drafter = Eagle3Drafter(draft)
    tokens, aux = [4, 8, 15, 16, 23, 42], torch.randn(5, 96)
    root = drafter.begin(tokens, aux)
    (step,) = drafter.expand([DraftInput(7, root.hidden, 1, [], [7])])
    seq = torch.tensor(tokens[1:] + [7])
    feats = torch.cat([draft.project_aux(aux), root.hidden[None]])
    logits, _ = draft(seq, feats, torch.arange(6), torch.ones(6, 6, dtype=torch.bool).tril())
    assert torch.allclose(root.logp, logits[-2].log_softmax(-1), atol=1e-5)
    assert torch.allclose(step.logp, logits[-1].log_softmax(-1), atol=1e-5)


@pytest.mark.parametrize("spelling", [lambda n: n, lambda n: "model." + n.replace("midlayer.", "layers.0."),
                                      lambda n: n.replace("midlayer.", "layers.0.")],
                         ids=["midlayer (as saved)", "model.layers.0", "layers.0"])
def test_the_mla_draft_loads_from_every_published_naming(kimi_manager, tmp_path, spelling) -> None:
    draft = tiny_mla_draft(0, kimi_manager)
    stored = load_file(str(save_weights(draft, tmp_path / "saved")))
    save_file({spelling(name): t for name, t in stored.items()}, str(tmp_path / "model.safetensors"))
    fresh = tiny_mla_draft(1, kimi_manager)
    load_weights(fresh, tmp_path / "model.safetensors")
    fresh.embed_tokens.load_state_dict(draft.embed_tokens.state_dict())  # the target's, never saved
    aux = torch.randn(4, 96)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    assert torch.equal(fresh(torch.arange(4), fresh.project_aux(aux), torch.arange(4), mask)[0],
                       draft(torch.arange(4), draft.project_aux(aux), torch.arange(4), mask)[0])


def test_the_eagle31_mla_draft_norms_each_aux_state_and_hands_on_the_normed_state(kimi_manager) -> None:
    """kimi-k2.6-eagle3.1-mla's options: fc_norm (RMSNorm per aux state before fc), norm_output."""
    plain = tiny_mla_draft(0, kimi_manager)
    v31 = tiny_mla_draft(0, kimi_manager, fc_norm=True, norm_output=True)
    v31.load_state_dict({**plain.state_dict(), **{k: v for k, v in v31.state_dict().items() if k.startswith("fc_norm")}})
    with torch.no_grad():
        for norm in v31.fc_norm:
            norm.weight.uniform_(0.5, 1.5)
    aux = torch.randn(5, 96)
    chunks = [norm(chunk) for norm, chunk in zip(v31.fc_norm, aux.chunk(3, -1))]
    assert torch.allclose(v31.project_aux(aux), plain.project_aux(torch.cat(chunks, -1)), atol=1e-6)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    feats = v31.project_aux(aux)
    logits, hidden = v31(torch.arange(5), feats, torch.arange(5), mask)
    plain_logits, plain_hidden = plain(torch.arange(5), feats, torch.arange(5), mask)
    assert torch.allclose(logits, plain_logits, atol=1e-6)
    assert torch.allclose(hidden, plain.norm(plain_hidden), atol=1e-6)  # norm_output: after the final norm
