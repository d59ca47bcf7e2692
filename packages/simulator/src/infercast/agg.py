"""Aggregated serving in ``infercast plan``: each configuration's steps priced on the built model,
then the continuous-batching model of :mod:`infercast.serving` at the plan's load.

A step's cost is a table over (decoding requests, prompt tokens) of the instance, each point
one traced forward:

- no prompt tokens: the decode step (or speculative cycle) of :meth:`Planner.evaluate`;
- prompt tokens only: a prefill step;
- both: one :class:`~infercast.parallel.MixedWorkload` forward, the GEMMs and MoE over all
  tokens, each part's attention at its own context; launched as a prefill step is (piecewise
  CUDA graphs where the engine captures its prompt chunk, else eagerly).

Prompt tokens ride in pieces of the token-weighted mean chunk of the length histogram (a
prompt up to the chunk size is one piece, a longer one several), over the token-weighted mean
prefix; decoding requests sit at the plan's decode context (mean input + half the mean output).
Speculative configurations run prompt steps apart from decode cycles (sglang turns mixed
chunks off under speculative decoding), the others mix them (``--enable-mixed-chunk``) unless
``--mixed-chunk off`` asks for sglang's default, prompt steps apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from infercast.parallel import MixedWorkload, Workload
from infercast.serving import (
    EnginePolicy,
    GridCost,
    LengthDist,
    ServingOptions,
    ServingPoint,
    default_chunk,
    MAX_UTILISATION,
    max_rate,
    steady_state,
)

if TYPE_CHECKING:
    from infercast.plan import Config, Layout, Planner, SpecChoice

ADMISSION_CEILING = 0.7
"""Largest mean share of ``--max-running-requests`` the planner fills: the model leaves out
waits for a free running slot, which the event simulation shows taking over the TTFT tail
above about this share (tests/simulator/test_serving.py)."""


@dataclass(frozen=True)
class ChunkShape:
    piece: int
    """Prompt tokens of one request in one step (token-weighted mean)."""
    prefix: int
    """Tokens of the same prompt already cached when a piece runs (token-weighted mean)."""


def chunk_shape(lengths: LengthDist, chunk: int) -> ChunkShape:
    """Pieces a prompt is cut into at ``chunk`` tokens per step (of its DP rank), averaged
    over prompt tokens."""
    tokens = piece = prefix = 0.0
    for (i, _, _), q in zip(lengths.rows, lengths.probabilities):
        for start in range(0, i, chunk):
            size = min(chunk, i - start)
            tokens += q * size
            piece += q * size * size
            prefix += q * size * start
    return ChunkShape(max(1, round(piece / tokens)), round(prefix / tokens))


def lengths_of(planner: Planner) -> LengthDist:
    r = planner.request
    return r.serving.lengths or LengthDist.fixed(r.input_length, r.output_length)


def chunk_of(planner: Planner, dp: int = 1) -> int:
    """Prompt tokens one step of the instance takes, its ``dp`` ranks together: the one asked,
    else the engine's default, which sglang splits over its DP ranks and each of vLLM's DP
    ranks, an engine of its own, takes whole."""
    asked = planner.request.serving.chunked_prefill_size
    if asked:
        return asked
    default = default_chunk(planner.device.memory_bytes, planner.request.engine, planner.device.name)
    return default * dp if planner.request.engine == "vllm" else default


class StepPricer:
    """Whole steps of one instance (host time and two-batch overlap included), each shape
    traced and priced once on the planner's built models."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self._steps: dict[tuple, float] = {}
        self._records: dict[tuple, list] = {}
        self._static: dict[tuple, Config] = {}

    def static(self, layout: Layout, quant: str | None, batch: int, spec: SpecChoice | None) -> Config:
        """:meth:`Planner.evaluate` (memory, the decode step or cycle at ``batch``), once per point."""
        key = (layout, quant, batch, spec)
        if key not in self._static:
            self._static[key] = self.planner.evaluate(layout, quant, batch, spec)
        return replace(self._static[key])

    def step(self, layout: Layout, quant: str | None, workload: Workload | MixedWorkload, tbo: bool = False,
             speculative: bool = False, disaggregated: bool = False, scattered: bool = False) -> float:
        """One serving step's time (``scattered``: the server scatters the attention input,
        :meth:`Planner.scattered_input`)."""
        from infercast.pricing import phase_of
        from infercast.step import price_records, step_time
        from infercast.trace import trace

        key = (layout, quant, workload, tbo, speculative, disaggregated, scattered)
        if key not in self._steps:
            planner = self.planner
            built, ctx = planner._model(layout, quant)
            with ctx.using(workload):
                phase = phase_of(planner.costs, ctx, workload.decode, speculative=speculative,
                                 disaggregated=disaggregated)
                # a prefill is traced once, or once for each of with and without graphs where the
                # engine's MLA form follows them
                traced = (layout, quant, workload, scattered, phase.piecewise and ctx.absorbed_in_graphs)
                records = self._records.get(traced)
                if records is None:
                    with ctx.replaying_graphs(phase.piecewise), ctx.scattering(scattered):
                        records = trace(built.sim, ctx.tokens)
                    planner.traces += 1
                    if not workload.decode:
                        self._records[traced] = records
                requests = ctx.requests
            micro = None
            if tbo:
                half = Workload(max(1, -(-workload.num_queries // 2)), workload.query_length,
                                workload.context_length, workload.decode)
                with ctx.using(half), ctx.replaying_graphs(phase.piecewise), ctx.scattering(scattered):
                    micro = price_records(trace(built.sim, ctx.tokens), planner.costs, phase)
                planner.traces += 1
            priced = price_records(records, planner.costs, phase)
            self._steps[key] = step_time(priced, planner.costs, phase, micro=micro, requests=requests).seconds
        return self._steps[key]

    def chunk(self, tokens: int, shape: ChunkShape, dp: int) -> Workload:
        """``tokens`` prompt tokens of the instance, spread evenly over its ``dp`` ranks, as
        pieces of ``shape`` on each."""
        per_rank = max(1, tokens // dp)
        pieces = max(1, round(per_rank / shape.piece))
        return Workload(dp * pieces, math.ceil(per_rank / pieces), shape.prefix, False)

    def grid(self, layout: Layout, quant: str | None, batch: int, spec: SpecChoice | None, shape: ChunkShape,
             chunk: int) -> GridCost:
        """The step-cost table of one configuration (``batch`` = its running-request limit). Its
        prompt-token columns: one token per rank (a short prompt's step pays the launches and
        fixed costs of any prefill), the mean piece and doublings of it, and the chunk."""
        planner = self.planner
        context = planner.request.input_length + planner.request.output_length // 2

        dp = layout.dp
        scattered = planner.scattered_input(layout, quant, planner.algorithm(spec))[0]

        def price(decoding: int, tokens: int) -> float:
            if tokens == 0:
                c = self.static(layout, quant, decoding, spec)
                return c.tpot_ms * c.accept_length / 1e3
            if decoding == 0:
                return self.step(layout, quant, self.chunk(tokens, shape, dp), speculative=spec is not None,
                                 scattered=scattered)
            return self.step(layout, quant, MixedWorkload(Workload(decoding, 1, context, True),
                                                          self.chunk(tokens, shape, dp)), speculative=spec is not None,
                             scattered=scattered)

        return GridCost(doublings(dp, batch), doublings(dp * shape.piece, chunk, dp, chunk // 4, chunk // 2), price)


def doublings(start: int, stop: int, *extra: int) -> list[int]:
    """``start``, twice that, ... up to ``stop`` (included), and ``extra``: grid points."""
    points, value = {stop, *(e for e in extra if 0 < e <= stop)}, max(1, start)
    while value < stop:
        points.add(value)
        value *= 2
    return sorted(points)


class RankView:
    """One DP rank's queue over the instance's step cost: sglang gives each DP rank its own
    scheduler with ``chunk / dp`` prompt tokens and ``max_running / dp`` requests, and a request
    stays on its rank; the ranks are taken as evenly loaded, so the instance's step carries ``dp``
    times one rank's tokens."""

    def __init__(self, cost: GridCost, dp: int) -> None:
        self.cost, self.dp = cost, dp

    def __call__(self, decoding: float, tokens: float) -> float:
        return self.cost(decoding * self.dp, tokens * self.dp)


def rank_policy(chunk: int, max_running: int, dp: int, policy: str, tokens_per_step: float = 1.0,
                recv_interval: int = 1, lookahead: bool = False) -> EnginePolicy:
    return EnginePolicy(max(1, chunk // dp), max(1, max_running // dp), policy, tokens_per_step, recv_interval,
                        lookahead)


def recv_interval_of(planner: Planner, layout: Layout) -> int:
    """The decode steps between the scheduler's polls for requests: the one asked, except under
    DP attention, which sglang's SchedulerRecvSkipper refuses (it asserts ``not
    enable_dp_attention``, managers/scheduler_recv_skipper.py, 0.5.9)."""
    return planner.request.serving.scheduler_recv_interval if layout.dp == 1 else 1


def serve(cost: GridCost, engine: EnginePolicy, lengths: LengthDist, options: ServingOptions, *,
          ttft_slo_s: float | None, tpot_slo_s: float | None, host_s: float, rate_scale: float = 1.0
          ) -> tuple[ServingPoint | None, ServingPoint]:
    """The operating point at the plan's load: (point meeting the SLOs or None, the point to
    report). ``rate_scale``: queues (DP ranks) sharing the plan's rate or clients."""
    q = options.ttft_percentile
    if options.request_rate is not None:
        point = steady_state(cost, engine, lengths, options.request_rate / rate_scale, q)
        return (point if _meets(point, ttft_slo_s, tpot_slo_s, host_s) else None), point
    if options.concurrency is not None:
        point = closed_loop(cost, engine, lengths, options.concurrency / rate_scale, q,
                            others=(options.concurrency - 1) / rate_scale)
        return (point if _meets(point, ttft_slo_s, tpot_slo_s, host_s) else None), point
    best = max_rate(cost, engine, lengths, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, percentile=q,
                    ttft_offset_s=host_s, admission_ceiling=ADMISSION_CEILING)
    if best is not None:
        return best, best
    # nothing meets the targets: report a trickle, so the violation says by how much
    trickle = engine.chunk / (lengths.mean_input * cost(0, engine.chunk)) * 1e-3
    return None, steady_state(cost, engine, lengths, trickle, q)


def _meets(point: ServingPoint, ttft_slo_s: float | None, tpot_slo_s: float | None, host_s: float) -> bool:
    return (point.stable and point.admission <= ADMISSION_CEILING
            and (ttft_slo_s is None or point.ttft_p_s + host_s <= ttft_slo_s)
            and (tpot_slo_s is None or point.tpot_s <= tpot_slo_s))


def closed_loop(cost: GridCost, engine: EnginePolicy, lengths: LengthDist, clients: float,
                percentile: float, others: float | None = None) -> ServingPoint:
    """``clients`` each sending a request when the last finished, priced by mean-value analysis
    on the open-loop model. What a request meets: by the arrival theorem of closed queueing
    networks, the steady state of the ``others`` clients alone (default ``clients - 1``; a share
    of them when DP ranks split the clients), so a lone client's prompt finds the engine idle
    and no other prompt comes between its tokens (its own decode, one request, is the smallest
    step; with more clients the request itself is left out of the batch it decodes in, a small
    error on weight-bound steps). Clients the engine cannot hold (the open-loop point with all of
    them in the system is past the running-request limit or the prompt queue's capacity) wait
    for a slot: (clients - held) / rate more TTFT, Little's law on the waiting clients. The rate
    is the clients over that response time (slot wait + TTFT + decode time)."""
    decode_tokens = lengths.mean(lambda i, o: max(0, o - 1))

    def held(p: ServingPoint) -> float:
        return p.rate * (p.ttft_mean_s + decode_tokens * p.tpot_s) if p.stable else math.inf

    def rate_for(n: float) -> float:
        lo, hi = 0.0, engine.chunk / (lengths.mean_input * cost(0, engine.chunk))
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if held(steady_state(cost, engine, lengths, mid, percentile)) < n else (lo, mid)
        return max(lo, 1e-9)

    point = steady_state(cost, engine, lengths, rate_for(clients), percentile)
    seen = steady_state(cost, engine, lengths, rate_for(max(0.0, clients - 1 if others is None else others)),
                        percentile)
    if not (point.stable and seen.stable):
        return point
    slot_wait = max(0.0, clients - held(point)) / point.rate
    response = slot_wait + seen.ttft_mean_s + decode_tokens * seen.tpot_s
    return replace(point, rate=clients / response, ttft_mean_s=seen.ttft_mean_s + slot_wait,
                   ttft_p_s=seen.ttft_p_s + slot_wait, tpot_s=seen.tpot_s)


def evaluate_agg(planner: Planner, pricer: StepPricer, layout: Layout, quant: str | None, batch: int,
                 spec: SpecChoice | None) -> Config:
    """One configuration under continuous batching: the static evaluation (memory, fits, the
    decode step), then TTFT, TPOT and throughput per device at the plan's load."""
    r = planner.request
    config = pricer.static(layout, quant, batch, spec)
    lengths, chunk = lengths_of(planner), chunk_of(planner, layout.dp)
    shape = chunk_shape(lengths, max(1, chunk // layout.dp))
    cost = RankView(pricer.grid(layout, quant, batch, spec, shape, chunk), layout.dp)
    policy = "mixed" if spec is None and r.serving.mixed_chunk else "separate"
    recv = recv_interval_of(planner, layout)
    engine = rank_policy(chunk, batch, layout.dp, policy, config.accept_length, recv,
                         planner.costs.overlapped(speculative=spec is not None))
    host = planner.costs.request_cost(planner.profile.tokenizer).at(round(lengths.mean_input))
    ttft_slo = r.ttft_slo_ms / 1e3 if r.ttft_slo_ms else None
    tpot_slo = r.tpot_slo_ms / 1e3 if r.tpot_slo_ms else None
    met, point = serve(cost, engine, lengths, r.serving, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo, host_s=host,
                       rate_scale=layout.dp)
    rate = point.rate * layout.dp if point.stable else 0.0
    config.tpot_ms = point.tpot_s * 1e3
    config.ttft_ms = (point.ttft_p_s + host) * 1e3
    config.tokens_per_s_per_user = 1e3 / config.tpot_ms if config.tpot_ms > 0 else 0.0
    config.tokens_per_s_per_device = rate * lengths.mean_output / layout.num_devices
    ratios = [v / slo for v, slo in ((config.ttft_ms, r.ttft_slo_ms), (config.tpot_ms, r.tpot_slo_ms)) if slo]
    config.violation = 0.0 if met else max([0.0] + [x - 1 for x in ratios if math.isfinite(x)] or [math.inf])
    if not met and config.violation == 0.0:
        config.violation = math.inf if not point.stable else 1e-9  # unstable, or over the admission cap
    config.meets_slo = met is not None
    config.serving = serving_dict(point, policy, chunk, host, r.serving.ttft_percentile, layout.dp, recv)
    return config


def serving_dict(point: ServingPoint, policy: str, chunk: int, host_s: float, percentile: float,
                 dp: int = 1, recv_interval: int = 1) -> dict[str, Any]:
    """What the serving model found; rates and batches for the whole instance (``dp`` ranks)."""
    finite = lambda v: v if math.isfinite(v) else None  # noqa: E731
    return {"mode": "agg", "policy": policy, "chunked_prefill_size": chunk, "scheduler_recv_interval": recv_interval,
            "stable": point.stable,
            "request_rate": point.rate * dp, "utilisation": finite(point.utilisation),
            "running_share": finite(point.admission),
            "ttft_mean_ms": finite((point.ttft_mean_s + host_s) * 1e3),
            f"ttft_p{percentile * 100:g}_ms": finite((point.ttft_p_s + host_s) * 1e3),
            "mean_step_ms": finite(point.step_s * 1e3), "decode_batch": finite(point.decode_batch * dp),
            "chunk_tokens": finite(point.chunk_tokens * dp), "busy_fraction": point.busy_fraction}


def serving_notes(planner: Planner, disagg: Any = None) -> list[str]:
    """The assumptions that change the answer, printed beside it."""
    r = planner.request
    options = r.serving
    lengths, chunk = lengths_of(planner), chunk_of(planner)
    shape = chunk_shape(lengths, chunk)
    given = "" if options.chunked_prefill_size else f" ({r.engine}'s default for {planner.device.name})"
    if options.request_rate is not None:
        load = f"Poisson arrivals at {options.request_rate:g} requests/s"
    elif options.concurrency is not None:
        n = options.concurrency
        load = ("one client in a closed loop: each request meets an idle engine" if n == 1 else
                f"{n} clients in a closed loop (mean-value analysis on the open-loop model: a request meets the "
                f"other {n - 1}, and waits for a slot if the engine cannot hold all {n})")
    else:
        load = (f"Poisson arrivals at the largest rate that meets the targets, the prompt queue at most "
                f"{MAX_UTILISATION:.0%} busy")
    pct = f"p{options.ttft_percentile * 100:g}"
    notes = [
        f"load: {load}; lengths {lengths.describe()}",
        f"chunked prefill: {chunk} prompt tokens per step{given}, in pieces of {shape.piece} tokens over a "
        f"{shape.prefix}-token prefix (token-weighted means); decode at context {r.input_length + r.output_length // 2}",
        f"TTFT is the {pct} of a queueing approximation (prompt tokens as an M/G/1 queue served a chunk per full "
        f"step, less the decodes a mixed step carries: Pollaczek-Khinchine mean wait, exponential tail; plus the step in progress and the request's own "
        f"steps) plus the engine's per-request host time; TPOT is the mean step between a request's tokens",
    ]
    if r.mode in ("agg", "both"):
        mixing = ("decodes and prompt chunks share each step (sglang --enable-mixed-chunk); speculative "
                  "configurations run prompt steps apart (sglang turns mixing off with speculation)"
                  if options.mixed_chunk else "each prompt step runs apart from the decodes (--mixed-chunk off, "
                  "sglang's default)")
        notes.append(f"aggregated: {mixing}; "
                     f"at most {ADMISSION_CEILING:.0%} of --max-running-requests in use on average (at a given "
                     f"rate, waits for a free slot are not modelled; with --concurrency, clients past the limit "
                     f"wait for one)")
        if options.scheduler_recv_interval > 1:
            notes.append(f"sglang polls for new requests every {options.scheduler_recv_interval} decode steps "
                         "(--scheduler-recv-interval; after a prompt step and when idle at once): a request arriving "
                         "during decodes waits for the next poll and is prefilled with the others of the interval "
                         "(its saving of host time per step is not priced)")
        if planner.costs.overlapped():
            spec = "" if planner.costs.overlapped(speculative=True) else " (its speculative configurations do not)"
            notes.append(f"{r.engine} schedules one step ahead of the GPU{spec}: a request arriving while a step "
                         "runs starts one step later")
        notes.append("TTFT under load runs low: of 27 published runs at 5-250 clients (NIM 1.8.0, sgl-cookbook) "
                     "26 measured more than this model gives (median |error| 45%, up to 76% low; 2026-11-27), "
                     "for a cause not yet found; at one client it matches infercast simulate "
                     "(benchmarks/serving_points.py, "
                     "docs/fidelity.md 'Loaded serving')")
    if disagg is not None:
        notes.append("disaggregated: decode instances kept full at their batch (no wait for a decode slot in "
                     "TTFT); KV cache sent after the prefill over the scale-out network (TTFT includes it); "
                     f"xPyD with up to {8} decode instances, the ratio that gives the most output tokens/s per "
                     "device of the whole deployment")
        notes += disagg.notes
        if options.scheduler_recv_interval > 1:
            notes.append("disaggregated pools are priced and launched polling every step (--scheduler-recv-interval "
                         "prices the aggregated instances)")
    return notes
