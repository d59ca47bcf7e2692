"""Cost formulas against hand computations."""

from __future__ import annotations

import pytest
import torch

from infercast.cost import OpCost, attended_pairs, collective_time, cost_of, op_time, register_cost
from infercast.devices import BUILTIN_DEVICES
from infercast.layers import expected_active_experts
from infercast.trace import OpRecord, TensorSpec

H200 = next(d for d in BUILTIN_DEVICES if d.name == "H200")
BF = torch.bfloat16


def test_one_gemm() -> None:
    record = OpRecord("infercast::gemm", (TensorSpec((4, 7168), BF), TensorSpec((2112, 7168), BF, "weight"), "bf16"),
                      (TensorSpec((4, 2112), BF),), "x", 0)
    cost = cost_of(record)
    assert cost.flops == 2 * 4 * 2112 * 7168
    assert cost.bytes == (4 * 7168 + 2112 * 7168 + 4 * 2112) * 2
    t = op_time(cost, H200, 8)
    memory_s = cost.bytes / (4.8e12 * 0.90)
    compute_s = cost.flops / (989e12 * 0.81)
    assert memory_s > compute_s
    assert t.seconds == pytest.approx(memory_s + 4e-6)
    assert t.bound == "memory"


def test_large_gemm_is_compute_bound_at_the_calibrated_efficiency() -> None:
    m = n = k = 8192
    record = OpRecord("infercast::gemm", (TensorSpec((m, k), BF), TensorSpec((n, k), BF, "weight"), "bf16"),
                      (TensorSpec((m, n), BF),), "x", 0)
    t = op_time(cost_of(record), H200, 8)
    assert t.bound == "compute"
    assert t.seconds == pytest.approx(2 * m * n * k / (989e12 * 0.81) + 4e-6)


def test_attended_pairs() -> None:
    assert attended_pairs(1, 1, 2049, True) == 2049  # decode: the prefix plus itself
    assert attended_pairs(2, 4, 4, True) == 2 * (4 * 5 / 2)  # prefill from scratch: triangle
    assert attended_pairs(1, 3, 10, False) == 30


def test_expected_active_experts() -> None:
    assert expected_active_experts(384, 8, 1, 384) == pytest.approx(8)  # one token touches exactly top-k
    assert expected_active_experts(384, 8, 0, 384) == 0
    two = expected_active_experts(384, 8, 2, 384)
    assert two == pytest.approx(384 * (1 - (1 - 8 / 384) ** 2))
    assert 8 < two < 16  # some overlap between two tokens
    assert expected_active_experts(256, 8, 10_000, 4) == pytest.approx(4)  # saturates at the local experts


def test_one_all_reduce_on_eight_gpus() -> None:
    B = 7168 * 2  # one token's hidden state in bf16
    cost = OpCost(collective="all_reduce", message_bytes=B, group_size=8)
    bw = 450e9 * 0.80
    ring = 2 * 7 * 3e-6 + 2 * 7 / 8 * B / bw
    one_shot = 2 * 3e-6 + 7 * B / bw
    two_shot = 4 * 3e-6 + 2 * 7 / 8 * B / bw
    assert collective_time(cost, H200, 8).seconds == pytest.approx(min(ring, one_shot, two_shot) + 4e-6)
    assert min(ring, one_shot, two_shot) == one_shot  # small messages: latency wins
    assert collective_time(OpCost(collective="all_reduce", message_bytes=B, group_size=1), H200, 8).seconds == 0


def test_all_to_all_across_nodes_uses_the_slower_link() -> None:
    B = 1e7
    t = collective_time(OpCost(collective="all_to_all", message_bytes=B, group_size=16), H200, 8).seconds
    inter = B * 8 / 16 / (50e9 * 0.8)
    assert t == pytest.approx(10e-6 + inter + 4e-6)


def test_registering_an_op_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_cost("infercast::gemm")(lambda record: OpCost())


@pytest.fixture(scope="module")
def kimi_layer_records():
    """Kimi-K2.5, 2 layers (one dense, one MoE), 8 x H200 TP8, batch 1 decode on 2,048 cached tokens."""
    from infercast.build import build
    from infercast.layers import SimContext
    from infercast.parallel import Parallel, Workload
    from infercast.plugins import get_manager
    from infercast.quant import plan_from_checkpoint
    from infercast.trace import trace
    from infercast_adapters.config import load_config

    manager = get_manager()
    config = load_config("moonshotai/Kimi-K2.5", manager=manager, num_hidden_layers_override=2)
    manager.patch_config(config)
    ctx = SimContext(Parallel(8, 8, 1, 1), Workload(1, 1, 2048, True),
                     plan_from_checkpoint(config.text_config.quantization_config))
    return trace(build(config, manager.profile_for("kimi_k25"), ctx, manager).sim, ctx.tokens)


def test_one_mla_decode_layer_attention(kimi_layer_records) -> None:
    (record,) = [r for r in kimi_layer_records if r.name == "infercast::mla_attention" and r.layer == 1]
    cost = cost_of(record)
    heads, kv_len = 64 // 8, 2049
    assert cost.flops == 2 * heads * kv_len * (576 + 512)   # QK over the 576-wide latent, PV over 512
    assert cost.bytes == (heads * 576 + heads * 512 + kv_len * 576) * 2  # q, out, the bf16 latent cache


def test_one_moe_layer_reads_only_the_activated_experts(kimi_layer_records) -> None:
    w13 = next(r for r in kimi_layer_records if r.name == "infercast::grouped_gemm" and "w13" in r.path)
    cost = cost_of(w13)
    # One token activates exactly top-8 of 384 experts; TP8 splits each expert's 2048 columns.
    per_expert = 2 * (2048 // 8) * 7168 * (0.5 + 2 / 32)  # INT4 weights + one bf16 scale per 32
    rows = 8  # one token x top-8
    activations = rows * 7168 * 2 + rows * 2 * (2048 // 8) * 2
    assert cost.bytes == pytest.approx(8 * per_expert + activations)
    assert cost.flops == 2 * rows * 2 * (2048 // 8) * 7168
