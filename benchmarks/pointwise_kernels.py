"""What small pointwise and normalisation kernels take on a GPU, replayed in a CUDA graph.

No kernel table covers an engine's norms, RoPE, SiLU-and-mul, residual adds or cache writes:
the simulator prices them analytically, ``bytes / (HBM x memory) + kernel_fixed``, where
``kernel_fixed`` is read off the smallest GEMMs of aiconfigurator-core's tables (3.0 us on
Hopper). This microbenchmark times such kernels directly, the way a decode step runs them: each
kernel launched many times back to back inside one CUDA graph, the graph replayed, the time
divided by the launches. Beside them it times:

- PyTorch's FP8-to-bf16 cast, which the simulator prices at a rate read off the MLA tables;
- cuBLAS GEMMs of one row at shapes the tables hold, the check that this harness and the
  tables' time a kernel alike;
- Kimi-K2.5's bf16 decode projections at TP8, with one weight reused and with a different
  weight each launch, as consecutive layers read them;
- a layer's pointwise kernels after a write that evicts the L2, as a layer's GEMMs do;
- a layer's pointwise kernels with two pairs of them forked onto a second stream, as sglang's
  decode graphs fork the query and latent norms and the shared experts.

The kernels are written here in Triton, one kernel per operation as the engines' fused CUDA
kernels are (sgl-kernel's and vLLM's ``fused_add_rms_norm``, ``silu_and_mul``, the RoPE and
cache-write kernels); their shapes are Kimi-K2.5's and DeepSeek-V3's at TP8.

Two steps:

- ``measure`` (needs a CUDA GPU, PyTorch and Triton): times everything and writes JSON;
- ``compare FILE``: prints the measurements beside infercast's analytic price of the same
  kernel on the measured device and the GEMM table the simulator reads, and the fixed time and
  streaming share they imply.

Run: python benchmarks/pointwise_kernels.py measure --out pointwise.json
     .venv/bin/python benchmarks/pointwise_kernels.py compare benchmarks/measured/pointwise_h200.json
(``benchmarks/measured/pointwise_h200.json`` and ``pointwise_h100.json``: torch 2.11.0+cu130, Triton 3.6.0,
2026-11-27.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HIDDEN = 7168
"""Kimi-K2.5's and DeepSeek-V3's hidden size."""
Q_LORA, KV_LORA, ROPE_DIM = 1536, 512, 64
"""MLA's query and latent ranks and its RoPE width."""
HEADS_TP8 = 8
"""Kimi-K2.5's 64 query heads over 8 ranks."""
SHARED_TP8 = 2048 // 8
"""Kimi-K2.5's shared expert (intermediate 2048) per rank at TP8."""
DENSE_TP8 = 18432 // 8
"""The dense layers' MLP (intermediate 18432) per rank at TP8."""
CACHE_ROW = KV_LORA + ROPE_DIM
"""One token's MLA cache row: latent and RoPE key."""
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
GEMMS = ((1, 32, 32), (1, 128, 128), (1, 256, 64), (1, 1024, 64), (1, 64, 512), (1, 512, 512))
"""One-row bf16 GEMMs (m, n, k) that aiconfigurator-core's gemm tables also time."""
CHAIN = [("add_rms_norm", HIDDEN), ("rms_norm", Q_LORA), ("rms_norm", KV_LORA), ("rope", HEADS_TP8),
         ("add_rms_norm", HIDDEN), ("silu_and_mul", SHARED_TP8), ("add", HIDDEN)]
"""The pointwise kernels of one Kimi-K2.5 decoder layer at TP8, in order: the residual norms
before attention and before the MLP, the query and latent norms, RoPE, the shared expert's
SiLU-and-mul and the shared + routed add."""
CHAIN_COUNT = {key: CHAIN.count(key) for key in CHAIN}
CAST_ELEMENTS = (1 << 20, 1 << 24, 1 << 28)
"""FP8-to-bf16 casts (PyTorch's copy, as sglang casts an FP8 MLA cache for its bf16 kernels)."""
LAUNCHES = 100
REPLAYS = 20


def _kernels():
    """The Triton kernels (imported here so that ``compare`` needs no GPU stack)."""
    import triton
    import triton.language as tl

    @triton.jit
    def noop(x_ptr):
        pass

    @triton.jit
    def rms_norm(x_ptr, w_ptr, out_ptr, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.sum(x * x, axis=0) / n + eps)
        tl.store(out_ptr + row * n + cols, (x * scale * w).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def add_rms_norm(x_ptr, residual_ptr, w_ptr, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        s = (tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
             + tl.load(residual_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32))
        tl.store(residual_ptr + row * n + cols, s.to(residual_ptr.dtype.element_ty), mask=mask)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.sum(s * s, axis=0) / n + eps)
        tl.store(x_ptr + row * n + cols, (s * scale * w).to(x_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def silu_and_mul(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < d
        gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * d + cols, (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        s = tl.load(a_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, s, mask=mask)

    @triton.jit
    def rope(q_ptr, k_ptr, cos_sin_ptr, pos_ptr, heads, HALF: tl.constexpr, HEADS: tl.constexpr):
        """Neox-style rotation in place of one token's query heads and its one key head."""
        t = tl.program_id(0)
        p = tl.load(pos_ptr + t)
        i = tl.arange(0, HALF)
        cos = tl.load(cos_sin_ptr + p * 2 * HALF + i)
        sin = tl.load(cos_sin_ptr + p * 2 * HALF + HALF + i)
        h = tl.arange(0, HEADS)[:, None]
        hm = h < heads
        base = q_ptr + t * heads * 2 * HALF + h * 2 * HALF
        x1 = tl.load(base + i[None, :], mask=hm, other=0.0).to(tl.float32)
        x2 = tl.load(base + HALF + i[None, :], mask=hm, other=0.0).to(tl.float32)
        tl.store(base + i[None, :], (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty), mask=hm)
        tl.store(base + HALF + i[None, :], (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty), mask=hm)
        kb = k_ptr + t * 2 * HALF
        k1 = tl.load(kb + i).to(tl.float32)
        k2 = tl.load(kb + HALF + i).to(tl.float32)
        tl.store(kb + i, (k1 * cos - k2 * sin).to(k_ptr.dtype.element_ty))
        tl.store(kb + HALF + i, (k2 * cos + k1 * sin).to(k_ptr.dtype.element_ty))

    @triton.jit
    def cache_write(src_ptr, slot_ptr, cache_ptr, width, BLOCK: tl.constexpr):
        """Copy one token's cache row to its slot in the pool."""
        t = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < width
        slot = tl.load(slot_ptr + t).to(tl.int64)
        tl.store(cache_ptr + slot * width + cols, tl.load(src_ptr + t * width + cols, mask=mask), mask=mask)

    return dict(noop=noop, rms_norm=rms_norm, add_rms_norm=add_rms_norm, silu_and_mul=silu_and_mul, add=add,
                rope=rope, cache_write=cache_write)


def _cases(torch, k: dict) -> list[tuple[str, dict, object]]:
    """(kernel name, shape, launch) for every measured kernel: ``launch()`` runs it once. The
    byte count is what the kernel must read and write, as the simulator counts it."""
    import triton

    dev, bf16 = "cuda", torch.bfloat16
    cases = [("noop", dict(tokens=0, bytes=0), (lambda x=torch.empty(1, device=dev): k["noop"][(1,)](x)))]

    def norm(t: int, n: int):
        x, w, out = (torch.randn(t, n, device=dev, dtype=bf16), torch.randn(n, device=dev, dtype=bf16),
                     torch.empty(t, n, device=dev, dtype=bf16))
        block = triton.next_power_of_2(n)
        return lambda: k["rms_norm"][(t,)](x, w, out, n, 1e-6, BLOCK=block, num_warps=8 if n > 2048 else 4)

    def add_norm(t: int, n: int):
        x, r, w = (torch.randn(t, n, device=dev, dtype=bf16), torch.randn(t, n, device=dev, dtype=bf16),
                   torch.randn(n, device=dev, dtype=bf16))
        block = triton.next_power_of_2(n)
        return lambda: k["add_rms_norm"][(t,)](x, r, w, n, 1e-6, BLOCK=block, num_warps=8)

    def silu(t: int, d: int):
        x, out = torch.randn(t, 2 * d, device=dev, dtype=bf16), torch.empty(t, d, device=dev, dtype=bf16)
        block = min(1024, triton.next_power_of_2(d))
        return lambda: k["silu_and_mul"][(t, triton.cdiv(d, block))](x, out, d, BLOCK=block)

    def add(t: int, n: int):
        a, b, out = (torch.randn(t * n, device=dev, dtype=bf16) for _ in range(3))
        return lambda: k["add"][(triton.cdiv(t * n, 1024),)](a, b, out, t * n, BLOCK=1024)

    def rope(t: int, heads: int):
        q, kk = (torch.randn(t, heads, ROPE_DIM, device=dev, dtype=bf16),
                 torch.randn(t, ROPE_DIM, device=dev, dtype=bf16))
        angles = torch.outer(torch.arange(8192, device=dev, dtype=torch.float32),
                             torch.rand(ROPE_DIM // 2, device=dev))
        cos_sin = torch.cat([angles.cos(), angles.sin()], dim=-1)  # a rotation: launches keep q, k finite
        pos = torch.arange(t, device=dev, dtype=torch.int64) % 8192
        return lambda: k["rope"][(t,)](q, kk, cos_sin, pos, heads, HALF=ROPE_DIM // 2,
                                       HEADS=triton.next_power_of_2(heads))

    def cache_write(t: int, width: int):
        src, cache = torch.randn(t, width, device=dev, dtype=bf16), torch.empty(65536, width, device=dev, dtype=bf16)
        slots = torch.randperm(65536, device=dev)[:t]
        return lambda: k["cache_write"][(t,)](src, slots, cache, width, BLOCK=triton.next_power_of_2(width))

    for t in TOKENS:
        cases += [
            ("add_rms_norm", dict(tokens=t, width=HIDDEN, bytes=t * HIDDEN * 2 * 4 + HIDDEN * 2), add_norm(t, HIDDEN)),
            ("rms_norm", dict(tokens=t, width=HIDDEN, bytes=t * HIDDEN * 2 * 2 + HIDDEN * 2), norm(t, HIDDEN)),
            ("rms_norm", dict(tokens=t, width=Q_LORA, bytes=t * Q_LORA * 2 * 2 + Q_LORA * 2), norm(t, Q_LORA)),
            ("rms_norm", dict(tokens=t, width=KV_LORA, bytes=t * KV_LORA * 2 * 2 + KV_LORA * 2), norm(t, KV_LORA)),
            ("silu_and_mul", dict(tokens=t, width=SHARED_TP8, bytes=t * SHARED_TP8 * 2 * 3), silu(t, SHARED_TP8)),
            ("silu_and_mul", dict(tokens=t, width=DENSE_TP8, bytes=t * DENSE_TP8 * 2 * 3), silu(t, DENSE_TP8)),
            ("add", dict(tokens=t, width=HIDDEN, bytes=t * HIDDEN * 2 * 3), add(t, HIDDEN)),
            ("rope", dict(tokens=t, width=HEADS_TP8, bytes=t * ((HEADS_TP8 + 1) * ROPE_DIM * 2 * 2 + ROPE_DIM * 4)),
             rope(t, HEADS_TP8)),
            ("cache_write", dict(tokens=t, width=CACHE_ROW, bytes=t * CACHE_ROW * 2 * 2), cache_write(t, CACHE_ROW)),
        ]
    for n in CAST_ELEMENTS:
        src = torch.randn(n, device=dev, dtype=bf16).to(torch.float8_e4m3fn)
        dst = torch.empty(n, device=dev, dtype=bf16)
        cases.append(("fp8_cast", dict(tokens=0, elements=n, bytes=n * 3), (lambda src=src, dst=dst: dst.copy_(src))))
    for m, n, kk in GEMMS:
        a, b = torch.randn(m, kk, device=dev, dtype=bf16), torch.randn(kk, n, device=dev, dtype=bf16)
        out = torch.empty(m, n, device=dev, dtype=bf16)
        cases.append(("cublas_gemm", dict(tokens=m, n=n, k=kk, bytes=(m * kk + kk * n + m * n) * 2),
                      (lambda a=a, b=b, out=out: torch.mm(a, b, out=out))))
    return cases


def _graph_time(torch, launch, launches: int = LAUNCHES, replays: int = REPLAYS) -> float:
    """Seconds per launch of ``launch`` run ``launches`` times in one CUDA graph, over
    ``replays`` replays after two untimed ones (the median of three such timings)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # compile and warm outside the capture
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            launch()
    for _ in range(2):
        graph.replay()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / (replays * launches))
    return statistics.median(times)


def _chain_launches(torch, k: dict, tokens: int) -> dict:
    """The launch of each :data:`CHAIN` kernel at ``tokens``, by (name, width)."""
    return {(name, shape.get("width")): launch for name, shape, launch in _cases(torch, k)
            if shape.get("tokens") == tokens and (name, shape.get("width")) in CHAIN_COUNT}


def _layer_chain(torch, k: dict, tokens: int) -> dict:
    """:data:`CHAIN` launched in sequence, 50 layers in one graph: seconds per layer, and the
    sum of the same kernels timed alone."""
    launches = _chain_launches(torch, k, tokens)
    order = [launches[key] for key in CHAIN]

    def layer():
        for launch in order:
            launch()

    per_layer = _graph_time(torch, layer, launches=50)
    alone = sum(_graph_time(torch, launches[key]) * count for key, count in CHAIN_COUNT.items())
    return dict(tokens=tokens, seconds_per_layer=per_layer, kernels=len(order), seconds_alone=alone)


DECODE_GEMMS = {"fused_qkv_a_proj": (Q_LORA + CACHE_ROW, HIDDEN), "q_b_proj": (HEADS_TP8 * 192, Q_LORA),
                "o_proj": (HIDDEN, HEADS_TP8 * 128), "gate": (384, HIDDEN), "shared gate_up": (2 * SHARED_TP8, HIDDEN),
                "shared down": (HIDDEN, SHARED_TP8)}
"""Kimi-K2.5's bf16 projections on one TP8 rank, (n, k)."""
COLD_BYTES = 1 << 30
"""Distinct weights cycled through in the cold measurement: many times the L2."""


def _decode_gemms(torch) -> list[dict]:
    """Each decode projection at a few token counts, timed two ways in a CUDA graph: one
    weight launched again and again (warm: it stays in the L2, as a table that reuses its
    operands may be), and a different weight each launch, as consecutive layers are (cold)."""
    rows = []
    for name, (n, k) in DECODE_GEMMS.items():
        copies = max(8, min(256, COLD_BYTES // (n * k * 2)))
        weights = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in (1, 4, 16, 64):
            a, out = (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                      torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
            warm = _graph_time(torch, lambda: torch.mm(a, weights[0], out=out))

            def every_weight():
                for w in weights:
                    torch.mm(a, w, out=out)

            cold = _graph_time(torch, every_weight, launches=1) / copies
            rows.append(dict(name=name, m=m, n=n, k=k, warm_seconds=warm, cold_seconds=cold, copies=copies))
            print(f"{name:16s} m={m:<3d} n={n:<5d} k={k:<5d} warm {warm * 1e6:7.2f} us  cold {cold * 1e6:7.2f} us",
                  flush=True)
        del weights
    return rows


FLUSH_BYTES = 256 << 20
"""What a layer's GEMMs read between its pointwise kernels, in effect: several times the L2."""


def _cold_chain(torch, k: dict, tokens: int) -> dict:
    """:data:`CHAIN` after a write of :data:`FLUSH_BYTES` that evicts the L2, as a layer's GEMMs
    do in a real step (the norm weights and the RoPE table then come from HBM), against the
    write alone: seconds per layer, 20 layers a graph."""
    launches = _chain_launches(torch, k, tokens)
    scratch = torch.empty(FLUSH_BYTES // 2, device="cuda", dtype=torch.bfloat16)

    def flush_and_chain():
        scratch.zero_()
        for key in CHAIN:
            launches[key]()

    flushed = _graph_time(torch, flush_and_chain, launches=20)
    flush = _graph_time(torch, scratch.zero_, launches=20)
    return dict(tokens=tokens, seconds_per_layer=flushed - flush, flush_seconds=flush)


def _two_streams(torch, k: dict, tokens: int = 1) -> dict:
    """sglang's decode under CUDA graphs forks a second stream twice a layer (the query and
    latent norms side by side; the routed experts beside the shared ones). :data:`CHAIN` with
    its two norms, and its SiLU-and-mul and add (standing in for the two expert branches), each
    pair forked onto a second stream, against the same kernels on one stream: seconds per
    layer, 50 layers a graph."""
    launches = _chain_launches(torch, k, tokens)
    alt = torch.cuda.Stream()

    def forked(first, second):
        main = torch.cuda.current_stream()
        alt.wait_stream(main)
        first()
        with torch.cuda.stream(alt):
            second()
        main.wait_stream(alt)

    def one_stream():
        for key in CHAIN:
            launches[key]()

    def two_streams():
        launches[CHAIN[0]]()
        forked(launches[CHAIN[1]], launches[CHAIN[2]])
        launches[CHAIN[3]]()
        launches[CHAIN[4]]()
        forked(launches[CHAIN[5]], launches[CHAIN[6]])

    return dict(tokens=tokens, one_stream=_graph_time(torch, one_stream, launches=50),
                two_streams=_graph_time(torch, two_streams, launches=50))



def measure(out: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("measure needs a CUDA GPU (and Triton); run `compare FILE` on a file measured elsewhere")
    import triton

    k = _kernels()
    props = torch.cuda.get_device_properties(0)
    result = dict(device=props.name, sm_count=props.multi_processor_count, torch=torch.__version__,
                  triton=triton.__version__, cuda=torch.version.cuda, launches=LAUNCHES, replays=REPLAYS, kernels=[])
    for name, shape, launch in _cases(torch, k):
        seconds = _graph_time(torch, launch)
        result["kernels"].append(dict(name=name, **shape, seconds=seconds))
        print(f"{name:14s} {json.dumps(shape):60s} {seconds * 1e6:8.2f} us", flush=True)
    result["layer_chain"] = [_layer_chain(torch, k, t) for t in (1, 16, 256)]
    for row in result["layer_chain"]:
        print(f"layer chain at {row['tokens']} tokens: {row['seconds_per_layer'] * 1e6:.2f} us for "
              f"{row['kernels']} kernels in sequence; {row['seconds_alone'] * 1e6:.2f} us timed one by one")
    result["cold_chain"] = [_cold_chain(torch, k, t) for t in (1, 16, 256)]
    for row in result["cold_chain"]:
        print(f"layer chain at {row['tokens']} tokens after evicting the L2: {row['seconds_per_layer'] * 1e6:.2f} us "
              f"(the eviction alone {row['flush_seconds'] * 1e6:.1f} us)")
    result["two_streams"] = [_two_streams(torch, k, t) for t in (1, 64)]
    for row in result["two_streams"]:
        print(f"layer chain at {row['tokens']} tokens: {row['one_stream'] * 1e6:.2f} us on one stream, "
              f"{row['two_streams'] * 1e6:.2f} us with two forks to a second stream")
    result["decode_gemms"] = _decode_gemms(torch)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


DEVICE_NAMES = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100", "NVIDIA B200": "B200",
                "NVIDIA A100-SXM4-80GB": "A100"}


def compare(path: Path) -> None:
    """Measured against the analytic price, and the fixed time and streaming share implied."""
    from rich.console import Console
    from rich.table import Table

    from infercast.devices import BUILTIN_DEVICES

    data = json.loads(path.read_text())
    name = DEVICE_NAMES.get(data["device"])
    if name is None:
        sys.exit(f"{path}: no built-in device for {data['device']!r}; known: {', '.join(DEVICE_NAMES)}")
    device = next(d for d in BUILTIN_DEVICES if d.name == name)
    eff = device.efficiency
    stream = device.hbm_bandwidth_bytes_per_s * eff.memory

    def analytic(row: dict) -> float:
        if row["name"] == "fp8_cast" and eff.fp8_cast_s_per_element:
            return row["elements"] * eff.fp8_cast_s_per_element + eff.kernel_fixed_s
        return row["bytes"] / stream + eff.kernel_fixed_s

    table = Table(title=f"Pointwise kernels in a CUDA graph on {data['device']} ({data['sm_count']} SMs; torch "
                        f"{data['torch']}, Triton {data['triton']}) against infercast's analytic price for {name}")
    for column in ("kernel", "tokens", "width", "bytes", "measured us", "analytic us", "error"):
        table.add_column(column, justify="left" if column == "kernel" else "right")
    for row in data["kernels"]:
        if row["name"] == "noop":
            continue
        width = row.get("width") or (f"{row['n']}x{row['k']}" if "n" in row else f"{row['elements']:,}")
        price = analytic(row)
        table.add_row(row["name"], str(row["tokens"]), str(width), f"{row['bytes']:,}", f"{row['seconds'] * 1e6:.2f}",
                      f"{price * 1e6:.2f}", f"{price / row['seconds'] - 1:+.0%}")
    Console(width=160).print(table)

    noop = next(r["seconds"] for r in data["kernels"] if r["name"] == "noop")
    pointwise = [r for r in data["kernels"] if r["name"] not in ("noop", "cublas_gemm", "fp8_cast")]
    small = [r["seconds"] - r["bytes"] / stream for r in pointwise if r["bytes"] <= 2**18]
    fixed = statistics.median(small)
    gemms = [r for r in data["kernels"] if r["name"] == "cublas_gemm"]
    tabled = _table_gemms(device)
    big = [r for r in pointwise if r["bytes"] >= 2**27]  # twice the L2 and more: streamed from HBM
    print(f"empty kernel: {noop * 1e6:.2f} us a launch")
    print(f"pointwise kernels moving <= 256 KiB: fixed time median {fixed * 1e6:.2f} us "
          f"(range {min(small) * 1e6:.2f}-{max(small) * 1e6:.2f}) over {len(small)} kernels, beyond streaming at "
          f"{eff.memory:.3f} of HBM; infercast's kernel_fixed_s for {name}: {eff.kernel_fixed_s * 1e6:.2f} us")
    times = [r["seconds"] for r in gemms]
    print(f"one-row cuBLAS GEMMs: median {statistics.median(times) * 1e6:.2f} us (range {min(times) * 1e6:.2f}-"
          f"{max(times) * 1e6:.2f})")
    if tabled:
        gaps = [tabled[1][(r["tokens"], r["n"], r["k"])] - r["seconds"] for r in gemms
                if (r["tokens"], r["n"], r["k"]) in tabled[1]]
        print(f"  the same shapes in {tabled[0]}: {statistics.median(gaps) * 1e6:.2f} us longer shape by shape "
              f"(median; {min(gaps) * 1e6:.2f} to {max(gaps) * 1e6:.2f})")
    if big:
        shares = ", ".join(f"{r['name']} {r['bytes'] / (r['seconds'] - fixed) / device.hbm_bandwidth_bytes_per_s:.2f}"
                           for r in big)
        print(f"pointwise kernels moving >= 128 MiB, beyond the fixed time: {shares} of HBM peak (infercast "
              f"streams at {eff.memory:.3f})")
    casts = [r for r in data["kernels"] if r["name"] == "fp8_cast"]
    if casts:
        largest = max(casts, key=lambda r: r["elements"])
        per_element = largest["seconds"] / largest["elements"]
        print(f"FP8-to-bf16 cast of {largest['elements']:,} elements: {per_element * 1e12:.3f} ps an element "
              f"({3 / per_element / 1e12:.2f} TB/s read and written); infercast's fp8_cast_s_per_element for {name}: "
              + (f"{eff.fp8_cast_s_per_element * 1e12:.3f} ps" if eff.fp8_cast_s_per_element else "none"))
    by_key = {(r["name"], r.get("width"), r["tokens"]): r for r in pointwise}

    def chain_price(tokens: int) -> float:
        return sum(analytic(by_key[(name, width, tokens)]) for name, width in CHAIN)

    for row in data.get("layer_chain", []):
        print(f"a Kimi-K2.5 layer's {len(CHAIN)} pointwise kernels at {row['tokens']} tokens: "
              f"{row['seconds_per_layer'] * 1e6:.2f} us in sequence ({row['seconds_alone'] * 1e6:.2f} us timed one by "
              f"one); infercast prices them at {chain_price(row['tokens']) * 1e6:.2f} us")
    for row in data.get("cold_chain", []):
        print(f"the same at {row['tokens']} tokens after evicting the L2, as a layer's GEMMs do: "
              f"{row['seconds_per_layer'] * 1e6:.2f} us")
    for row in data.get("two_streams", []):
        print(f"the same at {row['tokens']} tokens with two forks to a second stream: {row['two_streams'] * 1e6:.2f} us "
              f"({row['one_stream'] * 1e6:.2f} us on one stream)")
    if data.get("decode_gemms"):
        _compare_gemms(data["decode_gemms"], device)


def _compare_gemms(rows: list[dict], device) -> None:
    """Kimi-K2.5's decode projections, warm and cold, against the table the simulator reads."""
    from rich.console import Console
    from rich.table import Table

    from infercast.kernels import aiconfigurator as aic

    system = device.kernel_tables
    version = system and aic.default_version(system, "sglang")
    grid = aic.load("gemm", system, "sglang", version).grid(("bf16",)) if version else None
    table = Table(title=f"Kimi-K2.5's bf16 decode projections at TP8 in a CUDA graph: one weight reused (warm) or a "
                        f"different weight each launch (cold), against {system} sglang {version}'s gemm table")
    for column in ("projection", "m", "n", "k", "warm us", "cold us", "table us", "table vs cold"):
        table.add_column(column, justify="left" if column == "projection" else "right")
    for row in rows:
        m, n, k = row["m"], row["n"], row["k"]
        tabled = grid.query((m, n, k), lambda c: c[0] * c[1] * c[2] + c[1] * c[2]).value * 1e-6 if grid else None
        table.add_row(row["name"], str(m), str(n), str(k), f"{row['warm_seconds'] * 1e6:.2f}",
                      f"{row['cold_seconds'] * 1e6:.2f}", f"{tabled * 1e6:.2f}" if tabled else "-",
                      f"{tabled / row['cold_seconds'] - 1:+.0%}" if tabled else "-")
    Console(width=160).print(table)


def _table_gemms(device) -> tuple[str, dict] | None:
    """aiconfigurator-core's times of :data:`GEMMS` in bf16 on ``device`` (its newest sglang
    tables), by (m, n, k): the check that this harness times a kernel as the tables do."""
    from infercast.kernels import aiconfigurator as aic

    system = device.kernel_tables
    version = system and aic.default_version(system, "sglang")
    if not version:
        return None
    grid = aic.load("gemm", system, "sglang", version).grid(("bf16",))
    times = dict(grid.points()) if grid is not None else {}
    found = {shape: times[shape] * 1e-6 for shape in GEMMS if shape in times}
    return (f"{system} sglang {version}", found) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the kernels on this machine's GPU")
    m.add_argument("--out", type=Path, default=Path("pointwise.json"))
    c = sub.add_parser("compare", help="compare a measurement with infercast's analytic prices")
    c.add_argument("file", type=Path)
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out)
    else:
        compare(args.file)


if __name__ == "__main__":
    main()
