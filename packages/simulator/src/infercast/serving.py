"""Continuous batching with chunked prefill: a steady-state queueing model of one engine
instance, and a discrete-event simulation of the same policy that checks it.

The engine policy (both models):

- requests arrive as a Poisson stream (rate ``lambda``) with (input, output) lengths drawn
  from a :class:`LengthDist`; they wait FCFS and are admitted while fewer than
  ``max_running`` requests run;
- each step takes up to ``chunk`` prompt tokens (``--chunked-prefill-size``, instance-wide)
  from the admitted prompts in FCFS order, a long prompt over several steps;
- policy ``mixed`` (vLLM's scheduler, sglang ``--enable-mixed-chunk``): the step also carries
  one decode token (``tokens_per_step`` with speculative decoding) of every running request
  that has its first token, and those tokens come out of the chunk: a step with ``B`` decoding
  requests takes at most ``chunk - B`` prompt tokens (sglang's ``PrefillAdder`` subtracts the
  running batch from ``rem_chunk_tokens``; vLLM schedules the running requests first inside
  ``--max-num-batched-tokens``); policy ``separate`` (sglang without mixing, and always with
  speculative decoding): a step with prompt tokens carries only them, a step without runs the
  decodes;
- a step lasts ``cost(decoding requests, prompt tokens)``; a prompt's first token comes out at
  the end of the step holding its last chunk; a request leaves after ``output - 1`` more.

The steady state (:func:`steady_state`) solves for the mean step: ``B = lambda (O - 1) / a x
step`` requests decode (Little's law, ``a`` tokens per step), ``lambda E[I] x step`` prompt
tokens arrive per step and ride in a fraction ``p`` of the steps (the busy steps). TTFT is
waiting + the request's own steps: the prompt tokens form an M/G/1 queue served at ``chunk``
tokens per full step (``chunk - B`` under ``mixed``), whose wait is the Pollaczek-Khinchine mean with the usual exponential
tail (no wait with probability ``1 - rho``, else exponential with mean ``W / rho``); a request
that finds no backlog waits out the current decode step. Percentiles come from that mixture
over the length histogram. :func:`simulate_engine` runs the same policy step by step with the
same step cost.
"""

from __future__ import annotations

import bisect
import csv
import heapq
import json
import math
import os
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from infercast_adapters import InfercastError

POLICIES = ("mixed", "separate")
MAX_UTILISATION = 0.95
"""The planner's largest rate keeps the prompt queue below this utilisation (the wait grows
without bound as it approaches 1)."""


# ------------------------------------------------------------------------------ lengths


@dataclass(frozen=True)
class LengthDist:
    """A histogram of (input tokens, output tokens, weight); weights are normalised."""

    rows: tuple[tuple[int, int, float], ...]
    source: str = "fixed"

    @classmethod
    def fixed(cls, input_length: int, output_length: int) -> LengthDist:
        return cls(((input_length, output_length, 1.0),), f"fixed {input_length} in / {output_length} out")

    @property
    def probabilities(self) -> list[float]:
        total = sum(w for _, _, w in self.rows)
        return [w / total for _, _, w in self.rows]

    def mean(self, fn: Callable[[int, int], float]) -> float:
        return sum(p * fn(i, o) for (i, o, _), p in zip(self.rows, self.probabilities))

    @property
    def mean_input(self) -> float:
        return self.mean(lambda i, o: i)

    @property
    def mean_output(self) -> float:
        return self.mean(lambda i, o: o)

    @property
    def max_total(self) -> int:
        return max(i + o for i, o, _ in self.rows)

    def describe(self) -> str:
        if len(self.rows) == 1:
            return self.source
        return (f"{self.source}: {len(self.rows)} buckets, mean input {self.mean_input:.0f}, "
                f"mean output {self.mean_output:.0f}")


LENGTHS_FLAG = "--length-distribution"


def load_lengths(path: str) -> LengthDist:
    """Read a length histogram: CSV with a header ``input_length,output_length,weight``
    (weight optional, default 1), or JSON: a list of objects with those keys."""
    if not os.path.isfile(path):
        raise InfercastError(f"{LENGTHS_FLAG} {path}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InfercastError(f"{LENGTHS_FLAG} {path}: cannot read ({exc.strerror or exc})") from exc
    if path.lower().endswith(".json"):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InfercastError(f"{LENGTHS_FLAG} {path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(items, list):
            raise InfercastError(f"{LENGTHS_FLAG} {path}: expected a JSON list of "
                                 '{"input_length": N, "output_length": M, "weight": W} objects')
    else:
        items = list(csv.DictReader(text.splitlines()))
    rows = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict) or "input_length" not in item or "output_length" not in item:
            raise InfercastError(f"{LENGTHS_FLAG} {path}: row {n} needs input_length and output_length "
                                 "(CSV header input_length,output_length,weight; or a JSON list of objects)")
        try:
            i, o = int(item["input_length"]), int(item["output_length"])
            w = float(item.get("weight") if item.get("weight") not in (None, "") else 1.0)
        except (TypeError, ValueError):
            raise InfercastError(f"{LENGTHS_FLAG} {path}: row {n} has a value that is not a number: {item}") from None
        if i < 1 or o < 1 or not w >= 0 or math.isinf(w):
            raise InfercastError(f"{LENGTHS_FLAG} {path}: row {n}: lengths must be >= 1 and the weight a finite "
                                 f"number >= 0, got input {i}, output {o}, weight {w}")
        rows.append((i, o, w))
    if not rows or sum(w for _, _, w in rows) <= 0:
        raise InfercastError(f"{LENGTHS_FLAG} {path}: no rows with a positive weight")
    return LengthDist(tuple(rows), os.path.basename(path))


# ------------------------------------------------------------------------------ what plan is asked

MODES = ("agg", "disagg", "both")
TRANSFER_BACKENDS = ("mooncake", "nixl")


@dataclass(frozen=True)
class ServingOptions:
    """How ``infercast plan`` serves: aggregated and/or disaggregated, at what load."""

    request_rate: float | None = None
    """Requests per second offered to the whole deployment; None: the largest that meets the SLOs."""
    concurrency: int | None = None
    """Clients each sending its next request when the last one finishes (instead of a rate)."""
    lengths: LengthDist | None = None
    """Length histogram; None: the plan's fixed input and output lengths."""
    chunked_prefill_size: int | None = None
    """Prompt tokens per step, instance-wide; None: the engine's default for the device."""
    ttft_percentile: float = 0.9
    prefill_devices: tuple[int, ...] | None = None
    """Device counts of one prefill instance (disaggregated); None: the plan's ``--num-devices``."""
    decode_devices: tuple[int, ...] | None = None
    """Device counts of one decode instance (disaggregated); None: the plan's ``--num-devices``."""
    transfer_backend: str = "mooncake"
    scheduler_recv_interval: int = 1
    """sglang's ``--scheduler-recv-interval``: decode steps between polls for new requests."""
    mixed_chunk: bool = True
    """Prompt chunks share steps with the running decodes (sglang ``--enable-mixed-chunk``, vLLM's
    and TensorRT-LLM's scheduling); False: sglang's default, each prompt step runs apart."""

    def __post_init__(self) -> None:
        if self.request_rate is not None and self.concurrency is not None:
            raise InfercastError("give --request-rate or --concurrency, not both")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise InfercastError(f"--request-rate must be a positive number of requests per second, got "
                                 f"{self.request_rate!r}")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or self.concurrency < 1):
            raise InfercastError(f"--concurrency must be a positive whole number, got {self.concurrency!r}")
        if self.chunked_prefill_size is not None and (isinstance(self.chunked_prefill_size, bool)
                                                      or self.chunked_prefill_size < 1):
            raise InfercastError(f"--chunked-prefill-size must be a positive number of tokens, got "
                                 f"{self.chunked_prefill_size!r}")
        check_recv_interval(self.scheduler_recv_interval)
        if not 0.5 <= self.ttft_percentile < 1.0:
            raise InfercastError(f"--ttft-percentile must be in [50, 100) (percent), got "
                                 f"{self.ttft_percentile * 100:g}")
        if self.transfer_backend not in TRANSFER_BACKENDS:
            raise InfercastError(f"unknown --disaggregation-transfer-backend {self.transfer_backend!r}; valid: "
                                 f"{', '.join(TRANSFER_BACKENDS)}")


def check_recv_interval(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InfercastError(f"--scheduler-recv-interval must be a whole number of decode steps >= 1, got {value!r}")


def default_chunk(memory_bytes: float, engine: str = "sglang", device_name: str = "") -> int:
    """The engine's default prompt tokens per step on a device with ``memory_bytes``. sglang's
    ``--chunked-prefill-size`` (server_args.py, ``_handle_gpu_memory_settings``, from the
    driver's total in MiB): 2,048 below 35 GiB, 4,096 below 60 GiB, 8,192 below 160 GiB (A100,
    H100, H200, H20), 16,384 above (B200, MI300X). vLLM's ``--max-num-batched-tokens`` for
    ``vllm serve`` (EngineArgs.get_batch_defaults, 0.12-0.17): 8,192 from 70 GiB except on
    A100s (PR 17885: more reduced their throughput), else 2,048. TensorRT-LLM taken as sglang's."""
    gib = memory_bytes / 2**30
    if engine == "vllm":
        return 8192 if gib >= 70 and "A100" not in device_name.upper() else 2048
    return 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384


# ------------------------------------------------------------------------------ engine and step cost


@dataclass(frozen=True)
class EnginePolicy:
    chunk: int
    """Prompt tokens per step, instance-wide (``--chunked-prefill-size``)."""
    max_running: int
    """Requests admitted at once (``--max-running-requests``)."""
    policy: str = "mixed"
    tokens_per_step: float = 1.0
    """Output tokens a decoding request gains per step (the accept length with speculation)."""
    recv_interval: int = 1
    """Decode steps between two polls for new requests (sglang's ``--scheduler-recv-interval``):
    the scheduler polls after every step that carried prompt tokens and while idle, and otherwise
    only every ``recv_interval``-th decode step, so a request arriving while others decode waits
    up to that many steps before its prompt can be scheduled."""
    lookahead: bool = False
    """The scheduler forms each step while the GPU runs the one before (sglang's overlap
    scheduler, vLLM's async scheduling): it polls as a step starts, so a request arriving
    while the engine runs misses the step already formed and starts one step later."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InfercastError(f"unknown engine policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        check_recv_interval(self.recv_interval)


StepCost = Callable[[float, float], float]
"""seconds = cost(decoding requests, prompt tokens) of one step of the instance."""


class GridCost:
    """A step cost tabulated at (decoding requests, prompt tokens) grid points and interpolated
    linearly between them in each direction (held at the edge beyond the grid). A step without
    prompt tokens (decode, under a CUDA graph) and one with (launched eagerly, prefill
    kernels) are different kinds: prompt tokens below the first non-zero column scale the
    difference to that column down to zero. (0, 0) costs nothing. The steady-state model and
    the event simulation call the same object."""

    def __init__(self, batches: Sequence[int], tokens: Sequence[int], price: Callable[[int, int], float]) -> None:
        self.batches = sorted(set(batches) | {0})
        self.tokens = sorted(set(tokens) | {0})
        if len(self.tokens) < 2:
            raise ValueError("GridCost needs a non-zero prompt-token column")
        self.price = price
        self._cells: dict[tuple[int, int], float] = {(0, 0): 0.0}

    def cell(self, i: int, j: int) -> float:
        """The priced grid point (batches[i], tokens[j]), priced on first use."""
        if (i, j) not in self._cells:
            self._cells[(i, j)] = self.price(self.batches[i], self.tokens[j])
        return self._cells[(i, j)]

    @staticmethod
    def _bracket(grid: Sequence[int], x: float) -> tuple[int, int, float]:
        if x <= grid[0]:
            return 0, 0, 0.0
        if x >= grid[-1]:
            return len(grid) - 1, len(grid) - 1, 0.0
        j = bisect.bisect_right(grid, x)
        return j - 1, j, (x - grid[j - 1]) / (grid[j] - grid[j - 1])

    def _row(self, i: int, tokens: float) -> float:
        if tokens <= 0:
            return self.cell(i, 0)
        first = self.tokens[1]
        if tokens < first:
            return self.cell(i, 0) + (self.cell(i, 1) - self.cell(i, 0)) * tokens / first
        j0, j1, v = self._bracket(self.tokens, tokens)
        return self.cell(i, j0) * (1 - v) + (self.cell(i, j1) * v if v else 0.0)

    def __call__(self, batch: float, tokens: float) -> float:
        if batch > 0 and batch < self.batches[1]:
            batch = self.batches[1]  # a fraction of a request: the smallest batch
        i0, i1, u = self._bracket(self.batches, batch)
        return self._row(i0, tokens) * (1 - u) + (self._row(i1, tokens) * u if u else 0.0)


# ------------------------------------------------------------------------------ steady state


@dataclass
class ServingPoint:
    """One instance at one arrival rate (seconds; TTFT excludes the per-request host time)."""

    rate: float
    stable: bool
    utilisation: float
    """Prompt tokens arriving / what full-chunk steps can take (the prompt queue's rho)."""
    step_s: float
    """Mean step duration (what a decoding request sees between steps)."""
    tpot_s: float
    ttft_mean_s: float
    ttft_p_s: float
    percentile: float
    decode_batch: float
    """Mean decoding requests per step."""
    chunk_tokens: float
    """Mean prompt tokens in a step that has any."""
    busy_fraction: float
    """Share of steps that carry prompt tokens."""
    admission: float = 0.0
    """Mean running requests (admission to last token) / ``max_running``."""


def _fixed_point(f: Callable[[float], float], start: float) -> float:
    """The least solution of ``x = f(x)`` above ``start`` for an increasing ``f`` (the mean step
    as a function of itself): secant steps on ``f(x) - x`` inside a bracket that grows until it
    holds the root; ``inf`` when there is none below a million seconds (the load diverges) or
    when ``f`` is infinite right above the last point below the root (a load no step can carry:
    under ``mixed``, decodes that fill the chunk)."""
    lo, g_lo = start, f(start) - start
    if g_lo <= 0:
        return start
    hi = lo
    while True:  # f(x) > x below the root: step up until it is not
        hi = max(hi * 2, hi + g_lo)
        if hi > 1e6:
            return math.inf
        g_hi = f(hi) - hi
        for _ in range(60):  # past the load f can carry (f infinite): step back towards lo
            if math.isfinite(g_hi):
                break
            hi = 0.5 * (lo + hi)
            g_hi = f(hi) - hi
        if not math.isfinite(g_hi) or hi - lo <= 1e-12 + 1e-9 * hi:
            return math.inf
        if g_hi <= 0:
            break
        lo, g_lo = hi, g_hi
    for _ in range(100):  # Illinois regula falsi: keeps the bracket, converges superlinearly
        x = hi - g_hi * (hi - lo) / (g_hi - g_lo)
        g = f(x) - x
        if abs(g) <= 1e-12 + 1e-9 * x or hi - lo <= 1e-12 + 1e-9 * hi:
            return x
        if g > 0:
            lo, g_lo = x, g
            g_hi /= 2
        else:
            hi, g_hi = x, g
            g_lo /= 2
    return x


def _ceil_steps(tokens: int, chunk: int) -> int:
    return max(1, math.ceil(tokens / chunk))


def _uniform_plus_exp(s: float, length: float, mean: float) -> float:
    """P(U + X <= s) for U uniform on [0, length] and X exponential with ``mean``."""
    if s <= 0:
        return 0.0
    if length <= 0:
        return 1 - math.exp(-s / mean)
    top = min(s, length)
    return (top - mean * (math.exp(-(s - top) / mean) - math.exp(-s / mean))) / length


def _uniform(s: float, length: float) -> float:
    return 1.0 if s >= length else max(0.0, s / length) if length > 0 else float(s >= 0)


def steady_state(cost: StepCost, engine: EnginePolicy, lengths: LengthDist, rate: float,
                 percentile: float = 0.9) -> ServingPoint:
    """The mean step, TPOT and TTFT (mean and ``percentile``) of one instance at ``rate``.

    Mean step: a share ``p`` of the steps carries prompt tokens, ``p = max(u, 1 - exp(-rate x
    step x k))`` (``u`` = prompt tokens per step / the room R a step has for them, the chunk less
    its decodes under ``mixed``; ``k`` = steps one prompt needs at R): at
    light load a step is busy when a request arrived during the one before. TTFT = the rest of
    the step in progress (a length-biased pick of a busy or decode step, uniform within it; with
    fewer than one request decoding on average, a decode step only that share of the time, else
    none) + the wait for backlog (M/G/1 on prompt tokens at ``chunk`` per full step, less the
    decodes it carries under ``mixed``: Pollaczek-Khinchine mean, zero with probability
    ``1 - rho`` else exponential) + the request's own steps (full ones, then the last, shared
    with the prompt tokens that arrive in a step), each carrying the decodes a prompt meets."""
    C, a = engine.chunk, engine.tokens_per_step
    mixed = engine.policy == "mixed"
    mean_in = lengths.mean_input
    decode_steps = lengths.mean(lambda i, o: max(0, o - 1) / a)   # decode steps per request
    steps_own = lengths.mean(lambda i, o: _ceil_steps(i, C))

    def point(step: float) -> tuple[float, float, float, float, float, float]:
        """(mean step, decoding requests, busy share, busy chunk, idle cost, busy cost)"""
        tokens = rate * mean_in * step
        if mixed:  # Little's law: decoding requests = rate x time spent decoding
            B = rate * decode_steps * step
            room = C - B
            if room <= 0:
                return math.inf, B, 1.0, 0.0, math.inf, math.inf
            p = min(1.0, max(tokens / room, 1.0 - math.exp(-rate * step * lengths.mean(lambda i, o: _ceil_steps(i, room)))))
        else:  # a request decodes only in the idle share of the steps
            room = C
            p = min(1.0, max(tokens / C, 1.0 - math.exp(-rate * step * steps_own)))
            B = rate * decode_steps * (step / (1.0 - p) if p < 1.0 else math.inf)
        c_busy = min(room, tokens / p) if p > 0 else 0.0
        seen = max(1.0, B)  # a decoding request's step holds at least itself
        idle = cost(seen, 0)
        busy = cost(seen if mixed else 0, c_busy) if c_busy > 0 else idle
        return (1 - p) * idle + p * busy, B, p, c_busy, idle, busy

    if decode_steps == 0:
        return _prefill_only(cost, engine, lengths, rate, percentile)
    step = _fixed_point(lambda s: point(s)[0], 1e-9)
    if not math.isfinite(step):
        return ServingPoint(rate, False, math.inf, math.inf, math.inf, math.inf, math.inf, percentile, math.inf,
                            C, 1.0, math.inf)
    step, B, p, c_busy, idle, busy = point(step)
    # A prompt meets other requests decoding a share w of the time: with B < 1 decoding on
    # average, some decode runs w = B of the time and the engine idles otherwise (the cost's
    # smallest batch, one request, is what a decoding request itself sees).
    w = min(1.0, B)

    def beside(tokens: float) -> float:
        """A step of ``tokens`` prompt tokens as a prompt meets it (the decodes it carries)."""
        if not mixed:
            return cost(0, tokens)
        return cost(B, tokens) if w == 1.0 else w * cost(1, tokens) + (1 - w) * cost(0, tokens)

    room = C - B if mixed else C  # prompt tokens a full step takes
    full = beside(room)
    rho = rate * mean_in * full / room
    tpot = (step if mixed else step / max(1e-12, 1.0 - p)) / a
    probs = lengths.probabilities

    # the step in progress, picked in proportion to its length: busy with probability p busy / step,
    # else a decode step (a share w of the time) or none
    busy_share = p * busy / step if step > 0 else 0.0
    decoding_share = (1 - busy_share) * w
    # An arrival during decodes waits for the scheduler's next poll, recv_interval decode steps
    # apart (a decode run shorter than that empties the engine, the share 1 - w of the time no
    # request decodes, and an idle engine polls at once).
    interval = w * engine.recv_interval + (1 - w) * min(engine.recv_interval, max(1.0, decode_steps))
    # One step ahead (lookahead), the poll runs as a step starts: an arrival during a step misses
    # the one already formed after it: a decode step, or after a prompt step either another
    # prompt step (the poll at its start found prompts, or the prompts polled together need more
    # than a step) or the interval's decodes.
    polled = max(mean_in, rate * mean_in * interval * idle)
    again = max(1 - math.exp(-rate * step), 1 - room / max(room, polled))
    late_busy = again * busy + (1 - again) * interval * idle if engine.lookahead else 0.0
    late_decoding = idle if engine.lookahead else 0.0
    # Prefilled with the others polled at the same time: half of them ahead of it (FCFS), half
    # sharing its last step (mean-field: weighted by the share of arrivals that wait for a poll).
    polled_with = rate * mean_in * (decoding_share * (interval - 1) * idle
                                    + (busy_share * (1 - again) * (interval - 1) * idle if engine.lookahead else 0.0))
    ahead = polled_with / 2 / room * full
    arriving = rate * mean_in * step + polled_with / 2  # prompt tokens of others that share its last step

    def own(i: int) -> float:
        k = _ceil_steps(i, room)
        last = min(room, i - (k - 1) * room + arriving)
        return ahead + (k - 1) * full + beside(last)

    in_system = sum(q * own(i) for (i, _, _), q in zip(lengths.rows, probs)) + decode_steps * tpot * a
    admission = rate * in_system / engine.max_running
    if not (rho < 1.0 and p < 1.0 and admission <= 1.0):
        return ServingPoint(rate, False, rho, step, tpot, math.inf, math.inf, percentile, B, c_busy, p, admission)
    service = [i / room * full for i, _, _ in lengths.rows]
    es2 = sum(q * s * s for q, s in zip(probs, service))
    wait = rate * es2 / (2 * (1 - rho)) if rho > 0 else 0.0
    # (share, the uniform wait for the next poll, the steps formed before it): the rest of the step
    # in progress, or during decodes of the recv_interval steps to the next poll
    phases = ((busy_share, busy, late_busy), (decoding_share, interval * idle, late_decoding),
              ((1 - busy_share) * (1 - w), 0.0, 0.0))
    residual = sum(share * (length / 2 + late) for share, length, late in phases)

    owns = [(own(i), q) for (i, _, _), q in zip(lengths.rows, probs)]

    def cdf(t: float) -> float:
        total = 0.0
        for own_s, q in owns:
            for share, length, late in phases:
                if share <= 0:
                    continue
                s = t - own_s - late
                queued = rho * _uniform_plus_exp(s, length, wait / rho) if wait > 0 else 0.0
                total += q * share * ((1 - rho if wait > 0 else 1.0) * _uniform(s, length) + queued)
        return total

    mean_ttft = residual + wait + sum(q * own_s for own_s, q in owns)
    return ServingPoint(rate, True, rho, step, tpot, mean_ttft, _quantile(cdf, percentile, mean_ttft), percentile,
                        B, c_busy, p, admission)


def _prefill_only(cost: StepCost, engine: EnginePolicy, lengths: LengthDist, rate: float,
                  percentile: float) -> ServingPoint:
    """A prefill-only instance (disaggregated; every request's output is its first token): it
    runs a step whenever prompt tokens wait and idles otherwise. A busy step carries the
    tokens that arrived during the one before (at least one prompt's piece, at most a chunk);
    an arrival finds a step in progress with the busy share of time, and then waits as in
    :func:`steady_state`."""
    C = engine.chunk
    mean_in = lengths.mean_input
    busy = cost(0, min(C, mean_in))
    for _ in range(200):
        c_busy = min(C, max(min(C, mean_in), rate * mean_in * busy))
        new = cost(0, c_busy)
        if abs(new - busy) <= 1e-12 + 1e-9 * busy:
            break
        busy = 0.5 * busy + 0.5 * new
    c_busy = min(C, max(min(C, mean_in), rate * mean_in * busy))
    full = cost(0, C)
    rho = rate * mean_in * full / C
    busy_time = min(1.0, rate * mean_in * busy / c_busy)
    if not (rho < 1.0 and busy_time < 1.0):
        return ServingPoint(rate, False, max(rho, busy_time), busy, 0.0, math.inf, math.inf, percentile, 0.0, c_busy,
                            busy_time)
    arriving = rate * mean_in * busy
    probs = lengths.probabilities

    def own(i: int, shared: float) -> float:
        k = _ceil_steps(i, C)
        return (k - 1) * full + cost(0, min(C, i - (k - 1) * C + shared))

    es2 = sum(q * (i / C * full) ** 2 for (i, _, _), q in zip(lengths.rows, probs))
    wait = rate * es2 / (2 * (1 - rho)) if rho > 0 else 0.0
    # an arrival to an idle instance starts at once, alone; one that finds a step running waits
    # (the Pollaczek-Khinchine mean over the arrivals that wait, exponentially distributed) and
    # shares its step with the tokens arriving meanwhile
    owns = [(own(i, 0.0), own(i, arriving), q) for (i, _, _), q in zip(lengths.rows, probs)]

    def cdf(t: float) -> float:
        total = 0.0
        for own_alone, own_shared, q in owns:
            alone, shared = t - own_alone, t - own_shared
            queued = 1 - math.exp(-shared * busy_time / wait) if shared > 0 and wait > 0 else _uniform(shared, busy)
            total += q * ((1 - busy_time) * float(alone >= 0) + busy_time * queued)
        return total

    mean_ttft = sum(q * ((1 - busy_time) * a + busy_time * b) for a, b, q in owns) + max(wait, busy_time * busy / 2)
    return ServingPoint(rate, True, max(rho, busy_time), busy, 0.0, mean_ttft, _quantile(cdf, percentile, mean_ttft),
                        percentile, 0.0, c_busy, busy_time)


def _quantile(cdf: Callable[[float], float], q: float, scale: float) -> float:
    lo, hi = 0.0, max(scale, 1e-6)
    while cdf(hi) < q and hi < 1e7:
        hi *= 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return hi


def max_rate(cost: StepCost, engine: EnginePolicy, lengths: LengthDist, *, ttft_slo_s: float | None,
             tpot_slo_s: float | None, percentile: float = 0.9, ttft_offset_s: float = 0.0,
             ceiling: float = MAX_UTILISATION, admission_ceiling: float = 1.0) -> ServingPoint | None:
    """The largest arrival rate whose steady state meets the SLOs (TTFT at ``percentile`` plus
    ``ttft_offset_s``, mean TPOT) with the prompt queue at most ``ceiling`` busy and at most
    ``admission_ceiling`` of ``max_running`` in use; None when even a trickle misses them."""

    def ok(point: ServingPoint) -> bool:
        return (point.stable and point.utilisation <= ceiling and point.admission <= admission_ceiling
                and (ttft_slo_s is None or point.ttft_p_s + ttft_offset_s <= ttft_slo_s)
                and (tpot_slo_s is None or point.tpot_s <= tpot_slo_s))

    # the rate at which prompt-only full-chunk steps would saturate bounds the search from above
    top = engine.chunk / (lengths.mean_input * cost(0, engine.chunk))
    lo = top * 1e-4
    best = steady_state(cost, engine, lengths, lo, percentile)
    if not ok(best):
        return None
    hi = top
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        point = steady_state(cost, engine, lengths, mid, percentile)
        if ok(point):
            lo, best = mid, point
        else:
            hi = mid
        if hi / lo < 1.002:
            break
    return best


def rate_at_utilisation(cost: StepCost, engine: EnginePolicy, lengths: LengthDist, utilisation: float) -> float:
    """The arrival rate at which the prompt queue is ``utilisation`` busy (a stable point)."""
    lo, hi = 1e-3, 1e5
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        point = steady_state(cost, engine, lengths, mid)
        lo, hi = (mid, hi) if point.stable and point.utilisation < utilisation else (lo, mid)
    return lo


# ------------------------------------------------------------------------------ event simulation


@dataclass
class SimulatedRun:
    rate: float
    """Requests per second: the Poisson rate, or with clients the completions between the warm-up's
    last and the last request sent."""
    requests: int
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    steps: int = 0
    step_time_s: float = 0.0
    busy_steps: int = 0
    """Steps that carried prompt tokens."""
    decoding: float = 0.0
    """Decoding requests summed over steps (mean: / steps)."""

    def quantile(self, values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    @property
    def mean_step_s(self) -> float:
        return self.step_time_s / self.steps if self.steps else 0.0


def simulate_engine(cost: StepCost, engine: EnginePolicy, lengths: LengthDist, rate: float | None = None, *,
                    clients: int | None = None, requests: int = 4000, warmup: int = 500,
                    seed: int = 0) -> SimulatedRun:
    """Run the engine policy step by step; statistics of the requests after ``warmup`` (TTFT at
    the end of the step with the last prompt chunk; TPOT per request over its decode steps).
    Arrivals: Poisson at ``rate``, or ``clients`` closed-loop clients that all start at once and
    each send their next request at the end of the step that finishes their last (a benchmark
    client at ``--max-concurrency``). A mixed step's decodes take one token each of the chunk (the
    planner mixes only without speculation)."""
    if (rate is None) == (clients is None):
        raise ValueError("simulate_engine needs a rate or a number of clients, not both")
    if clients is not None and (isinstance(clients, bool) or not isinstance(clients, int) or clients < 1):
        raise ValueError(f"simulate_engine needs a whole number of clients >= 1, got {clients!r}")
    rng = random.Random(seed)
    probs = lengths.probabilities
    rows = [(i, o) for i, o, _ in lengths.rows]

    def draw() -> tuple[int, int]:
        return rows[rng.choices(range(len(rows)), probs)[0]] if len(rows) > 1 else rows[0]

    arrivals: list[tuple[float, int, int]] = []  # (time, input, output) by request index, in issue order
    if rate is not None:
        t = 0.0
        for _ in range(requests):
            t += rng.expovariate(rate)
            arrivals.append((t, *draw()))
    else:
        arrivals.extend((0.0, *draw()) for _ in range(min(clients, requests)))
    C, a = engine.chunk, engine.tokens_per_step
    mixed = engine.policy == "mixed"
    run = SimulatedRun(rate if rate is not None else 0.0, requests)
    waiting: deque[int] = deque()
    prefill: deque[list] = deque()  # [request index, prompt tokens left]
    first_token: dict[int, float] = {}
    decode_steps_done = 0  # decode steps so far (each gives every decoding request `a` tokens)
    finish_at: list[tuple[int, int]] = []  # heap (decode step count at which it finishes, request)
    running = 0
    nxt, now, done = 0, 0.0, 0
    # the closed loop's rate: completions from the warm-up's last to the last request sent, when
    # every client still has one in flight (before that the start, after it the drain)
    window = [0.0, 0, 0.0, 0]  # start time, completions then, end time, completions then

    def leave(r: int) -> None:
        nonlocal running, done
        running -= 1
        done += 1
        if done == warmup:
            window[:2] = now, done
        if clients is not None and len(arrivals) < requests:
            arrivals.append((now, *draw()))  # its client sends the next request
            if len(arrivals) == requests:
                window[2:] = now, done

    since_poll = engine.recv_interval  # decode steps since the last poll; the first loop polls
    started = None  # when the step that just ran began (None: the engine was idle)
    while done < requests:
        if since_poll >= engine.recv_interval or running == 0:
            since_poll = 0
            # one step ahead, this step was formed as the last one began; an idle engine polls at once
            cutoff = started if engine.lookahead and started is not None and running > 0 else now
            while nxt < len(arrivals) and arrivals[nxt][0] <= cutoff:
                waiting.append(nxt)
                nxt += 1
        if running == 0 and not waiting:
            now, started = max(now, arrivals[nxt][0]), None
            continue
        # admit FCFS
        while waiting and running < engine.max_running:
            r = waiting.popleft()
            prefill.append([r, arrivals[r][1]])
            running += 1
        batch = len(finish_at)
        budget, taken, completed = C - batch if mixed else C, 0, []
        if prefill:
            for item in prefill:
                if budget <= 0:
                    break
                take = min(budget, item[1])
                item[1] -= take
                budget -= take
                taken += take
                if item[1] == 0:
                    completed.append(item[0])
            while prefill and prefill[0][1] == 0:
                prefill.popleft()
        decodes = batch if (mixed or taken == 0) else 0
        duration = cost(decodes, taken)
        started = now
        now += duration
        run.steps += 1
        run.step_time_s += duration
        run.busy_steps += taken > 0
        run.decoding += decodes
        since_poll = engine.recv_interval if taken else since_poll + 1
        if decodes:
            decode_steps_done += 1
            while finish_at and finish_at[0][0] <= decode_steps_done:
                _, r = heapq.heappop(finish_at)
                if r >= warmup:
                    run.tpot_s.append((now - first_token[r]) / (arrivals[r][2] - 1))
                leave(r)
        for r in completed:
            first_token[r] = now
            if r >= warmup:
                run.ttft_s.append(now - arrivals[r][0])
            remaining = arrivals[r][2] - 1
            if remaining <= 0:
                leave(r)
            else:
                heapq.heappush(finish_at, (decode_steps_done + math.ceil(remaining / a), r))
    if clients is not None:
        start, before, end, after = window
        run.rate = (after - before) / (end - start) if end > start else 0.0
    return run
