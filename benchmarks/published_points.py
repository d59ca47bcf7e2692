"""Simulated vs published measurements beyond shared/reference/measured.md.

Public figures found in engine documentation and CI reports, each simulated from what its page
states (model, hardware, layout, dtype, lengths, batch) and compared as what it measures: an
in-engine prefill time has no HTTP in it, a client TTFT does, an offline batch latency is a
prefill plus every decode step. Nothing in the simulator knows these points; they check
mechanisms (dense FP8 prefill, TP communication, per-step host time, per-request time) across
devices, engines and sizes. Run: .venv/bin/python benchmarks/published_points.py
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.table import Table

from infercast.simulate import SimResult, UserInput, simulate

# Llama 2, as TensorRT-LLM's v0.9.0 benchmark engines built it (vocabulary 32,000; the 7B with
# full multi-head attention, the 70B with 8 KV heads): not bundled with infercast, so written
# out here from the architectures' published shapes.
LLAMA2 = {
    "Llama-2-7B": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32),
    "Llama-2-70B": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                        num_key_value_heads=8),
}
LLAMA2_COMMON = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=32000,
                     max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
                     tie_word_embeddings=False, torch_dtype="float16")

# Mixtral-8x22B (mistralai/Mixtral-8x22B-v0.1's config.json): eight experts of 16,384 behind a
# 6,144-wide residual, two per token, 56 layers of grouped-query attention (48 heads, 8 KV heads).
# Not bundled with infercast; the shape aiconfigurator's MoE tables list as (6144, 16384, 8, 2).
MIXTRAL_8X22B = dict(model_type="mixtral", architectures=["MixtralForCausalLM"], hidden_size=6144,
                     intermediate_size=16384, num_hidden_layers=56, num_attention_heads=48, num_key_value_heads=8,
                     num_local_experts=8, num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=65536,
                     rms_norm_eps=1e-5, rope_theta=1e6, hidden_act="silu", tie_word_embeddings=False,
                     torch_dtype="bfloat16")

# Kimi-K2-Instruct-0905: Kimi-K2.5's text model (the same DeepSeek-V3 architecture with 384
# experts, 64 heads, one dense layer), shipped with every linear layer in FP8 128x128 blocks
# instead of INT4 experts; its config.json names model_type kimi_k2.
def _kimi_k2_instruct() -> dict:
    from infercast_kimi_k25.architecture import TEXT_CONFIG

    return dict(TEXT_CONFIG, quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                                  "weight_block_size": [128, 128]})


# GLM-4.6 (zai-org/GLM-4.6, GLM-4.5's architecture with a longer context; 355B total, 32B active): 92
# layers, the first three dense (12,288 wide), then 160 routed experts of 1,536 (top-8) beside one
# shared expert, behind a 5,120-wide residual; 96 query heads and 8 KV heads of 128 with biased
# projections and query-key norms, rotary on half of each head. Its shape as Megatron-LM trains it
# (scripts/models/glm4.5-355B-A32B.sh in a copy of THUDM/slime, zyzshishui/slime) and as the
# transformers docs size it (docs/source/en/model_doc/glm4_moe.md: 355B).
GLM_4_6 = dict(model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"], hidden_size=5120,
               intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=92, num_attention_heads=96,
               num_key_value_heads=8, head_dim=128, n_routed_experts=160, n_shared_experts=1, num_experts_per_tok=8,
               first_k_dense_replace=3, n_group=1, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
               vocab_size=151552, max_position_embeddings=202752, attention_bias=True, partial_rotary_factor=0.5,
               use_qk_norm=True, rope_theta=1e6, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
               torch_dtype="bfloat16")

TRTLLM_090, NIM_180, VLLM_CI, COOKBOOK = "TRT-LLM 0.9.0", "NIM 1.8.0", "vLLM CI", "sgl-cookbook"
COOKBOOK_MORE = "sgl-cookbook, more runs"
COOKBOOK_AMD = "sgl-cookbook MI300X"
SGLANG_PR = "sglang PR 13466"
SGLANG_H20 = "sglang PR 7631"
# The sglang a PR measured with is its branch of main, between releases; what matters here is the
# all-reduce fusion rules it had, which are older than 0.5.7's (the first to fuse on sm_90).
SGLANG_PR_VERSION = "0.5.5"  # November 2025
SGLANG_H20_VERSION = "0.4.8"  # June 2025
VLLM_RTN = "vLLM PR 23197"
VLLM_MOE = "vLLM PR 4002"

SOURCES = {
    TRTLLM_090: "NVIDIA/TensorRT-LLM docs/source/performance.md at v0.9.0, the 'first token latency' tables at "
                "batch 1 (gptSessionBenchmark with output length 1; FP8 weights and KV cache)",
    NIM_180: "NVIDIA NIM for LLMs benchmarking page (docs.nvidia.com/nim/benchmarking/llm), version 1.8.0, "
             "Llama-3.3-70B-Instruct fp8 TP2 on 2 x H100 80G, AIPerf over HTTP at concurrency 1 (input/output "
             "200/200, 500/2000, 1000/1000, 5000/500, 20000/2000), as a public copy of the table lists them "
             "(zivbeker42/llm-guesstimator, tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv)",
    VLLM_CI: "vLLM's nightly performance benchmark (Buildkite vllm/performance-benchmark), latency tests: "
             "benchmark_latency with batch 8, 32 tokens in, 128 out, dummy bf16 weights, 15 timed runs; the H200 "
             "rows from build 9515, the H100 and A100 rows from runs whose stored copies lack the build number; "
             "the pipeline's 2024 test set (Llama-3.1 8B, Llama-3 70B, Mixtral 8x7B, as in vLLM's v0.6.0 "
             "performance post), so before async scheduling became vLLM's default (0.14.0)",
    COOKBOOK: "sgl-project/sgl-cookbook model pages, 'Speed Benchmark': sglang.bench_serving --dataset-name random "
              "at --max-concurrency 1, 10 prompts with lengths drawn uniformly up to the flag (1K in: 6,101 tokens; "
              "8K in: 41,941; 1K out: 4,210-4,220; 8K out: 44,452; the lengths are numpy's draws at bench_serving's "
              "default seed 1): TTFT as the mean over the ten prompts, the first served from the prefix cache (the "
              "warm-up sends it and the commands pass no --flush-cache), TPOT at the mean prompt plus half the mean "
              "output. DeepSeek-R1-0528 and Qwen3-235B-A22B-Instruct-2507 on 8 x B200 "
              "(SGLang 0.5.6.post1 / 0.5.6), Llama-3.1-70B on 8 x A100 (0.5.6), all --tp 8; MiniMax-M2.5 on 8 x B200 "
              "(0.5.8) and 8 x H100 (0.5.9), --tp 8 --ep 8 (the B200 1K run printed 6,091 input tokens)",
    COOKBOOK_MORE: "sgl-project/sgl-cookbook, the same pages' other concurrency-1 runs, read 2026-11-27 and "
                   "out of sample: the DeepSeek-R1 and Qwen3-235B pages' 1K/8K runs (the same ten 1K prompts, TTFT "
                   "a second measurement of them; TPOT at 610 + 2,223, R1's being C4) and the 8K/1K runs' TPOT "
                   "(4,194 + 211) of those pages and Llama-3.1's; GLM-4.6 on 8 x B200 (SGLang 0.5.6.post1, --tp 8, "
                   "bf16; page GLM/GLM-4.6.md); "
                   "gpt-oss-120b on 8 x B200 (SGLang 0.5.6, --tp 8; page OpenAI/GPT-OSS.md): bench_serving's default "
                   "ShareGPT prompts, 100 at concurrency 1, 33,178 tokens in and 21,251 out, priced at the mean "
                   "prompt (332 tokens) and the mean context (332 + 106), the lengths not being printed",
    COOKBOOK_AMD: "sgl-project/sgl-cookbook, the same 'Speed Benchmark' runs (random 1K/1K, 1K/8K and 8K/1K at "
                  "--max-concurrency 1, 10 prompts) on 8 x MI300X with SGLang 0.5.7, --tp 8: "
                  "deepseek-ai/DeepSeek-V3.1 (page DeepSeek-V3_1.md) and moonshotai/Kimi-K2-Instruct (ROCm image "
                  "v0.5.7-rocm700-mi30x, SGLANG_ROCM_FUSED_DECODE_MLA=0; page Moonshotai/Kimi-K2.md). The "
                  "MI300X profile has no ROCm kernel table: every operator is analytic, with H100's per-kernel fixed "
                  "costs and a measured smallest all-reduce",
    SGLANG_PR: "sgl-project/sglang PR 13466 (2025-11-18, 'Support Kimi-K2 (non-Thinking)' for piecewise CUDA "
               "graphs), the 'After' table: moonshotai/Kimi-K2-Instruct-0905 --tp 8 --enable-piecewise-cuda-graph, "
               "sglang.bench_serving random 1,024 in / 16 out, range ratio 1.0, 16 prompts at --max-concurrency 1, "
               "--flush-cache (no prompt cached). "
               "The GPU is not named; the PR's log (a 0.53 GB KV pool after 8 GB of graph capture beside ~1 TB of "
               "FP8 weights on 8 GPUs) fits 141 GB cards only, so H200",
    SGLANG_H20: "sgl-project/sglang PR 7631 (2025-06-29, 'Add H20 fused MoE kernel configs for Dpsk & Qwen3'), the "
                "run with the tuned config: DeepSeek-V3-0324 --tp 8 on NVIDIA_H20 (the 96 GB card), sglang.bench_serving "
                "random 1,024 in / 512 out at the default range ratio (200 prompts: 103,005 in, 53,590 out), "
                "--max-concurrency 8 (mean concurrency 7.83): median ITL, a decode step of about 8 requests, at the "
                "mean prompt plus half the mean output. H20 has no kernel tables: every operator is analytic",
    VLLM_RTN: "vllm-project/vllm PR 23197 (2025-08-19, closed; 'Marlin-based GEMM kernels for the "
              "calibration-free RTN-based quantization', whose kernels later landed through PR 26051), "
              "benchmark_latency --input-len 256 --output-len 32 on one H100, Llama-3.1-8B in bf16 and with "
              "RTN_NUM_BITS=4 --quantization rtn (INT4 weights, bf16 activations, through Marlin), mean of 5 runs; "
              "the batches 1 and 16 of the PR's 1, 4, 8 and 16",
    VLLM_MOE: "vllm-project/vllm PR 4002 (2024-04-11, 'Fused MoE Config for Mixtral 8x22'), its A100-80G sanity "
              "check 'with config': benchmark_latency at its defaults (32 tokens in, 128 out) for Mixtral-8x22B in "
              "bf16 at TP4 and TP8, batches 8, 16 and 32, mean latency. vLLM 0.4 (V0, no async scheduling, no "
              "all-reduce fusion). vLLM's A100 MoE table holds only skewed-routing rows, so the fused MoE is priced "
              "analytically",
}


@dataclass
class Published:
    id: str
    what: str
    measured_ms: float
    kind: str  # prefill or decode
    measures: str
    source: str
    simulated: Callable[[], float]
    in_median: bool = True
    """False for a device the medians leave out (MI300X: no ROCm kernel data, reported apart)."""
    added: str = ""
    """The date a point entered after the modelling it checks (out of sample), reported apart as
    well as in the medians; empty for the points the modelling has been checked against."""


def _llama2(name: str, root: Path) -> str:
    return _config_dir(name, {**LLAMA2_COMMON, **LLAMA2[name]}, root)


def simulated(read: str, **fields) -> Callable[[], float]:
    """Simulate ``UserInput(**fields)`` and read one figure of the result: ``step_latency_ms``
    for an in-engine prefill (no HTTP), ``ttft_ms`` for a client's TTFT (the request's host time
    and the prefill step), ``tpot_ms`` for a client's TPOT."""
    return lambda: getattr(simulate(UserInput(**fields)), read)


def trtllm_prefill(model: str, device: str, tp: int, tokens: int) -> Callable[[], float]:
    """The prefill step alone: the benchmark times one output token inside the engine."""
    return simulated("step_latency_ms", model=model, device=device, num_devices=tp, tp_size=tp, num_queries=1,
                     query_length=tokens, quantize_linear_action="FP8", kv_cache_dtype="fp8", engine="trtllm")


def fusion_in(version: str, model: str, device: str, tp: int, engine: str = "sglang") -> str:
    """``on`` where ``engine`` ``version`` ran each decoder layer's all-reduce and the RMSNorm after
    it as one kernel for this model class on ``device`` (TP over ``tp`` GPUs), else ``off``. The
    points keep the newest tables, whose version would otherwise decide (by its rules)."""
    from infercast_adapters.config import load_config

    from infercast.build import architecture_of
    from infercast.engines import engine_named
    from infercast.plugins import get_devices, get_manager, known_model_refs

    manager = get_manager()
    config = load_config(model, manager=manager, known_models=known_model_refs(manager))
    spec = get_devices().get(device)
    refusal = engine_named(engine).all_reduce_fusion.refusal(
        version, architecture_of(config), spec, -(-tp // spec.devices_per_node), tp)
    return "off" if refusal else "on"


@functools.lru_cache(maxsize=None)
def moe_kernel_in(version: str | None, model: str, device: str, engine: str = "sglang",
                  quantization: str | None = None) -> str:
    """The ``--moe-kernel`` that prices ``engine`` ``version``'s fused MoE for this model, in its
    checkpoint's precision or ``quantization``, on ``device``: the kernel the version's defaults
    picked for the architecture (sglang on Blackwell, :class:`infercast.engines.ArchMoERunner`),
    else ``auto``. The points keep the newest tables, whose version would otherwise decide."""
    from infercast.build import architecture_of
    from infercast.costmodel import table_dtype
    from infercast.engines import engine_named
    from infercast.plan import PlanRequest, Planner
    from infercast.plugins import get_devices

    rule = engine_named(engine).arch_moe_runner
    if rule is None or get_devices().get(device).cuda_arch not in rule.cuda_archs:
        return "auto"
    planner = Planner(PlanRequest(model=model, device=device, engine=engine))
    plan = planner.quant_plan(quantization)
    if plan.routed_experts is None:
        return "auto"
    dtype = table_dtype(plan.routed_experts.kernel_dtype, planner.device)
    return rule.launched(version, architecture_of(planner.config), dtype, planner.device.cuda_arch,
                         plan.checkpoint_method) or "auto"


# NIM 1.8.0's concurrency-1 rows for Llama-3.3-70B FP8 on 2 x H100 (input, output, TTFT ms,
# ITL ms): one client, so the TTFT is one prefill plus the request's host time and the ITL one
# decode step at about the prompt plus half the output of context.
NIM_C1 = [(5000, 500, 406.77, 18.58), (500, 2000, 47.77, 18.91), (200, 200, 31.22, 18.80),
          (1000, 1000, 82.46, 18.67), (20000, 2000, 1833.01, 19.58)]


def nim_points(model: str) -> list[Published]:
    """TTFT (prefill) and ITL (decode) of each NIM concurrency-1 row: N1-N5 and N6-N10."""
    common = dict(model=model, device="H100", num_devices=2, tp_size=2, num_queries=1, quantize_linear_action="FP8",
                  engine="trtllm")
    ttft = [Published(f"N{i}", f"Llama-3.3-70B FP8, 2 x H100 TP2, {isl:,} tokens", measured, "prefill",
                      "client TTFT; engine taken as TRT-LLM (unnamed)", NIM_180,
                      simulated("ttft_ms", **common, query_length=isl))
            for i, (isl, _, measured, _) in enumerate(NIM_C1, 1)]
    itl = [Published(f"N{i}", f"Llama-3.3-70B FP8, 2 x H100 TP2, context {isl + osl // 2:,}", measured, "decode",
                     "client ITL; engine taken as TRT-LLM (unnamed)", NIM_180,
                     simulated("tpot_ms", **common, decode=True, context_length=isl + osl // 2))
           for i, (isl, osl, _, measured) in enumerate(NIM_C1, len(NIM_C1) + 1)]
    return ttft + itl


def bench_serving_prompts(input_len: int, num_prompts: int = 10, seed: int = 1) -> tuple[int, ...]:
    """The prompt lengths ``sglang.bench_serving --dataset-name random`` sends, in order: at its
    default ``--random-range-ratio 0`` it draws each uniformly from [1, input_len] with numpy
    seeded by ``--seed`` (default 1; sample_random_requests). The cookbook's totals check it:
    6,101 tokens for ``--random-input-len 1000`` and 41,941 for 8000."""
    import numpy as np

    return tuple(int(n) for n in np.random.RandomState(seed).randint(1, input_len + 1, size=num_prompts))


def tokenizing_as_ran(engine, tokenizer: str, priced: str | None, ran: str, tokens: int) -> float:
    """Seconds a prompt of ``tokens`` adds to a TTFT priced at ``engine`` version ``priced`` when
    the version that measured, ``ran``, calls the model's ``tokenizer`` otherwise."""
    return engine.request_cost(tokenizer, ran).at(tokens) - engine.request_cost(tokenizer, priced).at(tokens)


def mean_ttft(user: UserInput, prompts: Sequence[int], *, warm_first: bool,
              ran: str | None = None) -> tuple[float, list[SimResult]]:
    """The mean client TTFT over ``prompts`` sent one at a time, each ``user``'s prefill at its
    length, and the results in order. ``warm_first``: bench_serving's warm-up request is the run's
    first prompt and the prefix cache is flushed only with ``--flush-cache``, so the first timed
    request finds its prompt cached and computes only its last token (sglang always computes at
    least one; a paged cache recomputes up to a page, left out here). ``ran``: the engine version
    that measured, whose way of calling the model's tokenizer prices each prompt's tokenizing
    (the kernels keep the newest tables)."""
    cache: dict[tuple[int, int], SimResult] = {}

    def prefill(query: int, cached: int) -> SimResult:
        if (query, cached) not in cache:
            cache[query, cached] = simulate(replace(user, query_length=query, context_length=cached))
        return cache[query, cached]

    def ttft(result: SimResult, tokens: int) -> float:
        if ran is None:
            return result.ttft_ms
        from infercast.engines import engine_named

        priced = result.cost_model
        return result.ttft_ms + tokenizing_as_ran(engine_named(priced["engine"]), priced["tokenizer"],
                                                  priced["engine_version"], ran, tokens) * 1e3

    results = [prefill(1, n - 1) if i == 0 and warm_first else prefill(n, 0) for i, n in enumerate(prompts)]
    return statistics.fmean(ttft(r, n) for r, n in zip(results, prompts)), results


def sglang_c1(model: str, device: str, tp: int, ran: str, *, prompts: Sequence[int] = (), warm_first: bool = False,
              context: int | None = None, prefill_graph: str | None = None, ep: int = 1) -> Callable[[], float]:
    """One request at a time through sglang ``ran`` (the version that measured): the mean client
    TTFT over ``prompts`` (``mean_ttft``), or the TPOT of a decode step at ``context``. The points
    keep the newest tables, which cover the most kernels, the prefill CUDA graphs ``ran`` has
    by default (piecewise graphs from 0.5.10; the cookbook's 0.5.6.x launches prefill eagerly)
    unless ``prefill_graph`` says what the run turned on, and the fused MoE kernel ``ran`` picks
    for the model's architecture (:func:`moe_kernel_in`). ``ep``: the experts over that many of
    the ranks, launched with ``--ep-size`` and no ``--moe-a2a-backend``: sglang's standard
    dispatcher (``--moe-all-to-all off``)."""
    if not prompts:
        return sglang_decode(model, device, tp, 1, context, ran, ep)
    from infercast.engines import engine_named

    user = UserInput(model=model, device=device, num_devices=tp, tp_size=tp, num_queries=1,
                     prefill_cuda_graph=prefill_graph or engine_named("sglang").prefill_graphs_as(ran),
                     all_reduce_fusion=fusion_in(ran, model, device, tp), moe_kernel=moe_kernel_in(ran, model, device),
                     **standard_ep(ep))
    return lambda: mean_ttft(user, prompts, warm_first=warm_first, ran=ran)[0]


def sglang_decode(model: str, device: str, tp: int, batch: int, context: int, ran: str,
                  ep: int = 1) -> Callable[[], float]:
    """A client's inter-token latency with ``batch`` requests decoding at ``context`` on sglang ``ran``
    (``ep``: as :func:`sglang_c1`)."""
    return simulated("tpot_ms", model=model, device=device, num_devices=tp, tp_size=tp, num_queries=batch,
                     decode=True, context_length=context, all_reduce_fusion=fusion_in(ran, model, device, tp),
                     moe_kernel=moe_kernel_in(ran, model, device), **standard_ep(ep))


def standard_ep(ep: int) -> dict:
    """The request fields of experts over ``ep`` ranks through sglang's standard dispatcher."""
    return {} if ep == 1 else {"ep_size": ep, "moe_all_to_all": "off"}


def batch_latency(model: str, device: str, tp: int, batch: int, prompt: int, output: int,
                  quantize: str | None = None) -> Callable[[], float]:
    """benchmark_latency: one prefill of the batch, then ``output - 1`` decode steps, priced at
    the mean context they see (the prompt plus half the output). These runs predate vLLM
    0.14.0, whose scheduler runs one step ahead of the GPU by default, and 0.17.0, which fuses
    the all-reduce with the norm after it (vLLM CI's 2024 test set, PR 23197 of August 2025):
    every step waits for the host and launches its norms (both ``off``)."""
    def run() -> float:
        common = dict(model=model, device=device, num_devices=tp, tp_size=tp, num_queries=batch, engine="vllm",
                      quantize_linear_action=quantize, overlap_scheduling="off", all_reduce_fusion="off")
        prefill = simulate(UserInput(**common, query_length=prompt)).step_latency_ms
        step = simulate(UserInput(**common, decode=True, context_length=prompt + output // 2)).step_latency_ms
        return prefill + (output - 1) * step
    return run


def _config_dir(name: str, values: dict, root: Path, tokenizer_class: str | None = None) -> str:
    """A model directory holding ``values`` as its config.json and, where given, the
    ``tokenizer_config.json`` that names its tokenizer class."""
    path = root / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    if tokenizer_class is not None:
        (path.parent / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class}))
    return str(path.parent)


def minimax_points(in_1k: dict, in_8k: dict) -> list[Published]:
    """The sgl-cookbook's MiniMax-M2.5 page (docs/autoregressive/MiniMax/MiniMax-M2.5.md), its
    concurrency-1 runs: 8 x B200 on sglang 0.5.8 and 8 x H100 on 0.5.9, both launched with
    ``--tp 8 --ep 8`` and no ``--moe-a2a-backend``. Added 2026-11-27, after the minimax_m2 family,
    with the launch as its page gives it. The H100 run's TTFTs: mean 145.20 ms, median 80.38, P99
    633.08 (one slow request of ten); B200's: mean 130.57, median 116.10, P99 190.90."""
    model, added = "MiniMaxAI/MiniMax-M2.5", "2026-11-27"
    b200 = ("B200", 8, "0.5.8")
    h100 = ("H100", 8, "0.5.9")
    return [
        Published("C11", "MiniMax-M2.5 FP8, 8 x B200 TP8 EP8, 1K prompts (mean 610)", 130.57, "prefill",
                  "client TTFT, mean", COOKBOOK, sglang_c1(model, *b200, ep=8, **in_1k), added=added),
        Published("C12", "MiniMax-M2.5 FP8, 8 x B200 TP8 EP8, 8K prompts (mean 4,194)", 131.50, "prefill",
                  "client TTFT, mean", COOKBOOK, sglang_c1(model, *b200, ep=8, **in_8k), added=added),
        Published("C13", "MiniMax-M2.5 FP8, 8 x B200 TP8 EP8, context 821", 9.89, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1(model, *b200, ep=8, context=610 + 211), added=added),
        Published("C14", "MiniMax-M2.5 FP8, 8 x B200 TP8 EP8, context 4,405", 10.00, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1(model, *b200, ep=8, context=4194 + 211), added=added),
        Published("C15", "MiniMax-M2.5 FP8, 8 x H100 TP8 EP8, 1K prompts (mean 610)", 145.20, "prefill",
                  "client TTFT, mean", COOKBOOK, sglang_c1(model, *h100, ep=8, **in_1k), added=added),
        Published("C16", "MiniMax-M2.5 FP8, 8 x H100 TP8 EP8, context 821", 8.05, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1(model, *h100, ep=8, context=610 + 211), added=added),
    ]


def cookbook_more_points(in_1k: dict, in_8k: dict, root: Path) -> list[Published]:
    """The sgl-cookbook's other concurrency-1 runs (:data:`COOKBOOK_MORE`), added 2026-11-27 as
    out of sample: nothing was changed to fit them. The 1K/8K runs send the same ten prompts as
    the 1K/1K ones, so their TTFT is a second measurement of the same requests (DeepSeek-R1 153.0
    and 125.8 ms, Qwen3-235B 99.0 and 110.6, GLM-4.6 155.6 and 160.2: 3-22% apart)."""
    added = "2026-11-27"
    glm = _config_dir("GLM-4.6", GLM_4_6, root)
    r1 = ("deepseek-ai/DeepSeek-R1", "B200", 8, "0.5.6.post1")
    qwen = ("Qwen/Qwen3-235B-A22B", "B200", 8, "0.5.6")
    b200_glm = (glm, "B200", 8, "0.5.6.post1")
    gpt_oss = ("openai/gpt-oss-120b", "B200", 8, "0.5.6")
    sharegpt = dict(prompts=(332,) * 100, warm_first=True)
    ttft, tpot = "client TTFT, mean", "client TPOT, mean"

    def point(id_: str, what: str, measured: float, kind: str, run) -> Published:
        return Published(id_, what, measured, kind, ttft if kind == "prefill" else tpot, COOKBOOK_MORE, run,
                         added=added)

    return [
        point("C17", "GLM-4.6 bf16, 8 x B200 TP8, 1K prompts (mean 610)", 155.57, "prefill",
              sglang_c1(*b200_glm, **in_1k)),
        point("C18", "GLM-4.6 bf16, 8 x B200 TP8, 1K prompts again (1K/8K run)", 160.21, "prefill",
              sglang_c1(*b200_glm, **in_1k)),
        point("C19", "GLM-4.6 bf16, 8 x B200 TP8, 8K prompts (mean 4,194)", 189.48, "prefill",
              sglang_c1(*b200_glm, **in_8k)),
        point("C20", "GLM-4.6 bf16, 8 x B200 TP8, context 821", 14.81, "decode", sglang_c1(*b200_glm, context=821)),
        point("C21", "GLM-4.6 bf16, 8 x B200 TP8, context 2,833", 14.92, "decode", sglang_c1(*b200_glm, context=2833)),
        point("C22", "GLM-4.6 bf16, 8 x B200 TP8, context 4,405", 15.02, "decode", sglang_c1(*b200_glm, context=4405)),
        point("C23", "gpt-oss-120b MXFP4, 8 x B200 TP8, ShareGPT prompts (mean 332)", 33.71, "prefill",
              sglang_c1(*gpt_oss, **sharegpt)),
        point("C24", "gpt-oss-120b MXFP4, 8 x B200 TP8, context 438", 2.31, "decode", sglang_c1(*gpt_oss, context=438)),
        point("C25", "DeepSeek-R1 FP8, 8 x B200 TP8, 1K prompts again (1K/8K run)", 125.76, "prefill",
              sglang_c1(*r1, **in_1k)),
        point("C26", "DeepSeek-R1 FP8, 8 x B200 TP8, context 4,405", 9.26, "decode", sglang_c1(*r1, context=4405)),
        point("C27", "Qwen3-235B-A22B bf16, 8 x B200 TP8, 1K prompts again (1K/8K run)", 110.60, "prefill",
              sglang_c1(*qwen, **in_1k)),
        point("C28", "Qwen3-235B-A22B bf16, 8 x B200 TP8, context 2,833", 10.23, "decode",
              sglang_c1(*qwen, context=2833)),
        point("C29", "Qwen3-235B-A22B bf16, 8 x B200 TP8, context 4,405", 10.31, "decode",
              sglang_c1(*qwen, context=4405)),
        point("C30", "Llama-3.1-70B bf16, 8 x A100 TP8, context 4,405", 18.80, "decode",
              sglang_c1("meta-llama/Llama-3.1-70B-Instruct", "A100", 8, "0.5.6", context=4405)),
    ]


def points(root: Path) -> list[Published]:
    l7, l70 = _llama2("Llama-2-7B", root), _llama2("Llama-2-70B", root)
    mixtral22 = _config_dir("Mixtral-8x22B", MIXTRAL_8X22B, root)
    # Kimi-K2's checkpoint tokenizes with tiktoken (tokenization_kimi.py), as Kimi-K2.5's does
    kimi_k2 = _config_dir("Kimi-K2-Instruct-0905", _kimi_k2_instruct(), root, "TikTokenTokenizer")
    llama70 = "meta-llama/Llama-3.1-70B-Instruct"  # Llama-3.3-70B has the same architecture
    llama8 = "meta-llama/Llama-3.1-8B-Instruct"
    # the cookbook's runs: bench_serving's ten prompts, the first cached by its warm-up (no --flush-cache)
    in_1k = dict(prompts=bench_serving_prompts(1000), warm_first=True)
    in_8k = dict(prompts=bench_serving_prompts(8000), warm_first=True)
    assert sum(in_1k["prompts"]) == 6101 and sum(in_8k["prompts"]) == 41941, "the pages' input totals"
    return [
        Published("T1", "Llama-2-7B FP8, 1 x H100, 128 tokens", 6.3, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l7, "H100", 1, 128)),
        Published("T2", "Llama-2-7B FP8, 1 x H100, 2,048 tokens", 30.8, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l7, "H100", 1, 2048)),
        Published("T3", "Llama-2-70B FP8, 4 x H100 TP4, 128 tokens", 19.6, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l70, "H100", 4, 128)),
        Published("T4", "Llama-2-70B FP8, 8 x H100 TP8, 2,048 tokens", 85.1, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l70, "H100", 8, 2048)),
        Published("T5", "Llama-2-7B FP8, 1 x H200, 128 tokens", 5.7, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l7, "H200", 1, 128)),
        Published("T6", "Llama-2-7B FP8, 1 x H200, 2,048 tokens", 30.2, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l7, "H200", 1, 2048)),
        Published("T7", "Llama-2-70B FP8, 4 x H200 TP4, 128 tokens", 17.8, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l70, "H200", 4, 128)),
        Published("T8", "Llama-2-70B FP8, 4 x H200 TP4, 2,048 tokens", 103.0, "prefill", "in-engine", TRTLLM_090,
                  trtllm_prefill(l70, "H200", 4, 2048)),
        *nim_points(llama70),
        Published("C1", "DeepSeek-R1 FP8, 8 x B200 TP8, 1K prompts (mean 610)", 153.00, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1("deepseek-ai/DeepSeek-R1", "B200", 8, "0.5.6.post1", **in_1k)),
        Published("C2", "DeepSeek-R1 FP8, 8 x B200 TP8, 8K prompts (mean 4,194)", 165.91, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1("deepseek-ai/DeepSeek-R1", "B200", 8, "0.5.6.post1", **in_8k)),
        Published("C3", "DeepSeek-R1 FP8, 8 x B200 TP8, context 821", 9.16, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1("deepseek-ai/DeepSeek-R1", "B200", 8, "0.5.6.post1", context=610 + 211)),
        Published("C4", "DeepSeek-R1 FP8, 8 x B200 TP8, context 2,833", 9.21, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1("deepseek-ai/DeepSeek-R1", "B200", 8, "0.5.6.post1", context=610 + 2223)),
        Published("C5", "Qwen3-235B-A22B bf16, 8 x B200 TP8, 1K prompts (mean 610)", 99.03, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1("Qwen/Qwen3-235B-A22B", "B200", 8, "0.5.6", **in_1k)),
        Published("C6", "Qwen3-235B-A22B bf16, 8 x B200 TP8, 8K prompts (mean 4,194)", 139.90, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1("Qwen/Qwen3-235B-A22B", "B200", 8, "0.5.6", **in_8k)),
        Published("C7", "Qwen3-235B-A22B bf16, 8 x B200 TP8, context 821", 10.12, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1("Qwen/Qwen3-235B-A22B", "B200", 8, "0.5.6", context=610 + 211)),
        Published("C8", "Llama-3.1-70B bf16, 8 x A100 TP8, 1K prompts (mean 610)", 131.61, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1(llama70, "A100", 8, "0.5.6", **in_1k)),
        Published("C9", "Llama-3.1-70B bf16, 8 x A100 TP8, 8K prompts (mean 4,194)", 395.25, "prefill", "client TTFT, mean",
                  COOKBOOK, sglang_c1(llama70, "A100", 8, "0.5.6", **in_8k)),
        Published("C10", "Llama-3.1-70B bf16, 8 x A100 TP8, context 821", 18.63, "decode", "client TPOT, mean",
                  COOKBOOK, sglang_c1(llama70, "A100", 8, "0.5.6", context=610 + 211)),
        *minimax_points(in_1k, in_8k),
        *cookbook_more_points(in_1k, in_8k, root),
        Published("K1", "Kimi-K2-Instruct FP8, 8 x H200 TP8, 1,024 tokens", 95.154, "prefill",
                  "client TTFT, mean; prefill in piecewise CUDA graphs (on in the run, sglang's default from "
                  "0.5.10)", SGLANG_PR,
                  sglang_c1(kimi_k2, "H200", 8, SGLANG_PR_VERSION, prompts=(1024,) * 16, prefill_graph="on")),
        Published("K2", "Kimi-K2-Instruct FP8, 8 x H200 TP8, context 1,032", 11.376, "decode", "client TPOT, mean",
                  SGLANG_PR, sglang_c1(kimi_k2, "H200", 8, SGLANG_PR_VERSION, context=1024 + 8)),
        *[Published(f"A{i}", f"{name}, 8 x MI300X TP8, context {context:,}", measured, "decode", "client TPOT, mean",
                    COOKBOOK_AMD, sglang_decode(model, "MI300X", 8, 1, context, "0.5.7"), in_median=False)
          for i, (name, model, context, measured) in enumerate((
              ("DeepSeek-V3.1 FP8", "deepseek-ai/DeepSeek-V3", 610 + 211, 23.84),
              ("DeepSeek-V3.1 FP8", "deepseek-ai/DeepSeek-V3", 610 + 2223, 24.41),
              ("DeepSeek-V3.1 FP8", "deepseek-ai/DeepSeek-V3", 4194 + 211, 24.93),
              ("Kimi-K2-Instruct FP8", kimi_k2, 610 + 211, 40.41)), 1)],
        Published("H1", "DeepSeek-V3 FP8, 8 x H20 TP8, 8 requests, context 649", 19.73, "decode",
                  "client ITL, median", SGLANG_H20,
                  sglang_decode("deepseek-ai/DeepSeek-V3", "H20", 8, 8, round(103005 / 200 + 53590 / 200 / 2),
                                SGLANG_H20_VERSION)),
        Published("R1", "Llama-3.1-8B bf16, 1 x H100, batch 1", 236.0, "decode", "offline batch latency",
                  VLLM_RTN, batch_latency(llama8, "H100", 1, 1, 256, 32)),
        Published("R2", "Llama-3.1-8B bf16, 1 x H100, batch 16", 336.0, "decode", "offline batch latency",
                  VLLM_RTN, batch_latency(llama8, "H100", 1, 16, 256, 32)),
        Published("R3", "Llama-3.1-8B INT4 (W4A16), 1 x H100, batch 1", 154.0, "decode", "offline batch latency",
                  VLLM_RTN, batch_latency(llama8, "H100", 1, 1, 256, 32, quantize="W4A16")),
        Published("R4", "Llama-3.1-8B INT4 (W4A16), 1 x H100, batch 16", 267.0, "decode", "offline batch latency",
                  VLLM_RTN, batch_latency(llama8, "H100", 1, 16, 256, 32, quantize="W4A16")),
        Published("V1", "Llama-3.1-8B bf16, 1 x H200", 833.421, "decode", "offline batch latency",
                  VLLM_CI, batch_latency(llama8, "H200", 1, 8, 32, 128)),
        Published("V2", "Llama-3-70B bf16, 4 x H200 TP4", 2077.53, "decode", "offline batch latency",
                  VLLM_CI, batch_latency(llama70, "H200", 4, 8, 32, 128)),
        Published("V3", "Llama-3.1-8B bf16, 1 x H100", 997.542, "decode", "offline batch latency",
                  VLLM_CI, batch_latency(llama8, "H100", 1, 8, 32, 128)),
        Published("V4", "Llama-3-70B bf16, 4 x H100 TP4", 2444.47, "decode", "offline batch latency",
                  VLLM_CI, batch_latency(llama70, "H100", 4, 8, 32, 128)),
        Published("V5", "Llama-3.1-8B bf16, 1 x A100-SXM4-80GB", 1585.43, "decode", "offline batch latency",
                  VLLM_CI, batch_latency(llama8, "A100", 1, 8, 32, 128)),
        *(Published(f"X{n}", f"Mixtral-8x22B bf16, {tp} x A100 TP{tp}, batch {batch}", seconds * 1e3, "decode",
                    "offline batch latency", VLLM_MOE, batch_latency(mixtral22, "A100", tp, batch, 32, 128))
          for n, (tp, batch, seconds) in enumerate(((4, 8, 5.4268), (4, 16, 6.1079), (4, 32, 6.8939),
                                                    (8, 8, 3.7084), (8, 16, 4.0473), (8, 32, 4.3907)), 1)),
    ]


def main() -> int:
    console = Console(width=max(Console().width, 200))
    table = Table(title="infercast vs other published measurements (not in measured.md)")
    for column in ("id", "setting", "measured ms", "simulated ms", "error", "what it measures", "source"):
        table.add_column(column, overflow="fold")
    errors: dict[str, list[float]] = {"prefill": [], "decode": []}
    fresh: dict[str, list[float]] = {"prefill": [], "decode": []}
    apart: list[float] = []
    with tempfile.TemporaryDirectory() as root:
        for point in points(Path(root)):
            simulated = point.simulated()
            error = (simulated - point.measured_ms) / point.measured_ms
            (errors[point.kind] if point.in_median else apart).append(abs(error))
            if point.added and point.in_median:
                fresh[point.kind].append(abs(error))
            table.add_row(point.id, point.what, f"{point.measured_ms:g}", f"{simulated:.2f}", f"{error:+.1%}",
                          point.measures, point.source)
    console.print(table)
    for kind, values in errors.items():
        console.print(f"median |error| over the {kind} points: {statistics.median(values):.1%} ({len(values)} points)")
        if fresh[kind]:
            checked = list(values)
            for e in fresh[kind]:
                checked.remove(e)
            console.print(f"  of them out of sample (added after the modelling they check): {len(fresh[kind])} points, "
                          f"{statistics.median(fresh[kind]):.1%}; the {len(checked)} checked before: "
                          f"{statistics.median(checked):.1%}")
    console.print(f"left out of the medians: the MI300X points (A1-A{len(apart)}), median |error| "
                  f"{statistics.median(apart):.1%}: analytic with H100's per-kernel fixed costs, no ROCm kernel data")
    for key, text in SOURCES.items():
        console.print(f"{key}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
