"""``infercast plan``: sweep layouts, batch sizes and speculative settings; keep what fits and
meets the latency targets; report the Pareto frontier of throughput per device against speed
per user, and the launch command of the best point.

Speed comes from reuse, not from pricing less: a model is built once per layout and
quantization (the workload is swapped on the built model), and every forward is priced once
per distinct shape (layout, tokens per request, batch), shared by every configuration that
runs it: plain decode, the verify of each speculative setting with the same number of draft
tokens, the draft forwards of settings with the same topk.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from infercast_adapters import InfercastError
from infercast_adapters.arch import text_config_of
from infercast_adapters.config import load_config

from infercast.build import BuiltModel, build
from infercast.devices import GIB, DeviceSpec
from infercast.engines import ENGINES, engine_named, reaches
from infercast.layers import KV_DTYPES, SimContext
from infercast.memory import MemoryLimits, kv_bytes_held
from infercast.parallel import Parallel, Workload, validate_layout
from infercast.pricing import (
    absorbed_in_graphs,
    absorbed_prefix_below,
    all_reduce_fusion,
    cost_model_for,
    decode_graph_tokens,
    default_memory_share,
    mla_pool_cast,
    moe_runner,
    phase_of,
    pool_cast_why,
    prefill_graph_tokens,
    spec_host_rows,
)
from infercast.quant import QuantPlan, checkpoint_quantization
from infercast.request import UserInput, check_flag
from infercast.serving import MODES, ServingOptions, default_chunk
from infercast.simulate import (
    _checkpoint_quantization,
    _resolve_quant,
    mtp_quant,
    quant_on_device,
    resolve_kv_cache_dtype,
    resolve_profile,
    routed_experts,
    speculative_request,
    unservable,
)
from infercast.step import price_records, step_time
from infercast.trace import trace
from infercast.validate import check_config

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Layout:
    num_devices: int
    tp: int
    dp: int
    ep: int
    redundant_experts: int = 0
    """Extra expert slots (sglang ``--ep-num-redundant-experts``), so an EP size that does not
    divide the experts still gives every rank the same number (:func:`infercast.disagg.pool_layouts`)."""

    def describe(self) -> str:
        return f"TP{self.tp} DP{self.dp} EP{self.ep}" + (f"+{self.redundant_experts}" if self.redundant_experts else "")


@dataclass(frozen=True)
class SpecChoice:
    """(s, k, n) of one speculative setup (``option``: its label, the acceptance preset's name
    for a family's registered option); a configuration without speculation has None."""

    num_steps: int
    topk: int
    num_draft_tokens: int
    option: str = ""

    def describe(self) -> str:
        setting = f"s{self.num_steps} k{self.topk} n{self.num_draft_tokens}"
        return f"{self.option} {setting}" if self.option else setting


DEFAULT_SPEC_GRID = tuple(SpecChoice(s, 1, s + 1) for s in range(1, 6))
"""Chains of 1 to 5 draft steps: what a preset measured as a chain can price."""


@dataclass
class Config:
    layout: Layout
    quantization: str | None
    batch: int
    spec: SpecChoice | None
    tpot_ms: float = math.nan
    ttft_ms: float = math.nan
    accept_length: float = 1.0
    tokens_per_s_per_device: float = 0.0
    tokens_per_s_per_user: float = 0.0
    memory_gib: float = 0.0
    fits: bool = False
    meets_slo: bool = False
    violation: float = 0.0
    """How far outside the SLOs (max ratio over 1); 0 when met."""
    serving: dict[str, Any] | None = None
    """Aggregated serving at the plan's load (:func:`infercast.agg.evaluate_agg`); None: one
    request's prefill alone and the decode step at ``batch``."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layout"] = asdict(self.layout)
        data["spec"] = asdict(self.spec) if self.spec else None
        return data


@dataclass
class PlanRequest:
    model: str
    device: str = "H200"
    num_devices: tuple[int, ...] = (8,)
    input_length: int = 1024
    output_length: int = 1024
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    quantizations: tuple[str | None, ...] = (None,)
    batches: tuple[int, ...] = DEFAULT_BATCHES
    kv_cache_dtype: str = "auto"
    speculative: UserInput | tuple[UserInput, ...] | None = None
    """Speculative setups (algorithm, draft, acceptance), each swept over ``spec_grid``; None:
    the model family's own options that its adapter offers for sweeping (``SpecOption.default``),
    an empty tuple: no speculation."""
    spec_grid: tuple[SpecChoice, ...] | None = None
    """(s, k, n) settings for every setup; None: :data:`DEFAULT_SPEC_GRID`."""
    engine: str = "sglang"
    engine_version: str | None = None
    calibration: str | None = None
    cost_model: str = "measured"
    expert_imbalance: str = "balanced"
    prefill_cuda_graph: str = "auto"
    """Prefill in piecewise CUDA graphs: ``auto``, ``on`` or ``off`` (as ``UserInput``)."""
    prefill_cuda_graph_max_tokens: int | None = None
    """The most tokens per rank a prefill forward is captured for (None: the engine's; as ``UserInput``)."""
    all_reduce_fusion: str = "auto"
    """Each layer's all-reduce and the norm after it as one kernel: ``auto``, ``on`` or ``off``."""
    overlap_scheduling: str = "auto"
    """The scheduler one step ahead of the GPU: ``auto``, ``on`` or ``off`` (as ``UserInput``)."""
    moe_kernel: str = "auto"
    """The fused-MoE kernel family the engine is launched with (``auto``: its default; as ``UserInput``)."""
    moe_all_to_all: str = "auto"
    """Expert parallelism through the engine's all-to-all: ``auto``, ``on`` or ``off`` (as ``UserInput``)."""
    enable_attn_tp_input_scattered: bool = False
    """sglang's ``--enable-attn-tp-input-scattered`` for every server, priced in prefill where
    sglang's checks pass for the layout (:meth:`Planner.scattered_input`)."""
    mode: str = "agg"
    """``agg`` (continuous batching with chunked prefill), ``disagg`` (prefill and decode pools)
    or ``both``; ``static``: one request's prefill alone and the decode step at each batch."""
    serving: ServingOptions = field(default_factory=ServingOptions)
    mem_fraction_static: float | None = None
    """Share of each device's memory for weights, KV cache and activations (None: 0.9)."""
    max_total_tokens: int | None = None
    """KV cache slots per rank at most (None: every slot the memory left after the weights holds)."""


@dataclass
class PlanResult:
    configs: list[Config]
    frontier: list[Config]
    best: Config | None
    closest: list[Config]
    evaluated: int
    sweep_s: float
    traces: int
    request: PlanRequest = field(repr=False)
    notes: list[str] = field(default_factory=list)
    disagg: Any = None
    """:class:`infercast.disagg.DisaggResult` with ``--mode disagg`` or ``both``."""
    execution: dict[str, Any] = field(default_factory=dict)
    """What evaluated the aggregated (or static) grid (:class:`infercast.executor.Execution` as a dict)."""


def layouts(num_devices: int, *, num_heads: int, num_experts: int | None) -> list[Layout]:
    """TP across all devices; for MoE models also TP attention with EP experts, DP attention
    with EP experts, and DP over nodes with TP inside; invalid ones are dropped."""
    candidates = [Layout(num_devices, num_devices, 1, 1)]
    if num_experts:
        candidates += [Layout(num_devices, num_devices, 1, num_devices), Layout(num_devices, 1, num_devices, num_devices)]
        if num_devices >= 16:
            candidates.append(Layout(num_devices, 8, num_devices // 8, num_devices))
    valid = []
    for layout in candidates:
        try:
            validate_layout(Parallel(num_devices, layout.tp, layout.dp, layout.ep), num_heads=num_heads,
                            num_experts=num_experts)
        except InfercastError:
            continue
        if layout not in valid:
            valid.append(layout)
    return valid


def pareto(configs: Iterable[Config]) -> list[Config]:
    """Configurations no other beats on both tokens/s per device and tokens/s per user."""
    ordered = sorted(configs, key=lambda c: (-c.tokens_per_s_per_user, -c.tokens_per_s_per_device))
    frontier, best_device = [], -math.inf
    for c in ordered:
        if c.tokens_per_s_per_device > best_device:
            frontier.append(c)
            best_device = c.tokens_per_s_per_device
    return frontier


class Planner:
    def __init__(self, request: PlanRequest, *, manager: Any = None, devices: Any = None) -> None:
        from infercast.plugins import get_devices, get_manager, known_model_refs

        self.request = request
        self.own_registries = (manager is not None and manager is not get_manager()) or devices is not None
        """True when this planner was given its own plugin manager or devices, which worker
        processes cannot rebuild from the request: its grid then runs in this process."""
        self.manager = manager or get_manager()
        self.device: DeviceSpec = (devices or get_devices()).get(request.device)
        from infercast.routing import check_distribution

        check_distribution(request.expert_imbalance)
        self.costs = cost_model_for(UserInput(engine=request.engine, engine_version=request.engine_version,
                                              calibration=request.calibration, cost_model=request.cost_model,
                                              overlap_scheduling=request.overlap_scheduling,
                                              moe_kernel=request.moe_kernel), self.device)
        self.config = load_config(request.model, manager=self.manager, known_models=known_model_refs(self.manager))
        self.manager.patch_config(self.config)
        self.profile = resolve_profile(request.model, self.config, self.manager)
        self.text = text_config_of(self.config)
        check_config(request.model, self.config, self.text, self.profile)
        if request.kv_cache_dtype not in KV_DTYPES:
            raise InfercastError(f"unknown --kv-cache-dtype {request.kv_cache_dtype!r}; valid: {', '.join(KV_DTYPES)}")
        if request.serving.scheduler_recv_interval > 1 and engine_named(request.engine).recv_interval_flag is None:
            takes = [name for name, engine in ENGINES.items() if engine.recv_interval_flag]
            raise InfercastError(f"--scheduler-recv-interval is {', '.join(takes)}'s; {request.engine} polls for "
                                 f"requests every step (valid with --engine {' or '.join(takes)})")
        if not request.serving.mixed_chunk and engine_named(request.engine).mixed_chunk_flag is None:
            takes = [name for name, engine in ENGINES.items() if engine.mixed_chunk_flag]
            raise InfercastError(f"--mixed-chunk off is {', '.join(takes)}'s default; {request.engine}'s scheduler "
                                 f"always mixes prompt chunks into decode steps (valid with --engine "
                                 f"{' or '.join(takes)}, or --mixed-chunk on)")
        for name, value in (("--input-length", request.input_length), ("--output-length", request.output_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InfercastError(f"{name} must be a positive whole number of tokens, got {value!r}")
        max_positions = getattr(self.text, "max_position_embeddings", None)
        if max_positions and request.input_length + request.output_length > max_positions:
            raise InfercastError(
                f"--input-length {request.input_length} + --output-length {request.output_length} = "
                f"{request.input_length + request.output_length} tokens exceeds {request.model}'s "
                f"max_position_embeddings ({max_positions})")
        lengths = request.serving.lengths
        if lengths and max_positions and lengths.max_total > max_positions:
            raise InfercastError(f"--length-distribution {lengths.source}: a request of {lengths.max_total} tokens "
                                 f"exceeds {request.model}'s max_position_embeddings ({max_positions})")
        for name, value in (("--ttft-slo-ms", request.ttft_slo_ms), ("--tpot-slo-ms", request.tpot_slo_ms)):
            if value is not None and not value > 0:
                raise InfercastError(f"{name} must be a positive number of milliseconds, got {value!r}")
        if request.mode not in (*MODES, "static"):
            raise InfercastError(f"unknown --mode {request.mode!r}; valid: {', '.join(MODES)}")
        for name in ("mem_fraction_static", "max_total_tokens", "prefill_cuda_graph_max_tokens"):
            check_flag(name, getattr(request, name))
        self.memory = MemoryLimits.asked(request.mem_fraction_static, request.max_total_tokens)
        self._built: dict[tuple, tuple[BuiltModel, SimContext]] = {}
        self._drafts: dict[tuple, Any] = {}
        self._seconds: dict[tuple, float] = {}
        self._prefill_records: dict[tuple, list] = {}
        self._scatter_blockers: dict[tuple, str | None] = {}
        self.traces = 0
        self.acceptance: dict[SpecChoice, tuple[float, str]] = {}
        self.spec_requests: dict[str, Any] = {}
        """Each speculative setup resolved (draft and acceptance), by its label."""
        self.spec_grid: list[SpecChoice] = []
        self.spec_notes: list[str] = []
        self._quant_plans: dict[str | None, QuantPlan] = {}
        self.quantizations = self._servable_quantizations()
        grid = DEFAULT_SPEC_GRID if request.spec_grid is None else request.spec_grid
        setups = self._speculative_setups()
        if request.spec_grid and not setups:
            raise InfercastError(f"--speculative-grid: {request.model} ({self.profile.model_type}) has no speculative "
                                 f"option its adapter offers for sweeping; give --speculative-algorithm (EAGLE3 with "
                                 f"--speculative-draft-model, or MTP) and an acceptance")
        for label, user, offered in setups:
            try:
                for choice in grid:
                    spec = speculative_request(replace(user, speculative_num_steps=choice.num_steps,
                                                       speculative_eagle_topk=choice.topk,
                                                       speculative_num_draft_tokens=choice.num_draft_tokens),
                                               self.text, self.profile, self.manager)
                    labelled = replace(choice, option=label)
                    self.acceptance[labelled] = (spec.accept_length, spec.acceptance)
                    self.spec_requests[label] = spec
                    self.spec_grid.append(labelled)
            except InfercastError as exc:
                if not offered:
                    raise
                self.spec_grid = [c for c in self.spec_grid if c.option != label]
                self.spec_requests.pop(label, None)
                self.spec_notes.append(f"speculative option {label} left out: {exc}")

    def _speculative_setups(self) -> list[tuple[str, UserInput, bool]]:
        """(label, flags, offered by the adapter) of every speculative setup to sweep."""
        given = self.request.speculative
        if given is None:
            return [(o.name, UserInput(model=self.request.model, speculative_algorithm=o.algorithm,
                                       speculative_draft_model=o.draft, acceptance_preset=o.name), True)
                    for o in self.manager.speculative_options(self.profile.model_type) if o.default]
        setups = (given,) if isinstance(given, UserInput) else tuple(given)
        return [((u.speculative_draft_model or (u.speculative_algorithm or "MTP")).split("/")[-1], u, False)
                for u in setups]

    @property
    def spec_request(self) -> Any:
        """The first speculative setup, resolved (None without speculation)."""
        return next(iter(self.spec_requests.values()), None)

    def spec_for(self, config: Config) -> Any:
        """The resolved speculative setup ``config`` runs (None without speculation)."""
        return self.spec_requests[config.spec.option] if config.spec is not None else None

    # ------------------------------------------------------------------ cached pricing

    def _model(self, layout: Layout, quant: str | None) -> tuple[BuiltModel, SimContext]:
        key = (layout, quant)
        if key not in self._built:
            parallel = Parallel(layout.num_devices, layout.tp, layout.dp, layout.ep,
                                scale_up_domain=self.device.scale_up_domain(),
                                redundant_experts=layout.redundant_experts)
            plan = self.quant_plan(quant)
            ctx = SimContext(parallel=parallel, workload=Workload(1, 1, 0, True), quant=plan,
                             mtp_quant=mtp_quant(self.config, self.text, quant, self.profile, self.costs.engine,
                                                 self.device, None, plan),
                             kv_cache_dtype=KV_DTYPES[self.kv_cache_dtype(quant)],
                             expert_imbalance=self.request.expert_imbalance, memory=self.memory,
                             pointwise=self.costs.engine.pointwise, sliding_kv=self.costs.engine.sliding_kv,
                             fp32_router=self.costs.engine.fp32_router,
                             moe_all_to_all=self.costs.engine.moe_all_to_all.runs(
                                 plan.routed_experts.kernel_dtype, layout.dp, self.device.cuda_arch,
                                 self.request.moe_all_to_all if layout.ep > 1 else "auto",
                                 self.costs.engine.name))
            built = build(self.config, self.profile, ctx, self.manager)
            chunk = self.request.serving.chunked_prefill_size or default_chunk(
                self.device.memory_bytes, self.request.engine, self.device.name)
            ctx.prefill_graph_tokens = prefill_graph_tokens(self.costs, built, parallel, chunk,
                                                            mode=self.request.prefill_cuda_graph,
                                                            max_tokens=self.request.prefill_cuda_graph_max_tokens)
            ctx.decode_graph_tokens = decode_graph_tokens(self.costs, self.request.prefill_cuda_graph_max_tokens, chunk)
            ctx.all_reduce_fusion_tokens = all_reduce_fusion(self.costs, built, parallel,
                                                             mode=self.request.all_reduce_fusion)[0]
            ctx.kv_pool_tokens = mla_pool_cast(self.costs, built, ctx)[0]
            ctx.moe_runner = moe_runner(self.costs, built, ctx)[0]
            ctx.absorbed_prefix_below = absorbed_prefix_below(self.costs, built)
            ctx.absorbed_in_graphs = absorbed_in_graphs(self.costs, built)
            self._built[key] = (built, ctx)
        return self._built[key]

    def launch_fraction(self, layout: Layout, quant: str | None, speculative: bool,
                        chunk: int | None = None, *, disaggregated: bool = False) -> float | None:
        """The ``--mem-fraction-static`` sglang's launch command needs to serve ``layout`` with the
        share of each device the plan priced: the request's, else the default share where sglang's
        own default for this launch is smaller (:attr:`~infercast.engines.Engine.static_memory`);
        None where sglang's default gives at least as much. ``chunk``: the instance's prompt tokens a
        step where it is not the request's (a disaggregated prefill pool); ``disaggregated``: a
        prefill or decode pool, which sglang launches without piecewise prefill graphs, so their
        memory is not kept back."""
        if self.request.mem_fraction_static is not None:
            return self.request.mem_fraction_static
        built, ctx = self._model(layout, quant)
        version = self.costs.engine_version if self.request.engine == "sglang" else None
        share = default_memory_share(engine_named("sglang").static_memory, version, self.device, built, ctx,
                                     self.config, speculative=speculative,
                                     chunk=chunk or self.request.serving.chunked_prefill_size,
                                     prefill_graphs=False if disaggregated else None,
                                     capture_tokens=self.request.prefill_cuda_graph_max_tokens)[0]
        return self.memory.fraction if share < self.memory.fraction else None

    def scattered_input(self, layout: Layout, quant: str | None, algorithm: str | None = None, *,
                        disaggregated: bool = False) -> tuple[bool, str | None]:
        """Whether ``layout``'s prefill runs with the attention input scattered: the request
        asks for it and sglang's checks pass (``algorithm``: the speculative one the server runs;
        ``disaggregated``: a prefill pool, which captures no prefill graphs); with why it stays
        off where asked (None: not asked, or on)."""
        if not self.request.enable_attn_tp_input_scattered:
            return False, None
        why = self.scatter_blocker(layout, quant, algorithm, disaggregated=disaggregated)
        return why is None, why

    def scatter_blocker(self, layout: Layout, quant: str | None, algorithm: str | None = None, *,
                        disaggregated: bool = False) -> str | None:
        """Why sglang would keep the scattered attention input off for ``layout``, asked for or
        not (None: it would run it); arguments as :meth:`scattered_input`."""
        key = (layout, quant, algorithm, disaggregated)
        if key not in self._scatter_blockers:
            from infercast.pricing import scattered_attention_input

            built, ctx = self._model(layout, quant)
            self._scatter_blockers[key] = scattered_attention_input(self.costs, built, ctx, speculative=algorithm,
                                                                    prefill_graphs=False if disaggregated else None)
        return self._scatter_blockers[key]

    def commands_for(self, config: Config) -> dict[str, list[str]]:
        """The launch commands of an aggregated ``config`` (:func:`launch_commands`)."""
        return launch_commands(self.request, config, self.device.devices_per_node, self.spec_for(config),
                               expert_dtype=self.expert_dtype(config.quantization), cuda_arch=self.device.cuda_arch,
                               mem_fraction=self.launch_fraction(config.layout, config.quantization,
                                                                 config.spec is not None),
                               scattered=self.scattered_input(config.layout, config.quantization,
                                                              self.algorithm(config.spec))[0],
                               capture=self._model(config.layout, config.quantization)[1].prefill_graph_tokens
                               if self.request.engine == "vllm" else 0)

    def notes_for(self, config: Config) -> list[str]:
        """What an aggregated ``config``'s launch commands cannot say (:func:`launch_notes`)."""
        return launch_notes(self.request, config, self.spec_for(config),
                            expert_dtype=self.expert_dtype(config.quantization), cuda_arch=self.device.cuda_arch,
                            scatter_off=self.scattered_input(config.layout, config.quantization,
                                                             self.algorithm(config.spec))[1],
                            checkpoint_fp8_kv=self.checkpoint_fp8_kv(config.quantization)) \
            + self.online_over_quantized(config.quantization) + self.refusals_by_other_engines(config.quantization)

    def online_over_quantized(self, quant: str | None) -> list[str]:
        """A note where sglang's and vLLM's commands quantize the checkpoint as it loads
        (``--quantization fp8``) but the model's checkpoint is already quantized another way: they
        read its quantization_config before the flag and will not apply it (vLLM loads a ModelOpt
        checkpoint as ModelOpt whatever the flag, and refuses another mismatch; sglang refuses
        the pair), so the commands want the 16-bit checkpoint."""
        engines = [name for name in ("sglang", "vllm") if ONLINE_QUANTIZATION[name].get(quant or "")]
        own = checkpoint_quantization(_checkpoint_quantization(self.config, self.text))
        if not engines or own in ("bf16", ONLINE_QUANTIZATION[engines[0]][quant][-1]):
            return []
        flag = " ".join(ONLINE_QUANTIZATION[engines[0]][quant])
        return [f"{', '.join(engines)}: {flag} quantizes a 16-bit checkpoint as it loads; {self.request.model} is "
                f"already quantized ({own}), which the engines read before the flag and will not requantize: point "
                "the model path at its 16-bit checkpoint"]

    def checkpoint_fp8_kv(self, quant: str | None) -> bool:
        """Whether an engine's ``--kv-cache-dtype auto`` would store this checkpoint's KV cache in
        FP8 under quantization ``quant`` (:func:`~infercast.simulate.resolve_kv_cache_dtype`)."""
        return resolve_kv_cache_dtype("auto", self.config, self.text, quant).startswith("fp8")

    def refusals_by_other_engines(self, quant: str | None,
                                  engines: tuple[str, ...] = ("sglang", "vllm", "trtllm")) -> list[str]:
        """Notes for the other ``engines``' launch commands where that engine does not serve
        quantization ``quant`` on the device (:func:`~infercast.simulate.unservable`), which the
        plan's own engine does."""
        plan = _resolve_quant(self.config, self.text, quant, self.profile)
        return [f"{name}: its command will not serve this plan: {why[0]}" for name in engines
                if name != self.costs.engine.name and (why := unservable(plan, engine_named(name), self.device))]

    def algorithm(self, spec: SpecChoice | None) -> str | None:
        """The speculative algorithm a configuration with ``spec`` runs (None: none)."""
        return self.spec_requests[spec.option].algorithm if spec is not None else None

    def quant_plan(self, quant: str | None) -> QuantPlan:
        """The plan quantization ``quant`` (None: the checkpoint's) runs as the engine serves it on
        the device (:func:`~infercast.simulate.quant_on_device`)."""
        if quant not in self._quant_plans:
            self._quant_plans[quant] = quant_on_device(_resolve_quant(self.config, self.text, quant, self.profile),
                                                       self.costs.engine, self.device)
        return self._quant_plans[quant]

    def _servable_quantizations(self) -> tuple[str | None, ...]:
        """The asked quantizations the engine serves on the device; the others are left out with a
        note, unless none is left."""
        kept = []
        for quant in self.request.quantizations:
            try:
                self.quant_plan(quant)
            except InfercastError as exc:
                if len(self.request.quantizations) == 1:
                    raise
                self.spec_notes.append(f"--quantization {quant or 'checkpoint'} left out: {exc}")
            else:
                kept.append(quant)
        if not kept:
            raise InfercastError(f"no --quantization choice can be served: {'; '.join(self.spec_notes)}")
        return tuple(kept)

    def kv_cache_dtype(self, quant: str | None) -> str:
        """The KV cache dtype under quantization ``quant`` (``--kv-cache-dtype auto``: the
        checkpoint's, :func:`~infercast.simulate.resolve_kv_cache_dtype`)."""
        return resolve_kv_cache_dtype(self.request.kv_cache_dtype, self.config, self.text, quant)

    def expert_dtype(self, quant: str | None) -> str:
        """The routed experts' kernel dtype under quantization ``quant`` (None: the checkpoint's)."""
        return self.quant_plan(quant).routed_experts.kernel_dtype

    def _draft(self, layout: Layout, quant: str | None, option: str):
        from infercast.speculative import draft_for

        key = (layout, quant, option)
        if key not in self._drafts:
            built, ctx = self._model(layout, quant)
            self._drafts[key] = draft_for(self.spec_requests[option].draft_config, built, ctx, self.manager,
                                          self.costs.engine, self.device)
        return self._drafts[key]

    def seconds(self, layout: Layout, quant: str | None, model: str, batch: int, tokens: int, logits: int,
                decode: bool = True, context: int = 0, speculative: bool = False, scattered: bool = False) -> float:
        """One forward's kernel time, priced once per distinct shape (host time apart);
        ``model`` is ``target`` or ``draft:<option>``; ``scattered``: the server scatters the
        attention input (:meth:`scattered_input`)."""
        from infercast.speculative import trace_draft

        shape = (layout, quant, model, batch, tokens, logits, decode, context, scattered)
        key = (*shape, speculative)
        if key not in self._seconds:
            workload = Workload(num_queries=batch, query_length=tokens, context_length=context, decode=decode)
            if model == "target":
                built, ctx = self._model(layout, quant)
            else:
                built, ctx = self._draft(layout, quant, model.partition(":")[2])
            with ctx.using(workload):
                phase = phase_of(self.costs, ctx, decode, speculative=speculative)
            # a prefill is traced once, or once for each of with and without graphs where the
            # engine's MLA form follows them
            traced = (shape, phase.piecewise and ctx.absorbed_in_graphs)
            records = self._prefill_records.get(traced)
            if records is None:
                with ctx.using(workload), ctx.replaying_graphs(phase.piecewise), ctx.scattering(scattered):
                    records = (trace(built.sim, ctx.tokens) if model == "target"
                               else trace_draft(built, ctx.tokens, logits))
                self.traces += 1
                if not decode:
                    self._prefill_records[traced] = records
            priced = price_records(records, self.costs, phase)
            self._seconds[key] = step_time(priced, self.costs, phase, host_step=False).seconds
        return self._seconds[key]

    # ------------------------------------------------------------------ one configuration

    @functools.cached_property
    def pricer(self) -> Any:
        """The :class:`infercast.agg.StepPricer` of this planner: whole serving steps, each shape
        priced once, shared by the aggregated grid and the disaggregated pools."""
        from infercast.agg import StepPricer

        return StepPricer(self)

    def evaluate_point(self, layout: Layout, quant: str | None, batch: int, spec: SpecChoice | None) -> Config:
        """One grid point under the request's mode: the static view (:meth:`evaluate`), or
        continuous batching with chunked prefill (:func:`infercast.agg.evaluate_agg`)."""
        if self.request.mode == "static":
            return self.evaluate(layout, quant, batch, spec)
        from infercast.agg import evaluate_agg

        return evaluate_agg(self, self.pricer, layout, quant, batch, spec)

    def evaluate(self, layout: Layout, quant: str | None, batch: int, spec: SpecChoice | None) -> Config:
        from infercast.speculative import cycle_forwards, weight_bytes

        r = self.request
        config = Config(layout, quant, batch, spec)
        context = r.input_length + r.output_length // 2  # the average decode step
        built, ctx = self._model(layout, quant)
        requests = math.ceil(batch / layout.dp)
        weights = built.sim.weight_bytes()
        length = r.input_length + r.output_length
        kv = requests * kv_bytes_held(built, length, ctx.sliding_kv)
        costs = self.costs
        if spec is None:
            cycle = self.seconds(layout, quant, "target", batch, 1, 1, context=context) + costs.host_step().at(requests)
            tau = 1.0
        else:
            cycle = sum(h.seconds for h in spec_host_rows(costs, requests))
            for forward in cycle_forwards(spec.num_steps, spec.topk, spec.num_draft_tokens):
                if forward.count:
                    model = "target" if forward.model == "target" else f"draft:{spec.option}"
                    cycle += forward.count * self.seconds(layout, quant, model, batch, forward.tokens_per_request,
                                                          forward.logits_per_request, context=context)
            tau = self.acceptance[spec][0]
            draft, _ = self._draft(layout, quant, spec.option)
            weights += weight_bytes(draft)
            kv += requests * length * draft.kv_bytes_per_token()
        slots = requests * length
        memory = weights + kv
        config.memory_gib = memory / GIB
        config.fits = memory <= self.memory.usable_bytes(self.device) and (
            self.memory.max_total_tokens is None or slots <= self.memory.max_total_tokens)
        config.accept_length = tau
        config.tpot_ms = cycle / tau * 1e3
        config.tokens_per_s_per_user = 1e3 / config.tpot_ms
        config.tokens_per_s_per_device = batch * tau / cycle / layout.num_devices
        prefill = self.seconds(layout, quant, "target", 1, r.input_length, 1, decode=False,
                               speculative=spec is not None,
                               scattered=self.scattered_input(layout, quant, self.algorithm(spec))[0])
        request = costs.request_cost(self.profile.tokenizer).at(r.input_length)
        config.ttft_ms = (prefill + costs.host_step().at(1) + request) * 1e3
        ratios = [v / slo for v, slo in ((config.ttft_ms, r.ttft_slo_ms), (config.tpot_ms, r.tpot_slo_ms)) if slo]
        config.violation = max([0.0] + [x - 1 for x in ratios])
        config.meets_slo = config.violation == 0.0
        return config

    def runs_all_to_all(self, layout: Layout, quant: str | None) -> bool:
        """Whether ``layout`` can be served as ``--moe-all-to-all on`` asks: always unless it is on
        and the engine cannot run this expert-parallel layout's experts behind an all-to-all."""
        if self.request.moe_all_to_all != "on" or layout.ep == 1:
            return True
        dtype = self.quant_plan(quant).routed_experts.kernel_dtype
        return self.costs.engine.moe_all_to_all.runs(dtype, layout.dp, self.device.cuda_arch)

    def grid(self) -> list[tuple[Layout, str | None, int, SpecChoice | None]]:
        experts = routed_experts(self.text, self.profile)
        points = []
        for n in self.request.num_devices:
            for layout in layouts(n, num_heads=self.text.num_attention_heads, num_experts=experts):
                for quant in self.quantizations:
                    if not self.runs_all_to_all(layout, quant):
                        continue  # --moe-all-to-all on: the engine cannot serve this layout that way
                    for batch in self.request.batches:
                        if batch < layout.dp:
                            continue  # a DP rank with no request
                        for spec in (None, *self.spec_grid):
                            points.append((layout, quant, batch, spec))
        if not points:
            raise InfercastError(f"no valid layout for {self.request.model} on {self.request.num_devices} devices")
        return points

    def run(self, progress: Callable[[int, int], None] | None = None, executor: Any = None) -> PlanResult:
        """Evaluate the grid; ``executor`` (:mod:`infercast.executor`) spreads it over processes
        or Ray tasks with the same results; default: this process."""
        from infercast.executor import SerialExecutor

        started = time.perf_counter()
        mode = self.request.mode
        points = self.grid() if mode != "disagg" else []
        executor = executor or SerialExecutor()
        configs = executor.evaluate(self, points, progress) if points else []
        disagg = None
        if mode in ("disagg", "both"):
            from infercast.disagg import plan_disagg

            disagg = plan_disagg(self, progress)
        usable = [c for c in configs if c.fits and c.meets_slo]
        frontier = pareto(usable)
        best = max(frontier, key=lambda c: c.tokens_per_s_per_device) if frontier else None
        notes = list(self.spec_notes)
        closest = []
        if best is None:
            fitting = [c for c in configs if c.fits]
            closest = sorted(fitting, key=lambda c: c.violation)[:5]
            if not fitting and configs:
                closest = sorted(configs, key=lambda c: c.memory_gib)[:5]
                usable_gib = self.memory.usable_bytes(self.device) / GIB
                notes.append(f"nothing fits: the smallest configuration needs {closest[0].memory_gib:.1f} GiB per "
                             f"device, {usable_gib:.1f} GiB is usable ({self.memory.describe(self.device)} of "
                             f"{self.device.name}'s memory); try more devices, a smaller --quantization, a shorter "
                             f"input/output or smaller --batch-sizes")
        if self.request.moe_all_to_all == "on":
            notes.append(f"--moe-all-to-all on: expert-parallel layouts {self.costs.engine.name} cannot serve behind an "
                         "all-to-all (its refusals: docs/simulate.md) are left out of the sweep")
        if self.request.speculative is None:
            notes.append(f"speculative decoding swept by default: {', '.join(self.spec_requests) or 'none offered'} "
                         f"(the options the model family's adapter offers; --no-speculative turns it off)")
        for label, spec in self.spec_requests.items():
            notes.append(f"acceptance of {label}: {spec.acceptance}")
        cast_why = pool_cast_why(self.costs, KV_DTYPES[self.kv_cache_dtype(self.quantizations[0])],
                                 bool(getattr(self.text, "kv_lora_rank", None)))
        if cast_why:
            notes.append(f"FP8 KV pool cast, priced at each layout's pool: {cast_why}")
        if mode == "static":
            notes.append(f"decode priced at context {self.request.input_length + self.request.output_length // 2} "
                         f"(input + half the output); memory holds input + output per request; TTFT is one "
                         f"request's prefill alone")
        else:
            from infercast.agg import serving_notes

            notes += serving_notes(self, disagg)
        return PlanResult(configs, frontier, best, closest, len(configs) + (disagg.evaluated if disagg else 0),
                          time.perf_counter() - started, self.traces, self.request, notes, disagg,
                          executor.execution.to_dict() if points else {})


# ------------------------------------------------------------------------------ launch commands

ONLINE_QUANTIZATION = {"sglang": {"FP8": ["--quantization", "fp8"]}, "vllm": {"FP8": ["--quantization", "fp8"]}}
"""Quantizations an engine applies itself to a 16-bit checkpoint at load time, with its flag."""
PREQUANTIZED = {
    "BF16": "a BF16 checkpoint (dequantized)", "W8A16": "an int8 weight-only checkpoint (GPTQ 8-bit)",
    "W8A8_DYNAMIC": "a W8A8 int8 checkpoint (compressed-tensors)", "W8A8_STATIC": "a W8A8 int8 checkpoint with "
    "static activation scales (compressed-tensors)", "W4A8_DYNAMIC": "a W4A8 checkpoint (int4 weights, 8-bit "
    "activations)", "W4A16": "an int4 weight-only checkpoint (GPTQ or AWQ, group 128)",
    "FP8": "an FP8 checkpoint", "FP8_BLOCK": "a block-FP8 checkpoint (128 x 128 scales, DeepSeek-V3's format)",
    "MXFP4": "an MXFP4 checkpoint", "NVFP4": "an NVFP4 checkpoint (ModelOpt's, as NVIDIA publishes them)",
}
"""What to serve instead when an engine cannot quantize to an action itself."""


def quantization_flags(engine: str, quantization: str | None) -> tuple[list[str], str | None]:
    """The engine's flags for ``quantization`` (None: the checkpoint's own, no flag), or no
    flag and a note naming the checkpoint to serve instead: engines read a pre-quantized
    checkpoint's ``quantization_config`` and take no flag for it."""
    if quantization is None:
        return [], None
    flags = ONLINE_QUANTIZATION.get(engine, {}).get(quantization)
    if flags is not None:
        return list(flags), None
    return [], (f"{engine}: {quantization} needs {PREQUANTIZED.get(quantization, 'a checkpoint quantized that way')}; "
                f"point the model path at one (the engine reads its quantization_config; no flag)")


def sglang_prefill_graph_flags(mode: str, version: str | None) -> list[str]:
    """sglang's flag for ``--prefill-cuda-graph on|off`` where it differs from the version's
    default: ``--enable-piecewise-cuda-graph`` before 0.5.10, ``--disable-piecewise-cuda-graph``
    from 0.5.10 (an alias of ``--cuda-graph-backend-prefill disabled`` from 0.5.14)."""
    from infercast.engines import SGLANG_PIECEWISE

    default_on = SGLANG_PIECEWISE.applies(version)
    if mode == "on" and not default_on:
        return ["--enable-piecewise-cuda-graph"]
    if mode == "off" and default_on:
        return ["--disable-piecewise-cuda-graph"]
    return []


SGLANG_FUSION_OFF_SINCE = "0.5.10"
"""The first sglang with ``--enforce-disable-flashinfer-allreduce-fusion``; before it nothing
turns the fusion off where the version turns it on."""


def sglang_fusion_flags(mode: str, version: str | None) -> list[str]:
    """sglang's flag for ``--all-reduce-fusion on|off`` (none for auto, and none for off before
    0.5.10, which has no such flag: :func:`launch_notes` says so)."""
    if mode == "on":
        return ["--enable-flashinfer-allreduce-fusion"]
    if mode == "off" and reaches(version, SGLANG_FUSION_OFF_SINCE):
        return ["--enforce-disable-flashinfer-allreduce-fusion"]
    return []


def vllm_fusion_flags(mode: str, version: str | None, dp: int = 1) -> list[str]:
    """vLLM's pass-config flag for ``--all-reduce-fusion on|off`` (none for auto, none for off
    before 0.17.0, where the fusion is off by default, and none for on with DP ranks, where the
    plan priced no fusion: vLLM's default leaves it off there, vllm-project/vllm issue 34458)."""
    first = engine_named("vllm").all_reduce_fusion.eras[0].since
    if mode == "on":
        return ["-cc.pass_config.fuse_allreduce_rms=true"] if dp == 1 else []
    if mode == "off" and reaches(version, first):
        return ["-cc.pass_config.fuse_allreduce_rms=false"]
    return []


def overlap_flags(engine: str, request: PlanRequest) -> list[str]:
    """``engine``'s flag for ``--overlap-scheduling on|off`` (none for auto): vLLM's
    --async-scheduling / --no-async-scheduling (a BooleanOptionalAction from 0.12; off is the
    default before 0.14.0); TensorRT-LLM takes it from its options file (:func:`trtllm_options`)."""
    mode = request.overlap_scheduling
    if engine == "sglang":
        return ["--disable-overlap-schedule"] if mode == "off" else []
    if engine == "vllm":
        return {"on": ["--async-scheduling"], "off": ["--no-async-scheduling"]}.get(mode, [])
    return []


def sglang_command(request: PlanRequest, config: Config, devices_per_node: int, spec: Any = None,
                   deepep_mode: str = "auto", *, expert_dtype: str, cuda_arch: int | None,
                   mem_fraction: float | None = None, scattered: bool = False) -> list[str]:
    """``python -m sglang.launch_server ...`` for ``config`` (first node's command when multi-node).
    Expert parallelism runs through DeepEP where sglang runs ``expert_dtype`` experts behind it
    on these devices (``cuda_arch``: their compute capability, None for another vendor's), ``auto`` taking the normal kernels for prompt
    steps and the low-latency ones for decode (a disaggregated pool names one); elsewhere
    through the standard dispatcher (no a2a backend). ``mem_fraction``: the
    ``--mem-fraction-static`` to pass where the request gives none (:meth:`Planner.launch_fraction`);
    ``scattered``: the plan priced the scattered attention input (:meth:`Planner.scattered_input`)."""
    from infercast.plugins import served_model

    layout = config.layout
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", served_model(request.model), "--tp-size", str(layout.num_devices)]
    if layout.dp > 1:
        cmd += ["--dp-size", str(layout.dp), "--enable-dp-attention"]
    if layout.ep > 1:
        cmd += ["--ep-size", str(layout.ep)]
        if engine_named("sglang").moe_all_to_all.runs(expert_dtype, layout.dp, cuda_arch,
                                                      "off" if request.moe_all_to_all == "off" else "auto"):
            cmd += ["--moe-a2a-backend", "deepep", "--deepep-mode", deepep_mode]
    if layout.redundant_experts:
        cmd += ["--ep-num-redundant-experts", str(layout.redundant_experts)]
    nodes = math.ceil(layout.num_devices / devices_per_node)
    if nodes > 1:
        cmd += ["--nnodes", str(nodes), "--node-rank", "0", "--dist-init-addr", "MASTER_IP:5000"]
    cmd += quantization_flags("sglang", config.quantization)[0]
    cmd += kv_cache_flags("sglang", launched_kv_dtype(request.kv_cache_dtype, config.quantization))
    cmd += ["--max-running-requests", str(config.batch)]
    fraction = request.mem_fraction_static if request.mem_fraction_static is not None else mem_fraction
    if fraction is not None:
        cmd += ["--mem-fraction-static", f"{fraction:g}"]
    if request.max_total_tokens is not None:
        cmd += ["--max-total-tokens", str(request.max_total_tokens)]
    cmd += sglang_prefill_graph_flags(request.prefill_cuda_graph,
                                      request.engine_version if request.engine == "sglang" else None)
    if request.prefill_cuda_graph_max_tokens is not None:
        cmd += [engine_named("sglang").prefill_graphs.flag, str(request.prefill_cuda_graph_max_tokens)]
    cmd += sglang_fusion_flags(request.all_reduce_fusion, request.engine_version if request.engine == "sglang" else None)
    cmd += overlap_flags("sglang", request)
    if scattered:
        cmd += [engine_named("sglang").scattered_attention_input.flag]
    if config.serving:  # continuous batching as planned: the chunk budget, decodes mixed into prompt steps
        cmd += ["--chunked-prefill-size", str(config.serving["chunked_prefill_size"])]
        cmd += [engine_named("sglang").mixed_chunk_flag] if config.serving["policy"] == "mixed" else []
        recv = config.serving.get("scheduler_recv_interval", 1)
        cmd += [engine_named("sglang").recv_interval_flag, str(recv)] if recv > 1 else []
    if config.spec is not None:
        algorithm = "EAGLE3" if spec.draft_model else "EAGLE"
        cmd += ["--speculative-algorithm", algorithm]
        if spec.draft_model:
            cmd += ["--speculative-draft-model-path", spec.draft_model]
        cmd += ["--speculative-num-steps", str(config.spec.num_steps), "--speculative-eagle-topk", str(config.spec.topk),
                "--speculative-num-draft-tokens", str(config.spec.num_draft_tokens)]
    cmd += ["--trust-remote-code"]
    return cmd


TRTLLM_OPTIONS_FILE = "extra_llm_api_options.yaml"
TRTLLM_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""``--kv-cache-dtype`` as TensorRT-LLM's ``kv_cache_config.dtype`` names it. Its PyTorch backend
takes ``auto``, ``fp8`` (E4M3) and ``nvfp4`` only (``_VALID_KV_CACHE_DTYPES``, its model loader,
0.21-1.x): an E5M2 cache is written as ``fp8`` (the same bytes), and a bf16 or fp16 cache is
left to its auto, which takes the model's dtype unless the checkpoint states an FP8 cache
(:func:`kv_cache_notes`)."""
SGLANG_KV_DTYPES = {"bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
"""sglang's ``--kv-cache-dtype`` choices (server_args.py, 0.5.6-0.5.14) for ours."""
VLLM_KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
"""vLLM's ``--kv-cache-dtype`` choices (``CacheDType``, config/cache.py, 0.16) for ours."""


MODELOPT_TARGETS = ("FP8", "NVFP4")
"""Quantization actions whose checkpoints TensorRT-LLM reads come from NVIDIA's ModelOpt, which
often stores an FP8 KV cache (``kv_cache_quant_algo``) that an engine's auto takes."""


def launched_kv_dtype(asked: str, quantization: str | None) -> str:
    """The KV cache dtype the launch commands name: the one asked, except ``auto`` under a
    quantization action, which the plan prices as bf16 (:func:`~infercast.simulate.resolve_kv_cache_dtype`)
    and the commands therefore name, since the checkpoint they are pointed at may state FP8."""
    return "bf16" if asked == "auto" and quantization else asked


def kv_cache_flags(engine: str, kv_cache_dtype: str) -> list[str]:
    """sglang's or vLLM's flags for ``--kv-cache-dtype``: none for ``auto`` (the engine's own auto
    reads the checkpoint's, as the plan's does); an fp16 cache, which neither names, is the
    model's dtype under their auto (``--dtype float16``, :func:`kv_cache_notes`)."""
    names = SGLANG_KV_DTYPES if engine == "sglang" else VLLM_KV_DTYPES
    if kv_cache_dtype == "fp16":
        return ["--dtype", "float16"]
    return ["--kv-cache-dtype", names[kv_cache_dtype]] if kv_cache_dtype in names else []


def kv_cache_notes(kv_cache_dtype: str, checkpoint_fp8: bool = False, *, cuda_arch: int | None = None,
                   action: bool = False) -> list[str]:
    """What the launch commands cannot say of ``--kv-cache-dtype`` with a flag (``kv_cache_dtype``:
    :func:`launched_kv_dtype`'s; ``checkpoint_fp8``: the checkpoint states an FP8 KV cache, which
    an engine's auto takes; ``cuda_arch``: the devices' compute capability; ``action``: a
    quantization action points the commands at another checkpoint, one of :data:`MODELOPT_TARGETS`'s
    that may state an FP8 cache)."""
    notes = []
    takes = ("its auto takes this checkpoint's FP8 KV cache: it will store the cache in FP8" if checkpoint_fp8 else
             "its auto takes an FP8 KV cache where the checkpoint the command is pointed at states one: it would "
             "store the cache in FP8")
    if kv_cache_dtype == "fp16":
        notes.append("sglang, vllm: no fp16 KV cache dtype; under their auto the cache takes the model's dtype, so "
                     "the commands run the model in float16 (--dtype float16)")
        notes.append(f"trtllm: no fp16 kv_cache_config.dtype; {TRTLLM_OPTIONS_FILE} runs the model in float16 "
                     "(dtype), whose dtype its auto cache takes")
        if checkpoint_fp8:
            notes.append("sglang, vllm: this checkpoint states an FP8 KV cache, which their auto takes: they will "
                         "store the cache in FP8, half the bytes the plan priced for fp16")
        if checkpoint_fp8 or action:
            notes.append(f"trtllm: {takes}, half the bytes the plan priced for fp16")
    elif kv_cache_dtype == "bf16" and (checkpoint_fp8 or action):
        notes.append(f"trtllm: its kv_cache_config.dtype takes auto, fp8 or nvfp4 only, and {takes}, where the plan "
                     "priced bf16")
    elif kv_cache_dtype == "fp8_e5m2":
        notes.append(f"trtllm: no E5M2 KV cache; {TRTLLM_OPTIONS_FILE} names fp8 (E4M3, the same bytes)")
        if cuda_arch == 90:
            notes.append("sglang: FlashAttention 3, its attention on Hopper, reads only E4M3 caches: with fp8_e5m2 it "
                         "switches to its triton backend (server_args.py), which the plan does not price")
    return notes


def trtllm_options(config: Config, spec: Any = None, overlap: str = "auto",
                   kv_cache_dtype: str = "auto") -> dict[str, Any]:
    """What ``trtllm-serve`` takes from its ``--extra_llm_api_options`` YAML file rather than
    from flags: DP attention and the speculative setup (keys as in NVIDIA's own example,
    build.nvidia.com/spark/speculative-decoding: ``enable_attention_dp``, ``speculative_config``
    with ``decoding_type: Eagle``, ``max_draft_len`` and ``speculative_model_dir``; DeepSeek's
    MTP is ``decoding_type: MTP`` with ``num_nextn_predict_layers``), the overlap scheduler
    turned off (``disable_overlap_scheduler``, LLM API) for ``overlap`` ``off``, and an asked
    KV cache dtype (``kv_cache_config.dtype``, :data:`TRTLLM_KV_DTYPES`; fp16 as the model's
    ``dtype``)."""
    options: dict[str, Any] = {}
    if config.layout.dp > 1:
        options["enable_attention_dp"] = True
    if overlap == "off":
        options["disable_overlap_scheduler"] = True
    if kv_cache_dtype in TRTLLM_KV_DTYPES:
        options["kv_cache_config"] = {"dtype": TRTLLM_KV_DTYPES[kv_cache_dtype]}
    elif kv_cache_dtype == "fp16":
        options["dtype"] = "float16"  # the LLM API's model dtype, which its auto cache takes
    if config.spec is not None:
        if spec is not None and spec.draft_model:
            options["speculative_config"] = {"decoding_type": "Eagle", "max_draft_len": config.spec.num_steps,
                                             "speculative_model_dir": spec.draft_model}
        else:
            options["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": config.spec.num_steps}
    return options


def trtllm_command(request: PlanRequest, config: Config, spec: Any = None) -> list[str]:
    """TensorRT-LLM's OpenAI server (``trtllm-serve``, PyTorch backend). DP attention and
    speculation go in an ``--extra_llm_api_options`` YAML file, named here; its contents are a
    launch note (:func:`launch_notes`)."""
    from infercast.plugins import served_model

    layout = config.layout
    cmd = ["trtllm-serve", served_model(request.model), "--backend", "pytorch", "--tp_size", str(layout.num_devices)]
    if layout.ep > 1:
        cmd += ["--ep_size", str(layout.ep)]
    cmd += ["--max_batch_size", str(config.batch)]
    if trtllm_options(config, spec, request.overlap_scheduling,
                      launched_kv_dtype(request.kv_cache_dtype, config.quantization)):
        cmd += ["--extra_llm_api_options", TRTLLM_OPTIONS_FILE]
    return cmd


def launch_commands(request: PlanRequest, config: Config, devices_per_node: int, spec: Any = None, *,
                    expert_dtype: str, cuda_arch: int | None, mem_fraction: float | None = None,
                    scattered: bool = False, capture: int = 0) -> dict[str, list[str]]:
    """The chosen engine's launch command first, then the other engines' equivalents
    (``expert_dtype``: the routed experts' kernel dtype, :meth:`Planner.expert_dtype`;
    ``mem_fraction``: sglang's, :meth:`Planner.launch_fraction`; ``scattered``: sglang's
    scattered attention input, :meth:`Planner.scattered_input`; ``capture``: the prefill
    tokens per rank the plan priced as captured)."""
    commands = {"sglang": sglang_command(request, config, devices_per_node, spec, expert_dtype=expert_dtype,
                                         cuda_arch=cuda_arch, mem_fraction=mem_fraction, scattered=scattered),
                "vllm": vllm_command(request, config, spec, capture=capture),
                "trtllm": trtllm_command(request, config, spec)}
    first = request.engine if request.engine in commands else "sglang"
    return {first: commands[first], **{k: v for k, v in commands.items() if k != first}}


def launch_notes(request: PlanRequest, config: Config, spec: Any = None, *, expert_dtype: str,
                 cuda_arch: int | None, scatter_off: str | None = None, checkpoint_fp8_kv: bool = False) -> list[str]:
    """What the launch commands cannot say with a flag (a checkpoint to serve instead, a
    DeepEP mode the engine cannot switch per step, an engine that moves the experts' tokens
    otherwise than the plan priced, TensorRT-LLM's options file, why sglang keeps an asked-for
    scattered attention input off: ``scatter_off``, :meth:`Planner.scattered_input`)."""
    import json

    notes = [quantization_flags(engine, config.quantization)[1] for engine in ("sglang", "vllm", "trtllm")]
    kv_dtype = launched_kv_dtype(request.kv_cache_dtype, config.quantization)
    options = trtllm_options(config, spec, request.overlap_scheduling, kv_dtype)
    notes += kv_cache_notes(kv_dtype, checkpoint_fp8_kv, cuda_arch=cuda_arch,
                            action=config.quantization in MODELOPT_TARGETS)
    if options:  # JSON is YAML: the file's contents as they are to be written
        notes.append(f"trtllm: {TRTLLM_OPTIONS_FILE} holds {json.dumps(options)}")
    if config.layout.dp > 1 and config.layout.tp > 1:
        notes.append(f"trtllm: enable_attention_dp gives every rank its own attention; the plan's "
                     f"{config.layout.describe()} shards attention over {config.layout.tp} ranks in each DP group, "
                     "which TensorRT-LLM has no setting for")
    if config.serving and config.serving.get("mode") == "agg" and not request.serving.mixed_chunk:
        notes.append("vllm, trtllm: their schedulers always mix prompt chunks into decode steps; the plan's TTFT and "
                     "TPOT are sglang's with prompt steps apart (--mixed-chunk off)")
    asked = request.serving.scheduler_recv_interval
    if asked > 1 and config.layout.dp > 1:
        notes.append(f"sglang: --scheduler-recv-interval {asked} is refused with DP attention (its receive "
                     "skipper asserts it is off); this layout is priced and launched polling every step")
    elif asked > 1 and config.serving:
        every = [name for name in ("vllm", "trtllm") if engine_named(name).recv_interval_flag is None]
        notes.append(f"{', '.join(every)}: no equivalent of sglang's --scheduler-recv-interval {asked} (they poll "
                     "for requests every step); the plan's TTFT is sglang's")
    if request.max_total_tokens is not None:
        notes.append(f"vllm, trtllm: no flag caps the KV cache at {request.max_total_tokens:,} slots a rank as "
                     "sglang's --max-total-tokens does (vLLM sizes it in blocks, --num-gpu-blocks-override; "
                     "TensorRT-LLM in its options file, kv_cache_config.max_tokens)")
    if request.mem_fraction_static is not None:
        notes.append(f"trtllm: its --kv_cache_free_gpu_memory_fraction is a share of the memory left after the "
                     f"weights, not of the whole device; the plan's {request.mem_fraction_static:g} of each device "
                     "is not passed on")
    if (request.engine == "sglang" and request.all_reduce_fusion == "off"
            and not reaches(request.engine_version, SGLANG_FUSION_OFF_SINCE)):
        notes.append(f"sglang {request.engine_version} has no flag to turn the all-reduce fusion off (from "
                     f"{SGLANG_FUSION_OFF_SINCE}: --enforce-disable-flashinfer-allreduce-fusion)")
    if request.moe_kernel != "auto":
        notes.append(f"the commands do not select the fused-MoE kernel the plan priced ({request.moe_kernel}, "
                     "--moe-kernel); set it with the engine's own option (vLLM: --moe-backend, or "
                     "VLLM_MXFP4_USE_MARLIN=1 for MXFP4 experts on Hopper; sglang: --moe-runner-backend; "
                     "TensorRT-LLM: moe_config.backend in its options file)")
    notes += dispatch_notes(request, config.layout, expert_dtype, cuda_arch, ("sglang", "vllm", "trtllm"),
                            one_mode=True)
    notes += [scatter_note(scatter_off, config.layout)]
    if request.enable_attn_tp_input_scattered and scatter_off is None:
        notes.append(f"vllm, trtllm: no equivalent of sglang's {engine_named('sglang').scattered_attention_input.flag}, "
                     "which the plan priced prefill with")
    return [note for note in notes if note]


def scatter_note(why: str | None, layout: Layout, pool: str = "") -> str:
    """The note for an asked-for scattered attention input that ``layout`` runs without (``why``:
    :meth:`Planner.scattered_input`'s reason; None: no note)."""
    if why is None:
        return ""
    flag = engine_named("sglang").scattered_attention_input.flag
    return (f"{pool}sglang: {flag} has no effect on {layout.describe()} ({why}); the command leaves it out and the "
            "plan prices prefill without it")


def dispatch_notes(request: PlanRequest, layout: Layout, expert_dtype: str, cuda_arch: int | None,
                   engines: tuple[str, ...], *, one_mode: bool) -> list[str]:
    """Where one of ``engines`` moves an expert-parallel layout's tokens otherwise than the plan's
    engine, which priced it (an all-to-all or the standard dispatcher); with ``one_mode`` (one
    server for prompt and decode steps), that vLLM runs a single DeepEP mode for both."""
    if layout.ep == 1:
        return []

    def dispatch(engine: str) -> str:
        if engine_named(engine).moe_all_to_all.runs(expert_dtype, layout.dp, cuda_arch,
                                                    "off" if request.moe_all_to_all == "off" else "auto"):
            return "an all-to-all"
        return "local experts over every token" + (" gathered from the DP ranks" if layout.dp > 1 else "")

    priced = dispatch(request.engine)
    notes = [f"{engine}: its expert parallelism here runs {dispatch(engine)}, where {request.engine}, whose price "
             f"the plan shows, runs {priced}" for engine in engines
             if engine != request.engine and dispatch(engine) != priced]
    if "vllm" in engines and one_mode and layout.dp > 1 and priced == dispatch("vllm") == "an all-to-all":
        notes.append("vllm: --all2all-backend runs one DeepEP mode for every step (low-latency here); the plan "
                     "priced prompt steps with DeepEP's normal kernels, as sglang's --deepep-mode auto runs them")
    return notes


def vllm_command(request: PlanRequest, config: Config, spec: Any = None,
                 all2all: str = "deepep_low_latency", capture: int = 0) -> list[str]:
    """The vLLM equivalent (``vllm serve ...``). Expert parallelism runs through DeepEP
    (``--all2all-backend``): one mode for every step, low-latency unless a prefill pool names
    the high-throughput kernels. vLLM uses all-to-all kernels only across data-parallel ranks.
    Without ``--max-cudagraph-capture-size`` vLLM captures at most twice ``--max-num-seqs`` tokens
    (times the tokens a speculative step verifies); where that is below ``capture``, the tokens
    the plan priced as captured, the command sets it."""
    import json

    from infercast.plugins import served_model

    layout = config.layout
    cmd = ["vllm", "serve", served_model(request.model), "--tensor-parallel-size", str(layout.tp)]
    if layout.dp > 1:
        cmd += ["--data-parallel-size", str(layout.dp)]
    if layout.ep > 1:
        # without an all-to-all (--moe-all-to-all off) DP ranks gather every token and reduce-scatter the sum
        backend = "allgather_reducescatter" if request.moe_all_to_all == "off" else all2all
        cmd += ["--enable-expert-parallel"] + (["--all2all-backend", backend] if layout.dp > 1 else [])
    cmd += quantization_flags("vllm", config.quantization)[0]
    cmd += kv_cache_flags("vllm", launched_kv_dtype(request.kv_cache_dtype, config.quantization))
    # each vLLM DP rank is an engine of its own, with its own scheduler: its share of the running
    # requests and of the chunk (sglang's --max-running-requests and chunk are the instance's)
    cmd += ["--max-num-seqs", str(-(-config.batch // layout.dp))]
    if request.mem_fraction_static is not None:
        cmd += ["--gpu-memory-utilization", f"{request.mem_fraction_static:g}"]
    if config.serving:
        cmd += ["--max-num-batched-tokens", str(max(1, config.serving["chunked_prefill_size"] // layout.dp))]
    if request.prefill_cuda_graph == "off":  # decode keeps its full CUDA graphs, prefill none
        cmd += ["-cc.cudagraph_mode=FULL_DECODE_ONLY"]
    max_num_seqs = -(-config.batch // layout.dp)
    verified = 1 + (config.spec.num_steps if config.spec is not None else 0)
    capture_flag = engine_named("vllm").prefill_graphs.flag
    if request.prefill_cuda_graph_max_tokens is not None:
        cmd += [capture_flag, str(request.prefill_cuda_graph_max_tokens)]
    elif request.prefill_cuda_graph != "off" and 2 * max_num_seqs * verified < capture:
        cmd += [capture_flag, str(capture)]
    cmd += vllm_fusion_flags(request.all_reduce_fusion, request.engine_version if request.engine == "vllm" else None,
                             layout.dp)
    cmd += overlap_flags("vllm", request)
    if config.spec is not None:
        method = "eagle3" if spec.draft_model else "deepseek_mtp"
        body = {"method": method, "num_speculative_tokens": config.spec.num_steps}
        if spec.draft_model:
            body["model"] = spec.draft_model
        cmd += ["--speculative-config", json.dumps(body)]
    cmd += ["--trust-remote-code"]
    return cmd


def plot(result: PlanResult, path_stem: str) -> list[str]:
    """The frontier over every configuration that fits, best point marked: PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    fits = [c for c in result.configs if c.fits]
    off = [c for c in fits if c.spec is None]
    on = [c for c in fits if c.spec is not None]
    ax.scatter([c.tokens_per_s_per_user for c in off], [c.tokens_per_s_per_device for c in off], s=12, c="#9aa5b1",
               label="fits, no speculation" if on else "fits")
    if on:
        ax.scatter([c.tokens_per_s_per_user for c in on], [c.tokens_per_s_per_device for c in on], s=12, c="#f0b37e",
                   marker="^", label="fits, speculative")
    if result.frontier:
        ax.plot([c.tokens_per_s_per_user for c in result.frontier], [c.tokens_per_s_per_device for c in result.frontier],
                "-o", c="#1f5fa8", ms=5, label="Pareto frontier (fits and meets SLOs)")
    if result.best is not None:
        b = result.best
        ax.scatter([b.tokens_per_s_per_user], [b.tokens_per_s_per_device], s=220, marker="*", c="#d62728", zorder=5,
                   label="chosen")
        ax.annotate(f"{b.layout.describe()}, batch {b.batch}, {b.spec.describe() if b.spec else 'no spec'}",
                    (b.tokens_per_s_per_user, b.tokens_per_s_per_device), textcoords="offset points", xytext=(-12, -4),
                    ha="right", va="top", fontsize=9)
    r = result.request
    if r.tpot_slo_ms:
        ax.axvline(1e3 / r.tpot_slo_ms, ls="--", c="#555", lw=1, label=f"TPOT SLO {r.tpot_slo_ms:g} ms")
    ax.set_xlabel("output tokens/s per user (1000 / TPOT ms)")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title(f"{r.model} on {r.device} x {', '.join(map(str, r.num_devices))}: in {r.input_length}, "
                 f"out {r.output_length}", fontsize=10)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths = []
    for suffix in (".png", ".svg"):
        fig.savefig(path_stem + suffix, dpi=150 if suffix == ".png" else None)
        paths.append(path_stem + suffix)
    plt.close(fig)
    return paths
