"""Golden numbers for three small configurations, each derived by hand from the config's shapes.

``infercast simulate CONFIG --device H100 --num-devices 1 --num-queries 4 --context-length 100
--decode --cost-model analytic --json`` for a dense Llama with GQA, a DeepSeek-V3 (MLA, MoE
with a shared expert, a first dense layer, group-limited routing, the FP8 128 x 128 block
checkpoint format) and a Qwen3-MoE, plus one Llama prefill. Every expected value below is
computed here from the config: parameters matrix by matrix, weight bytes from each matrix's
storage dtype, KV cache bytes per token, the kernels each layer launches (read off
``infercast.layers``), and a few operator rows priced with the roofline of ``infercast.analytic``
re-derived from the H100 profile's own constants and the operator's shape. Nothing is copied
from a run of the tool; a number that moves means the cost model moved.
"""

from __future__ import annotations

import json
import math

import pytest

from infercast.cli import main
from infercast.plugins import get_devices
from .toy_models import DEEPSEEK_V3, LLAMA, QWEN3_MOE

BATCH, CONTEXT = 4, 100
KV_LEN = CONTEXT + 1  # each request attends to its 100 cached tokens plus the new one
BF16, FP8, FP32 = 2, 1, 4  # bytes per value
GIB, MIB = 2**30, 2**20


@pytest.fixture(scope="module")
def h100():
    return get_devices().get("H100")


def simulate_json(capsys, tmp_path, name: str, config: dict, *flags: str) -> dict:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    code = main(["simulate", str(path), "--device", "H100", "--num-devices", "1", "--num-queries", str(BATCH),
                 "--cost-model", "analytic", "--json", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def decode_json(capsys, tmp_path, name: str, config: dict) -> dict:
    return simulate_json(capsys, tmp_path, name, config, "--context-length", str(CONTEXT), "--decode")


def row(result: dict, name: str) -> dict:
    rows = [r for r in result["ops"] if r["name"] == name]
    assert len(rows) == 1, [r["name"] for r in result["ops"]]
    return rows[0]


# ------------------------------------------------------------------------------ the roofline, re-derived
#
# analytic.py: time = max(flops x pad / (peak x efficiency x wave_use), bytes / (HBM x memory efficiency))
#                     + kernel_fixed x kernels (attention and MLA decode kernels: their own measured figures)
# pad: tensor cores compute 64 rows and 8 columns at a time, so m and n round up to those;
# wave_use: a GEMM with fewer 128 x 128 x 128 (tile, K step) pairs than SMs keeps only that share busy.


def roofline(device, *, flops: float, nbytes: float, peak: float, efficiency: float,
             mnk: tuple[int, int, int] | None = None, count: float = 1.0, kernels: int = 1,
             attention: str | None = None) -> tuple[float, str]:
    """(seconds, bound) of one kernel (or fused group of ``kernels``) on ``device``."""
    pad = use = 1.0
    if mnk is not None:
        m, n, k = mnk
        pad = math.ceil(m / 64) * 64 / m * math.ceil(n / 8) * 8 / n
        steps = math.ceil(m / 128) * math.ceil(n / 128) * math.ceil(k / 128) * max(1, round(count))
        use = min(1.0, steps / device.sm_count)
    compute = flops * pad / (peak * efficiency * use)
    memory = nbytes / (device.hbm_bandwidth_bytes_per_s * device.efficiency.memory)
    fixed = {None: device.efficiency.kernel_fixed_s, "attention": device.efficiency.attention_fixed_s,
             "mla": device.efficiency.mla_attention_fixed_s}[attention] * kernels
    bound = "latency" if fixed > max(compute, memory) else ("compute" if compute >= memory else "memory")
    return max(compute, memory) + fixed, bound


def bf16_gemm(device, m: int, n: int, k: int) -> tuple[float, str]:
    """y[m, n] = x[m, k] @ W[n, k].T, all bf16: reads x and W, writes y."""
    return roofline(device, flops=2 * m * n * k, nbytes=BF16 * (m * k + n * k + m * n),
                    peak=device.peak_flops_per_s["bf16"], efficiency=device.efficiency.gemm["bf16"], mnk=(m, n, k))


def assert_row(result: dict, name: str, count: int, seconds_each: float, bound: str | None = None) -> None:
    found = row(result, name)
    assert found["count"] == count
    assert found["source"] == "analytic"
    assert found["total_ms"] == pytest.approx(count * seconds_each * 1e3, rel=1e-9)
    if bound is not None:
        assert found["bound"] == bound


# ------------------------------------------------------------------------------ (a) dense Llama, GQA


def llama_parameters(c: dict) -> int:
    h, inter, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    head_dim = h // c["num_attention_heads"]  # 64: no head_dim in the config
    q = h * c["num_attention_heads"] * head_dim  # 256 x 256 = 65,536
    k = v = h * c["num_key_value_heads"] * head_dim  # 256 x 128 = 32,768 each
    o = c["num_attention_heads"] * head_dim * h  # 65,536
    gate = up = down = h * inter  # 131,072 each
    norms = 2 * h  # input_layernorm, post_attention_layernorm
    per_layer = q + k + v + o + gate + up + down + norms  # 590,336
    embed, final_norm, lm_head = vocab * h, h, vocab * h  # untied: two 256,000 matrices
    return embed + layers * per_layer + final_norm + lm_head  # 1,692,928


LLAMA_KERNELS_PER_LAYER = (
    1  # fused_add_rms_norm (input_layernorm)
    + 1  # qkv_proj GEMM (q, k and v fused)
    + 1  # rope on q and k
    + 1  # kv_cache_write: the new k and v rows into the cache in one kernel (sglang's store_cache)
    + 1  # attention over the paged cache
    + 1  # o_proj GEMM
    + 1  # fused_add_rms_norm (post_attention_layernorm)
    + 3  # gate_up_proj GEMM, silu_and_mul, down_proj GEMM
)  # TP 1: no all-reduce after o_proj or down_proj, none after the embedding


def test_llama_gqa_decode(capsys, tmp_path, h100) -> None:
    c = LLAMA
    result = decode_json(capsys, tmp_path, "llama", c)
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = h // heads
    assert result["workload"]["tokens_per_rank"] == BATCH and result["quantization"] == "BF16 (bf16 checkpoint)"

    params = llama_parameters(c)
    assert params == 1_692_928
    assert result["parameters_billion"] == params / 1e9
    # a bf16 checkpoint: 2 bytes per parameter, nothing else stored
    assert result["memory_gib"]["weights"] == params * BF16 / GIB

    # GQA: layers x (K and V) x kv_heads x head_dim x 2 bytes = 2 x 2 x 2 x 64 x 2 = 1,024 bytes per token
    kv_per_token = layers * 2 * kv_heads * head_dim * BF16
    assert kv_per_token == 1024
    assert result["memory_gib"]["kv_cache_per_token_mib"] == kv_per_token / MIB
    assert result["memory_gib"]["kv_cache"] == kv_per_token * BATCH * KV_LEN / GIB

    # embedding + the layers + the head (final fused_add_rms_norm and lm_head; decode needs
    # logits for every new token, so no last-token gather)
    assert result["kernel_count"] == 1 + layers * LLAMA_KERNELS_PER_LAYER + 2 == 23

    # qkv_proj: m = 4 tokens, n = (4 + 2 x 2) heads x 64 = 512, k = 256
    seconds, bound = bf16_gemm(h100, BATCH, (heads + 2 * kv_heads) * head_dim, h)
    assert_row(result, "gemm (layers.*.self_attn.qkv_proj)", layers, seconds, bound)
    # lm_head: m = 4, n = vocab 1,000 (a multiple of 8: no column padding), k = 256
    seconds, bound = bf16_gemm(h100, BATCH, c["vocab_size"], h)
    assert_row(result, "gemm (head.lm_head)", 1, seconds, bound)

    # decode attention: each of the 4 requests' one new query scores 101 keys in each of the 4
    # heads: 2 x heads x pairs x (d_qk + d_v) FLOPs; it reads q, the K and V caches of
    # 4 x 101 tokens x 2 KV heads x 64, and writes the output
    pairs = BATCH * KV_LEN
    cache = BATCH * KV_LEN * kv_heads * head_dim * BF16
    q = out = BATCH * heads * head_dim * BF16
    seconds, bound = roofline(h100, flops=2 * heads * pairs * (head_dim + head_dim), nbytes=q + out + 2 * cache,
                              peak=h100.peak_flops_per_s["bf16"], efficiency=h100.efficiency.attention,
                              attention="attention")
    assert_row(result, "attention (layers.*.self_attn)", layers, seconds, bound)

    # the cache write: 4 new rows of K and of V (2 KV heads x 64 each) read in bf16 and written
    # into the bf16 cache, one kernel per layer; no copy kernel joins k and v first
    rows = BATCH * 2 * kv_heads * head_dim
    seconds, bound = roofline(h100, flops=0, nbytes=rows * BF16 + rows * BF16, peak=h100.peak_flops_per_s["bf16"],
                              efficiency=h100.efficiency.gemm["bf16"])
    assert_row(result, "kv_cache_write (layers.*.self_attn)", layers, seconds, bound)
    assert not [r for r in result["ops"] if r["name"].startswith("cat ")]


PROMPT = 1024


def test_llama_gqa_prefill(capsys, tmp_path, h100) -> None:
    """4 prompts of 1,024 tokens, no cached prefix: 4,096 tokens through every GEMM."""
    c = LLAMA
    result = simulate_json(capsys, tmp_path, "llama_prefill", c, "--query-length", str(PROMPT))
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim, tokens = h // heads, BATCH * PROMPT
    assert result["phase"] == "prefill" and result["workload"]["tokens_per_rank"] == tokens == 4096

    # as in decode, plus one gather of each prompt's last token before the lm_head
    assert result["kernel_count"] == 1 + layers * LLAMA_KERNELS_PER_LAYER + 3 == 24
    kv_per_token = layers * 2 * kv_heads * head_dim * BF16
    assert result["memory_gib"]["kv_cache"] == kv_per_token * BATCH * PROMPT / GIB

    # causal attention within each prompt: token i scores i keys, 1,024 x 1,025 / 2 = 524,800
    # pairs per prompt, 2,099,200 for the 4; 2 x 4 heads x pairs x (64 + 64) = 2.15 GFLOP per
    # layer, which outweighs its 6.3 MB of traffic (compute time above memory time)
    pairs = BATCH * PROMPT * (PROMPT + 1) // 2
    flops = 2 * heads * pairs * (head_dim + head_dim)
    assert flops == 2_149_580_800
    q = out = tokens * heads * head_dim * BF16
    cache = tokens * kv_heads * head_dim * BF16
    seconds, bound = roofline(h100, flops=flops, nbytes=q + out + 2 * cache, peak=h100.peak_flops_per_s["bf16"],
                              efficiency=h100.efficiency.attention, attention="attention")
    compute_s = flops / (h100.peak_flops_per_s["bf16"] * h100.efficiency.attention)
    assert compute_s > (q + out + 2 * cache) / (h100.hbm_bandwidth_bytes_per_s * h100.efficiency.memory)
    assert_row(result, "attention (layers.*.self_attn)", layers, seconds, bound)

    # gate_up_proj: m = 4,096, n = 2 x 512, k = 256 (no padding; 512 tile-steps fill all 132 SMs)
    seconds, bound = bf16_gemm(h100, tokens, 2 * c["intermediate_size"], h)
    assert_row(result, "gemm (layers.*.mlp.gate_up_proj)", layers, seconds, bound)
    # the lm_head sees only the last token of each prompt: m = 4
    seconds, bound = bf16_gemm(h100, BATCH, c["vocab_size"], h)
    assert_row(result, "gemm (head.lm_head)", 1, seconds, bound)


# ------------------------------------------------------------------------------ (b) DeepSeek-V3: MLA, MoE, FP8 blocks


def fp8_block_bytes(out_features: int, in_features: int, experts: int = 1) -> int:
    """An FP8 block-quantized matrix: 1 byte per weight and one fp32 scale per 128 x 128 block."""
    return experts * (out_features * in_features * FP8
                      + math.ceil(out_features / 128) * math.ceil(in_features / 128) * FP32)


def test_deepseek_v3_mla_moe_decode(capsys, tmp_path, h100) -> None:
    c = DEEPSEEK_V3
    result = decode_json(capsys, tmp_path, "deepseek_v3", c)
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    q_lora, kv_lora, nope, rope, v_dim = (c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"],
                                          c["qk_rope_head_dim"], c["v_head_dim"])
    experts, moe_inter, inter = c["n_routed_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    vocab, dense_layers = c["vocab_size"], c["first_k_dense_replace"]
    moe_layers = layers - dense_layers  # layer 0 dense, layers 1 and 2 MoE
    assert result["quantization"] == "FP8_BLOCK (checkpoint fp8 128x128 blocks)"

    # --- parameters: (out, in) of every matrix
    qkv_a = (q_lora + kv_lora + rope, h)  # q_a_proj and kv_a_proj_with_mqa fused: 176 x 256
    q_b = (heads * (nope + rope), q_lora)  # 192 x 96
    kv_b = (heads * (nope + v_dim), kv_lora)  # 256 x 64
    o = (h, heads * v_dim)  # 256 x 128
    attention = [qkv_a, q_b, kv_b, o]
    attention_norms = q_lora + kv_lora  # q_a_layernorm, kv_a_layernorm
    dense_mlp = [(2 * inter, h), (h, inter)]  # gate and up (fused), down
    router = (experts, h)  # 8 x 256, bf16 in every checkpoint
    routed_w13, routed_w2 = (2 * moe_inter, h), (h, moe_inter)  # per expert
    shared = [(2 * moe_inter, h), (h, moe_inter)]  # one shared expert of the routed experts' size

    def n(shapes):
        return sum(a * b for a, b in shapes)

    layer_common = n(attention) + attention_norms + 2 * h  # + input and post-attention norms
    moe_params = n([router]) + experts * n([routed_w13, routed_w2]) + n(shared)
    params = (vocab * h + dense_layers * (layer_common + n(dense_mlp)) + moe_layers * (layer_common + moe_params)
              + h + vocab * h)
    assert (layer_common, n(dense_mlp), moe_params) == (113_312, 393_216, 886_784)
    assert params == 3_018_976
    assert result["parameters_billion"] == params / 1e9

    # --- weight bytes: the checkpoint's FP8 blocks for attention, dense MLP and experts; kv_b_proj
    # (read as per-head bf16 matrices by the absorbed decode), the router, embeddings and norms in bf16
    attention_bytes = (fp8_block_bytes(*qkv_a) + fp8_block_bytes(*q_b) + fp8_block_bytes(*o)
                       + n([kv_b]) * BF16 + attention_norms * BF16)
    assert fp8_block_bytes(*qkv_a) == 176 * 256 + 2 * 2 * 4  # 176 rows -> 2 blocks, 256 columns -> 2 blocks
    dense_bytes = sum(fp8_block_bytes(*s) for s in dense_mlp)
    moe_bytes = (n([router]) * BF16 + fp8_block_bytes(*routed_w13, experts) + fp8_block_bytes(*routed_w2, experts)
                 + sum(fp8_block_bytes(*s) for s in shared))
    layer_bytes = attention_bytes + 2 * h * BF16
    weights = (vocab * h * BF16 + dense_layers * (layer_bytes + dense_bytes) + moe_layers * (layer_bytes + moe_bytes)
               + h * BF16 + vocab * h * BF16)
    assert weights == 3_587_120
    assert result["memory_gib"]["weights"] == weights / GIB

    # --- MLA caches one latent per token and layer: (kv_lora_rank + qk_rope_head_dim) x 2 bytes
    kv_per_token = layers * (kv_lora + rope) * BF16
    assert kv_per_token == 480
    assert result["memory_gib"]["kv_cache_per_token_mib"] == kv_per_token / MIB
    assert result["memory_gib"]["kv_cache"] == kv_per_token * BATCH * KV_LEN / GIB

    # --- kernels. An FP8 linear is two kernels: per-token activation quantization, then the GEMM.
    mla_decode = (
        2  # fused_qkv_a_proj (quantize + GEMM)
        + 1  # q_a_layernorm
        + 2  # q_b_proj
        + 1  # kv_a_layernorm
        + 1  # rope on q_pe and k_pe
        + 1  # kv_cache_write of the latent
        + 1  # mla_bmm "pre": q_nope into the latent space (W_UK absorbed)
        + 1  # mla_attention over the latent cache, q absorbed and q_pe as two inputs (no concat kernel)
        + 1  # mla_bmm "post": the latent output through W_UV, written straight into o_proj's layout
        + 2  # o_proj
    )
    norms = 2  # fused_add_rms_norm before attention and before the MLP
    dense_mlp_kernels = 2 + 1 + 2  # gate_up (FP8), silu_and_mul, down (FP8)
    moe_kernels = (1  # router GEMM (bf16)
                   + 5  # fused_moe, one operator of five kernels: aligning the routed rows to blocks, the
                   #       two grouped GEMMs, the activation between them and the sum over the top-k
                   + 2 + 1 + 2  # shared expert: gate_up, silu_and_mul, down
                   + 1)  # add of the shared and routed outputs
    expected_kernels = (1 + dense_layers * (mla_decode + norms + dense_mlp_kernels)
                        + moe_layers * (mla_decode + norms + moe_kernels) + 2)
    assert expected_kernels == 77
    assert result["kernel_count"] == expected_kernels

    # --- o_proj, an FP8-block GEMM: m = 4, n = 256, k = 4 heads x 32 = 128; reads bf16 x, the
    # fp8 weight and its 2 x 1 fp32 block scales, writes bf16 y; at the fp8 peak and fp8_block efficiency
    m, n_out, k = BATCH, h, heads * v_dim
    seconds, bound = roofline(h100, flops=2 * m * n_out * k,
                              nbytes=m * k * BF16 + fp8_block_bytes(n_out, k) + m * n_out * BF16,
                              peak=h100.peak_flops_per_s["fp8"], efficiency=h100.efficiency.gemm["fp8_block"],
                              mnk=(m, n_out, k))
    assert_row(result, "quant_gemm (layers.*.self_attn.o_proj)", layers, seconds, bound)

    # --- the absorbed bmm pair, per head: pre [4 x 32] @ [32 x 64] (q_nope -> latent), post
    # [4 x 64] @ [64 x 32] (latent -> v); bf16, batched over 4 heads
    bmm = 0.0
    for kk, nn in ((nope, kv_lora), (kv_lora, v_dim)):
        bmm += roofline(h100, flops=2 * heads * BATCH * kk * nn,
                        nbytes=BF16 * heads * (BATCH * kk + kk * nn + BATCH * nn),
                        peak=h100.peak_flops_per_s["bf16"], efficiency=h100.efficiency.gemm["bf16"],
                        mnk=(BATCH, nn, kk), count=heads)[0]
    found = row(result, "mla_bmm (layers.*.self_attn)")
    assert found["count"] == 2 * layers
    assert found["total_ms"] == pytest.approx(layers * bmm * 1e3, rel=1e-9)

    # --- absorbed decode attention: q of width kv_lora + rope = 80 against the 4 x 101 cached
    # latents, value width kv_lora = 64: 2 x heads x pairs x (80 + 64) FLOPs; reads q and the
    # latent cache, writes [4, 4, 64]
    latent = kv_lora + rope
    seconds, bound = roofline(h100, flops=2 * heads * BATCH * KV_LEN * (latent + kv_lora),
                              nbytes=BF16 * (BATCH * heads * (latent + kv_lora) + BATCH * KV_LEN * latent),
                              peak=h100.peak_flops_per_s["bf16"], efficiency=h100.efficiency.attention,
                              attention="mla")
    assert_row(result, "mla_attention (layers.*.self_attn)", layers, seconds, bound)


# ------------------------------------------------------------------------------ (c) Qwen3-MoE


def test_qwen3_moe_decode(capsys, tmp_path, h100) -> None:
    c = QWEN3_MOE
    result = decode_json(capsys, tmp_path, "qwen3_moe", c)
    h, layers, heads, kv_heads, head_dim = (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                                            c["num_key_value_heads"], c["head_dim"])
    experts, top_k, moe_inter = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    vocab = c["vocab_size"]

    # --- parameters: q 256 x 256, k and v 256 x 128, o 256 x 256, q_norm and k_norm (64 each);
    # every layer MoE (decoder_sparse_step 1, no mlp_only_layers): router 8 x 256 and 8 experts
    # of gate, up (128 x 256) and down (256 x 128); no shared expert
    attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h + 2 * head_dim
    moe = experts * h + experts * 3 * h * moe_inter
    per_layer = attention + 2 * h + moe
    assert (attention, moe) == (196_736, 788_480)
    params = vocab * h + layers * per_layer + h + vocab * h
    assert params == 2_483_712
    assert result["parameters_billion"] == params / 1e9
    assert result["memory_gib"]["weights"] == params * BF16 / GIB  # bf16 checkpoint

    kv_per_token = layers * 2 * kv_heads * head_dim * BF16  # 2 x 2 x 2 x 64 x 2
    assert kv_per_token == 1024
    assert result["memory_gib"]["kv_cache_per_token_mib"] == kv_per_token / MIB
    assert result["memory_gib"]["kv_cache"] == kv_per_token * BATCH * KV_LEN / GIB

    per_layer_kernels = (1  # fused_add_rms_norm
                         + 1  # qkv_proj
                         + 2  # q_norm and k_norm (rms_norm per head)
                         + 1 + 1  # rope, kv_cache_write of k and v
                         + 1  # attention
                         + 1  # o_proj
                         + 1  # fused_add_rms_norm
                         + 1  # router GEMM
                         + 5)  # fused_moe: align, two grouped GEMMs, activation, top-k sum (no shared expert, no add)
    assert result["kernel_count"] == 1 + layers * per_layer_kernels + 2 == 33

    # --- the router: m = 4, n = 8 experts, k = 256, bf16
    seconds, bound = bf16_gemm(h100, BATCH, experts, h)
    assert_row(result, "gemm (layers.*.mlp.gate)", layers, seconds, bound)

    # --- fused_moe, balanced routing, EP 1: 4 tokens x top-2 = 8 routed rows; the expected
    # number of distinct experts they touch is 8 x (1 - (1 - 2/8)^4) = 5.46875, whose weights
    # are read (a 5.46875 / 8 share of all expert bytes); FLOPs are the gate/up GEMM (2 x rows
    # x 256 x 256) and the down GEMM (2 x rows x 128 x 256); activations in and out of both
    # GEMMs: rows x 256 x 2 bytes x 2 + rows x 256 x 2 bytes x 1.5. sglang runs bf16 experts
    # through its Triton fused MoE, which has figures of its own on the H100 (sglang's own,
    # ``triton:sglang``): it streams the bytes at its share of HBM plus one fixed time for the
    # operator (not five small kernels' worth), and computes the real rows at its compute-bound
    # share of the bf16 peak for experts 128 wide (bf16: 0.234 x 128 / (128 + 80)), not padded to tiles.
    rows = BATCH * top_k
    active = experts * (1 - (1 - top_k / experts) ** BATCH)
    assert active == 5.46875
    expert_bytes = experts * 3 * h * moe_inter * BF16
    nbytes = expert_bytes * active / experts + rows * h * BF16 * 2 + rows * 2 * moe_inter * BF16 * 1.5
    flops = 2 * rows * h * 2 * moe_inter + 2 * rows * moe_inter * h
    triton = h100.efficiency.streams["triton:sglang"]
    assert triton.grouped_share(moe_inter, "bf16") == pytest.approx(0.234 * 128 / (128 + 80))
    compute = flops / (h100.peak_flops_per_s["bf16"] * triton.grouped_share(moe_inter, "bf16"))
    memory = nbytes / (triton.grouped_memory * h100.hbm_bandwidth_bytes_per_s)
    bound = "latency" if triton.grouped_fixed_s > max(compute, memory) else "memory"
    assert_row(result, "fused_moe (layers.*.mlp)", layers, max(compute, memory) + triton.grouped_fixed_s, bound)


def test_tied_embeddings_are_stored_and_counted_once(capsys, tmp_path, h100) -> None:
    """``tie_word_embeddings``: the lm_head is the embedding matrix (transformers ties the
    parameter, sglang points lm_head at embed_tokens), so it is one parameter matrix and one
    copy in memory, while the head's GEMM still reads all of it."""
    c = dict(LLAMA, tie_word_embeddings=True)
    result = decode_json(capsys, tmp_path, "llama_tied", c)
    h, vocab = c["hidden_size"], c["vocab_size"]
    params = llama_parameters(LLAMA) - vocab * h  # one 1,000 x 256 matrix instead of two
    assert params == 1_436_928
    assert result["parameters_billion"] == params / 1e9
    assert result["memory_gib"]["weights"] == params * BF16 / GIB
    seconds, bound = bf16_gemm(h100, BATCH, vocab, h)
    assert_row(result, "gemm (head.lm_head)", 1, seconds, bound)
