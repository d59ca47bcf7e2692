"""``infercast export``: the graphs pytorch-ir extracts on meta compute what the eager model
computes, decode after prefill through the KV mapping generates what ``generate`` does, the
adapters' class patches are what makes that possible, and bad input is refused early."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
import torch_ir
from infercast_adapters import InfercastError, hookimpl
from infercast_adapters.manager import AdapterManager
from transformers import AutoModelForCausalLM, DynamicCache

from infercast import builtin_models
from infercast.cli import main
from infercast.export import ExportRequest, export_model
from infercast.export import run as export_run
from infercast.export.graph import load_ir
from infercast.plugins import get_manager

ATOL, RTOL = 1e-5, 1e-4
"""fp32 graphs against the eager model: every logit and cache element within atol + rtol x |eager|."""

SEQ, SLOTS, BATCH, STEPS = 6, 12, 2, 4

_DENSE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False)
_MLA = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=8,
            n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=96,
            first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=128, max_position_embeddings=256,
            rope_theta=50000.0, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                              "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                              "mscale_all_dim": 1.0})

TINY = {
    "llama": dict(_DENSE, model_type="llama", rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}),
    "qwen3": dict(_DENSE, model_type="qwen3", head_dim=16),
    "qwen3_moe": dict(_DENSE, model_type="qwen3_moe", head_dim=16, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=32, norm_topk_prob=True),
    "mixtral": dict(_DENSE, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2": dict(_DENSE, model_type="qwen2"),
    "mistral": dict(_DENSE, model_type="mistral", sliding_window=None),
    "minimax_m2": dict(_DENSE, model_type="minimax_m2", head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                       rotary_dim=8),
    "glm4_moe": dict(_DENSE, model_type="glm4_moe", head_dim=16, n_routed_experts=4, n_shared_experts=1,
                     num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1, use_qk_norm=True,
                     attention_bias=True, partial_rotary_factor=0.5),
    "deepseek_v3": dict(_MLA, model_type="deepseek_v3"),
    # the VL checkpoint's layout: the text model under text_config, a vision tower beside it
    "kimi_k25": {"model_type": "kimi_k25", "text_config": dict(_MLA, model_type="kimi_k2"),
                 "vision_config": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                       intermediate_size=48, patch_size=14, merge_kernel_size=[2, 2])},
}
DEFAULT_FAMILIES = ("llama", "qwen3_moe", "kimi_k25")
MORE_FAMILIES = ("qwen3", "mixtral", "deepseek_v3", "qwen2", "mistral", "minimax_m2", "glm4_moe")


def write_config(directory, family: str) -> str:
    path = directory / f"{family}.json"
    path.write_text(json.dumps(TINY[family]))
    return str(path)


def eager_model(config_path: str) -> torch.nn.Module:
    """The unpatched transformers causal LM of the text config on CPU, with random weights."""
    from infercast_adapters.arch import text_config_of
    from infercast_adapters.config import load_config

    manager = get_manager()
    config = load_config(config_path, manager=manager)
    manager.patch_config(config)
    text = text_config_of(config)
    text._attn_implementation = "eager"
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(text, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.15)
    return lm


def _cache_tensors(cache: DynamicCache) -> list[torch.Tensor]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


class EagerPrefill(torch.nn.Module):
    """The prefill ABI computed by transformers alone: its own cache, positions and mask."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        out = self.lm(input_ids=input_ids, use_cache=True)
        return (out.logits[:, -1:], *_cache_tensors(out.past_key_values))


class EagerDecode(torch.nn.Module):
    """The decode ABI computed by transformers alone: a DynamicCache holding slots
    0..cache_position-1 (the slots after it are never seen), the new rows written back."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, cache_position, *slots):
        position = int(cache_position)
        cache = DynamicCache()
        for layer in range(len(slots) // 2):
            cache.update(slots[2 * layer][:, :, :position], slots[2 * layer + 1][:, :, :position], layer)
        out = self.lm(input_ids=input_ids, past_key_values=cache, use_cache=True)
        updated = []
        for slot, new in zip(slots, _cache_tensors(cache)):
            slot = slot.clone()
            slot[:, :, position] = new[:, :, position]
            updated.append(slot)
        return (out.logits[:, -1:], *updated)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Export each family's tiny config once (fp32), keyed by family."""
    done = {}

    def get(family: str):
        if family not in done:
            directory = tmp_path_factory.mktemp(family)
            path = write_config(directory, family)
            result = export_model(ExportRequest(model=path, phase="both", seq_len=SEQ, max_cache_len=SLOTS, batch=BATCH,
                                                dtype="fp32", out_dir=directory))
            done[family] = (path, result)
        return done[family]

    return get


def _check_family(exported, family: str) -> None:
    path, result = exported(family)
    prefill_file, decode_file = (p.path for p in result.phases)
    prefill, decode = load_ir(prefill_file), load_ir(decode_file)  # the JSON as written, read back
    mapping = json.loads(result.kv_mapping.read_text())
    lm = eager_model(path)
    weights = lm.state_dict()
    torch.manual_seed(1)
    prompt = torch.randint(0, lm.config.vocab_size, (BATCH, SEQ))

    ok, report = torch_ir.verify_ir_with_state_dict(prefill, weights, EagerPrefill(lm), (prompt,), rtol=RTOL, atol=ATOL)
    assert ok, f"prefill graph vs eager: {report}"
    assert report.num_outputs == 1 + 2 * lm.config.num_hidden_layers

    # decode over slots with arbitrary contents, also after the position (the mask must hide them)
    slots = [torch.randn(entry[role]["decode_shape"]) for entry in mapping["cache"] for role in mapping["cache_roles"]]
    token = torch.randint(0, lm.config.vocab_size, (BATCH, 1))
    ok, report = torch_ir.verify_ir_with_state_dict(decode, weights, EagerDecode(lm), (token, torch.tensor([SEQ]), *slots),
                                                    rtol=RTOL, atol=ATOL)
    assert ok, f"decode graph vs eager: {report}"

    generated = generate_through_graphs(prefill, decode, mapping, weights, prompt, STEPS)
    expected = lm.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, do_sample=False,
                           pad_token_id=0)[:, SEQ:]
    assert generated.tolist() == expected.tolist()


def generate_through_graphs(prefill, decode, mapping, weights, prompt, steps: int) -> torch.Tensor:
    """Greedy decoding with the two graphs only, routing the cache as the KV mapping says."""
    seq, axis = mapping["prefill_seq_len"], mapping["sequence_axis"]
    assert axis == 2
    out = dict(zip([o.name for o in prefill.graph_outputs], torch_ir.execute_ir(prefill, (prompt,), weights=weights)))
    state = {}
    for entry in mapping["cache"]:
        for role in mapping["cache_roles"]:
            m = entry[role]
            slots = torch.zeros(m["decode_shape"])
            slots[:, :, :seq] = out[m["prefill_output"]]
            state[m["decode_input"]] = slots
    tokens = [out[mapping["prefill"]["logits"]][:, -1].argmax(-1)]
    for step in range(steps - 1):
        given = {mapping["decode"]["input_ids"]: tokens[-1].unsqueeze(1),
                 mapping["decode"]["cache_position"]: torch.tensor([seq + step]), **state}
        result = torch_ir.execute_ir(decode, tuple(given[i.name] for i in decode.graph_inputs), weights=weights)
        out = dict(zip([o.name for o in decode.graph_outputs], result))
        for entry in mapping["cache"]:
            for role in mapping["cache_roles"]:
                state[entry[role]["decode_input"]] = out[entry[role]["decode_output"]]
        tokens.append(out[mapping["decode"]["logits"]][:, -1].argmax(-1))
    return torch.stack(tokens, dim=1)


@pytest.mark.parametrize("family", DEFAULT_FAMILIES)
def test_graphs_match_the_eager_model_and_generate_what_it_generates(exported, family: str) -> None:
    _check_family(exported, family)


@pytest.mark.slow
@pytest.mark.parametrize("family", MORE_FAMILIES)
def test_the_other_builtin_families_export_as_well(exported, family: str) -> None:
    _check_family(exported, family)


def test_files_kv_mapping_and_cache_layout(exported) -> None:
    _, result = exported("kimi_k25")
    assert [p.path.name for p in result.phases] == ["kimi_k25_prefill_ir.json", "kimi_k25_decode_ir.json"]
    assert result.kv_mapping.name == "kimi_k25_kv_mapping.json"
    mapping = json.loads(result.kv_mapping.read_text())
    assert mapping["cache_roles"] == ["latent", "rope_key"]  # MLA: the model caches its compressed latent
    first = mapping["cache"][0]
    assert first["latent"]["prefill_shape"] == [BATCH, 1, SEQ, 16] and first["latent"]["decode_shape"] == [BATCH, 1, SLOTS, 16]
    assert first["rope_key"]["decode_shape"] == [BATCH, 1, SLOTS, 8] and first["rope_key"]["decode_input"] == "layer_0_rope_key"
    decode = json.loads((result.phases[1].path).read_text())
    assert [i["name"] for i in decode["graph_inputs"]][:3] == ["input_ids", "cache_position", "layer_0_latent"]
    assert decode["infercast"]["text_model_type"] == "deepseek_v3" and decode["infercast"]["phase"] == "decode"
    weights = {w["name"] for w in decode["weights"]}
    assert "model.layers.1.mlp.experts.gate_up_proj" in weights and "lm_head.weight" in weights
    assert not any(name.startswith("lm.") for name in weights)
    assert all(n["op_type"].startswith("aten.") or "getitem" in n["op_type"] for n in decode["nodes"])
    assert any(n["op_type"] == "aten.index_copy.default" for n in decode["nodes"])
    # the rotary frequencies travel with the graph, with their values
    assert any(name.endswith("_infercast_host_inv_freq") for name in decode.get("constants", {}))


# -------------------------------------------------------------------------------------------
# the class patches are what makes the graphs exportable


class Without:
    """The process's adapter manager minus one class patch."""

    def __init__(self, owner: str, attribute: str):
        self.manager, self.owner, self.attribute = get_manager(), owner, attribute

    def __getattr__(self, name):
        return getattr(self.manager, name)

    def class_patches(self, config):
        patches = self.manager.class_patches(config)
        kept = [p for p in patches if not (p.owner.__name__ == self.owner and p.attribute == self.attribute)]
        assert len(kept) == len(patches) - 1, f"no patch {self.owner}.{self.attribute} for {config.model_type}"
        return kept


EXPERTS_FAIL = "the forward failed in"  # transformers' own experts path on meta runs grouped_mm, bf16 only
NO_VALUES = "reads inv_freq, a buffer computed at construction"


@pytest.mark.parametrize(("family", "owner", "attribute", "says"), [
    ("qwen3_moe", "Qwen3MoeExperts", "forward", f"{EXPERTS_FAIL} Qwen3MoeExperts (module model.layers.0.mlp.experts)"),
    ("llama", "LlamaRotaryEmbedding", "forward", f"LlamaRotaryEmbedding (module model.rotary_emb) {NO_VALUES}"),
    ("llama", "LlamaRotaryEmbedding", "__init__", f"LlamaRotaryEmbedding (module model.rotary_emb) {NO_VALUES}"),
    ("kimi_k25", "DeepseekV3Experts", "forward", f"{EXPERTS_FAIL} DeepseekV3Experts (module model.layers.1.mlp.experts)"),
    ("kimi_k25", "DeepseekV3RotaryEmbedding", "forward", f"DeepseekV3RotaryEmbedding (module model.rotary_emb) {NO_VALUES}"),
])
def test_removing_a_class_patch_makes_the_export_fail_naming_the_module(tmp_path, family, owner, attribute, says) -> None:
    path = write_config(tmp_path, family)
    request = ExportRequest(model=path, phase="prefill", seq_len=4, dtype="fp32", out_dir=tmp_path)
    with pytest.raises(InfercastError) as caught:
        export_model(request, manager=Without(owner, attribute))
    message = str(caught.value)
    assert says in message and "infercast_class_patches" in message
    assert not (tmp_path / f"{family}_prefill_ir.json").exists()


def test_patches_are_restored_after_an_export(exported) -> None:
    from transformers.models.qwen3_moe import modeling_qwen3_moe as qm

    before = (qm.Qwen3MoeExperts.__dict__["forward"], qm.Qwen3MoeRotaryEmbedding.__dict__["__init__"])
    exported("qwen3_moe")
    assert (qm.Qwen3MoeExperts.__dict__["forward"], qm.Qwen3MoeRotaryEmbedding.__dict__["__init__"]) == before


@pytest.mark.parametrize(("dtype", "says"), [
    ("fp32", f"{EXPERTS_FAIL} Qwen2MoeExperts (module model.layers.0.mlp.experts)"),
    ("bf16", f"Qwen2MoeRotaryEmbedding (module model.rotary_emb) {NO_VALUES}"),
])
def test_a_family_without_export_patches_names_the_module_and_the_hook(tmp_path, dtype, says) -> None:
    """qwen2_moe has a profile (the built-in plugin's) but no adapter hands out class patches for it."""
    qwen2_moe = next(p for p in builtin_models.PROFILES if p.model_type == "qwen2_moe")
    profile_only = types.SimpleNamespace(infercast_register_profiles=hookimpl(lambda register: register(qwen2_moe)))
    manager = AdapterManager()
    manager.register(profile_only, "qwen2_moe_profile")
    path = tmp_path / "qwen2_moe.json"
    path.write_text(json.dumps(dict(_DENSE, model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=32, shared_expert_intermediate_size=32)))
    with pytest.raises(InfercastError) as caught:
        export_model(ExportRequest(model=str(path), phase="prefill", seq_len=4, dtype=dtype, out_dir=tmp_path),
                     manager=manager)
    assert says in str(caught.value) and "infercast_class_patches" in str(caught.value)


# -------------------------------------------------------------------------------------------
# bad input, refused before any work


def _no_build(*args, **kwargs):
    raise AssertionError("the model was built; the request should have been refused first")


def test_seq_len_must_leave_room_in_the_cache_checked_before_resolving_the_model(monkeypatch) -> None:
    monkeypatch.setattr(export_run, "build_causal_lm", _no_build)
    with pytest.raises(InfercastError, match="--seq-len 64 does not fit --max-cache-len 64"):
        export_model(ExportRequest(model="no-such/model", seq_len=64, max_cache_len=64))


def test_lengths_beyond_the_models_context_are_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(export_run, "build_causal_lm", _no_build)
    path = write_config(tmp_path, "llama")
    with pytest.raises(InfercastError, match="--max-cache-len 300 exceeds the model's context of 256"):
        export_model(ExportRequest(model=path, seq_len=16, max_cache_len=300, out_dir=tmp_path))
    with pytest.raises(InfercastError, match="--seq-len 257 exceeds"):
        export_model(ExportRequest(model=path, phase="prefill", seq_len=257, out_dir=tmp_path))
    with pytest.raises(InfercastError, match="--layers 3: the model has 2 decoder layers"):
        export_model(ExportRequest(model=path, seq_len=8, max_cache_len=16, layers=3, out_dir=tmp_path))


def test_missing_pytorch_ir_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_ir", None)  # import torch_ir raises ImportError
    with pytest.raises(InfercastError, match=r"pip install 'infercast\[ir\]'"):
        export_model(ExportRequest(model="no-such/model", seq_len=8, max_cache_len=16))


def test_cli_errors_are_one_paragraph_and_exit_2(tmp_path, capsys) -> None:
    assert main(["export", "moonshotai/Kimi-K2.5", "--seq-len", "4096", "--max-cache-len", "2048",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "\n\n" not in err.strip()
    assert "--seq-len 4096 does not fit" in " ".join(err.split())  # rich wraps lines


# -------------------------------------------------------------------------------------------
# the command


def test_cli_writes_the_three_files_and_layers_says_what_was_cut(tmp_path, capsys) -> None:
    path = write_config(tmp_path, "qwen3_moe")
    out = tmp_path / "out"
    assert main(["export", path, "--phase", "both", "--seq-len", "8", "--max-cache-len", "32", "--layers", "1",
                 "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == ["qwen3_moe_decode_ir.json", "qwen3_moe_kv_mapping.json",
                                                     "qwen3_moe_prefill_ir.json"]
    assert result["layers"] == 1 and result["model_layers"] == 2
    assert any("first 1 of the model's 2 decoder layers" in note for note in result["notes"])
    mapping = json.loads((out / "qwen3_moe_kv_mapping.json").read_text())
    assert len(mapping["cache"]) == 1 and mapping["cache"][0]["key"]["decode_shape"] == [1, 2, 32, 16]


@pytest.mark.slow
def test_the_full_kimi_k25_text_model_exports_weight_free(tmp_path) -> None:
    """The done-when command: all 61 layers, prefill at 128 tokens, decode over 2,048 slots."""
    result = export_model(ExportRequest(model="moonshotai/Kimi-K2.5", phase="both", seq_len=128, max_cache_len=2048,
                                        out_dir=tmp_path))
    assert result.layers == result.model_layers == 61 and result.notes == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kimi-k2.5_decode_ir.json", "kimi-k2.5_kv_mapping.json",
                                                          "kimi-k2.5_prefill_ir.json"]
    mapping = json.loads(result.kv_mapping.read_text())
    assert len(mapping["cache"]) == 61
    assert mapping["cache"][60]["latent"]["decode_shape"] == [1, 1, 2048, 512]
    assert mapping["cache"][60]["rope_key"]["prefill_shape"] == [1, 1, 128, 64]
    decode = json.loads(result.phases[1].path.read_text())
    experts = next(w for w in decode["weights"] if w["name"] == "model.layers.60.mlp.experts.gate_up_proj")
    assert experts["shape"] == [384, 4096, 7168] and experts["dtype"] == "bfloat16"
    # 1.03 T parameters described, none allocated: a few hundred MiB of Python and graph
    assert all(p.peak_rss_mib < 4096 for p in result.phases)
