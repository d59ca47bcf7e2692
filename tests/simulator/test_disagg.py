"""Disaggregated prefill/decode: KV transfer sized from the cache layout (MLA's latent, GQA's
keys and values), pool layouts with redundant expert slots, xPyD balancing, the plan and its
launch commands, and the M2 decode pool."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from types import SimpleNamespace

import pytest

from infercast.cli import main
from infercast.agg import StepPricer
from infercast.disagg import (
    DecodeChoice,
    PrefillChoice,
    combine,
    decode_choices,
    kv_transfer,
    launch_commands,
    launch_notes,
    pool_layouts,
)
from infercast.plan import Layout, Planner, PlanRequest
from infercast.serving import EnginePolicy, LengthDist, ServingOptions

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
DSV3 = "deepseek-ai/DeepSeek-V3"

# sglang's PD-disaggregation and server flags (docs/advanced_features/pd_disaggregation.md,
# server_arguments.md) and its router's (python -m sglang_router.launch_router --help)
SGLANG_PD_ARGS = {
    "--model-path", "--tp-size", "--dp-size", "--ep-size", "--enable-dp-attention", "--nnodes", "--node-rank",
    "--dist-init-addr", "--quantization", "--kv-cache-dtype", "--max-running-requests", "--trust-remote-code",
    "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--ep-num-redundant-experts", "--chunked-prefill-size",
    "--disaggregation-mode", "--disaggregation-transfer-backend", "--moe-a2a-backend", "--deepep-mode",
    "--enable-two-batch-overlap", "--port", "--host", "--mem-fraction-static",
}
ROUTER_ARGS = {"--pd-disaggregation", "--prefill", "--decode", "--host", "--port"}
VLLM_ARGS = {"--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--max-num-seqs",
             "--max-num-batched-tokens", "--kv-transfer-config", "--port", "--trust-remote-code", "--kv-cache-dtype",
             "--speculative-config", "--all2all-backend"}


# ------------------------------------------------------------------------------ KV transfer


def test_kv_transfer_is_sized_from_the_cache_layout_mla_latent_vs_gqa_heads() -> None:
    llama = Planner(PlanRequest(model=LLAMA, device="H100"))
    seconds, size, streams = kv_transfer(llama, Layout(2, 2, 1, 1), None, 1000)
    # GQA: keys and values of 8 heads x 128 in bf16, 32 layers; TP2 splits the heads: two senders
    assert size == 1000 * 32 * 2 * 8 * 128 * 2 and streams == 2
    h100 = llama.device
    assert seconds == pytest.approx(h100.scale_out_latency_s + size / (2 * h100.scale_out_bandwidth_bytes_per_s
                                                                      * h100.efficiency.scale_out))
    deepseek = Planner(PlanRequest(model=DSV3, device="H100"))
    _, latent, streams = kv_transfer(deepseek, Layout(8, 8, 1, 8), None, 1000)
    # MLA: the 512 + 64 latent in bf16 per layer, 61 layers, the same on every attention-TP rank: one sender
    assert latent == 1000 * 61 * 576 * 2 and streams == 1
    fp8 = Planner(PlanRequest(model=DSV3, device="H100", kv_cache_dtype="fp8"))
    assert kv_transfer(fp8, Layout(8, 8, 1, 8), None, 1000)[1] == latent / 2


# ------------------------------------------------------------------------------ layouts


def test_pool_layouts_fill_every_ep_rank_with_redundant_expert_slots() -> None:
    got = pool_layouts(72, num_heads=128, num_experts=256)
    # 256 experts over 72 ranks: 32 redundant slots make 288 = 4 per rank (LMSYS used the same)
    assert Layout(72, 1, 72, 72, 32) in got and Layout(72, 8, 9, 72, 32) in got
    assert all(x.tp in (1, 8) for x in got)  # 128 heads do not split 72 ways
    assert Layout(16, 1, 16, 16) in pool_layouts(16, num_heads=128, num_experts=256)  # divides: none needed
    assert pool_layouts(4, num_heads=32, num_experts=None) == [Layout(4, 4, 1, 1)]


# ------------------------------------------------------------------------------ xPyD


def _fake_planner(**serving):
    request = SimpleNamespace(serving=ServingOptions(**serving), ttft_slo_ms=None, tpot_slo_ms=None)
    return SimpleNamespace(request=request)


def _command_planner(request: PlanRequest, expert_dtype: str) -> SimpleNamespace:
    """What the pools' launch commands ask of a planner, for ``request`` on 8-GPU H100 nodes."""
    return SimpleNamespace(request=request, device=SimpleNamespace(devices_per_node=8, cuda_arch=90),
                           spec_requests={}, expert_dtype=lambda quantization: expert_dtype,
                           launch_fraction=lambda *pool, **options: None,
                           scattered_input=lambda *pool, **options: (False, None),
                           checkpoint_fp8_kv=lambda quantization: False,
                           online_over_quantized=lambda quantization: [],
                           refusals_by_other_engines=lambda quantization, engines=(): [])


def _pools(layout: Layout, *, batch: int, two_batch_overlap: bool) -> SimpleNamespace:
    """One prefill and one decode instance on ``layout``, as the launch commands read them."""
    return SimpleNamespace(
        prefill=SimpleNamespace(layout=layout, quantization=None, chunk=16384, scattered=False),
        decode=SimpleNamespace(layout=layout, quantization=None, batch=batch, spec=None,
                               two_batch_overlap=two_batch_overlap),
        prefill_instances=1, decode_instances=1)


def _prefill(rate, devices):
    cost = (lambda b, c: 0.001 + c * 1e-5)
    queue = (cost, EnginePolicy(8192, 10**9, "separate"), LengthDist.fixed(1000, 1), 0.0, 1)
    return PrefillChoice(Layout(devices, devices, 1, 1), None, 8192, rate, 100.0, 1.0, 1e6, 1, False, 0.0, 10.0, True,
                         queue)


def _decode(rate, devices):
    return DecodeChoice(Layout(devices, devices, 1, 1), None, 64, None, False, 20.0, 1.0, 20.0, 1000.0, rate, 10.0,
                        True, True)


@pytest.mark.parametrize("prefill_rate, decode_rate", [(3.0, 10.0), (10.0, 3.0), (7.0, 7.0), (0.9, 8.0)])
def test_xpyd_balances_prefill_supply_and_decode_demand(prefill_rate, decode_rate) -> None:
    planner = _fake_planner()
    lengths = LengthDist.fixed(1000, 200)
    p, d = _prefill(prefill_rate, 8), _decode(decode_rate, 8)
    got = combine(planner, p, d, lengths)
    assert got.rate == pytest.approx(min(got.prefill_instances * prefill_rate, got.decode_instances * decode_rate))
    # no other small xPyD gives more output tokens/s per device
    best = max(min(x * prefill_rate, y * decode_rate) * 200 / (8 * x + 8 * y)
               for x in range(1, 200) for y in range(1, 9))
    assert got.tokens_per_s_per_device == pytest.approx(best)
    assert got.num_devices == 8 * (got.prefill_instances + got.decode_instances)
    # balanced: neither side has a whole idle instance
    assert (got.prefill_instances - 1) * prefill_rate < got.rate or got.prefill_instances == 1
    assert (got.decode_instances - 1) * decode_rate < got.rate or got.decode_instances == 1


def test_a_given_rate_sizes_both_pools_to_carry_it() -> None:
    got = combine(_fake_planner(request_rate=25.0), _prefill(3.0, 8), _decode(10.0, 8), LengthDist.fixed(1000, 200))
    assert (got.prefill_instances, got.decode_instances) == (math.ceil(25 / 3), math.ceil(25 / 10))
    assert got.rate == 25.0 and got.tokens_per_s_per_device == pytest.approx(25 * 200 / (8 * 9 + 8 * 3))


# ------------------------------------------------------------------------------ the plan

DISAGG = PlanRequest(model=LLAMA, device="H100", num_devices=(1, 2), batches=(16, 64, 256), input_length=2048,
                     output_length=512, tpot_slo_ms=30.0, ttft_slo_ms=1000.0, mode="both")


@pytest.fixture(scope="module")
def disagg_plan():
    planner = Planner(DISAGG)
    return planner, planner.run()


def test_the_disaggregated_frontier_meets_the_slos_and_counts_every_device(disagg_plan) -> None:
    _, result = disagg_plan
    d = result.disagg
    assert result.best is not None and d.best is not None  # both modes side by side
    assert d.frontier and all(c.meets_slo for c in d.frontier)
    for c in d.frontier:
        assert c.ttft_ms <= 1000.0 and c.tpot_ms <= 30.0 and c.decode.fits and c.prefill.fits
        assert c.ttft_ms > c.prefill.transfer_ms  # TTFT carries the KV transfer
        assert c.tokens_per_s_per_device == pytest.approx(c.rate * 512 / c.num_devices)
        assert c.rate <= c.prefill_instances * c.prefill.rate * (1 + 1e-9)
        assert c.rate <= c.decode_instances * c.decode.rate * (1 + 1e-9)
    assert d.best is max(d.frontier, key=lambda c: c.tokens_per_s_per_device)


def test_disaggregated_launch_commands_use_documented_flags(disagg_plan) -> None:
    planner, result = disagg_plan
    best = result.disagg.best
    commands = launch_commands(planner, best)
    prefill, decode, router = commands["sglang"]
    for cmd in (prefill, decode):
        assert cmd[:3] == ["python", "-m", "sglang.launch_server"] and shlex.split(shlex.join(cmd)) == cmd
        assert {a for a in cmd if a.startswith("--")} <= SGLANG_PD_ARGS
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert decode[decode.index("--disaggregation-mode") + 1] == "decode"
    assert decode[decode.index("--max-running-requests") + 1] == str(best.decode.batch)
    assert router[:4] == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    assert {a for a in router if a.startswith("--")} <= ROUTER_ARGS
    assert router.count("--prefill") == best.prefill_instances and router.count("--decode") == best.decode_instances
    vllm_prefill, vllm_decode, proxy = commands["vllm"]
    assert proxy[1].endswith("disagg_proxy_demo.py") and proxy.count("--prefill") == 1
    for cmd in (vllm_prefill, vllm_decode):
        assert {a for a in cmd if a.startswith("--")} <= VLLM_ARGS
        connector = json.loads(cmd[cmd.index("--kv-transfer-config") + 1])
        assert connector == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    per_rank = best.prefill.chunk // best.prefill.layout.dp  # each vLLM DP rank is an engine of its own
    assert vllm_prefill[vllm_prefill.index("--max-num-batched-tokens") + 1] == str(per_rank)
    nixl = replace(planner.request, serving=replace(planner.request.serving, transfer_backend="nixl"))
    planner.request = nixl
    try:
        assert "nixl" in launch_commands(planner, best)["sglang"][0]
    finally:
        planner.request = DISAGG


def test_disaggregated_expert_parallel_pools_name_their_deepep_mode_once() -> None:
    """Prefill runs DeepEP's normal kernels, decode the low-latency ones (sglang --deepep-mode;
    vLLM --all2all-backend across its data-parallel ranks), each flag once."""
    request = PlanRequest(model="deepseek-ai/DeepSeek-V3", device="H100")
    planner = _command_planner(request, "fp8_block")  # DeepSeek-V3's experts
    ep16 = Layout(16, 1, 16, 16)
    config = _pools(ep16, batch=4096, two_batch_overlap=True)
    commands = launch_commands(planner, config)
    (sg_prefill, sg_decode, _), (vl_prefill, vl_decode, _) = commands["sglang"], commands["vllm"]
    for cmd, flag, value in ((sg_prefill, "--deepep-mode", "normal"), (sg_decode, "--deepep-mode", "low_latency"),
                             (vl_prefill, "--all2all-backend", "deepep_high_throughput"),
                             (vl_decode, "--all2all-backend", "deepep_low_latency")):
        assert cmd.count(flag) == 1 and cmd[cmd.index(flag) + 1] == value
    for cmd in (sg_prefill, sg_decode):
        assert cmd.count("--moe-a2a-backend") == 1 and cmd[cmd.index("--moe-a2a-backend") + 1] == "deepep"
        assert {a for a in cmd if a.startswith("--")} <= SGLANG_PD_ARGS
    for cmd in (vl_prefill, vl_decode):
        assert {a for a in cmd if a.startswith("--")} <= VLLM_ARGS
    # each pool names its own mode: no note about vLLM's single mode, no dispatch difference
    assert launch_notes(planner, config) == []


def test_disaggregated_launch_notes_carry_the_kv_cache_and_refusal_notes() -> None:
    """The pools' sglang and vLLM commands get the aggregated plan's notes on a KV cache dtype no
    flag can say (an fp16 cache over a checkpoint that states FP8), on online FP8 over a checkpoint
    already quantized and on an engine refusing the pool's quantization, each once per pool;
    nothing about TensorRT-LLM, which has no disaggregated command here."""
    request = PlanRequest(model="nvidia/Llama-3.1-70B-Instruct-FP8", device="H100", kv_cache_dtype="fp16")
    planner = _command_planner(request, "fp8")
    planner.checkpoint_fp8_kv = lambda quantization: True
    planner.refusals_by_other_engines = lambda quantization, engines=(): [f"{name}: refuses" for name in engines]
    planner.online_over_quantized = lambda quantization: ["sglang, vllm: already quantized"]
    tp8 = Layout(8, 8, 1, 1)
    config = _pools(tp8, batch=64, two_batch_overlap=False)
    notes = launch_notes(planner, config)
    assert [n for n in notes if n.endswith("already quantized")] == [
        "prefill pool, sglang, vllm: already quantized", "decode pool, sglang, vllm: already quantized"]
    assert any(n.startswith("sglang, vllm: this checkpoint states an FP8 KV cache") for n in notes)
    assert not any("trtllm" in n for n in notes)
    assert [n for n in notes if n.endswith("refuses")] == ["prefill pool, sglang: refuses", "prefill pool, vllm: refuses",
                                                           "decode pool, sglang: refuses", "decode pool, vllm: refuses"]


def test_two_batch_overlap_is_offered_and_launched_only_where_the_engine_has_an_all_to_all() -> None:
    """Qwen3-235B's BF16 experts: sglang has no DeepEP path for them, so its decode pool gets no
    overlap option; vLLM runs its all-to-all across DP ranks, so the overlap is offered, and the
    sglang command for such a plan leaves the flag out (sglang refuses it without an a2a
    backend) with a note saying so."""
    ep = Layout(16, 1, 16, 16)
    lengths = LengthDist.fixed(1000, 200)
    for engine, offered in (("sglang", [False]), ("vllm", [False, True])):
        planner = Planner(PlanRequest(model="Qwen/Qwen3-235B-A22B", device="H100", engine=engine))
        choices = decode_choices(planner, StepPricer(planner), ep, None, 64, None, lengths)
        assert [c.two_batch_overlap for c in choices] == offered
    request = PlanRequest(model="Qwen/Qwen3-235B-A22B", device="H100", engine="vllm")
    planner = _command_planner(request, "bf16")
    config = _pools(ep, batch=1024, two_batch_overlap=True)
    (_, sg_decode, _) = launch_commands(planner, config)["sglang"]
    assert "--enable-two-batch-overlap" not in sg_decode and "--moe-a2a-backend" not in sg_decode
    notes = launch_notes(planner, config)
    assert any(n.startswith("decode pool, sglang: two-batch overlap needs an MoE all-to-all") for n in notes)
    assert any(n.startswith("prefill pool, sglang: its expert parallelism here runs local experts") for n in notes)


def test_cli_both_prints_the_two_side_by_side_and_json_has_both(capsys) -> None:
    argv = ["plan", LLAMA, "--device", "H100", "--num-devices", "1", "--batch-sizes", "64", "--tpot-slo-ms", "40",
            "--ttft-slo-ms", "2000", "--mode", "both"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "best aggregated vs best disaggregated" in out and "sglang_router.launch_router --pd-disaggregation" in out
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best"]["serving"]["mode"] == "agg"
    best = report["disagg"]["best"]
    assert best["xpyd"] == f"{best['prefill_instances']}P{best['decode_instances']}D"
    assert best["prefill"]["kv_bytes_per_request"] == 1024 * 32 * 2 * 8 * 128 * 2
    assert report["disagg"]["launch"]["sglang"][2].startswith("python -m sglang_router.launch_router")


# ------------------------------------------------------------------------------ M2


@pytest.mark.slow
def test_m2_decode_pool_throughput_per_gpu_within_20_percent_of_lmsys() -> None:
    """LMSYS 2025-05-05: DeepSeek-V3 decode on 72 H100 (DP72 EP72, DeepEP low-latency, TBO),
    256 requests per GPU at ~2,000 tokens of KV: 2,785 output tok/s per GPU (measured.md M2)."""
    request = PlanRequest(model=DSV3, device="H100", num_devices=(72,), batches=(256 * 72,), input_length=2000,
                          output_length=100, mode="disagg", speculative=(), serving=ServingOptions(prefill_devices=(16,),
                                                                                   decode_devices=(72,)))
    result = Planner(request).run().disagg
    lmsys = next(c for c in result.decode if c.layout == Layout(72, 1, 72, 72, 32) and c.two_batch_overlap)
    assert lmsys.fits and abs(lmsys.tokens_per_s_per_device - 2785) / 2785 <= 0.20
    assert result.best.decode is lmsys  # the planner picks that decode pool itself
