"""Where routed tokens go: experts touched, the busiest EP rank, and DeepEP's destinations.

Routing is a distribution over experts, chosen with ``--expert-imbalance``:

- ``balanced``: every expert equally likely (the default, what load balancing aims for);
- ``power-law-1.01`` / ``power-law-1.2``: expert popularity falls as rank^-alpha (a Zipf
  law, the skew aiconfigurator's MoE tables were measured under), capped at 1/top_k because
  a token picks an expert at most once, and placed on EP ranks independently of popularity.

The measured MoE tables carry the distribution themselves (their balanced tables read for
random routing: :func:`infercast.kernels.aiconfigurator.random_routing`); the analytic model
uses the expected number of distinct experts a batch touches (weights read) and the busiest
rank's share of the routed rows (the straggler every rank waits for at the next collective).
Under expert parallelism that share is never below what random picks give
(:func:`busiest_rank`), and a balanced table is asked for the busiest rank's load: the
collector spreads its tokens perfectly evenly, which real routing of a few tokens does not.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics

from infercast_adapters import InfercastError

DISTRIBUTIONS = {"balanced": "balanced", "power-law-1.01": "power_law_1.01", "power-law-1.2": "power_law_1.2"}
"""``--expert-imbalance`` values -> the measured tables' distribution names."""


def describe(distribution: str) -> str:
    if distribution == "balanced":
        return "balanced: each token picks top-k experts uniformly at random"
    return f"{distribution}: expert popularity ~ rank^-{distribution.rsplit('-', 1)[1]}, placed blind to popularity"


def check_distribution(name: str) -> str:
    if name not in DISTRIBUTIONS:
        raise InfercastError(f"unknown --expert-imbalance {name!r}; valid: {', '.join(DISTRIBUTIONS)}")
    return name


@functools.lru_cache(maxsize=256)
def popularity(distribution: str, num_experts: int, top_k: int) -> tuple[float, ...]:
    """Share of (token, expert) pairs each expert receives, most popular first (sums to 1)."""
    if distribution == "balanced":
        return (1.0 / num_experts,) * num_experts
    alpha = float(distribution.rsplit("-", 1)[1])
    raw = [i ** -alpha for i in range(1, num_experts + 1)]
    total = sum(raw)
    shares = [r / total for r in raw]
    cap = 1.0 / top_k
    for _ in range(num_experts):  # cap and hand the excess to the uncapped experts, until stable
        excess = sum(s - cap for s in shares if s > cap)
        if excess <= 1e-12:
            break
        free = sum(s for s in shares if s < cap)
        shares = [cap if s >= cap else s + excess * s / free for s in shares]
    return tuple(shares)


def expected_active_experts(num_experts: int, top_k: int, routed_tokens: float, local_experts: int,
                            distribution: str = "balanced") -> float:
    """Expected distinct local experts hit when ``routed_tokens`` tokens each pick ``top_k``
    experts. Expert i is picked by one token with probability top_k x share_i, missed by all
    with (1 - top_k x share_i)^T; under balanced routing (1 - k/E)^T."""
    if routed_tokens <= 0:
        return 0.0
    if distribution == "balanced":
        return local_experts * (1.0 - (1.0 - top_k / num_experts) ** routed_tokens)
    shares = popularity(distribution, num_experts, top_k)
    hit = sum(1.0 - (1.0 - min(1.0, top_k * s)) ** routed_tokens for s in shares)
    return hit * local_experts / num_experts  # local experts are a popularity-blind sample


def straggler(distribution: str, num_experts: int, top_k: int, ep: int) -> float:
    """The busiest EP rank's routed rows over the mean from skewed popularity alone: the rank
    that holds the most popular expert carries its share plus an average share for each of its
    other experts (1 for balanced routing; the chance of uneven picks is :func:`busiest_rank`)."""
    if distribution == "balanced" or ep <= 1:
        return 1.0
    shares = popularity(distribution, num_experts, top_k)
    local = num_experts / ep
    rest = (1.0 - shares[0]) / (num_experts - 1)
    return max(1.0, (shares[0] + (local - 1) * rest) / (local / num_experts))


NORMAL_FROM_ROWS = 32
"""From this many routed rows a rank on average, :func:`busiest_rank` takes each rank's rows as
normal (within 2.2% of the exact sum there, down to 0.4% at 128; the normal law's tail runs low at
fewer rows, 10-13% at two a rank on 32-256 ranks); below, it sums the per-token law exactly."""


@functools.lru_cache(maxsize=256)
def _rank_picks(num_experts: int, top_k: int, ep: int, n_group: int | None, topk_group: int | None
                ) -> tuple[float, ...]:
    """Probability that one token puts 0, 1, ..., top_k of its picks on a rank: top_k experts
    drawn without replacement from every expert or, under group-limited routing, from the
    experts of ``topk_group`` of ``n_group`` groups chosen uniformly, where ranks hold whole
    groups (a rank's eligible experts: per_group x its chosen groups, hypergeometric over the
    choice) or groups span whole ranks (a rank's experts are eligible when its group is chosen)."""
    local = num_experts // ep
    if n_group and topk_group and topk_group < n_group and num_experts % n_group == 0:
        per_group = num_experts // n_group
        pool = topk_group * per_group
        if n_group % ep == 0:  # ranks hold n_group / ep whole groups
            own = n_group // ep
            eligible = {c * per_group: math.comb(own, c) * math.comb(n_group - own, topk_group - c)
                        / math.comb(n_group, topk_group) for c in range(min(own, topk_group) + 1)}
        else:  # a group spans ep / n_group ranks
            eligible = {local: topk_group / n_group, 0: 1 - topk_group / n_group}
    else:
        pool, eligible = num_experts, {local: 1.0}
    dist = [0.0] * (top_k + 1)
    for inside, weight in eligible.items():
        for c in range(min(top_k, inside) + 1):
            dist[c] += weight * math.comb(inside, c) * math.comb(pool - inside, top_k - c) / math.comb(pool, top_k)
    return tuple(dist)


def _convolve(a: list[float], b: list[float], cap: int) -> list[float]:
    out = [0.0] * min(len(a) + len(b) - 1, cap)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b[:cap - i]):
                out[i + j] += x * y
    return out


def _rows_law(per_token: tuple[float, ...], tokens: int, cap: int) -> list[float]:
    """P(a rank gets m rows), m < ``cap``, over ``tokens`` independent tokens: the per-token law
    raised to the power ``tokens`` by squaring, cut at ``cap`` (beyond it the mass is negligible)."""
    law, power, n = [1.0], list(per_token), tokens
    while n:
        if n & 1:
            law = _convolve(law, power, cap)
        n >>= 1
        if n:
            power = _convolve(power, power, cap)
    return law


def _expected_max(per_token: tuple[float, ...], tokens: int, ep: int, normal: bool) -> float:
    """E[max over ``ep`` independent ranks of the rows] / the mean rank's rows: sum over m >= 0 of
    1 - P(rows <= m)^ep, with each rank's rows summed exactly or taken as normal."""
    mean = tokens * sum(c * q for c, q in enumerate(per_token))
    var = tokens * sum(c * c * q for c, q in enumerate(per_token)) - mean * mean / tokens
    if var <= 1e-12 * mean * mean:
        return 1.0  # every rank gets the same rows (top-k of all experts)
    cap = int(mean + 12 * math.sqrt(var)) + len(per_token) + 1
    if normal:
        law = statistics.NormalDist(mean, math.sqrt(var))
        below = [law.cdf(m + 0.5) for m in range(cap)]
    else:
        below = list(itertools.accumulate(_rows_law(per_token, tokens, cap)))
    return sum(1.0 - min(1.0, cdf) ** ep for cdf in below) / mean


@functools.lru_cache(maxsize=4096)
def busiest_rank(tokens: int, num_experts: int, top_k: int, ep: int, n_group: int | None = None,
                 topk_group: int | None = None) -> float:
    """Expected routed rows on the busiest of ``ep`` ranks over the mean rank's, ``tokens``
    tokens each picking ``top_k`` of ``num_experts`` experts uniformly at random (within
    ``topk_group`` of ``n_group`` groups where given, and where ranks hold whole groups or
    groups whole ranks; otherwise, or when ``ep`` does not divide the experts, as without). A
    combine waits for that rank, and a table measured with perfectly even routing times the mean
    rank: one DeepSeek-V3 token on 8 ranks puts its 8 picks on the 4 ranks of its 4 groups, the
    busiest holding about 3.2 of them (a Monte Carlo of the same routing: 3.5), against 1.

    Each rank's rows are a sum of ``tokens`` independent per-token counts (:func:`_rank_picks`),
    summed exactly up to :data:`NORMAL_FROM_ROWS` rows a rank and taken as normal beyond. The
    ranks are taken as independent of one another, which ignores that the picks on all ranks
    add up to tokens x top_k: low by up to 10% at a few tokens under group limits, 3% by 16
    (tests/simulator/test_cost.py)."""
    if tokens <= 0 or ep <= 1 or num_experts % ep:
        return 1.0
    aligned = n_group and topk_group and (ep % n_group == 0 or n_group % ep == 0)
    per_token = _rank_picks(num_experts, top_k, ep, n_group if aligned else None, topk_group if aligned else None)
    return _expected_max(per_token, tokens, ep, normal=tokens * top_k / ep > NORMAL_FROM_ROWS)


@functools.lru_cache(maxsize=256)
def expected_destination_nodes(num_experts: int, top_k: int, nodes: int, n_group: int | None = None,
                               topk_group: int | None = None) -> float:
    """Expected distinct nodes one token's top-k experts live on, experts split evenly over
    ``nodes`` in order (DeepEP's normal mode sends a token to each such node once).

    Without group limits each token picks ``top_k`` of ``num_experts`` uniformly: a node with
    e experts is missed with probability C(E - e, k) / C(E, k). With DeepSeek-V3's
    group-limited routing the token first picks ``topk_group`` of ``n_group`` expert groups,
    then its experts among those groups' experts; the expectation is taken over every choice
    of groups (C(8, 4) = 70 for DeepSeek-V3).
    """
    if nodes <= 1:
        return 1.0
    per_node = num_experts / nodes
    if not n_group or not topk_group or topk_group >= n_group or num_experts % n_group:
        miss = math.comb(num_experts - round(per_node), top_k) / math.comb(num_experts, top_k)
        return nodes * (1.0 - miss)
    per_group = num_experts // n_group
    total = 0.0
    choices = list(itertools.combinations(range(n_group), topk_group))
    for groups in choices:
        eligible = [e for g in groups for e in range(g * per_group, (g + 1) * per_group)]
        pool = len(eligible)
        hits = 0.0
        for node in range(nodes):
            lo, hi = node * per_node, (node + 1) * per_node
            inside = sum(1 for e in eligible if lo <= e < hi)
            hits += 1.0 - math.comb(pool - inside, top_k) / math.comb(pool, top_k)
        total += hits
    return total / len(choices)
