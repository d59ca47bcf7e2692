"""Small real checkpoints in each published naming and EAGLE3 variant: each loads and gives the
logits of a reference written from sglang 0.5.23's semantics (``llama_eagle3.py``, the eagle
worker's embedding and head sharing), or is refused with an error naming the field."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from infercast_adapters import ConfigError
from infercast_eagle3.measure import load_draft
from safetensors.torch import save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from .test_loop import VOCAB, tiny_llama_draft_config, tiny_llama_target

H, HEADS, KV_HEADS, D, INTER, N_AUX = 32, 4, 2, 8, 64, 3
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def tensors(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random draft tensors in sglang's canonical names, for the variant ``config`` describes."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.3):
        return torch.randn(*shape, generator=g) * scale

    def norm(size):
        return 1 + rand(size, scale=0.2)

    eagle = config.get("eagle_config") or {}
    aux = eagle.get("use_aux_hidden_state", True)
    t = {f"layers.0.{n}": norm(H) for n in ("input_layernorm.weight", "hidden_norm.weight",
                                              "post_attention_layernorm.weight")}
    t |= {"layers.0.self_attn.q_proj.weight": rand(HEADS * D, 2 * H), "layers.0.self_attn.k_proj.weight": rand(KV_HEADS * D, 2 * H),
          "layers.0.self_attn.v_proj.weight": rand(KV_HEADS * D, 2 * H), "layers.0.self_attn.o_proj.weight": rand(H, HEADS * D),
          "layers.0.mlp.gate_proj.weight": rand(INTER, H), "layers.0.mlp.up_proj.weight": rand(INTER, H),
          "layers.0.mlp.down_proj.weight": rand(H, INTER), "norm.weight": norm(H)}
    if aux:
        t["fc.weight"] = rand(H, N_AUX * H)
    if config.get("bias"):
        t["fc.bias"], t["layers.0.self_attn.o_proj.bias"] = rand(H), rand(H)
    if config.get("fc_norm") or config.get("use_aux_norm"):
        t |= {f"fc_norm.{i}.weight": norm(H) for i in range(N_AUX)}
    if eagle.get("norm_before_fc"):
        t["input_norm.weight"] = norm(N_AUX * H)
    if config.get("draft_vocab_size") and not config.get("tie_word_embeddings"):
        t["lm_head.weight"] = rand(config["draft_vocab_size"], H)
    return t


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def reference(t: dict, config: dict, target, aux: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sglang's ``LlamaModel.forward`` + ``LlamaForCausalLMEagle3`` for one causal sequence at
    positions 0..n-1, from the raw tensors: (logits, the hidden state for the next step)."""
    eagle = config.get("eagle_config") or {}
    h = aux
    if h.shape[-1] != H:  # the fc branch: norm_before_fc, then fc_norm per aux state, then fc
        if eagle.get("norm_before_fc"):
            h = rms(h, t["input_norm.weight"])
        if "fc_norm.0.weight" in t:
            h = torch.cat([rms(c, t[f"fc_norm.{i}.weight"]) for i, c in enumerate(h.chunk(N_AUX, -1))], -1)
        h = F.linear(h, t["fc.weight"], t.get("fc.bias"))
    embeds = target.get_input_embeddings().weight[ids]  # set_embed: the target's embedding
    x = torch.cat([rms(embeds, t["layers.0.input_layernorm.weight"]), rms(h, t["layers.0.hidden_norm.weight"])], -1)
    n = ids.shape[0]
    q = F.linear(x, t["layers.0.self_attn.q_proj.weight"]).view(n, HEADS, D).transpose(0, 1)
    k = F.linear(x, t["layers.0.self_attn.k_proj.weight"]).view(n, KV_HEADS, D).transpose(0, 1)
    v = F.linear(x, t["layers.0.self_attn.v_proj.weight"]).view(n, KV_HEADS, D).transpose(0, 1)
    rope = LlamaConfig(hidden_size=H, num_attention_heads=HEADS, head_dim=D, max_position_embeddings=256,
                       rope_scaling=config.get("rope_scaling"), rope_theta=config.get("rope_theta", 10000.0))
    cos, sin = LlamaRotaryEmbedding(rope)(x, torch.arange(n)[None])
    q, k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
    k, v = k[0].repeat_interleave(HEADS // KV_HEADS, 0), v.repeat_interleave(HEADS // KV_HEADS, 0)
    scores = (q[0] @ k.transpose(-1, -2)) * D ** -0.5 + torch.full((n, n), float("-inf")).triu(1)
    attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, HEADS * D)
    h = h + F.linear(attn, t["layers.0.self_attn.o_proj.weight"], t.get("layers.0.self_attn.o_proj.bias"))
    m = rms(h, t["layers.0.post_attention_layernorm.weight"])
    h = h + F.linear(F.silu(F.linear(m, t["layers.0.mlp.gate_proj.weight"])) * F.linear(m, t["layers.0.mlp.up_proj.weight"]),
                     t["layers.0.mlp.down_proj.weight"])
    normed = rms(h, t["norm.weight"])
    if config.get("tie_word_embeddings"):
        head = target.get_input_embeddings().weight
    elif config.get("draft_vocab_size") is None:
        head = target.get_output_embeddings().weight  # load_lm_head_from_target
    else:
        head = t["lm_head.weight"]
    return F.linear(normed, head), normed if config.get("norm_output") else h


def rename_layer(prefix: str):
    return lambda name: prefix + name.removeprefix("layers.0.") if name.startswith("layers.0.") else name


VARIANTS = {
    # name: (config changes, how the checkpoint spells the names)
    "sglang-layers.0": ({}, lambda n: n),
    "specforge-midlayer": ({}, rename_layer("midlayer.")),
    "model-prefix": ({}, lambda n: "model." + n),
    "eagle3.1-fc_norm-norm_output": ({"fc_norm": True, "norm_output": True}, lambda n: n),
    "legacy-use_aux_norm": ({"use_aux_norm": True}, lambda n: n.replace("fc_norm.0", "aux_norm_low").replace(
        "fc_norm.1", "aux_norm_mid").replace("fc_norm.2", "aux_norm_high")),
    "no-draft_vocab_size-no-lm_head": ({"draft_vocab_size": None}, lambda n: n),
    "tied-embeddings": ({"tie_word_embeddings": True, "draft_vocab_size": None}, lambda n: n),
    "norm_before_fc-bias": ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4], "norm_before_fc": True},
                             "bias": True}, lambda n: n),
    "llama3-rope": ({"rope_scaling": LLAMA3, "rope_theta": 500000.0}, rename_layer("midlayer.")),
    "no-aux-hidden-states": ({"eagle_config": {"use_aux_hidden_state": False}}, lambda n: n),
}


def write(tmp_path, changes: dict, spell, seed: int = 0) -> tuple[dict, dict]:
    config = tiny_llama_draft_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}).to_dict()
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        config.pop(key)
    (tmp_path / "config.json").write_text(json.dumps(config))
    t = tensors(config, seed)
    save_file({spell(name): value for name, value in t.items()}, str(tmp_path / "model.safetensors"))
    return config, t


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_loads_and_gives_the_reference_logits(tmp_path, name) -> None:
    changes, spell = VARIANTS[name]
    config, t = write(tmp_path, changes, spell)
    target = tiny_llama_target(0)
    draft = load_draft(tmp_path, target, dtype=torch.float32)
    aux_width = H if (config.get("eagle_config") or {}).get("use_aux_hidden_state") is False else N_AUX * H
    aux, ids = torch.randn(7, aux_width, generator=torch.Generator().manual_seed(1)), torch.tensor([5, 9, 2, 7, 7, 1, 3])
    with torch.no_grad():
        logits, hidden = draft(ids, draft.project_aux(aux), torch.arange(7), torch.ones(7, 7, dtype=torch.bool).tril())
        expected_logits, expected_hidden = reference(t, config, target, aux, ids)
    assert torch.allclose(logits, expected_logits, atol=1e-5), (logits - expected_logits).abs().max()
    assert torch.allclose(hidden, expected_hidden, atol=1e-5)


@pytest.mark.parametrize(("changes", "drop", "message"), [
    ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4], "eagle_config": {}}, (), "at the top level.*eagle_config"),
    ({"hidden_act": "gelu"}, (), "hidden_act='gelu'"),
    ({}, ("lm_head.weight",), r"no lm_head.weight, but the config's draft_vocab_size \(97\)"),
    ({"architectures": ["LlamaForCausalLMEagle"]}, (), "EAGLE-1/2"),
    ({"fc_norm": True}, ("fc_norm.1.weight",), r"missing tensor\(s\) in the checkpoint: fc_norm.1.weight \(32,\)"),
])
def test_a_variant_that_cannot_be_served_as_published_is_refused_naming_the_field(tmp_path, changes, drop, message) -> None:
    config, t = write(tmp_path, changes, lambda n: n)
    save_file({k: v for k, v in t.items() if k not in drop}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match=message):
        load_draft(tmp_path, tiny_llama_target(0), dtype=torch.float32)


def test_variants_differ_where_they_should() -> None:
    """The reference is sensitive to each option (a test of the test)."""
    target = tiny_llama_target(0)
    base = tiny_llama_draft_config().to_dict()
    t = tensors(dict(base, fc_norm=True), 0)
    aux, ids = torch.randn(4, N_AUX * H), torch.tensor([1, 2, 3, 4])
    plain = reference({k: v for k, v in t.items() if not k.startswith("fc_norm")}, base, target, aux, ids)
    normed = reference(t, dict(base, fc_norm=True), target, aux, ids)
    output = reference(t, dict(base, fc_norm=True, norm_output=True), target, aux, ids)
    assert not torch.allclose(plain[0], normed[0]) and not torch.allclose(normed[1], output[1])
    assert VOCAB == plain[0].shape[-1]
