"""Disaggregated prefill/decode in ``infercast plan``: prefill instances and decode instances
with layouts chosen apart, the KV cache sent between them over the scale-out network, and
the ratio xPyD that balances them.

- A **prefill instance** runs prompt-only steps (up to ``--chunked-prefill-size`` tokens
  each); its rate is the largest whose TTFT (the prompt queue of :mod:`infercast.serving` at
  the percentile asked, plus the KV transfer and the engine's per-request host time) meets
  the TTFT target, and no more than its NICs can send.
- A **decode instance** runs decode-only steps at a batch it is kept full at (the router's
  queue in front absorbs arrivals; the wait for a decode slot is not in TTFT), with two-batch
  overlap as an option for DP-attention + EP layouts (DeepEP low-latency); TPOT is its step
  (over the accept length with speculative decoding).
- **KV transfer**: prompt tokens x the model's cache bytes per token (all layers, the built
  model's ``kv_bytes_per_token``: MLA's latent, GQA's keys and values), sent in parallel by
  the ranks that hold distinct shards of it (MLA's latent is replicated over attention-TP:
  one stream; GQA's heads split: one per rank), each at the device's scale-out bandwidth x
  its efficiency, after the prefill (not layer by layer, which would hide it).
- **xPyD**: for each decode choice and prefill choice, x prefill and y decode instances serve
  ``min(x r_prefill, y r_decode)`` requests/s; the integers (y up to 8) that give the most
  output tokens/s per device of the whole deployment win.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from infercast_adapters import InfercastError

from infercast.agg import RankView, StepPricer, chunk_shape, doublings, lengths_of, rank_policy
from infercast.parallel import Parallel, Workload, validate_layout
from infercast.serving import GridCost, LengthDist, ServingPoint, default_chunk, max_rate, steady_state

if TYPE_CHECKING:
    from infercast.plan import Layout, Planner, SpecChoice

MAX_DECODE_INSTANCES = 8


def pool_layouts(num_devices: int, *, num_heads: int, num_experts: int | None) -> list[Layout]:
    """The planner's layouts, plus, for MoE models, expert-parallel layouts over all devices
    whose EP size does not divide the experts, with the fewest redundant expert slots that
    fill every rank evenly (sglang ``--ep-num-redundant-experts``; DeepSeek-V3 on 72 GPUs: 32)."""
    from infercast.plan import Layout, layouts

    found = layouts(num_devices, num_heads=num_heads, num_experts=num_experts)
    if not num_experts:
        return found
    shapes = [(num_devices, 1), (1, num_devices)] + ([(8, num_devices // 8)] if num_devices % 8 == 0 and num_devices > 8
                                                     else [])
    for tp, dp in shapes:
        if any(x.tp == tp and x.dp == dp and x.ep == num_devices for x in found):
            continue
        extra = (-num_experts) % num_devices
        try:
            validate_layout(Parallel(num_devices, tp, dp, num_devices, redundant_experts=extra), num_heads=num_heads,
                            num_experts=num_experts)
        except InfercastError:
            continue
        found.append(Layout(num_devices, tp, dp, num_devices, extra))
    return found


@dataclass
class PrefillChoice:
    layout: Layout
    quantization: str | None
    chunk: int
    """``--chunked-prefill-size`` of the instance (all its DP ranks together)."""
    rate: float
    """Requests/s one instance takes at the TTFT target (0: it cannot meet it)."""
    ttft_ms: float
    """At ``rate``: the prompt queue's percentile + KV transfer + host."""
    transfer_ms: float
    kv_bytes_per_request: float
    kv_streams: int
    network_limited: bool
    """The NICs, not the TTFT target, cap ``rate``."""
    prompt_tokens_per_s_per_device: float
    memory_gib: float
    fits: bool
    queue: Any = field(default=None, repr=False, compare=False)
    """(step cost, engine policy, prompt lengths, TTFT offset s): to price other rates."""
    scattered: bool = False
    """The instance runs sglang's scattered attention input (``--enable-attn-tp-input-scattered``)."""

    def describe(self) -> str:
        return f"{self.layout.describe()}{', scattered' if self.scattered else ''}"

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k not in ("queue", "layout")}
        return {"layout": asdict(self.layout), **data, "ttft_ms": _finite(self.ttft_ms)}


@dataclass
class DecodeChoice:
    layout: Layout
    quantization: str | None
    batch: int
    spec: SpecChoice | None
    two_batch_overlap: bool
    tpot_ms: float
    accept_length: float
    step_ms: float
    tokens_per_s_per_device: float
    """Output tokens/s per decode device at the full batch."""
    rate: float
    """Requests/s one instance finishes at the full batch."""
    memory_gib: float
    fits: bool
    meets_tpot: bool


@dataclass
class DisaggConfig:
    prefill: PrefillChoice
    decode: DecodeChoice
    prefill_instances: int
    decode_instances: int
    rate: float
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_device: float
    """Output tokens/s per device of the whole deployment (prefill and decode devices)."""
    tokens_per_s_per_user: float
    meets_slo: bool
    violation: float = 0.0

    @property
    def num_devices(self) -> int:
        return (self.prefill_instances * self.prefill.layout.num_devices
                + self.decode_instances * self.decode.layout.num_devices)

    def describe(self) -> str:
        return f"{self.prefill_instances}P{self.decode_instances}D"

    def to_dict(self) -> dict[str, Any]:
        prefill = self.prefill.to_dict()
        decode = asdict(self.decode)
        return {"xpyd": self.describe(), "prefill_instances": self.prefill_instances,
                "decode_instances": self.decode_instances, "num_devices": self.num_devices, "request_rate": self.rate,
                "ttft_ms": _finite(self.ttft_ms), "tpot_ms": _finite(self.tpot_ms),
                "tokens_per_s_per_device": self.tokens_per_s_per_device,
                "tokens_per_s_per_user": self.tokens_per_s_per_user, "meets_slo": self.meets_slo,
                "violation": _finite(self.violation), "prefill": prefill, "decode": decode}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass
class DisaggResult:
    configs: list[DisaggConfig]
    frontier: list[DisaggConfig]
    best: DisaggConfig | None
    prefill: list[PrefillChoice]
    decode: list[DecodeChoice]
    evaluated: int
    notes: list[str] = field(default_factory=list)


def kv_transfer(planner: Planner, layout: Layout, quant: str | None, prompt_tokens: float) -> tuple[float, float, int]:
    """(seconds, bytes, parallel streams) to send one request's KV cache from a prefill
    instance of ``layout``: the whole model's cache per token is that of a one-device build;
    the ranks holding distinct shards of it send in parallel."""
    from infercast.plan import Layout

    whole, _ = planner._model(Layout(1, 1, 1, 1), quant)
    built, _ = planner._model(layout, quant)
    total = sum(layer.self_attn.kv_bytes_per_token() for layer in whole.sim.layers)
    per_rank = sum(layer.self_attn.kv_bytes_per_token() for layer in built.sim.layers)
    streams = max(1, round(total / per_rank))
    device = planner.device
    size = prompt_tokens * total
    seconds = device.scale_out_latency_s + size / (streams * device.scale_out_bandwidth_bytes_per_s
                                                   * device.efficiency.scale_out)
    return seconds, size, streams


def prefill_chunks(planner: Planner, layout: Layout) -> list[int]:
    """Chunk sizes a prefill instance tries: the one asked, else the engine's default for the
    device and doublings up to twice that default on every DP rank (sglang divides the chunk
    over the DP ranks, which starves DP-attention prefill at the default)."""
    asked = planner.request.serving.chunked_prefill_size
    if asked:
        return [asked]
    base = default_chunk(planner.device.memory_bytes, planner.request.engine, planner.device.name)
    return doublings(base, 2 * base * layout.dp)


def scatter_options(planner: Planner, layout: Layout, quant: str | None) -> list[bool]:
    """Whether a prefill instance of ``layout`` runs sglang's scattered attention input: as the
    request says where it asks for it, else both ways where sglang would run it (an opt-in server
    flag that pays off at long chunks and costs launches at short ones, so the pool keeps the faster)."""
    blocked = planner.scatter_blocker(layout, quant, disaggregated=True) is not None
    if planner.request.enable_attn_tp_input_scattered:
        return [not blocked]
    return [False] if blocked else [False, True]


def prefill_choice(planner: Planner, pricer: StepPricer, layout: Layout, quant: str | None,
                   lengths: LengthDist, scatter: Sequence[bool] | None = None) -> PrefillChoice:
    """The chunk size (and, where sglang offers it, the scattered attention input: ``scatter``,
    default :func:`scatter_options`) that lets one prefill instance take the most requests/s
    within the TTFT target (its queue per DP rank, :class:`~infercast.agg.RankView`), capped by
    its NICs."""
    r = planner.request
    dp, pct = layout.dp, r.serving.ttft_percentile
    static = pricer.static(layout, quant, dp, None)
    prompts = LengthDist(tuple((i, 1, w) for i, _, w in lengths.rows), lengths.source)
    transfer_s, size, streams = kv_transfer(planner, layout, quant, lengths.mean_input)
    host = planner.costs.request_cost(planner.profile.tokenizer).at(round(lengths.mean_input)) + transfer_s
    device = planner.device
    network = layout.num_devices * device.scale_out_bandwidth_bytes_per_s * device.efficiency.scale_out / size
    best = None
    for scattered in scatter_options(planner, layout, quant) if scatter is None else scatter:
        for chunk in prefill_chunks(planner, layout):
            shape = chunk_shape(lengths, max(1, chunk // dp))
            grid = GridCost([], doublings(dp * shape.piece, chunk, dp, chunk // 8, chunk // 4, chunk // 2),
                            lambda b, c, shape=shape, scattered=scattered: pricer.step(
                                layout, quant, pricer.chunk(c, shape, dp), disaggregated=True, scattered=scattered))
            cost, engine = RankView(grid, dp), rank_policy(chunk, 10**9, dp, "separate")
            point = max_rate(cost, engine, prompts, ttft_slo_s=r.ttft_slo_ms / 1e3 if r.ttft_slo_ms else None,
                             tpot_slo_s=None, percentile=pct, ttft_offset_s=host)
            if point is not None and (best is None or point.rate > best[0].rate):
                best = (point, chunk, cost, engine, scattered)
    if best is None:
        chunk = prefill_chunks(planner, layout)[0]
        return PrefillChoice(layout, quant, chunk, 0.0, math.inf, transfer_s * 1e3, size, streams, False, 0.0,
                             static.memory_gib, static.fits, None)
    point, chunk, cost, engine, scattered = best
    limited = network < point.rate * dp
    if limited:
        point = steady_state(cost, engine, prompts, network / dp, pct)
    rate = point.rate * dp
    return PrefillChoice(layout, quant, chunk, rate, (point.ttft_p_s + host) * 1e3, transfer_s * 1e3, size, streams,
                         limited, rate * lengths.mean_input / layout.num_devices, static.memory_gib, static.fits,
                         (cost, engine, prompts, host, dp), scattered)


def decode_choices(planner: Planner, pricer: StepPricer, layout: Layout, quant: str | None, batch: int,
                   spec: SpecChoice | None, lengths: LengthDist) -> list[DecodeChoice]:
    r = planner.request
    static = pricer.static(layout, quant, batch, spec)
    context = r.input_length + r.output_length // 2
    all_to_all = planner._model(layout, quant)[1].moe_dispatch == "all_to_all"
    options = [False] + ([True] if spec is None and layout.dp > 1 and all_to_all else [])
    decode_tokens = lengths.mean(lambda i, o: max(0, o - 1))
    found = []
    for tbo in options:
        if tbo:
            step = pricer.step(layout, quant, Workload(batch, 1, context, True), tbo=True)
        else:
            step = static.tpot_ms * static.accept_length / 1e3
        tpot = step / static.accept_length
        tokens = batch * static.accept_length / step
        found.append(DecodeChoice(layout, quant, batch, spec, tbo, tpot * 1e3, static.accept_length, step * 1e3,
                                  tokens / layout.num_devices, tokens / max(decode_tokens, 1e-9), static.memory_gib,
                                  static.fits, not r.tpot_slo_ms or tpot * 1e3 <= r.tpot_slo_ms))
    return found


def combine(planner: Planner, prefill: PrefillChoice, decode: DecodeChoice, lengths: LengthDist) -> DisaggConfig | None:
    """The xPyD of these two choices that gives the most output tokens/s per device."""
    r = planner.request
    options = r.serving
    if prefill.rate <= 0 or decode.rate <= 0:
        return None
    best = None
    if options.request_rate is not None or options.concurrency is not None:
        rate = options.request_rate
        if rate is None:  # clients: rate x (TTFT + decode time) = clients
            rate = options.concurrency / (prefill.ttft_ms / 1e3
                                          + lengths.mean(lambda i, o: max(0, o - 1)) * decode.tpot_ms / 1e3)
        plans = [(max(1, math.ceil(rate / prefill.rate)), max(1, math.ceil(rate / decode.rate)), rate)]
    else:
        plans = []
        for y in range(1, MAX_DECODE_INSTANCES + 1):
            exact = y * decode.rate / prefill.rate
            for x in {max(1, math.floor(exact)), max(1, math.ceil(exact))}:
                plans.append((x, y, min(x * prefill.rate, y * decode.rate)))
    for x, y, rate in plans:
        devices = x * prefill.layout.num_devices + y * decode.layout.num_devices
        per_device = rate * lengths.mean_output / devices
        if best is None or per_device > best[3] + 1e-9:
            best = (x, y, rate, per_device)
    x, y, rate, per_device = best
    cost, engine, prompts, host, dp = prefill.queue
    point: ServingPoint = steady_state(cost, engine, prompts, rate / x / dp, r.serving.ttft_percentile)
    ttft = (point.ttft_p_s + host) * 1e3 if point.stable else math.inf
    ratios = [v / slo for v, slo in ((ttft, r.ttft_slo_ms), (decode.tpot_ms, r.tpot_slo_ms)) if slo]
    violation = max([0.0] + [q - 1 for q in ratios])
    meets = violation == 0.0 and point.stable and rate <= x * prefill.rate * (1 + 1e-9) and decode.fits and prefill.fits
    return DisaggConfig(prefill, decode, x, y, rate, ttft, decode.tpot_ms, per_device, 1e3 / decode.tpot_ms, meets,
                        violation)


def plan_disagg(planner: Planner, progress: Callable[[int, int], None] | None = None) -> DisaggResult:
    """Every prefill choice and decode choice over the plan's device counts (or the pool
    counts asked), paired into the best xPyD each; the frontier and the best deployment."""
    from infercast.plan import pareto
    from infercast.simulate import routed_experts

    r = planner.request
    options = r.serving
    lengths = lengths_of(planner)
    pricer = planner.pricer
    experts = routed_experts(planner.text, planner.profile)
    heads = planner.text.num_attention_heads
    prefill, decode = [], []
    prefill_layouts = [x for n in (options.prefill_devices or r.num_devices)
                       for x in pool_layouts(n, num_heads=heads, num_experts=experts)]
    decode_layouts = [x for n in (options.decode_devices or r.num_devices)
                      for x in pool_layouts(n, num_heads=heads, num_experts=experts)]
    if not prefill_layouts or not decode_layouts:
        raise InfercastError(f"no valid layout for {r.model} on the prefill ({options.prefill_devices or r.num_devices})"
                             f" or decode ({options.decode_devices or r.num_devices}) device counts")
    work = [("p", x, q) for x in prefill_layouts for q in r.quantizations if planner.runs_all_to_all(x, q)]
    work += [("d", x, q, b, s) for x in decode_layouts for q in r.quantizations for b in r.batches if b >= x.dp
             for s in (None, *planner.spec_grid) if planner.runs_all_to_all(x, q)]
    for n, item in enumerate(work):
        if item[0] == "p":
            prefill.append(prefill_choice(planner, pricer, item[1], item[2], lengths))
        else:
            decode += decode_choices(planner, pricer, *item[1:], lengths)
        if progress is not None:
            progress(n + 1, len(work))
    configs = []
    usable_prefill = [p for p in prefill if p.fits and p.rate > 0]
    for d in decode:
        if not d.fits:
            continue
        paired = [c for c in (combine(planner, p, d, lengths) for p in usable_prefill) if c is not None]
        if paired:
            configs.append(max(paired, key=lambda c: (c.meets_slo, c.tokens_per_s_per_device)))
    usable = [c for c in configs if c.meets_slo]
    frontier = pareto(usable)
    best = max(frontier, key=lambda c: c.tokens_per_s_per_device) if frontier else None
    notes = []
    if not usable_prefill:
        notes.append("disaggregated: no prefill instance meets the TTFT target at any rate (or none fits)")
    return DisaggResult(configs, frontier, best, prefill, decode, len(work), notes)


# ------------------------------------------------------------------------------ launch commands


def sglang_overlaps(planner: Planner, decode: DecodeChoice) -> bool:
    """Whether sglang can run the decode pool's two-batch overlap: only with an MoE all-to-all."""
    from infercast.engines import engine_named

    mode = "off" if planner.request.moe_all_to_all == "off" else "auto"
    return engine_named("sglang").moe_all_to_all.runs(planner.expert_dtype(decode.quantization), decode.layout.dp,
                                                      planner.device.cuda_arch, mode)


def launch_notes(planner: Planner, config: DisaggConfig) -> list[str]:
    """What the pools' launch commands cannot say: an engine that moves the experts' tokens
    otherwise than the plan priced, a two-batch overlap sglang cannot run, and the prefill pool's
    scattered attention input (chosen, asked for and refused, or without an equivalent)."""
    from infercast.engines import engine_named
    from infercast.plan import dispatch_notes, kv_cache_notes, launched_kv_dtype, scatter_note

    r, arch = planner.request, planner.device.cuda_arch
    notes = []
    for pool, choice in (("prefill", config.prefill), ("decode", config.decode)):
        notes += [f"{pool} pool, {note}" for note in dispatch_notes(
            r, choice.layout, planner.expert_dtype(choice.quantization), arch, ("sglang", "vllm"), one_mode=False)]
    p = config.prefill
    notes.append(scatter_note(planner.scattered_input(p.layout, p.quantization, disaggregated=True)[1], p.layout,
                              "prefill pool, "))
    if p.scattered:
        flag = engine_named("sglang").scattered_attention_input.flag
        if not r.enable_attn_tp_input_scattered:
            notes.append(f"prefill pool, sglang: runs {flag}, which serves more requests/s on {p.layout.describe()} "
                         "than without it (each prefill pool where sglang offers it is priced both ways)")
        notes.append(f"prefill pool, vllm: no equivalent of sglang's {flag}, which the plan priced the pool with")
    d = config.decode
    for pool, choice in (("prefill", p), ("decode", d)) if p.quantization != d.quantization else (("", p),):
        notes += [f"{pool} pool, {note}" if pool else note for note in kv_cache_notes(
            launched_kv_dtype(r.kv_cache_dtype, choice.quantization), planner.checkpoint_fp8_kv(choice.quantization),
            cuda_arch=arch) if not note.startswith("trtllm")]
    for pool, choice in (("prefill", config.prefill), ("decode", config.decode)):
        notes += [f"{pool} pool, {note}" for note in planner.online_over_quantized(choice.quantization)
                  + planner.refusals_by_other_engines(choice.quantization, ("sglang", "vllm"))]
    if config.decode.two_batch_overlap and not sglang_overlaps(planner, config.decode):
        notes.append("decode pool, sglang: two-batch overlap needs an MoE all-to-all, which sglang does not run for "
                     "these experts: its command runs without it, where the plan priced the overlap")
    return [note for note in notes if note]


def launch_commands(planner: Planner, config: DisaggConfig) -> dict[str, list[list[str]]]:
    """sglang: one prefill and one decode server command (repeat per instance and node, with
    its host and ports) and the router over all of them; vLLM: the same servers with the
    NIXL connector, and its example proxy."""
    import json

    from infercast.plan import Config, sglang_command, vllm_command
    from infercast.plugins import served_model

    r = planner.request
    per_node, arch = planner.device.devices_per_node, planner.device.cuda_arch
    p, d = config.prefill, config.decode
    spec = planner.spec_requests[d.spec.option] if d.spec is not None else None
    chunk = p.chunk
    prefill = Config(p.layout, p.quantization, max(p.layout.dp, 1), None)
    decode = Config(d.layout, d.quantization, d.batch, d.spec)
    backend = r.serving.transfer_backend
    sg_prefill = sglang_command(r, prefill, per_node, spec, deepep_mode="normal",
                                expert_dtype=planner.expert_dtype(p.quantization), cuda_arch=arch,
                                mem_fraction=planner.launch_fraction(p.layout, p.quantization, False, chunk,
                                                                     disaggregated=True),
                                scattered=p.scattered)[:-1] + [
        "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", backend,
        "--chunked-prefill-size", str(chunk), "--port", "30000", "--trust-remote-code"]
    sg_prefill = [a for i, a in enumerate(sg_prefill) if not (a == "--max-running-requests"
                                                            or (i and sg_prefill[i - 1] == "--max-running-requests"))]
    sg_decode = sglang_command(r, decode, per_node, spec, deepep_mode="low_latency",
                               expert_dtype=planner.expert_dtype(d.quantization), cuda_arch=arch,
                               mem_fraction=planner.launch_fraction(d.layout, d.quantization, d.spec is not None,
                                                                    disaggregated=True))[:-1] + [
        "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", backend]
    if d.two_batch_overlap and sglang_overlaps(planner, d):
        sg_decode += ["--enable-two-batch-overlap"]
    sg_decode += ["--port", "30001", "--trust-remote-code"]
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for i in range(config.prefill_instances):
        router += ["--prefill", f"http://PREFILL_{i}_IP:30000"]
    for i in range(config.decode_instances):
        router += ["--decode", f"http://DECODE_{i}_IP:30001"]
    router += ["--host", "0.0.0.0", "--port", "8000"]
    connector = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    per_rank = str(max(1, chunk // p.layout.dp))  # each vLLM DP rank is an engine of its own
    vl_prefill = vllm_command(r, prefill, spec, all2all="deepep_high_throughput")[:-1] + [
        "--max-num-batched-tokens", per_rank, "--kv-transfer-config", connector, "--port", "8100", "--trust-remote-code"]
    vl_prefill = [a for i, a in enumerate(vl_prefill) if not (a == "--max-num-seqs"
                                                            or (i and vl_prefill[i - 1] == "--max-num-seqs"))]
    vl_decode = vllm_command(r, decode, spec)[:-1] + ["--kv-transfer-config", connector, "--port", "8200",
                                                     "--trust-remote-code"]
    proxy = ["python", "examples/disaggregated/disaggregated_serving/disagg_proxy_demo.py", "--model", served_model(r.model),
             "--prefill", *[f"PREFILL_{i}_IP:8100" for i in range(config.prefill_instances)],
             "--decode", *[f"DECODE_{i}_IP:8200" for i in range(config.decode_instances)], "--port", "8000"]
    commands = {"sglang": [sg_prefill, sg_decode, router], "vllm": [vl_prefill, vl_decode, proxy]}
    first = r.engine if r.engine in commands else "sglang"
    return {first: commands[first], **{k: v for k, v in commands.items() if k != first}}
