"""One step's time from its priced operators: streams, overlap, and the host around them.

- The GPU runs the compute and communication kernels one after the other, or, with two-batch
  overlap, two micro-batches with one computing while the other communicates.
- Launched eagerly (prefill without CUDA graphs), every kernel costs the host
  ``engine.eager_launch`` to issue; the host runs ahead of the GPU, so within each decoder
  layer the GPU waits for whichever is slower: the layer takes max(GPU time, launches x
  launch time). The excess is reported as its own row.
- Under piecewise CUDA graphs (prefill in sglang from 0.5.10, vLLM) only attention launches
  eagerly, between replays of the captured pieces, so only those launches count.
- Every step also waits for the engine's host work between steps (scheduling, sampling),
  ``engine.step`` (or, where the scheduler does not run ahead of the GPU, its
  ``step_without_overlap``), and a client-measured TTFT adds the per-request work
  (``engine.request_cost``: its prompt's tokenizing time depends on the model's tokenizer).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from infercast.cost import cost_of
from infercast.costmodel import CostModel, Phase, Priced
from infercast.engines import EAGER_UNDER_PIECEWISE
from infercast.trace import OpRecord

Priced_ = list[tuple[OpRecord, Priced]]


@dataclass(frozen=True)
class HostRow:
    name: str
    seconds: float
    source: str


@dataclass
class StepTime:
    priced: Priced_
    compute_s: float
    communication_s: float
    gpu_s: float
    """The kernels' time on the GPU, overlap applied."""
    host: list[HostRow]

    @property
    def seconds(self) -> float:
        return self.gpu_s + sum(h.seconds for h in self.host)


def price_records(records: list[OpRecord], model: CostModel, phase: Phase) -> Priced_:
    """Each record priced; where ``phase.kv_pool_tokens`` says the engine casts the FP8 KV pool,
    each MLA decode attention is preceded by that cast, its own kernel. Activation
    quantization and cache writes that a kernel table already times are folded into it
    (:func:`fold_into_tables`)."""
    priced = []
    for r in records:
        if phase.kv_pool_tokens and r.name == "infercast::mla_attention":
            cast = OpRecord("infercast::kv_pool_cast", (), (), r.path, r.layer, r.count, r.layers,
                            {"pool_tokens": phase.kv_pool_tokens, "width": r["latent_cache"].shape[-1]})
            priced.append((cast, model.price(cast, phase)))
        priced.append((r, model.price(r, phase)))
    return fold_into_tables(priced, writes_cache=model.engine.attention_writes_cache)


QUANTIZE_INTO = {"infercast::quantize_activation": frozenset({"infercast::quant_gemm"})}
"""A quantized GEMM's table timed the quantization of its input with it: aiconfigurator's
collectors time sglang's ``sglang_per_token_group_quant_fp8`` + DeepGEMM (fp8_block) and
``sgl_per_token_quant_fp8`` + ``fp8_scaled_mm`` (fp8) as one op, and TensorRT-LLM's and vLLM's
``Linear.forward``, which quantizes its own input (``collector/*/collect_gemm.py``)."""
CACHE_WRITE_INTO = {
    "infercast::kv_cache_write": frozenset({"infercast::attention", "infercast::mla_attention"}),
    "infercast::rope_kv_cache_write": frozenset({"infercast::attention"}),
}
"""An attention table timed the cache write before it where the engine's attention call stores
the new keys and values itself (:attr:`~infercast.engines.Engine.attention_writes_cache`):
sglang's collectors call ``RadixAttention`` with ``save_kv_cache`` (``set_kv_buffer``, for MLA
``set_mla_kv_buffer``), TensorRT-LLM's ``attn.forward`` applies RoPE and writes the cache. MLA
prefill attention is not here: sglang writes the latent cache in the module, before an attention
call that does not store."""


def fold_into_tables(priced: Priced_, *, writes_cache: bool = False) -> Priced_:
    """Each op of :data:`QUANTIZE_INTO` (and, where the engine's attention call stores the cache,
    :data:`CACHE_WRITE_INTO`) whose consumer in the same module and layer a kernel table priced
    costs nothing of its own: it stays a row, its kernel still launched, at zero time, saying
    where its time is. Before an analytically priced consumer it keeps its own price. A
    calibration table's rows mean the same as the shipped tables'."""
    folded = {**QUANTIZE_INTO, **(CACHE_WRITE_INTO if writes_cache else {})}
    out = list(priced)
    for i, (r, p) in enumerate(out):
        consumers = folded.get(r.name)
        if consumers is None:
            continue
        consumer = next((cp for c, cp in out[i + 1:] if c.name in consumers and c.path == r.path
                         and c.layer == r.layer), None)
        if consumer is not None and consumer.source != "analytic":
            out[i] = (r, Priced(0.0, p.bound, consumer.source, f"inside {consumer.origin} (timed with it)"))
    return out


def forward_seconds(records: list[OpRecord], model: CostModel, phase: Phase) -> float:
    """The kernels of one forward, back to back (no host time)."""
    return sum(p.seconds * r.count for r, p in price_records(records, model, phase))


def streams(priced: Priced_) -> tuple[float, float]:
    compute = sum(p.seconds * r.count for r, p in priced if p.bound != "communication")
    comm = sum(p.seconds * r.count for r, p in priced if p.bound == "communication")
    return compute, comm


def two_batch_overlap(micro: Priced_, whole: Priced_) -> float:
    """Two micro-batches A and B on a compute stream and a communication stream, as sglang's
    two-batch overlap runs them: each decoder layer of one micro-batch is a chain of compute
    and communication segments (split at every collective); the compute stream runs A's
    first segment, then B's, then A's next, ...; each stream runs its segments in that order,
    and a segment also waits for the previous segment of its own micro-batch. ``micro`` is
    one micro-batch priced on its own (each kernel at half the batch, so fixed costs and
    weight reads are paid twice); what runs outside the decoder layers (embedding, head)
    comes from ``whole``, unsplit, before and after."""
    by_layer: dict[int, list[tuple[bool, float]]] = defaultdict(list)
    for r, p in micro:
        if r.layer is None:
            continue
        comm = p.bound == "communication"
        for index in r.layers or (r.layer,):
            segments = by_layer[index]
            if segments and segments[-1][0] == comm:
                segments[-1] = (comm, segments[-1][1] + p.seconds)
            else:
                segments.append((comm, p.seconds))
    free = {False: 0.0, True: 0.0}  # when each stream is next free
    ready = [0.0, 0.0]  # when each micro-batch's previous segment ends
    for index in sorted(by_layer):
        for comm, seconds in by_layer[index]:
            for mb in (0, 1):
                start = max(free[comm], ready[mb])
                free[comm] = ready[mb] = start + seconds
    outside = sum(p.seconds * r.count for r, p in whole if r.layer is None)
    return max(ready) + outside


def exposed_launch(priced: Priced_, launch_s: float, *, piecewise: bool = False) -> float:
    """Host launch time the GPU waits for, per decoder layer (and once for what runs outside
    the layers): max(0, launches x launch time - GPU time). Eagerly every kernel is a launch;
    under piecewise graphs only the attention kernels are, plus one replay per layer (the
    piece that ends before its attention) and per group outside the layers, each replay taken
    at one eager launch's host time (no replay cost is measured apart)."""
    if launch_s <= 0:
        return 0.0
    groups: dict[tuple, list] = defaultdict(lambda: [0.0, 0, 1])
    for r, p in priced:
        key = r.layers or ((r.layer,) if r.layer is not None else ("outside", r.path.split(".")[0]))
        g = groups[key]
        g[0] += p.seconds * (1 if r.layer is not None else r.count)
        if not piecewise or r.name.split("::")[-1] in EAGER_UNDER_PIECEWISE:
            g[1] += cost_of(r).kernels * (1 if r.layer is not None else r.count)
        g[2] = r.count if r.layer is not None else 1
    replays = 1 if piecewise else 0
    return sum(max(0.0, (kernels + replays) * launch_s - gpu) * count for gpu, kernels, count in groups.values())


def step_time(priced: Priced_, model: CostModel, phase: Phase, *, micro: Priced_ | None = None,
              host_step: bool = True, requests: int = 1) -> StepTime:
    """The step's time: GPU streams (overlapped when ``micro`` gives the micro-batch), exposed
    eager launches, and the engine's per-step host time (``requests`` running on this rank)."""
    compute, comm = streams(priced)
    gpu = two_batch_overlap(micro, priced) if micro is not None else compute + comm
    engine = model.engine
    host = []
    if not phase.graph or phase.piecewise:
        exposed = exposed_launch(priced, engine.eager_launch.seconds, piecewise=phase.piecewise)
        if exposed > 0:
            name = ("host: attention launches and graph replays not hidden by GPU time (piecewise CUDA graphs)"
                    if phase.piecewise else "host: eager kernel launches not hidden by GPU time")
            host.append(HostRow(name, exposed, engine.eager_launch.source))
    between = model.host_step()
    if host_step and between.at(requests):
        host.append(HostRow("host: scheduling, input preparation and sampling per step", between.at(requests),
                            between.source))
    return StepTime(priced, compute, comm, gpu, host)
