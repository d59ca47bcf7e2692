"""Cost formulas and the analytic model against hand computations."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch

from infercast import analytic
from infercast.cost import OpCost, attended_pairs, cost_of, register_cost
from infercast.devices import BUILTIN_DEVICES
from infercast.routing import (NORMAL_FROM_ROWS, _expected_max, _rank_picks, busiest_rank, expected_active_experts,
                               expected_destination_nodes, popularity, straggler)
from infercast.trace import OpRecord, TensorSpec

DEVICES = {d.name: d for d in BUILTIN_DEVICES}
H200, H100, H20 = DEVICES["H200"], DEVICES["H100"], DEVICES["H20"]
BF = torch.bfloat16


def gemm_record(m: int, n: int, k: int, dtype: str = "bf16") -> OpRecord:
    x, w, out = TensorSpec((m, k), BF), TensorSpec((n, k), BF, "weight"), TensorSpec((m, n), BF)
    return OpRecord("infercast::gemm", (x, w, dtype), (out,), "x", 0, named={"x": x, "weight": w, "dtype": dtype})


def test_small_gemm_is_memory_bound_plus_the_fixed_time() -> None:
    cost = cost_of(gemm_record(4, 2112, 7168))
    assert cost.flops == 2 * 4 * 2112 * 7168
    assert cost.bytes == (4 * 7168 + 2112 * 7168 + 4 * 2112) * 2
    t = analytic.kernel_time(cost, H200)
    memory_s = cost.bytes / (4.8e12 * H200.efficiency.memory)
    assert t.bound == "memory"
    assert t.seconds == pytest.approx(memory_s + H200.efficiency.kernel_fixed_s)


def test_large_gemm_runs_at_its_dtypes_efficiency() -> None:
    m = n = k = 8192
    bf16 = analytic.kernel_time(cost_of(gemm_record(m, n, k)), H100)
    fp8 = analytic.kernel_time(cost_of(gemm_record(m, n, k, "fp8_block")), H100)
    assert bf16.bound == fp8.bound == "compute"
    fixed = H100.efficiency.kernel_fixed_s
    assert bf16.seconds == pytest.approx(2 * m * n * k / (989e12 * H100.efficiency.gemm["bf16"]) + fixed)
    assert fp8.seconds == pytest.approx(2 * m * n * k / (1979e12 * H100.efficiency.gemm["fp8_block"]) + fixed)
    # FP8 is not twice as fast as bf16: its tensor cores reach a lower share of their peak
    assert 1.2 < bf16.seconds / fp8.seconds < 2.0


def test_small_m_pays_for_padded_tensor_core_rows() -> None:
    """A 100-row GEMM computes 128 rows (wgmma m64 twice) when compute-bound."""
    padded = analytic.compute_seconds(cost_of(gemm_record(100, 8192, 8192)), H100)
    full = analytic.compute_seconds(cost_of(gemm_record(128, 8192, 8192)), H100)
    assert padded == pytest.approx(full)


def test_weight_only_kernels_pad_rows_to_16_not_64() -> None:
    """Marlin multiplies with mma.sync m16n8k16 (activations as the 16-row operand): a one-row
    W4A16 GEMM computes 16 rows, where a bf16 GEMM on Hopper's wgmma computes 64."""
    def compute(m: int, dtype: str) -> float:
        return analytic.compute_seconds(cost_of(gemm_record(m, 8192, 8192, dtype)), H100)

    one, sixteen, seventeen, thirty_two = (compute(m, "w4a16") for m in (1, 16, 17, 32))
    assert one == pytest.approx(sixteen) and seventeen == pytest.approx(thirty_two) == pytest.approx(2 * sixteen)
    assert compute(1, "bf16") == pytest.approx(compute(64, "bf16")) == pytest.approx(4 * sixteen)


def int4_moe_cost(tokens: int, experts: int = 8, hidden: int = 256, inter: int = 128, top_k: int = 2,
                  dtype: str = "w4a16") -> OpCost:
    """One rank's fused MoE over ``tokens`` tokens, every expert local, INT4 weights in groups of 128."""
    x = TensorSpec((tokens, hidden), BF)
    named = dict(x=x, w13=TensorSpec((experts, 2 * inter, hidden // 8), torch.int32, "weight"),
                 w13_scale=TensorSpec((experts, 2 * inter, hidden // 128), BF, "weight"),
                 w2=TensorSpec((experts, hidden, inter // 8), torch.int32, "weight"),
                 w2_scale=TensorSpec((experts, hidden, max(1, inter // 128)), BF, "weight"), tokens=tokens,
                 top_k=top_k, num_experts=experts, local_experts=experts, routed_rows=float(tokens * top_k),
                 active_experts=float(min(experts, tokens * top_k)), straggler=1.0, moe_tp=1, dtype=dtype,
                 distribution="balanced", dispatch="tp")
    return cost_of(OpRecord("infercast::fused_moe", tuple(named.values()), (x,), "mlp", 0, named=named))


def test_a_marlin_moe_streams_at_its_sms_or_its_memorys_limit_and_pays_one_fixed_time() -> None:
    """A fused Marlin MoE with a few rows streams at min(22.71 GB/s per SM, 0.789 of HBM): the
    SMs bound it on H200 (132 SMs: 3.00 TB/s of 4.8) and on the H20 (78 SMs: 1.77 TB/s of 4.0),
    the memory on H100 (2.64 of 3.35 TB/s); it pays 23.4 us on top, all its kernels together. A
    dense Marlin GEMM keeps its own stream, and without the family all five kernels pay the
    device's fixed time."""
    cost = int4_moe_cost(1)
    assert (cost.kernels, cost.gemm_kernels, cost.grouped) == (5, 2, True)
    for device, rate in ((H200, 22.71e9 * 132), (H20, 22.71e9 * 78), (H100, 0.789 * 3.35e12)):
        marlin = device.efficiency.streams["marlin"]
        assert marlin.grouped_rate(device) == pytest.approx(rate)
        roof = max(analytic.compute_seconds(cost, device, marlin), cost.bytes / rate)
        assert analytic.kernel_time(cost, device, "marlin").seconds == pytest.approx(roof + 23.4e-6)
    assert analytic.kernel_time(cost, H200).seconds == pytest.approx(  # no family: five at the device's
        5 * H200.efficiency.kernel_fixed_s + max(analytic.compute_seconds(cost, H200),
                                                 cost.bytes / (4.8e12 * H200.efficiency.memory)))
    dense = replace(cost, grouped=False)  # the dense kernel's stream: its own share and fixed time
    marlin = H200.efficiency.streams["marlin"]
    assert analytic.kernel_time(dense, H200, "marlin").seconds == pytest.approx(
        3 * H200.efficiency.kernel_fixed_s + 2 * marlin.fixed_s
        + max(analytic.compute_seconds(dense, H200), cost.bytes / (4.8e12 * marlin.memory)))


def test_a_compute_bound_marlin_moe_runs_its_real_rows_at_the_familys_own_share_of_the_peak() -> None:
    """Marlin's fused MoE reaches 0.278 x w / (w + 123) of Hopper's bf16 peak once compute-bound
    (0.360 x on the capped H20), w its experts' width on the rank, over its real rows; its dense
    GEMM and a bf16 MoE keep the device's GEMM figure."""
    big = int4_moe_cost(4096, experts=64, hidden=4096, inter=1024, top_k=8)  # 512 rows an expert, 1,024 wide
    flops = 4096 * 8 * 2 * 3 * 4096 * 1024
    assert big.flops == pytest.approx(flops)
    for device, wide in ((H20, 0.360), (H200, 0.278), (H100, 0.278)):
        marlin = device.efficiency.streams["marlin"]
        share = wide * 1024 / (1024 + 123)
        assert marlin.grouped_share(1024) == pytest.approx(share)
        timed = analytic.kernel_time(big, device, "marlin")
        assert timed.bound == "compute"
        assert timed.seconds == pytest.approx(flops / (device.peak("bf16") * share) + marlin.grouped_fixed_s)
    # MoE TP 4 leaves each rank experts 256 wide: a quarter of the work at a smaller share
    marlin = H200.efficiency.streams["marlin"]
    narrow = int4_moe_cost(4096, experts=64, hidden=4096, inter=256, top_k=8)
    ratio = analytic.compute_seconds(narrow, H200, marlin) / analytic.compute_seconds(big, H200, marlin)
    assert ratio == pytest.approx(0.25 * (1024 / (1024 + 123)) / (256 / (256 + 123)))
    # a few rows an expert: no padding to 16 (the stream, not the padded MMAs, sets the time)
    few = int4_moe_cost(4, experts=64, hidden=4096, inter=1024, top_k=2)
    marlin = H20.efficiency.streams["marlin"]
    assert analytic.compute_seconds(few, H20, marlin) == pytest.approx(few.flops / (H20.peak("bf16")
                                                                                     * marlin.grouped_share(1024)))
    assert analytic.kernel_time(few, H20, "marlin").bound in ("memory", "latency")
    # without the family (TensorRT-LLM's own kernel) or for bf16 experts: the generic figure
    generic = big.flops / (H20.peak("bf16") * H20.efficiency.gemm_efficiency("bf16", "bf16"))
    assert analytic.compute_seconds(big, H20) == pytest.approx(generic, rel=0.05)
    bf16 = int4_moe_cost(4096, experts=64, hidden=4096, inter=1024, top_k=8, dtype="bf16")
    padded = analytic.expected_row_tiles(512, 64) * 64 / 512  # routed rows: 8.5 tiles an expert, not 8
    assert analytic.compute_seconds(bf16, H20, marlin) == pytest.approx(generic * padded, rel=0.05)
    # MXFP4 experts in the same kernel (gpt-oss launched with Marlin): the same FLOPs at 0.75 of the share
    mxfp4 = replace(big, kernel_dtype="mxfp4")
    for device in (H20, H200):
        marlin = device.efficiency.streams["marlin"]
        assert marlin.grouped_share(1024, "mxfp4") == pytest.approx(0.75 * marlin.grouped_share(1024))
        assert analytic.compute_seconds(mxfp4, device, marlin) == pytest.approx(
            analytic.compute_seconds(big, device, marlin) / 0.75)


def test_each_dtype_of_a_triton_figure_has_its_own_curve() -> None:
    """sglang's Triton MoE on the H200: bf16 experts 0.266 x w / (w + 75) of the bf16 peak,
    FP8-block ones 0.801 x w / (w + 345), per-tensor FP8 the FP8-block curve (the same kernel)."""
    triton = H200.efficiency.streams["triton:sglang"]
    for width in (64, 192, 1536):
        assert triton.grouped_share(width, "bf16") == pytest.approx(0.266 * width / (width + 75))
        assert triton.grouped_share(width, "fp8_block") == pytest.approx(0.801 * width / (width + 345))
        assert triton.grouped_share(width, "fp8") == triton.grouped_share(width, "fp8_block")


@pytest.mark.parametrize("field, value, message", [
    ("memory", 0.0, "KernelStream.memory is 0.0; it must be in (0, 1]"),
    ("grouped_compute", 1.5, "KernelStream.grouped_compute is 1.5; it must be None or in (0, 1]"),
    ("grouped_half_width", -1, "KernelStream.grouped_half_width is -1; it must be >= 0"),
    ("grouped_compute_scale", (("mxfp4", 1.5),),
     "KernelStream.grouped_compute_scale['mxfp4'] is 1.5; it must be in (0, 1]"),
    ("grouped_half_widths", (("bf16", -5),), "KernelStream.grouped_half_widths['bf16'] is -5; it must be >= 0"),
])
def test_a_kernel_stream_out_of_range_is_a_clear_error(field, value, message) -> None:
    from infercast_adapters import InfercastError

    with pytest.raises(InfercastError, match=re.escape(message)):
        replace(H200.efficiency.streams["marlin"], **{field: value})


def test_fp4_weights_run_at_the_bf16_rate_where_there_are_no_fp4_tensor_cores() -> None:
    assert H200.peak("fp4") == H200.peak("bf16")  # Hopper dequantises MXFP4
    assert DEVICES["B200"].peak("fp4") == 9000e12
    assert DEVICES["A100"].peak("fp8") == 312e12  # A100 has no FP8: weight-only at the bf16 rate


def test_attention_uses_its_own_efficiency() -> None:
    cost = OpCost(flops=1e12, kind="attention")
    assert analytic.compute_seconds(cost, H20) == pytest.approx(1e12 / (148e12 * H20.efficiency.attention))
    assert H20.efficiency.attention != H20.efficiency.gemm["bf16"]


def test_attended_pairs() -> None:
    assert attended_pairs(1, 1, 2049, True) == 2049  # decode: the prefix plus itself
    assert attended_pairs(2, 4, 4, True) == 2 * (4 * 5 / 2)  # prefill from scratch: triangle
    assert attended_pairs(1, 3, 10, False) == 30


def kv_write_record(tokens: int, width: int, cache_dtype: torch.dtype, with_v: bool = True) -> OpRecord:
    k = TensorSpec((tokens, width), BF)
    v = TensorSpec((tokens, width), BF) if with_v else None
    named = {"k": k, "v": v, "cache_dtype": str(cache_dtype)}
    return OpRecord("infercast::kv_cache_write", (k, v, str(cache_dtype)), (), "x", 0, named=named)


def test_kv_cache_write_reads_bf16_rows_and_writes_the_cache_dtype() -> None:
    # 16 tokens x 1,024 values of K and of V: 32 KiB each in bf16 read; written as 32 KiB each
    # into a bf16 cache, 16 KiB each into an FP8 one
    assert cost_of(kv_write_record(16, 1024, torch.bfloat16)).bytes == 2 * (16 * 1024 * 2 + 16 * 1024 * 2)
    assert cost_of(kv_write_record(16, 1024, torch.float8_e4m3fn)).bytes == 2 * (16 * 1024 * 2 + 16 * 1024 * 1)
    # an MLA latent row has no separate V
    assert cost_of(kv_write_record(16, 576, torch.bfloat16, with_v=False)).bytes == 16 * 576 * 2 * 2


def test_expected_active_experts() -> None:
    assert expected_active_experts(384, 8, 1, 384) == pytest.approx(8)  # one token touches exactly top-k
    assert expected_active_experts(384, 8, 0, 384) == 0
    two = expected_active_experts(384, 8, 2, 384)
    assert two == pytest.approx(384 * (1 - (1 - 8 / 384) ** 2))
    assert 8 < two < 16  # some overlap between two tokens
    assert expected_active_experts(256, 8, 10_000, 4) == pytest.approx(4)  # saturates at the local experts
    # skewed routing concentrates tokens on fewer experts
    assert expected_active_experts(256, 8, 64, 256, "power-law-1.2") < expected_active_experts(256, 8, 64, 256)


def test_power_law_popularity_is_capped_and_the_busiest_rank_carries_more() -> None:
    shares = popularity("power-law-1.2", 256, 8)
    assert sum(shares) == pytest.approx(1.0)
    assert max(shares) <= 1 / 8 + 1e-12
    assert straggler("balanced", 256, 8, 64) == 1.0
    assert straggler("power-law-1.2", 256, 8, 64) >= straggler("power-law-1.01", 256, 8, 64) > 1.0
    assert straggler("power-law-1.2", 256, 2, 8) > straggler("power-law-1.01", 256, 2, 8) > 1.0  # uncapped


def test_routed_rows_pad_to_the_expected_tiles_of_a_poisson_count() -> None:
    # at a mean of 64 rows an expert the zero-truncated law is the Poisson law itself (P(0) is
    # e^-64): one tile, plus a second for every count above 64
    above = sum(math.exp(x * math.log(64) - 64 - math.lgamma(x + 1)) for x in range(65, 400))
    assert analytic.expected_row_tiles(64, 64) == pytest.approx(1 + above, rel=1e-6)
    assert 0.45 < above < 0.49
    means = (1, 8, 48, 64, 96, 128, 512, 800, 999, 1001, 4096)  # e^-800 underflows: summed in logs
    tiles = [analytic.expected_row_tiles(m, 64) for m in means]
    assert tiles == sorted(tiles) and tiles[:2] == [1.0, 1.0]
    assert all(m / 64 <= t <= m / 64 + 1 for m, t in zip(means, tiles))
    # past 1,000 rows the last tile's fill is taken as uniform: the two sides meet
    assert analytic.expected_row_tiles(1000.01, 64) == pytest.approx(analytic.expected_row_tiles(999.99, 64), abs=0.005)
    # one-row tiles count the rows themselves: the zero-truncated law's mean, even just above one
    for mean in (1.001, 1.09, 1.5, 3.0, 40.0):
        assert analytic.expected_row_tiles(mean, 1) == pytest.approx(mean, rel=1e-6)
    # a grouped GEMM of 16 experts at 64 rows each: exact rows fill one tile, routed rows 1.47
    cost = OpCost(flops=2.0 * 16 * 64 * 4096 * 7168, compute_dtype="fp8", kind="gemm", kernel_dtype="fp8_block",
                  gemm_mnk=(64, 4096, 7168), gemm_count=16, grouped=True)
    routed = replace(cost, routed_mean_rows=64.0)
    assert analytic.compute_seconds(routed, H20) / analytic.compute_seconds(cost, H20) == pytest.approx(1 + above)


def test_the_busiest_rank_by_hand_for_one_token_on_two_ranks() -> None:
    # 8 experts on 2 ranks, top-2: rank 0 gets 0, 1 or 2 picks with C(4, c) C(4, 2 - c) / C(8, 2),
    # 6/28, 16/28, 6/28; with the ranks taken as independent, E[max] = sum over m of
    # 1 - P(X <= m)^2 = (1 - (6/28)^2) + (1 - (22/28)^2), over a mean of one pick a rank
    assert busiest_rank(1, 8, 2, 2) == pytest.approx(2 - (6 / 28) ** 2 - (22 / 28) ** 2)
    # the true joint law puts both picks on one rank with probability 12/28: E[max] = 40/28, so
    # the independent ranks come out low
    assert busiest_rank(1, 8, 2, 2) < 40 / 28
    assert busiest_rank(1, 8, 2, 1) == busiest_rank(0, 8, 2, 2) == 1.0


def _busiest_rank_sampled(tokens: int, experts: int, top_k: int, ep: int, n_group: int | None = None,
                          topk_group: int | None = None, trials: int = 4000) -> float:
    """The busiest rank's rows over the mean, by drawing the routing: each token picks
    ``topk_group`` groups, then ``top_k`` experts among theirs, uniformly."""
    gen = torch.Generator().manual_seed(0)
    keys = torch.rand(trials, tokens, experts, generator=gen)
    if n_group:
        group_keys = torch.rand(trials, tokens, n_group, generator=gen)
        chosen = torch.zeros(trials, tokens, n_group, dtype=torch.bool)
        chosen.scatter_(-1, group_keys.topk(topk_group, dim=-1).indices, True)
        keys = keys - 2.0 * (~chosen).repeat_interleave(experts // n_group, dim=-1)
    picks = keys.topk(top_k, dim=-1).indices // (experts // ep)
    rows = torch.nn.functional.one_hot(picks, ep).sum(dim=(1, 2))
    return rows.max(dim=-1).values.double().mean().item() / (tokens * top_k / ep)


@pytest.mark.parametrize("tokens, experts, top_k, ep, groups, low", [
    (1, 256, 8, 8, (8, 4), 0.12),  # DeepSeek-V3, one token: its 8 picks on 4 ranks
    (1, 256, 8, 8, (None, None), 0.08),
    (16, 256, 8, 8, (8, 4), 0.04),
    (8, 384, 8, 8, (None, None), 0.04),  # Kimi-K2.5
    (32, 256, 8, 16, (8, 4), 0.03),  # groups spanning two ranks each
])
def test_the_busiest_rank_comes_near_the_sampled_routing_and_never_above_it(tokens, experts, top_k, ep, groups,
                                                                          low) -> None:
    sampled = _busiest_rank_sampled(tokens, experts, top_k, ep, *groups)
    priced = busiest_rank(tokens, experts, top_k, ep, *groups)
    assert sampled * (1 - low) <= priced <= sampled * 1.01


def test_the_busiest_rank_evens_out_as_tokens_grow_and_its_two_sums_meet() -> None:
    loads = [busiest_rank(t, 256, 8, 8, 8, 4) for t in (1, 4, 16, 64, 1024, 65536)]
    assert loads == sorted(loads, reverse=True) and loads[0] > 3 and 1.0 < loads[-1] < 1.02
    # group-limited routing piles a token's picks onto fewer ranks than unlimited routing does
    assert busiest_rank(1, 256, 8, 8, 8, 4) > busiest_rank(1, 256, 8, 8)
    # the exact sum below NORMAL_FROM_ROWS rows a rank, a normal law from there: at that many rows
    # the two agree within 2.5% on 8 to 256 ranks (the normal tail runs low, more so at fewer rows)
    for experts, ep, groups in ((256, 8, (8, 4)), (256, 64, (8, 4)), (288, 72, (None, None)), (256, 256, (None, None))):
        picks = _rank_picks(experts, 8, ep, *groups)
        tokens = NORMAL_FROM_ROWS * ep // 8
        exact, normal = _expected_max(picks, tokens, ep, normal=False), _expected_max(picks, tokens, ep, normal=True)
        assert exact * 0.975 < normal < exact
        assert _expected_max(picks, tokens // 16, ep, normal=True) < 0.95 * _expected_max(picks, tokens // 16, ep,
                                                                                          normal=False)


def test_deepep_destination_nodes_by_hand() -> None:
    # one node: every token stays home
    assert expected_destination_nodes(256, 8, 1) == 1.0
    # 2 nodes, 4 experts each, top-2, no groups: a node is missed with C(4, 2) / C(8, 2) = 6 / 28
    assert expected_destination_nodes(8, 2, 2) == pytest.approx(2 * (1 - 6 / 28))
    # DeepSeek-V3 on 8 nodes: 8 groups of 32 experts, one group per node; a token picks 4
    # groups, then its 8 experts among their 128 experts: a chosen node is missed with
    # C(96, 8) / C(128, 8), an unchosen one always
    chosen_hit = 1 - math.comb(96, 8) / math.comb(128, 8)
    assert expected_destination_nodes(256, 8, 8, 8, 4) == pytest.approx(4 * chosen_hit)
    assert expected_destination_nodes(256, 8, 8, 8, 4) < expected_destination_nodes(256, 8, 8)


def test_deepep_volume_against_a_hand_count() -> None:
    tokens, hidden, k, experts = 256, 7168, 8, 256
    fp8_token = hidden * 1 + hidden // 128 * 4  # FP8 values and one fp32 scale per 128
    # low-latency mode over 4 nodes of 8: one copy per (token, expert); 3/4 of them leave the node
    ll = analytic.deepep_volume(tokens=tokens, bytes_per_token=fp8_token, top_k=k, num_experts=experts, mode="ll",
                                ep=32, scale_up_domain=8, destinations=0.0)
    assert ll.scale_out_bytes == pytest.approx(tokens * k * 3 / 4 * fp8_token)
    assert ll.scale_up_bytes == pytest.approx(tokens * k / 4 * fp8_token * 7 / 8)
    # normal mode: once per remote destination node, then once per destination GPU over NVLink
    reach = expected_destination_nodes(experts, k, 4, 8, 4)
    normal = analytic.deepep_volume(tokens=tokens, bytes_per_token=fp8_token, top_k=k, num_experts=experts,
                                    mode="normal", ep=32, scale_up_domain=8, destinations=reach)
    assert normal.scale_out_bytes == pytest.approx(tokens * reach * 3 / 4 * fp8_token)
    assert normal.scale_out_bytes < ll.scale_out_bytes  # the per-node copy saves scale-out bytes


def test_an_analytic_deepep_moves_the_busiest_ranks_rows() -> None:
    """The dispatch's busiest receiver holds ``out_rows`` rows where the mean rank holds tokens x
    top-k; it receives them in the dispatch and sends them back in the combine, and the links'
    time scales with them (the collective floor does not)."""
    tokens, hidden, k = 64, 7168, 8

    def a2a(phase: str, rows: int) -> OpCost:
        fp8 = phase == "dispatch"
        x = TensorSpec((tokens if fp8 else rows, hidden), torch.float8_e4m3fn if fp8 else BF)
        named = dict(x=x, out_rows=rows if fp8 else tokens, group_size=16, group="ep", phase=phase, mode="ll",
                     top_k=k, num_experts=256, destinations=2.0)
        return cost_of(OpRecord("infercast::all_to_all", tuple(named.values()), (x,), "mlp", 0, named=named))

    floor = H20.efficiency.collective_floor_s + H20.scale_out_latency_s
    for phase in ("dispatch", "combine"):
        even, busiest = a2a(phase, tokens * k), a2a(phase, 3 * tokens * k)
        assert even.a2a["busiest"] == 1.0 and busiest.a2a["busiest"] == pytest.approx(3.0)
        even_s, busiest_s = (analytic.deepep_time(c, H20, 8).seconds - floor for c in (even, busiest))
        assert busiest_s == pytest.approx(3 * even_s)


def test_one_all_reduce_inside_a_node() -> None:
    B = 7168 * 2  # one token's hidden state in bf16
    cost = OpCost(kind="collective", collective="all_reduce", message_bytes=B, group_size=8)
    w = 450e9 * H200.efficiency.link
    expected = H200.efficiency.collective_floor_s + 2 * 7 / 8 * B / w
    assert analytic.collective_time(cost, H200, 8).seconds == pytest.approx(expected)
    one = OpCost(kind="collective", collective="all_reduce", message_bytes=B, group_size=1)
    assert analytic.collective_time(one, H200, 8).seconds == 0


def test_cross_node_all_reduce_is_hierarchical() -> None:
    """TP16 over two nodes of 8: reduce-scatter in the node, all-reduce of B/8 between the two
    nodes (one tree hop each way), all-gather in the node."""
    B = 7168 * 2
    cost = OpCost(kind="collective", collective="all_reduce", message_bytes=B, group_size=16)
    eff = H200.efficiency
    w, out = 450e9 * eff.link, 50e9 * eff.scale_out
    rs = eff.collective_floor_s + 7 / 8 * B / w
    ag = eff.collective_floor_s + 7 * (B / 8) / w
    inter = 2 * H200.scale_out_latency_s + 2 * 1 / 2 * (B / 8) / out
    t = analytic.collective_time(cost, H200, 8).seconds
    assert t == pytest.approx(rs + inter + ag)
    assert t < 100e-6  # a 14 KB all-reduce across two nodes is tens of microseconds, not hundreds


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
    moe = next(r for r in kimi_layer_records if r.name == "infercast::fused_moe")
    cost = cost_of(moe)
    # One token activates exactly top-8 of 384 experts; TP8 splits each expert's 2048 columns.
    inter = 2048 // 8
    per_expert = 3 * inter * 7168 * (0.5 + 2 / 32)  # INT4 weights + one bf16 scale per 32
    rows = 8  # one token x top-8
    activations = rows * 7168 * 2 * 2 + rows * 2 * inter * 2 * 1.5
    assert cost.bytes == pytest.approx(8 * per_expert + activations)
    assert cost.flops == 2 * rows * 3 * inter * 7168
    assert cost.kernels == 5 and cost.kernel_dtype == "w4a16"


@pytest.mark.parametrize("device, system", [("H100", "h100_sxm"), ("B200", "b200_sxm")])
def test_analytic_decode_attention_pays_what_the_tables_small_attentions_take(device, system) -> None:
    """GQA decode attention (8 KV heads of 128) for up to 8 requests over 64-2,048 tokens: the
    measured kernels take 8-35 us where the roofline is a few. Priced with a GEMM's fixed time
    (2-3 us) the analytic model put them at a third of that (medians 0.40 and 0.30); with the attention
    fixed time derived from the same tables (over every head layout) its median lands within a
    quarter of the tables, and nearly every case within 0.7-1.6x."""
    from infercast.kernels import aiconfigurator as aic

    spec = DEVICES[device]
    table = aic.load("generation_attention", system, "sglang", "0.5.14")
    ratios = []
    for (heads, batch, context), us in table.grid(("bf16", 128, 8)).points():
        if batch > 8 or not 64 <= context <= 2048:
            continue
        cache = batch * context * 8 * 128 * 2  # K or V, bf16
        q_and_out = 2 * batch * heads * 128 * 2
        cost = OpCost(flops=2.0 * heads * batch * context * 256, compute_dtype="bf16", bytes=q_and_out + 2 * cache,
                      kind="attention")
        ratios.append(analytic.kernel_time(cost, spec).seconds * 1e6 / us)
    assert len(ratios) > 100
    assert 0.8 < sorted(ratios)[len(ratios) // 2] < 1.25
    assert sum(0.7 < r < 1.6 for r in ratios) / len(ratios) > 0.9


def test_a_device_without_an_attention_figure_prices_attention_with_its_kernel_fixed_time() -> None:
    """A plugin's Efficiency written before attention_fixed_s existed still builds and prices."""
    older = replace(H100, efficiency=replace(H100.efficiency, attention_fixed_s=None))
    cost = OpCost(flops=0.0, compute_dtype="bf16", bytes=0.0, kind="attention")
    assert analytic.kernel_time(cost, older).seconds == pytest.approx(H100.efficiency.kernel_fixed_s)
    assert analytic.kernel_time(cost, H100).seconds == pytest.approx(H100.efficiency.attention_fixed_s)
    assert H100.efficiency.attention_fixed_s > 3 * H100.efficiency.kernel_fixed_s


@pytest.mark.parametrize("device, system", [("H100", "h100_sxm"), ("H200", "h200_sxm")])
def test_analytic_mla_decode_pays_what_the_tables_small_mla_decodes_take(device, system) -> None:
    """MLA decode over a latent cache (576 wide, values 512) for up to 8 requests over 64-2,048
    tokens: Hopper's measured kernels take 12-31 us. With a GEMM's fixed time the analytic model
    put them at about a quarter of that (median 0.24); with MLA's own figure its median is within 10% of the
    tables, and MLA's figure is above the plain attention one it falls back to."""
    from infercast.kernels import aiconfigurator as aic

    spec = DEVICES[device]
    table = aic.load("generation_mla", system, "sglang", "0.5.14")
    ratios = []
    for (heads, batch, context), us in table.grid(("bf16",)).points():
        if batch > 8 or not 64 <= context <= 2048:
            continue
        cost = OpCost(flops=2.0 * heads * batch * context * (576 + 512), compute_dtype="bf16",
                      bytes=batch * heads * (576 + 512) * 2 + batch * context * 576 * 2, kind="mla_attention")
        ratios.append(analytic.kernel_time(cost, spec).seconds * 1e6 / us)
    assert len(ratios) > 20
    assert 0.9 < sorted(ratios)[len(ratios) // 2] < 1.1
    plain = replace(spec.efficiency, mla_attention_fixed_s=None)
    mla_fixed = spec.efficiency.fixed_s("mla_attention")
    assert plain.fixed_s("mla_attention") == spec.efficiency.attention_fixed_s < mla_fixed
