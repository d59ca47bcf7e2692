"""Pointwise kernels an engine folds into its neighbours (TensorRT-LLM's PyTorch backend, vLLM's
Inductor-compiled graph)."""

from __future__ import annotations

import pytest
import torch

from infercast.cost import cost_of
from infercast.engines import ENGINES
from infercast.simulate import UserInput, simulate
from infercast.trace import OpRecord, TensorSpec

LLAMA8 = dict(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, num_queries=1,
              query_length=512, quantize_linear_action="FP8")


def _rows(result) -> dict[str, int]:
    """Kernels per layer by operator and module (``quantize_activation (layers.*.mlp.down_proj)``)."""
    layers = next(row.count for row in result.ops if row.name.startswith("attention (layers.*"))
    return {row.name: row.count // layers for row in result.ops if "layers.*" in row.name}


def test_tensorrt_llm_writes_the_cache_in_its_rope_kernel_and_quantizes_in_swiglu() -> None:
    sglang = _rows(simulate(UserInput(**LLAMA8)))
    trtllm = _rows(simulate(UserInput(**LLAMA8, engine="trtllm")))
    assert sglang["rope (layers.*.self_attn)"] == sglang["kv_cache_write (layers.*.self_attn)"] == 1
    assert "rope (layers.*.self_attn)" not in trtllm and "kv_cache_write (layers.*.self_attn)" not in trtllm
    assert trtllm["rope_kv_cache_write (layers.*.self_attn)"] == 1
    # SiLU-and-mul writes down_proj's FP8 input; the bf16 norms leave qkv and gate_up their own quantize
    assert "quantize_activation (layers.*.mlp.down_proj)" in sglang
    assert "quantize_activation (layers.*.mlp.down_proj)" not in trtllm
    for kept in ("self_attn.qkv_proj", "mlp.gate_up_proj", "self_attn.o_proj"):
        assert trtllm[f"quantize_activation (layers.*.{kept})"] == 1
    folded = {"rope (layers.*.self_attn)", "kv_cache_write (layers.*.self_attn)",
              "quantize_activation (layers.*.mlp.down_proj)"}
    assert {name: n for name, n in sglang.items() if name not in folded} == {
        name: n for name, n in trtllm.items() if name != "rope_kv_cache_write (layers.*.self_attn)"}


def test_attention_writes_o_proj_fp8_input_only_with_an_fp8_cache() -> None:
    bf16 = _rows(simulate(UserInput(**LLAMA8, engine="trtllm")))
    fp8 = _rows(simulate(UserInput(**LLAMA8, engine="trtllm", kv_cache_dtype="fp8")))
    assert "quantize_activation (layers.*.self_attn.o_proj)" in bf16
    assert "quantize_activation (layers.*.self_attn.o_proj)" not in fp8


def test_block_fp8_keeps_its_quantize_kernels_and_bf16_has_none_to_fold() -> None:
    """The fused SwiGLU and attention output quantize with one scale per tensor: FP8 block
    checkpoints keep their per-group quantize kernels, even with an FP8 cache; bf16 weights have
    none, and still get RoPE in the cache write."""
    block = _rows(simulate(UserInput(**{**LLAMA8, "quantize_linear_action": "FP8_BLOCK"}, engine="trtllm",
                                     kv_cache_dtype="fp8")))
    assert block["quantize_activation (layers.*.mlp.down_proj)"] == 1
    assert block["quantize_activation (layers.*.self_attn.o_proj)"] == 1
    bf16 = _rows(simulate(UserInput(**{**LLAMA8, "quantize_linear_action": None}, engine="trtllm")))
    assert not any(name.startswith("quantize_activation") for name in bf16)
    assert bf16["rope_kv_cache_write (layers.*.self_attn)"] == 1


def test_each_engine_declares_its_fusions_with_their_source() -> None:
    assert ENGINES["trtllm"].pointwise is not None and "invokeQKVPreprocessing" in ENGINES["trtllm"].pointwise.source
    assert not ENGINES["trtllm"].pointwise.fp8_norm
    assert ENGINES["vllm"].pointwise.fp8_norm and "enable_norm_fusion" in ENGINES["vllm"].pointwise.source
    assert ENGINES["sglang"].pointwise is None  # sglang compiles nothing by default (--enable-torch-compile)


@pytest.mark.parametrize("cache, itemsize", [(torch.bfloat16, 2), (torch.float8_e4m3fn, 1)])
def test_the_fused_kernel_reads_q_k_v_once_and_writes_q_and_the_cache(cache, itemsize) -> None:
    # 16 tokens: q 32 heads x 128, k and v 8 heads x 128, bf16
    q = TensorSpec((16, 32, 128), torch.bfloat16)
    k = TensorSpec((16, 8, 128), torch.bfloat16)
    v = TensorSpec((16, 8 * 128), torch.bfloat16)
    record = OpRecord("infercast::rope_kv_cache_write", (q, k, v, str(cache)), (q,), "x", 0,
                      named={"q": q, "k": k, "v": v, "cache_dtype": str(cache)})
    q_bytes, kv_values = 16 * 32 * 128 * 2, 2 * 16 * 8 * 128
    assert cost_of(record).bytes == 2 * q_bytes + kv_values * 2 + kv_values * itemsize


def test_vllm_quantizes_in_its_compiled_norms_and_swiglu_but_not_after_attention() -> None:
    """Inductor fuses the RMSNorm and SiLU-and-mul with the FP8 quantization after them; attention,
    a custom op between compiled pieces, leaves o_proj its own quantize. A bf16 model has none."""
    sglang = _rows(simulate(UserInput(**LLAMA8)))
    vllm = _rows(simulate(UserInput(**LLAMA8, engine="vllm")))
    for folded in ("self_attn.qkv_proj", "mlp.gate_up_proj", "mlp.down_proj"):
        assert sglang[f"quantize_activation (layers.*.{folded})"] == 1
        assert f"quantize_activation (layers.*.{folded})" not in vllm
    assert vllm["quantize_activation (layers.*.self_attn.o_proj)"] == 1
    assert vllm["rope (layers.*.self_attn)"] == vllm["kv_cache_write (layers.*.self_attn)"] == 1
    bf16 = dict(LLAMA8, quantize_linear_action=None)
    assert _rows(simulate(UserInput(**bf16, engine="vllm"))) == _rows(simulate(UserInput(**bf16)))
