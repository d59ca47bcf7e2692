"""Loaded serving runs from aiconfigurator-core's silicon sample, each simulated as it was run.

aiconfigurator-core (a declared dependency) ships ``systems/silicon_sample.csv``: TTFT and TPOT
means of serving runs at 1 to 1,024 clients, which NVIDIA's estimator is checked against. Its
InferenceX rows (SemiAnalysis' InferenceMAX measurements, source ``db-dump/...`` or
``source_file=2026-...``) follow one protocol, as the estimator's own replay of them states
(ai-dynamo/aisimulate, ``scripts/e2e_accuracy``: ``request_count = concurrency x 10``,
``random_range_ratio = 0.8``): N clients start at once and send 10 x N requests in all, with
input and output lengths uniform in 0.8-1.0 of the row's ISL and OSL. This script replays
that: `infercast.serving.simulate_engine(..., clients=N)` over the planner's step costs for
the row's layout, with the engine's default step policy (sglang runs a prompt step apart from
the decodes unless launched with --enable-mixed-chunk; vLLM mixes them), the scheduler its
version runs by default (vLLM from 0.14.0 one step ahead of the GPU; the all-reduce fused with
the norm after it by sglang's rules for the version, by vLLM's from 0.17.0), the launch flags of
the run's recipe that the simulator prices (:func:`recipe`: prompt budget, running requests,
KV cache dtype, sglang's --scheduler-recv-interval, vLLM's largest captured size), and the
engine's per-request host time added to each TTFT, with the prompt tokenized as the run's
version calls the model's tokenizer.
The mean TTFT therefore includes the first wave of N prompts arriving together (InferenceX's
warm-up requests precede the timed ones and are not counted).

A run of 10 x N requests is one draw of its lengths, and at a few clients one draw decides much
of its mean TTFT: two clients that draw the same output length finish in the same step and send
their next prompts together, and the second waits out the first's prefill. So each run is
replayed with :data:`SEEDS` draws and reported as their mean, the simulator's expectation, over
lengths on a grid fine enough (:data:`RANGE`) that two clients share an output length about as
rarely as they do under InferenceX's integer draws.

Rows used: aggregated runs on H100, H200 and B200 of a model infercast ships, in the precision
it ships or in NVIDIA's NVFP4 checkpoints (read from the configs aiconfigurator-core ships,
:data:`MODELS`), through sglang or vLLM, without attention DP. Every run is priced with the newest
kernel tables of its engine (the versions named by the groups are the runs', not the tables').
Left out, with their counts printed:
- TensorRT-LLM rows: the CSV does not record InferenceX's ``spec_method``, and these recipes
  draft tokens (Llama-3.1-70B FP8 on one H200 decodes 4 clients at 14.6 ms a token, the time
  its 70 GB of weights take to read once at the full 4.8 TB/s);
- the ``aic-auto-gap-analysis`` rows: no protocol is stated, and some layouts cannot hold the
  model (Qwen3-235B-A22B in FP8, 235 GB, at TP1 on one 141 GB H200);
- rows whose measured TTFT passed 5 s: the queue grew through the finite run;
- rows giving TP 64 for a single-node recipe (sglang DeepSeek-R1 FP8 on B200, November 2025: the
  CSV's TP is its MoE TP x EP, 8 x 8, and the run's layout is not known);
- sglang DeepSeek-R1 FP8 runs on B200 from March 2026 that the database ties to no recipe: the
  same day InferenceX also ran its MTP recipe, and the CSV does not say which is which
  (:func:`beside_speculative`).
A run listed twice (under DeepSeek-V3 and -R1, the same architecture, or in two source files)
counts once; DeepSeek-R1 and -V3 are grouped as DeepSeek-R1/V3. Nothing here feeds the simulator. Run: .venv/bin/python benchmarks/silicon_points.py [--rows]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from dataclasses import dataclass

import pyarrow.csv as pa_csv
from rich.console import Console
from rich.table import Table

from infercast.agg import StepPricer, chunk_of, chunk_shape, rank_policy
from infercast.engines import engine_named, reaches
from infercast.kernels import aiconfigurator as aic
from infercast.plan import Layout, Planner, PlanRequest
from infercast.serving import LengthDist, ServingOptions, simulate_engine

from published_points import fusion_in, moe_kernel_in

MODELS = {  # (the CSV's model, precision) -> (infercast model, --quantize-linear-action; None: the checkpoint's own)
    ("meta-llama/Llama-3.1-70B", "fp8"): ("meta-llama/Llama-3.1-70B-Instruct", "FP8"),
    ("meta-llama/Llama-3.1-8B-Instruct", ""): ("meta-llama/Llama-3.1-8B-Instruct", None),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "fp8"): ("meta-llama/Llama-3.1-8B-Instruct", "FP8"),
    ("Qwen/Qwen3-32B", ""): ("Qwen/Qwen3-32B", None),
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8"): ("Qwen/Qwen3-235B-A22B", "FP8_BLOCK"),
    ("deepseek-ai/DeepSeek-R1", "fp8"): ("deepseek-ai/DeepSeek-R1", None),
    ("deepseek-ai/DeepSeek-V3", "fp8"): ("deepseek-ai/DeepSeek-V3", None),
    ("moonshotai/Kimi-K2.5", "int4"): ("moonshotai/Kimi-K2.5", None),
    ("MiniMaxAI/MiniMax-M2.5", "fp8"): ("MiniMaxAI/MiniMax-M2.5", None),
    ("openai/gpt-oss-120b", "fp4"): ("openai/gpt-oss-120b", None),  # the CSV's fp4: its MXFP4 experts
    # NVIDIA's NVFP4 checkpoints (InferenceX: nvidia/DeepSeek-R1-0528-FP4, Llama-3.3-70B-Instruct-FP4,
    # MiniMax-M2.5-NVFP4, Kimi-K2.5-NVFP4), read from the configs aiconfigurator-core ships: for DeepSeek
    # its DeepSeek-V3.1 NVFP4 checkpoint (the same architecture, ModelOpt keeping MLA's input projections
    # in bf16); for Llama every linear in NVFP4
    ("deepseek-ai/DeepSeek-R1", "fp4"): ("nvidia/DeepSeek-V3.1-NVFP4", None),
    ("deepseek-ai/DeepSeek-V3", "fp4"): ("nvidia/DeepSeek-V3.1-NVFP4", None),
    ("meta-llama/Llama-3.1-70B", "fp4"): ("meta-llama/Llama-3.1-70B-Instruct", "NVFP4"),
    ("MiniMaxAI/MiniMax-M2.5", "fp4"): ("nvidia/MiniMax-M2.5-NVFP4", None),
    ("moonshotai/Kimi-K2.5", "fp4"): ("nvidia/Kimi-K2.5-NVFP4", None),
}
OUT_OF_SAMPLE = {"MiniMax-M2.5 ": "2026-11-27", "gpt-oss-120b ": "2026-11-27", "NVFP4": "2026-11-27"}
"""Runs that first entered this benchmark after the modelling they check was done, by the start of
their group's name (a model; NVFP4 runs, whose groups start "NVFP4"), with the date they were
added: they are reported on their own as well as in the totals."""
DEVICES = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
"""The systems with a built-in device and kernel tables (GB200 and B300 have neither here)."""
POLICY = {"sglang": "separate", "vllm": "mixed"}
"""Each engine's default: sglang runs prompt steps apart (--enable-mixed-chunk is off by
default), vLLM's scheduler fills each step's token budget with decodes and prompt chunks."""
SATURATED_MS = 5000.0
RANGE = tuple(0.8 + 0.005 * k for k in range(41))
"""InferenceX's lengths: uniform in 0.8-1.0 of the nominal, here in 41 steps 0.5% apart (its
integer draws have 205 output lengths at 1,024, 1,639 at 8,192)."""
SEEDS = 8
"""Draws of each run's lengths whose mean is reported (16 draws move no group's median by more than
one point)."""


def silicon_rows() -> list[dict]:
    root = aic.data_root()
    if root is None:
        raise SystemExit(f"{aic.PACKAGE} is not installed")
    return pa_csv.read_csv(root.parent / "silicon_sample.csv").to_pylist()


def inferencex(row: dict) -> bool:
    return row["silicon_data_source"].startswith(("db-dump/", "source_file=2026-"))


def same_run(r: dict) -> tuple:
    return (r["system"], r["backend"], r["backend_version"], r["isl"], r["osl"], r["tp_size"], r["batch_size"],
            round(r["silicon_ttft_ms"], 6), round(r["silicon_tpot_ms"], 6))


def select(rows: list[dict]) -> tuple[list[dict], collections.Counter]:
    """The rows this script replays, and why the others of ours were left out."""
    left: collections.Counter = collections.Counter()
    chosen, seen = [], set()
    with_config = {same_run(r) for r in rows if "config_id=" in r["silicon_data_source"]}
    for r in rows:
        if not (r["mode"] == "agg" and r["system"] in DEVICES and r["model_path"] in {m for m, _ in MODELS}):
            continue
        if not inferencex(r):
            left["no stated protocol (aic-auto-gap-analysis)"] += 1
        elif r["backend"] not in POLICY:
            left["TensorRT-LLM (speculative decoding not recorded)"] += 1
        elif (r["attention_dp_size"] or 1) != 1:
            left["attention DP"] += 1
        elif (r["model_path"], r["precision"]) not in MODELS:
            left[f"{r['precision'] or 'unnamed'} weights, not mapped here"] += 1
        elif r["silicon_ttft_ms"] > SATURATED_MS:
            left[f"TTFT above {SATURATED_MS / 1e3:g} s (queue growing)"] += 1
        elif int(r["tp_size"]) > 8:
            left["CSV rows giving TP over 8 for InferenceX's single-node recipes (the CSV's TP x EP; the layout is "
                 "not known)"] += 1
        elif beside_speculative(r) and same_run(r) not in with_config:
            left["CSV rows of B200 sglang DeepSeek-R1 FP8 runs the database ties to no recipe (its MTP recipe ran "
                 "the same day)"] += 1
        else:
            same = same_run(r)
            if same in seen:
                left["CSV rows repeating a run (another model name or source file)"] += 1
                continue
            seen.add(same)
            chosen.append(r)
    return chosen, left


def beside_speculative(row: dict) -> bool:
    """A run of a recipe that InferenceX also ran with speculative decoding on the same day:
    sglang DeepSeek-R1 FP8 on B200 at TP8 (``dsr1-fp8-b200-sglang-mtp``: EAGLE/MTP, 2 steps, 3
    draft tokens, beside the plain ``dsr1_fp8_b200.sh``; its script stops at any other TP: "MTP
    only supports TP=8"). The plain recipe's runs carry a database
    config id (87 at TP8, 271 at TP4: at 4 clients 8.76 ms a token, where the other 1K/1K run
    decodes at 6.70 ms and goes on to 512 clients, which only the MTP recipe admits)."""
    return (row["system"] == "b200_sxm" and row["backend"] == "sglang" and int(row["tp_size"]) == 8
            and row["model_path"].startswith("deepseek-ai/") and row["backend_version"] == "0.5.9")


@dataclass(frozen=True)
class Recipe:
    """The launch flags of a run's InferenceX recipe that the replay prices."""

    chunk: int | None = None
    """--chunked-prefill-size (sglang) / --max-num-batched-tokens (vLLM); None: the engine's default."""
    max_running: int | None = None
    """--max-running-requests / --max-num-seqs; None: the clients."""
    recv_interval: int = 1
    """sglang's --scheduler-recv-interval."""
    kv_cache_dtype: str = "auto"
    """The recipe's --kv-cache-dtype; ``auto`` (the engines' default): the checkpoint's, FP8 where it
    states an FP8 KV cache (NVIDIA's MiniMax-M2.5 and Kimi-K2.5 NVFP4 checkpoints do), else bf16."""
    moe_kernel: str = "auto"
    """The fused-MoE kernel the launch selects (``--moe-kernel``); ``auto``: the engine's default."""
    all_reduce_fusion: str | None = None
    """``on`` where the launch turns the fusion on itself; None: the version's rules."""
    graph_tokens: int | None = None
    """vLLM's largest captured forward (``--prefill-cuda-graph-max-tokens``): the recipe's
    ``max-cudagraph-capture-size`` where it sets one, else min(2 x ``--max-num-seqs``, 512); None:
    the engine's default, 512."""
    prefill_graphs: str = "auto"
    """``off`` where the launch captures decode only (``cudagraph_mode FULL_DECODE_ONLY``)."""


def vllm_capture(max_num_seqs: int) -> int | None:
    """vLLM's default largest captured size under ``--max-num-seqs`` (``_set_cudagraph_sizes``:
    min(2 x max_num_seqs, 512)); None where that is the default 512 anyway."""
    return 2 * max_num_seqs if 2 * max_num_seqs < 512 else None


def recipe(row: dict) -> Recipe:
    """What the run's server was launched with (SemiAnalysisAI/InferenceX, benchmarks/single_node/
    and the earlier benchmarks/*_slurm.sh, read at the runs' dates):

    - sglang DeepSeek-R1 FP8 on B200 (``dsr1_fp8_b200.sh``, Nov 2025 and Mar 2026): TP8
      ``--chunked-prefill-size 32768 --max-running-requests 128 --kv-cache-dtype fp8_e4m3
      --scheduler-recv-interval`` 10 below 16 clients, else 30; TP4 8,192 tokens, 32 requests,
      interval 10;
    - sglang DeepSeek-R1 FP8 on H200 (``dsr1_fp8_h200.sh``): ``--chunked-prefill-size 32768``,
      ``--max-running-requests`` 512 at 1K/1K, else 256; bf16 cache; no receive interval;
    - vLLM Llama-3.3-70B FP8 (``70b_fp8_h100_slurm.sh``, ``70b_fp8_h200_slurm.sh``,
      ``70b_b200_slurm.sh``): ``--max-num-batched-tokens 8192 --kv-cache-dtype fp8
      --max-num-seqs`` the clients, which on H100 and H200 also caps the captured size at twice
      the clients (which B200 script ran is not certain: ``70b_fp8_b200_docker.sh`` passes 512
      and captures decode only; B200 keeps vLLM's default capture);
    - vLLM Kimi-K2.5 (``kimik2.5_int4_b200.sh``, ``kimik2.5_int4_h200.sh``): ``--max-num-seqs``
      the clients on H200 (the captured size too; the stored B200 scripts pass 512 or none), the
      rest vLLM's defaults;
    - vLLM MiniMax-M2.5 FP8 (``minimaxm2.5_fp8_h200.sh``, the one version stored, later than the
      runs): ``--kv-cache-dtype fp8``, ``--max-num-batched-tokens`` 16,384 up to 32 clients and
      32,768 from 64, ``--max-num-seqs 512``, ``--enable-expert-parallel`` where the row gives EP;
      its ``--moe-backend triton`` is the kernel infercast prices for vLLM's FP8-block MoE, while its
      ``--attention-backend FLASHINFER`` is priced from vLLM's default attention tables;
    - vLLM gpt-oss-120b on H100 and H200 (``gptoss_fp4_h100.sh``, ``gptoss_fp4_h200.sh``):
      ``max-num-batched-tokens 8192``, ``--max-num-seqs`` the clients, a bf16 cache,
      ``max-cudagraph-capture-size: 2048`` (prompts of 1K tokens replay piecewise graphs) and
      ``VLLM_MXFP4_USE_MARLIN=1``, which makes vLLM's MXFP4 MoE run Marlin on sm_90 where it runs
      OpenAI's Triton kernels by default (``get_mxfp4_backend``): ``--moe-kernel marlin``;
    - vLLM gpt-oss-120b on B200 (``gptoss_fp4_b200.sh``): ``max-num-batched-tokens 8192``,
      ``--max-num-seqs 512``, ``kv-cache-dtype fp8``, ``max-cudagraph-capture-size: 2048``, the
      all-reduce fused with the norm (``pass_config: fuse_allreduce_rms``) and FlashInfer's MXFP4 x
      MXFP8 MoE, which no table times (priced analytically, as before)."""
    clients, tp = int(row["batch_size"]), int(row["tp_size"])
    if row["precision"] == "fp4" and not row["model_path"].startswith("openai/"):
        return nvfp4_recipe(row)
    if row["backend"] == "sglang" and row["model_path"].startswith("deepseek-ai/"):
        if row["system"] == "b200_sxm":
            if tp == 4:
                return Recipe(8192, 32, 10, "fp8")
            return Recipe(32768, 128, 10 if clients < 16 else 30, "fp8")
        if row["system"] == "h200_sxm":
            return Recipe(32768, 512 if (row["isl"], row["osl"]) == (1024, 1024) else 256)
    if row["backend"] == "vllm" and row["model_path"] == "meta-llama/Llama-3.1-70B":
        hopper = row["system"] != "b200_sxm"
        return Recipe(8192, clients, kv_cache_dtype="fp8", graph_tokens=vllm_capture(clients) if hopper else None)
    if row["backend"] == "vllm" and row["model_path"] == "MiniMaxAI/MiniMax-M2.5":
        return Recipe(16384 if clients <= 32 else 32768, clients, kv_cache_dtype="fp8")
    if row["backend"] == "vllm" and row["model_path"] == "openai/gpt-oss-120b":
        if row["system"] == "b200_sxm":
            return Recipe(8192, 512, kv_cache_dtype="fp8", all_reduce_fusion="on", graph_tokens=2048)
        return Recipe(8192, clients, moe_kernel="marlin", graph_tokens=2048)
    by_clients = row["backend"] == "vllm" and row["system"] != "b200_sxm"  # Kimi-K2.5's H200 recipe
    return Recipe(max_running=clients, graph_tokens=vllm_capture(clients) if by_clients else None)


def nvfp4_recipe(row: dict) -> Recipe:
    """The NVFP4 recipes on B200 (SemiAnalysisAI/InferenceX, benchmarks/single_node/ and the
    earlier benchmarks/, read in November 2026; the runs' own dates' versions were not read):

    - sglang DeepSeek-R1 (``dsr1_fp4_b200.sh``): ``--chunked-prefill-size 16384
      --max-running-requests 256 --kv-cache-dtype fp8_e4m3 --enable-flashinfer-allreduce-fusion
      --scheduler-recv-interval`` 10 below 16 clients, else 30, ``--ep-size`` the row's EP,
      ``--moe-runner-backend flashinfer_trtllm`` (the kernel infercast prices for NVFP4 experts);
    - vLLM Llama-3.3-70B (``70b_fp4_b200_docker.sh``): ``max-num-batched-tokens 8192``,
      ``--max-num-seqs 512``, ``kv-cache-dtype fp8``, ``enable_fi_allreduce_fusion`` and
      ``cudagraph_mode FULL_DECODE_ONLY``: every prompt step launched without graphs;
    - vLLM MiniMax-M2.5 and Kimi-K2.5 (``minimaxm2.5_fp4_b200.sh``, ``kimik2.5_fp4_b200.sh``):
      ``--max-num-seqs`` the clients (the captured size too), ``fuse_allreduce_rms``, the rest
      vLLM's defaults."""
    clients = int(row["batch_size"])
    if row["backend"] == "sglang":
        return Recipe(16384, 256, 10 if clients < 16 else 30, "fp8", all_reduce_fusion="on")
    if row["model_path"].startswith("meta-llama/"):
        return Recipe(8192, 512, kv_cache_dtype="fp8", all_reduce_fusion="on", prefill_graphs="off")
    return Recipe(max_running=clients, all_reduce_fusion="on", graph_tokens=vllm_capture(clients))


def as_run(row: dict, model: str, flags: Recipe) -> dict:
    """What the run's engine version did by default where it differs from the newest tables'
    version, which prices every run: scheduling one step ahead of the GPU, fusing the all-reduce
    with the norm after it (unless the recipe turns it on itself), capturing prefill in piecewise
    CUDA graphs (sglang from 0.5.10; 0.5.9 and earlier launch it eagerly). An unnamed version is
    taken as the newest: ``auto``."""
    engine, version = row["backend"], row["backend_version"]
    if not version:
        return {} if flags.all_reduce_fusion is None else {"all_reduce_fusion": flags.all_reduce_fusion}
    policy = engine_named(engine)
    since = policy.overlap_since
    overlap = "auto" if since is None else "on" if reaches(version, since) else "off"
    return {"overlap_scheduling": overlap, "prefill_cuda_graph": policy.prefill_graphs_as(version),
            "all_reduce_fusion": flags.all_reduce_fusion
            or fusion_in(version, model, DEVICES[row["system"]], int(row["tp_size"]), engine)}


def moe_kernel_as_run(row: dict, model: str, quant: str | None, flags: Recipe) -> str:
    """The recipe's ``--moe-kernel``, else the kernel the run's engine version picked for the
    model's architecture in the run's precision ``quant`` (:func:`published_points.moe_kernel_in`;
    an unnamed version: ``auto``)."""
    if flags.moe_kernel != "auto" or not row["backend_version"]:
        return flags.moe_kernel
    return moe_kernel_in(row["backend_version"], model, DEVICES[row["system"]], row["backend"], quant)


def replay(row: dict, pricers: dict) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) of the row's benchmark run, simulated."""
    isl, osl, tp, clients = row["isl"], row["osl"], int(row["tp_size"]), int(row["batch_size"])
    ep = int(row["moe_ep_size"] or 1)
    model, quant = MODELS[(row["model_path"], row["precision"])]
    lengths = LengthDist(tuple((round(isl * a), round(osl * b), 1.0) for a in RANGE for b in RANGE),
                         "uniform in 0.8-1.0 of ISL and OSL")
    flags = recipe(row)
    batch = max(256, clients)
    run = as_run(row, model, flags)
    if flags.prefill_graphs != "auto":
        run["prefill_cuda_graph"] = flags.prefill_graphs
    graph_tokens = None if run.get("prefill_cuda_graph") == "off" else flags.graph_tokens
    request = PlanRequest(model=model, device=DEVICES[row["system"]], num_devices=(tp,), batches=(batch,),
                          speculative=(), quantizations=(quant,), engine=row["backend"],
                          engine_version=None, input_length=isl, output_length=osl, kv_cache_dtype=flags.kv_cache_dtype,
                          moe_kernel=moe_kernel_as_run(row, model, quant, flags), **run,
                          prefill_cuda_graph_max_tokens=graph_tokens,
                          serving=ServingOptions(concurrency=clients, lengths=lengths,
                                                 chunked_prefill_size=flags.chunk))
    key = (model, row["system"], row["backend"], request.overlap_scheduling, request.all_reduce_fusion,
           request.prefill_cuda_graph, graph_tokens, quant, isl, osl, flags.chunk, flags.kv_cache_dtype,
           request.moe_kernel)
    if key not in pricers:
        planner = Planner(request)
        pricers[key] = (planner, StepPricer(planner))
    planner, pricer = pricers[key]
    chunk = chunk_of(planner)
    cost = pricer.grid(Layout(tp, tp, 1, ep), quant, batch, None, chunk_shape(lengths, chunk), chunk)
    policy = rank_policy(chunk, flags.max_running or batch, 1, POLICY[row["backend"]], recv_interval=flags.recv_interval,
                         lookahead=planner.costs.overlapped())
    runs = [simulate_engine(cost, policy, lengths, clients=clients, requests=10 * clients, warmup=0, seed=seed)
            for seed in range(SEEDS)]
    # the run's version decides how the server calls the model's tokenizer (Kimi's is slow before
    # sglang 0.5.12 and vLLM 0.24.0); a run without one is taken as the tables' version
    ran = row["backend_version"] or planner.costs.engine_version
    host = planner.costs.engine.request_cost(planner.profile.tokenizer, ran).at(round(lengths.mean_input))
    ttft = statistics.mean(statistics.mean(run.ttft_s) for run in runs)
    return (ttft + host) * 1e3, statistics.mean(statistics.mean(run.tpot_s) for run in runs) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every run, not only each group's medians")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 160))
    rows, left = select(silicon_rows())
    groups: dict[tuple, list] = collections.defaultdict(list)
    pricers: dict = {}
    detail = Table(title="every run (errors: simulated vs measured)")
    for column in ("setting", "ISL/OSL", "TP", "clients", "TTFT ms", "error", "TPOT ms", "error"):
        detail.add_column(column)
    order = list(DEVICES)
    for r in sorted(rows, key=lambda r: (order.index(r["system"]), r["model_path"], r["backend"], r["backend_version"],
                                         r["isl"], r["osl"], r["tp_size"], r["batch_size"])):
        ttft, tpot = replay(r, pricers)
        e_ttft = (ttft - r["silicon_ttft_ms"]) / r["silicon_ttft_ms"]
        e_tpot = (tpot - r["silicon_tpot_ms"]) / r["silicon_tpot_ms"]
        model = "DeepSeek-R1/V3" if r["model_path"].startswith("deepseek-ai/") else r["model_path"].split("/")[-1]
        nvfp4 = r["precision"] == "fp4" and not r["model_path"].startswith("openai/")
        name = (f"{'NVFP4 ' if nvfp4 else ''}{model} {r['precision']}, {DEVICES[r['system']]}, "
                f"{r['backend']} {r['backend_version'] or '(version not given)'}")
        groups[name].append((e_ttft, e_tpot))
        detail.add_row(name, f"{r['isl']}/{r['osl']}", str(int(r["tp_size"])), str(int(r["batch_size"])),
                       f"{ttft:.1f} vs {r['silicon_ttft_ms']:.1f}", f"{e_ttft:+.0%}",
                       f"{tpot:.2f} vs {r['silicon_tpot_ms']:.2f}", f"{e_tpot:+.0%}")
    if args.rows:
        console.print(detail)
    table = Table(title="infercast vs InferenceX runs in aiconfigurator-core's silicon sample (replayed: 10 x N "
                        f"requests, N clients starting at once, lengths 0.8-1.0 x ISL/OSL, mean of {SEEDS} draws)")
    for column in ("setting", "runs", "TTFT median error", "median |error|", "TPOT median error", "median |error|"):
        table.add_column(column)
    for name, errors in groups.items():
        ttft, tpot = [e for e, _ in errors], [e for _, e in errors]
        table.add_row(name, str(len(errors)), f"{statistics.median(ttft):+.0%}",
                      f"{statistics.median(map(abs, ttft)):.0%}", f"{statistics.median(tpot):+.0%}",
                      f"{statistics.median(map(abs, tpot)):.0%}")
    console.print(table)
    every = [e for errors in groups.values() for e in errors]
    console.print(f"median |error| over {len(every)} runs: TTFT {statistics.median(abs(e) for e, _ in every):.1%}, "
                  f"TPOT {statistics.median(abs(e) for _, e in every):.1%}")
    def medians(runs: list) -> str:
        return (f"{len(runs)} runs, TTFT {statistics.median(abs(e) for e, _ in runs):.1%}, "
                f"TPOT {statistics.median(abs(e) for _, e in runs):.1%}")

    fresh_names = tuple(OUT_OF_SAMPLE)
    checked = [e for name, errors in groups.items() if not name.startswith(fresh_names) for e in errors]
    if checked and len(checked) < len(every):
        console.print(f"  the runs checked before {max(OUT_OF_SAMPLE.values())}: {medians(checked)}")
        for device in DEVICES.values():
            some = [e for name, errors in groups.items() if not name.startswith(fresh_names)
                    and f", {device}, " in name for e in errors]
            if some:
                console.print(f"    of them on {device}: {medians(some)}")
    for prefix, since in OUT_OF_SAMPLE.items():
        fresh = [e for name, errors in groups.items() if name.startswith(prefix) for e in errors]
        if fresh:
            console.print(f"  {prefix.strip()} (out of sample, added {since}): {medians(fresh)}")
    for device in DEVICES.values():
        some = [e for name, errors in groups.items() if f", {device}, " in name for e in errors]
        if some:
            console.print(f"  on {device}: {medians(some)}")
    used = sorted({planner.costs.describe() for planner, _ in pricers.values()})
    console.print("priced with: " + "; ".join(used))
    console.print("left out: " + "; ".join(f"{reason}: {n}" for reason, n in sorted(left.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
