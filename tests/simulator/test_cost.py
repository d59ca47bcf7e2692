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
