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
"""

from __future__ import annotations

import functools
import itertools
import math

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
    """The busiest EP rank's routed rows over the mean: the rank that holds the most popular
    expert carries its share plus an average share for each of its other experts."""
    if distribution == "balanced" or ep <= 1:
        return 1.0
    shares = popularity(distribution, num_experts, top_k)
    local = num_experts / ep
    rest = (1.0 - shares[0]) / (num_experts - 1)
    return max(1.0, (shares[0] + (local - 1) * rest) / (local / num_experts))


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
