"""Offline throughput under maximum load: TensorRT-LLM's published perf-overview tables, replayed.

NVIDIA/TensorRT-LLM's perf overview (docs/source/legacy/performance/perf-overview.md, the v0.21
page; the same tables under nvidia.github.io/TensorRT-LLM/performance/perf-overview.html) times
``trtllm-bench throughput`` on the PyTorch backend: every request of a synthetic dataset
(``prepare_dataset.py token-norm-dist``, fixed input and output lengths) queued at once, FP8
ModelOpt checkpoints (FP8 weights and KV cache; on B200 NVFP4 weights), CUDA graphs with padding, options otherwise
left at their defaults (the page: ``--kv_cache_free_gpu_mem_fraction 0.95`` "in many cases",
0.90 where that ran out of memory), and it reports the total output throughput. trtllm-bench
sizes the engine from the lengths (``tensorrt_llm/bench/build/tuning.py``): the KV requests R it
estimates fit (95% of the device memory NVML reports, in GiB, less an engine of one byte a
parameter, half a byte for NVFP4, over the input plus output length), a batch of at most R rounded up, and
``max_num_tokens`` R x (1 + input / output), capped at 32,768, at least 2,048 and rounded up
(:func:`bench_settings`). Chunked prefill is off by default, and trtllm-bench raises the token
budget to at least one whole prompt plus the batch (``bench/benchmark/utils/general.py``,
``get_settings``), so every prompt is prefilled in one step.

Each row is replayed with ``infercast plan``'s serving model on TensorRT-LLM: the requests as
that many clients in a closed loop (a full queue), that prompt-token budget, and the largest
batch that fits in the device's memory at 0.95 (the engine admits what its KV cache holds). A closed loop at a full queue is the steady state: the run's ramp-up and its last
requests draining are left out. Nothing here feeds the simulator. Run:
.venv/bin/python benchmarks/throughput_points.py
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from infercast.plan import Planner, PlanRequest
from infercast.serving import ServingOptions

SOURCE = ("NVIDIA/TensorRT-LLM perf overview, v0.21 (docs/source/legacy/performance/perf-overview.md): "
          "trtllm-bench throughput, PyTorch backend, FP8 and NVFP4 ModelOpt checkpoints, total output tokens/s")
REQUESTS = {(128, 2048): 3000, (1000, 1000): 3000, (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500,
            (20000, 2000): 1000}
"""The page's request count for each (input, output) length."""
PUBLISHED = {
    # (model, device, TP, weights): output tokens/s at the lengths of REQUESTS, in its order
    ("meta-llama/Llama-3.1-8B-Instruct", "H100", 1, "FP8"): (21413.21, 14991.62, 3275.55, 9462.43, 3276.47, 1340.69),
    ("meta-llama/Llama-3.1-8B-Instruct", "H200", 1, "FP8"): (23102.25, 17162.49, 3390.69, 11822.14, 3758.08, 1705.68),
    # Llama-3.3-70B: Llama-3.1-70B's architecture
    ("meta-llama/Llama-3.1-70B-Instruct", "H100", 2, "FP8"): (5892.94, 4181.06, 723.40, 2785.53, 865.55, 411.85),
    ("meta-llama/Llama-3.1-70B-Instruct", "H200", 2, "FP8"): (7467.36, 4773.33, 747.55, 3775.80, 978.28, 609.42),
    # added 2026-11-27 (ADDED): Llama-3.1-405B, whose config aiconfigurator-core ships, and the page's
    # NVFP4 tables on B200 (nvidia/Llama-3.3-70B-Instruct-FP4, nvidia/Llama-3.1-405B-Instruct-FP4)
    ("meta-llama/Llama-3.1-405B-Instruct", "H100", 8, "FP8"): (4517.39, 2955.50, 433.47, 2216.55, 579.05, 363.27),
    ("meta-llama/Llama-3.1-405B-Instruct", "H200", 8, "FP8"): (4715.13, 3208.25, 441.35, 2840.86, 645.26, 509.87),
    ("meta-llama/Llama-3.1-70B-Instruct", "B200", 1, "NVFP4"): (9445.51, 6434.29, 1330.35, 4528.48, 1427.44, 636.36),
    ("meta-llama/Llama-3.1-405B-Instruct", "B200", 4, "NVFP4"): (7178.10, 4958.53, 737.95, 4024.02, 1032.40, 667.39),
}
ADDED = {("meta-llama/Llama-3.1-405B-Instruct", "H100", 8, "FP8"), ("meta-llama/Llama-3.1-405B-Instruct", "H200", 8, "FP8"),
         ("meta-llama/Llama-3.1-70B-Instruct", "B200", 1, "NVFP4"),
         ("meta-llama/Llama-3.1-405B-Instruct", "B200", 4, "NVFP4")}
"""Tables added after the modelling they check (2026-11-27): reported apart as well as in the total."""
WEIGHT_BYTES = {"FP8": 1.0, "NVFP4": 0.5}
"""trtllm-bench's bytes a parameter for its engine-size estimate (``BYTES_PER_ELEM``, tuning.py)."""

BATCHES = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048)


@dataclass(frozen=True)
class Point:
    model: str
    device: str
    tp: int
    quant: str
    isl: int
    osl: int
    measured: float


def bench_settings(params: float, kv_bytes_per_token: float, device_bytes: float, tp: int, isl: int,
                   osl: int, weight_bytes: float = 1.0) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as trtllm-bench's tuning sets them (``calc_engine_setting``
    and ``finetune_setting``, in GiB as it counts): ``weight_bytes`` a parameter (FP8: 1, NVFP4:
    0.5), ``kv_bytes_per_token`` over every rank; the token budget then raised to a whole prompt
    plus the batch, chunked prefill being off."""
    available = (device_bytes * tp - params * weight_bytes) / 1024 ** 3
    requests = available * 0.95 / (kv_bytes_per_token / 1024 ** 3) / (isl + osl)
    raw_bs = min(requests, 4096)
    raw_token = min(raw_bs * (1 + isl / osl), 32768)
    batch = _round_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), 64)
    tokens = _round_up(raw_token, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048)
    return batch, max(tokens, isl + batch)


def _round_up(value: float, tiers: tuple[tuple[float, int], ...], floor: int) -> int:
    """``value`` rounded up to the step of the first tier it is below, and at least ``floor``."""
    step = next(step for limit, step in tiers if value < limit)
    return max(floor, step * math.ceil(value / step))


def points() -> list[Point]:
    return [Point(model, device, tp, quant, isl, osl, value) for (model, device, tp, quant), values in PUBLISHED.items()
            for (isl, osl), value in zip(REQUESTS, values)]


def replay(point: Point) -> tuple[float, int, int]:
    """(total output tokens/s, the batch, the prompt-token budget) of ``point`` simulated."""
    from infercast_adapters.config import load_config

    from infercast.plugins import get_devices, get_manager, known_model_refs
    from infercast.simulate import UserInput, simulate

    step = simulate(UserInput(model=point.model, device=point.device, num_devices=point.tp, decode=True,
                              quantize_linear_action=point.quant, kv_cache_dtype="fp8", engine="trtllm"))
    text = load_config(point.model, manager=get_manager(), known_models=known_model_refs(get_manager()))
    head = text.hidden_size // text.num_attention_heads
    kv = 2 * text.num_hidden_layers * max(point.tp, text.num_key_value_heads) * head  # FP8 cache, all ranks
    device = get_devices().get(point.device)
    batch_cap, chunk = bench_settings(step.parameters_billion * 1e9, kv, device.memory_bytes, point.tp, point.isl,
                                      point.osl, WEIGHT_BYTES[point.quant])
    batches = tuple(b for b in BATCHES if b < batch_cap) + (batch_cap,)
    request = PlanRequest(model=point.model, device=point.device, num_devices=(point.tp,), batches=batches,
                          speculative=(), quantizations=(point.quant,), engine="trtllm", input_length=point.isl,
                          output_length=point.osl, kv_cache_dtype="fp8", mem_fraction_static=0.95,
                          serving=ServingOptions(concurrency=REQUESTS[point.isl, point.osl],
                                                 chunked_prefill_size=chunk))
    fits = [c for c in Planner(request).run().configs if c.fits]
    best = max(fits, key=lambda c: c.batch)
    return best.tokens_per_s_per_device * point.tp, best.batch, chunk


def main() -> int:
    console = Console(width=max(Console().width, 160))
    table = Table(title="infercast vs TensorRT-LLM's perf overview (trtllm-bench throughput, all requests at once)")
    for column in ("model", "weights", "GPUs", "ISL/OSL", "requests", "batch", "max_num_tokens", "measured tok/s",
                   "simulated tok/s", "error"):
        table.add_column(column)
    errors, added, before = [], [], []
    for point in points():
        simulated, batch, chunk = replay(point)
        error = simulated / point.measured - 1
        errors.append(error)
        (added if (point.model, point.device, point.tp, point.quant) in ADDED else before).append(error)
        table.add_row(point.model.split("/")[-1], point.quant, f"{point.tp} x {point.device}",
                      f"{point.isl}/{point.osl}", f"{REQUESTS[point.isl, point.osl]:,}", str(batch), f"{chunk:,}",
                      f"{point.measured:,.0f}", f"{simulated:,.0f}", f"{error:+.1%}")
    console.print(table)
    console.print(f"median |error| over {len(errors)} points: {statistics.median(map(abs, errors)):.1%} "
                  f"(median signed {statistics.median(errors):+.1%})")
    if added:
        console.print(f"  the {len(before)} points of before: {statistics.median(map(abs, before)):.1%}; added "
                      f"2026-11-27 (Llama-3.1-405B FP8, NVFP4 on B200; out of sample): {len(added)} points, "
                      f"{statistics.median(map(abs, added)):.1%} (median signed {statistics.median(added):+.1%})")
    console.print(f"source: {SOURCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
