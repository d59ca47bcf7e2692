"""Parallel layout and workload of one serving step, validated, and what one rank sees."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infercast_adapters import InfercastError


@dataclass(frozen=True)
class Parallel:
    """A symmetric deployment: ``num_devices = tp x dp``; attention and dense MLPs are TP
    inside each DP group; routed experts are split over ``ep`` ranks (``ep = 1``: TP MoE)."""

    num_devices: int
    tp: int
    dp: int
    ep: int
    shared_expert_tp: bool = False
    two_batch_overlap: bool = False
    scale_up_domain: int = 8
    """Devices that share the fast link (a node, or an Ascend super-node)."""
    redundant_experts: int = 0
    """Extra expert slots for load balancing (sglang ``--ep-num-redundant-experts``): the EP
    ranks hold ``(experts + redundant) / ep`` experts each."""

    @property
    def moe_tp(self) -> int:
        """Ranks each routed expert's intermediate dimension is split over."""
        return self.tp if self.ep == 1 else self.num_devices // self.ep


@dataclass(frozen=True)
class Workload:
    """One step: ``num_queries`` requests across all DP ranks, each adding ``query_length``
    tokens on top of ``context_length`` cached ones."""

    num_queries: int
    query_length: int
    context_length: int
    decode: bool

    def requests_per_rank(self, parallel: Parallel) -> int:
        return math.ceil(self.num_queries / parallel.dp)

    def tokens_per_rank(self, parallel: Parallel) -> int:
        return self.requests_per_rank(parallel) * self.query_length

    @property
    def kv_length(self) -> int:
        """Tokens each request attends to at the end of this step."""
        return self.context_length + self.query_length

    @property
    def parts(self) -> tuple[Workload, ...]:
        """The groups attention runs separately: one here (see :class:`MixedWorkload`)."""
        return (self,)


@dataclass(frozen=True)
class MixedWorkload:
    """One step of a continuous-batching engine that batches decoding requests with prompt
    chunks (vLLM's scheduler, sglang ``--enable-mixed-chunk``): one forward over both parts'
    tokens, launched as a prefill step is (piecewise CUDA graphs or eagerly, by its prompt
    chunk; DeepEP normal mode), with each part's
    attention run by its own kernel at its own context (:attr:`parts`)."""

    decoding: Workload
    chunks: Workload
    decode = False  # the step as a whole is not a decode step (no decode graph, normal all-to-all)

    def __post_init__(self) -> None:
        if not self.decoding.decode or self.chunks.decode:
            raise ValueError("MixedWorkload takes a decode workload and a prefill (chunk) workload")

    @property
    def parts(self) -> tuple[Workload, Workload]:
        return (self.decoding, self.chunks)

    def requests_per_rank(self, parallel: Parallel) -> int:
        return sum(part.requests_per_rank(parallel) for part in self.parts)

    def tokens_per_rank(self, parallel: Parallel) -> int:
        return sum(part.tokens_per_rank(parallel) for part in self.parts)


def validate_layout(parallel: Parallel, *, num_heads: int, num_experts: int | None, max_devices_hint: str = "") -> None:
    """Raise with a one-paragraph explanation when the layout cannot run."""
    for name in ("num_devices", "tp", "dp", "ep"):
        value = getattr(parallel, name)
        if not isinstance(value, int) or value < 1:
            raise InfercastError(f"--{name.replace('_', '-')}{'-size' if name in ('tp', 'dp', 'ep') else ''} must be a positive integer, got {value!r}")
    if parallel.tp * parallel.dp != parallel.num_devices:
        raise InfercastError(
            f"TP x DP must equal the number of devices: {parallel.tp} x {parallel.dp} = "
            f"{parallel.tp * parallel.dp}, but --num-devices is {parallel.num_devices}. "
            f"For {parallel.num_devices} devices use e.g. --tp-size {parallel.num_devices} --dp-size 1."
        )
    if num_heads % parallel.tp:
        valid = [t for t in range(1, num_heads + 1) if num_heads % t == 0 and t <= parallel.num_devices]
        raise InfercastError(
            f"--tp-size {parallel.tp} does not divide the {num_heads} attention heads; valid TP sizes: "
            f"{', '.join(map(str, valid))}"
        )
    if parallel.ep > 1:
        if num_experts is None:
            raise InfercastError(f"--ep-size {parallel.ep} needs an MoE model; this model has no routed experts (use --ep-size 1)")
        if parallel.ep > parallel.num_devices:
            raise InfercastError(f"--ep-size {parallel.ep} exceeds the {parallel.num_devices} devices")
        slots = num_experts + parallel.redundant_experts
        if slots % parallel.ep:
            raise InfercastError(
                f"--ep-size {parallel.ep} does not divide the {slots} expert slots ({num_experts} routed experts"
                f" + {parallel.redundant_experts} redundant); add --ep-num-redundant-experts to fill every rank "
                f"evenly, or use an EP size up to "
                f"{parallel.num_devices}: "
                + ", ".join(str(e) for e in range(1, parallel.num_devices + 1) if slots % e == 0 and parallel.num_devices % e == 0)
            )
        if parallel.num_devices % parallel.ep:
            raise InfercastError(f"--ep-size {parallel.ep} must divide --num-devices {parallel.num_devices}")


def validate_workload(workload: Workload, *, max_positions: int | None) -> None:
    for name in ("num_queries", "query_length"):
        value = getattr(workload, name)
        if not isinstance(value, int) or value < 1:
            raise InfercastError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
    if not isinstance(workload.context_length, int) or workload.context_length < 0:
        raise InfercastError(f"--context-length must be zero or a positive integer, got {workload.context_length!r}")
    if max_positions is not None and workload.kv_length > max_positions:
        raise InfercastError(
            f"context {workload.context_length} + query {workload.query_length} = {workload.kv_length} tokens "
            f"exceeds the model's max_position_embeddings ({max_positions})"
        )
