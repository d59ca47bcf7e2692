"""Derive sglang's and vLLM's launch time per kernel from forwards timed without CUDA graphs.

sglang PR 12160 (2025-10-14 log) timed a DeepSeek-V3 prefill of one new token over one cached
token at 82.6 ms launched eagerly ("forward cost") and 23.1 ms replayed as a CUDA graph (TP8, a
Hopper GPU, sglang main between 0.5.3 and 0.5.4). One token leaves almost nothing for the GPU
to do, so the eager forward is host-bound: the time sglang takes to launch its kernels.

The simulator prices an eager forward as, per decoder layer, the larger of the layer's GPU time
and its kernels x the launch time (``step.exposed_launch``). This script traces that forward as
the simulator does today and finds the launch time at which the simulated forward (GPU streams
plus exposed launches, without the engine's per-step scheduling row, which sglang's log does not
time) takes 82.6 ms. The result depends on how many kernels the tracer emits, so rerun it after
a change that adds or removes kernels from a DeepSeek forward and update
``infercast.engines.SGLANG_EAGER``. The GPU is not named in the log; the figure is printed for
each Hopper device with tables to show that it hardly depends on it.

vLLM issue 45709 (August 2026, vLLM 0.28.1rc1) served Qwen3-30B-A3B in bf16 on 4 x L20 at TP4
(PyNCCL all-reduce, 3,500-token prompts, 1,500-token outputs, 8 clients) compiled with
cudagraph_mode NONE and with PIECEWISE: 34.4 ms and 11.8 ms a token. The GPU work is the same
in both, so the forward without graphs is host-bound: vLLM's launch time, the Python around
each kernel included. The same search gives the launch time at which the simulator's forward of
that decode batch (8 requests of one token over about 4,250 cached, no graphs, no all-reduce
fusion over PCIe), with the engine's per-step host row that every simulated vLLM step carries,
takes 34.4 ms, for ``infercast.engines.VLLM_EAGER``. Every layer of it is host-bound, so the
figure is the TPOT less that row over the kernels, on any device (the L20 is not a built-in one).
The TPOT also carries the run's second wave of prompts, whose 2,048-token chunks ran without
graphs in both modes among the first wave's decodes: about 2% of it by the issue's first-wave
TTFT (1,240 ms over 14 chunks), left in.

Run: .venv/bin/python benchmarks/derive_engine_constants.py
"""

from __future__ import annotations

from dataclasses import replace

from infercast import engines
from infercast.simulate import UserInput, simulate

LOGGED_EAGER_S = 82.6406e-3
"""sglang PR 12160: ``#new-token: 1, #cached-token: 1`` ... ``forward cost-82.6406478881836 ms``."""
VERSION = "0.5.3"
"""The last release before the log (sglang main on 2025-10-14): eager prefill, no all-reduce
fusion on sm_90."""
STEP_ROW = "host: scheduling"
VLLM_LOGGED_S = 34.4e-3
"""vLLM issue 45709: TPOT 34.4 ms with ``cudagraph_mode`` NONE (PIECEWISE: 11.8 ms)."""
VLLM_CONTEXT = 3500 + 1500 // 2
"""The mean context of its decode steps: the prompt and half the output."""


def eager_forward_s(device: str, launch_s: float, engine: str = "sglang") -> tuple[float, int]:
    """The simulated step without graphs of ``engine``'s measured batch at ``launch_s`` a kernel,
    and its kernels: sglang's without the per-step scheduling row (its log times the forward
    alone), vLLM's with it (a client's TPOT includes the step's host time)."""
    saved = engines.ENGINES[engine]
    engines.ENGINES[engine] = replace(saved, eager_launch=replace(saved.eager_launch, seconds=launch_s))
    try:
        if engine == "sglang":
            batch = UserInput(model="deepseek-ai/DeepSeek-V3", device=device, num_devices=8, tp_size=8,
                              num_queries=1, query_length=1, context_length=1, engine_version=VERSION,
                              prefill_cuda_graph="off")
        else:
            batch = UserInput(model="Qwen/Qwen3-30B-A3B", device=device, num_devices=4, tp_size=4, num_queries=8,
                              query_length=1, context_length=VLLM_CONTEXT, engine="vllm", prefill_cuda_graph="off",
                              all_reduce_fusion="off")
        r = simulate(batch)
    finally:
        engines.ENGINES[engine] = saved
    step_row = sum(row.total_ms for row in r.ops if row.name.startswith(STEP_ROW)) if engine == "sglang" else 0.0
    return (r.step_latency_ms - step_row) / 1e3, r.kernel_count


def launch_time_for(device: str, target_s: float = LOGGED_EAGER_S, engine: str = "sglang") -> tuple[float, int]:
    """The launch time at which the simulated forward takes ``target_s`` (bisection: the
    forward grows with the launch time)."""
    low, high = 0.0, 200e-6
    for _ in range(40):
        mid = (low + high) / 2
        if eager_forward_s(device, mid, engine)[0] < target_s:
            low = mid
        else:
            high = mid
    return (low + high) / 2, eager_forward_s(device, high, engine)[1]


def main() -> None:
    print(f"sglang {VERSION}, DeepSeek-V3 on 8 GPUs TP8, 1 new token over 1 cached, eager; "
          f"logged forward {LOGGED_EAGER_S * 1e3:.1f} ms (sglang PR 12160)")
    for engine, target, current, devices in (
            ("sglang", LOGGED_EAGER_S, engines.SGLANG_EAGER.seconds, ("H100", "H200")),
            ("vllm", VLLM_LOGGED_S, engines.VLLM_EAGER.seconds, ("H100", "H200", "A100"))):
        if engine == "vllm":
            print(f"vLLM, Qwen3-30B-A3B bf16 on 4 GPUs TP4, 8 requests decoding over {VLLM_CONTEXT:,} tokens, "
                  f"compiled without graphs; measured {VLLM_LOGGED_S * 1e3:.1f} ms a token (vLLM issue 45709)")
        for device in devices:
            launch_s, kernels = launch_time_for(device, target, engine)
            at_current = eager_forward_s(device, current, engine)[0]
            name = "SGLANG_EAGER" if engine == "sglang" else "VLLM_EAGER"
            print(f"{device}: {kernels:,} kernels; launch time {launch_s * 1e6:.1f} us a kernel "
                  f"(infercast.engines.{name}: {current * 1e6:.1f} us, which gives {at_current * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
