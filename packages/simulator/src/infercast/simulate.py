"""The Python API: :class:`~infercast.request.UserInput` in, :class:`~infercast.results.SimResult` out.

The steps live in their own modules: the request and its checks (:mod:`infercast.request`),
resolution of model, device and speculative settings (here), building the engine view
(:mod:`infercast.build`), tracing, pricing (:mod:`infercast.pricing`), memory
(:mod:`infercast.memory`) and results (:mod:`infercast.results`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from infercast_adapters import InfercastError
from infercast_adapters.arch import sliding_window_layers, text_config_of
from infercast_adapters.config import apply_num_hidden_layers_override, load_config
from infercast_adapters.profile import tokenizer_kind_of

from infercast.build import build
from infercast.layers import KV_DTYPES, SimContext
from infercast.memory import MemoryLimits
from infercast.parallel import Parallel, Workload, validate_layout, validate_workload
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
    prefill_graph_blockers,
    prefill_graph_tokens,
    price,
    price_speculative,
    scattered_attention_input,
    standard_dispatch_reason,
)
from infercast.quant import (
    QuantPlan,
    QuantScheme,
    checkpoint_kv_cache_dtype,
    plan_from_action,
    plan_from_checkpoint,
)
from infercast.request import DEFAULT_DECODE_CONTEXT, DEFAULT_DEVICE, UserInput, check
from infercast.serving import default_chunk
from infercast.results import OpRow, SimResult
from infercast.trace import trace
from infercast.validate import check_config

__all__ = ["DEFAULT_DEVICE", "OpRow", "SimResult", "UserInput", "simulate"]


def _resolve_quant(config: Any, text: Any, action: str | None, profile: Any, layers: int | None = None):
    """The quantization plan: the action's, else the checkpoint's asked of the last of ``layers``
    decoder layers (default: the config's count; one more for the MTP layer checkpoints store after
    them)."""
    if action:
        return plan_from_action(action)
    return plan_from_checkpoint(_checkpoint_quantization(config, text), profile,
                                layers or getattr(text, "num_hidden_layers", 2))


def _checkpoint_quantization(config: Any, text: Any) -> Any:
    """The checkpoint's quantization_config: the text model's, else the whole model's."""
    return getattr(text, "quantization_config", None) or getattr(config, "quantization_config", None)


def resolve_kv_cache_dtype(asked: str, config: Any, text: Any, action: str | None) -> str:
    """The KV cache dtype ``asked`` names; ``auto``: the checkpoint's (FP8 where its
    quantization_config states it, :func:`~infercast.quant.checkpoint_kv_cache_dtype`; not with a
    quantization action, which replaces the checkpoint's), else bf16."""
    if asked != "auto":
        return asked
    if action:
        return "bf16"
    return checkpoint_kv_cache_dtype(_checkpoint_quantization(config, text)) or "bf16"


def mtp_quant(config: Any, text: Any, action: str | None, profile: Any, engine: Any, device: Any,
              layers: int | None, quant: QuantPlan) -> QuantPlan | None:
    """The MTP layer's plan where the checkpoint stores it apart from the decoder's (``layers``:
    the decoder's count), else None."""
    if action or not getattr(text, "num_nextn_predict_layers", 0):
        return None
    depth = layers or getattr(text, "num_hidden_layers", 1)
    own = quant_on_device(_resolve_quant(config, text, None, profile, depth + 1), engine, device)
    return None if own == quant else own


QUANT_ROLES = ("routed_experts", "dense", "attention_in", "attention_out")
_CORES_FOR = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}
"""A kernel dtype -> the tensor cores it needs (``peak_flops_per_s`` keys)."""
_LABELS = {"fp8": "FP8", "fp4": "NVFP4"}


def _missing_cores(quant: QuantPlan, device: Any) -> list[str]:
    """The tensor cores ``quant``'s linears need that ``device`` lacks (``fp8``, ``fp4``)."""
    return sorted({_CORES_FOR[s.kernel_dtype] for r in QUANT_ROLES if (s := getattr(quant, r)) is not None
                   and s.kernel_dtype in _CORES_FOR and _CORES_FOR[s.kernel_dtype] not in device.peak_flops_per_s})


def unservable(quant: QuantPlan, engine: Any, device: Any) -> tuple[str, str] | None:
    """Why ``engine`` cannot serve ``quant`` on ``device``, and what would (None: it can):
    :func:`quant_on_device`'s refusals."""
    missing = _missing_cores(quant, device)
    if not missing or (device.cuda_arch is None and "fp4" not in missing):
        return None
    if device.cuda_arch is None:
        names = " and ".join(_LABELS[m] for m in missing)
        return (f"{names} weights need {' and '.join(m.upper() for m in missing)} tensor cores or Marlin's CUDA "
                f"kernels, and {device.name} has neither", "use an NVIDIA device")
    modelopt_fp8 = "fp8" in missing and quant.checkpoint_method == "modelopt"
    online = (f"or the model's 16-bit checkpoint (not this ModelOpt one) quantized to FP8 as it loads (FP8 as the "
              f"quantization action), which vllm and sglang run through Marlin's FP8 weight-only kernels on "
              f"{device.name}")
    for kind, refusal in (("fp4", engine.nvfp4_needs_fp4_cores), ("fp8", engine.fp8_needs_fp8_cores)):
        if kind in missing and refusal:
            label, example = _LABELS[kind], "B200" if kind == "fp4" else "H100"
            remedy = (f"use a device with them ({example}), {online}" if kind == "fp8" and modelopt_fp8 else
                      f"use a device with them ({example}) or --engine vllm, which runs {label} through Marlin's "
                      f"weight-only kernels")
            return (f"{engine.name} does not serve {label} weights on {device.name}, which has no {kind.upper()} "
                    f"tensor cores ({refusal})", remedy)
    if modelopt_fp8 and engine.modelopt_fp8_needs_fp8_cores:
        return (f"{engine.name} does not load a ModelOpt FP8 checkpoint on {device.name}, which has no FP8 tensor "
                f"cores ({engine.modelopt_fp8_needs_fp8_cores})", f"use a device with them (H100), {online}")
    return None


def quant_on_device(quant: QuantPlan, engine: Any, device: Any) -> QuantPlan:
    """``quant`` as the engine runs it on ``device``. FP8 or NVFP4 weights on an NVIDIA GPU
    without FP8 or FP4 tensor cores run weight-only through Marlin (vLLM's and sglang's
    ``apply_fp8_marlin_linear``, vLLM's ``apply_fp4_marlin_linear`` and ``fused_marlin_moe``): the
    same bytes, bf16 activations, no activation quantization, priced as Marlin's integer kernels
    (``w8a16``, ``w4a16``), which stream weights of the same width. Where the engine has no such
    path (:attr:`~infercast.engines.Engine.nvfp4_needs_fp4_cores`,
    :attr:`~infercast.engines.Engine.fp8_needs_fp8_cores`) it is refused (:func:`unservable`). Off
    NVIDIA, FP8 stays priced at the device's bf16 rate (a dequantising kernel) and NVFP4 is refused."""
    refused = unservable(quant, engine, device)
    if refused is not None:
        raise InfercastError("; ".join(refused))
    missing = _missing_cores(quant, device)
    if not missing or device.cuda_arch is None:
        return quant  # off NVIDIA, FP8 is priced at the bf16 rate, as a dequantising kernel runs it
    names = " and ".join(_LABELS[m] for m in missing)

    def marlin(s: QuantScheme | None) -> QuantScheme | None:
        if s is None or _CORES_FOR.get(s.kernel_dtype) not in missing:
            return s
        return replace(s, compute_dtype="bf16", dynamic_activation=False)

    return replace(quant, **{r: marlin(getattr(quant, r)) for r in QUANT_ROLES},
                   source=f"{quant.source}; {names} weight-only through Marlin on {device.name}, which has no "
                          f"{' or '.join(m.upper() for m in missing)} tensor cores")


def simulate(user: UserInput, *, manager=None, devices=None) -> SimResult:
    """Check, resolve, build, trace and price one serving step."""
    from infercast.plugins import default_model, get_devices, get_manager, known_model_refs

    started = time.perf_counter()
    user = check(user)
    manager = manager or get_manager()
    devices = devices or get_devices()
    device = devices.get(user.device)
    model_ref = user.model or default_model(manager)
    config = load_config(model_ref, manager=manager, known_models=known_model_refs(manager))
    depth = getattr(text_config_of(config), "num_hidden_layers", None)  # before any override: what memory holds
    if user.num_hidden_layers_override is not None:
        apply_num_hidden_layers_override(config, user.num_hidden_layers_override)
    manager.patch_config(config)
    profile = resolve_profile(model_ref, config, manager)
    text = text_config_of(config)
    check_config(model_ref, config, text, profile)

    tp = user.tp_size if user.tp_size is not None else user.num_devices // user.dp_size
    parallel = Parallel(
        num_devices=user.num_devices, tp=tp, dp=user.dp_size, ep=user.ep_size,
        shared_expert_tp=user.enable_shared_expert_tp, two_batch_overlap=user.two_batch_overlap,
        scale_up_domain=device.scale_up_domain(user.super_node), redundant_experts=user.ep_num_redundant_experts,
    )
    validate_layout(parallel, num_heads=text.num_attention_heads, num_experts=routed_experts(text, profile))
    decode = user.decode or user.query_length is None
    spec = speculative_request(user, text, profile, manager)
    query_length = 1 if decode else user.query_length
    context = user.context_length if user.context_length is not None else (DEFAULT_DECODE_CONTEXT if decode else 0)
    if user.image_batch_size and not (profile.has_vision and getattr(config, "vision_config", None) is not None):
        raise InfercastError(f"{model_ref} ({config.model_type}) has no vision tower; drop --image-batch-size")

    from infercast.routing import check_distribution

    model = cost_model_for(user, device)
    quant = quant_on_device(_resolve_quant(config, text, user.quantize_linear_action, profile, depth), model.engine,
                            device)
    ctx = SimContext(parallel=parallel, workload=Workload(user.num_queries, query_length, context, decode), quant=quant,
                     mtp_quant=mtp_quant(config, text, user.quantize_linear_action, profile, model.engine, device,
                                         depth, quant),
                     kv_cache_dtype=KV_DTYPES[resolve_kv_cache_dtype(user.kv_cache_dtype, config, text,
                                                                     user.quantize_linear_action)],
                     expert_imbalance=check_distribution(user.expert_imbalance),
                     memory=MemoryLimits.asked(user.mem_fraction_static, user.max_total_tokens))
    ctx.pointwise = model.engine.pointwise
    ctx.sliding_kv = model.engine.sliding_kv
    ctx.fp32_router = model.engine.fp32_router
    ctx.moe_all_to_all = model.engine.moe_all_to_all.runs(quant.routed_experts.kernel_dtype, parallel.dp,
                                                        device.cuda_arch,
                                                        user.moe_all_to_all if parallel.ep > 1 else "auto",
                                                        model.engine.name)
    if parallel.two_batch_overlap and ctx.moe_dispatch == "local":
        why = standard_dispatch_reason(model, ctx, user.moe_all_to_all)
        raise InfercastError("--two-batch-overlap overlaps one micro-batch's MoE all-to-all with the other's "
                             f"compute, and this deployment has none: {why}")
    built = build(config, profile, ctx, manager)
    chunk = default_chunk(device.memory_bytes, model.engine.name, device.name)
    ctx.prefill_graph_tokens = prefill_graph_tokens(model, built, parallel, chunk, mode=user.prefill_cuda_graph,
                                                    max_tokens=user.prefill_cuda_graph_max_tokens)
    ctx.decode_graph_tokens = decode_graph_tokens(model, user.prefill_cuda_graph_max_tokens, chunk)
    ctx.all_reduce_fusion_tokens, fusion_why = all_reduce_fusion(model, built, parallel, mode=user.all_reduce_fusion)
    ctx.kv_pool_tokens, cast_why = mla_pool_cast(model, built, ctx, layers=depth)
    ctx.moe_runner, runner_why = moe_runner(model, built, ctx)
    ctx.absorbed_prefix_below = absorbed_prefix_below(model, built)
    ctx.absorbed_in_graphs = absorbed_in_graphs(model, built)
    scatter_off = (scattered_attention_input(model, built, ctx, speculative=user.speculative_algorithm)
                   if user.enable_attn_tp_input_scattered else None)
    ctx.attn_input_scattered = user.enable_attn_tp_input_scattered and scatter_off is None
    vision = None
    if user.image_batch_size:
        tower = built.sim.vision
        if tower is None:
            raise InfercastError(f"{model_ref}: no adapter registers a simulator vision builder for "
                                 f"{profile.model_type}; drop --image-batch-size")
        vision = tower.policy.grid(user.image_height, user.image_width)
        if decode:
            context += vision.tokens * user.image_batch_size
        else:
            query_length += vision.tokens * user.image_batch_size
    workload = Workload(num_queries=user.num_queries, query_length=query_length, context_length=context, decode=decode)
    validate_workload(workload, max_positions=getattr(text, "max_position_embeddings", None))
    ctx.workload = workload
    images = ctx.requests * user.image_batch_size if vision and not decode else 0
    with ctx.replaying_graphs(phase_of(model, ctx, decode).piecewise):
        records = trace(built.sim, ctx.tokens, every_layer=user.trace_every_layer, images=images,
                        patches_per_image=vision.patches if vision else 0)
        micro = None
        if parallel.two_batch_overlap:
            half = Workload(num_queries=max(1, -(-user.num_queries // 2)), query_length=query_length,
                            context_length=context, decode=decode)
            with ctx.using(half):
                micro = trace(built.sim, ctx.tokens, every_layer=user.trace_every_layer)
    if spec is None:
        result = price(user, built, records, model, ctx, decode, query_length, context, quant.describe(), micro=micro)
    else:
        result = price_speculative(user, built, records, model, ctx, context, quant.describe(), spec, manager)
    result.model = model_ref
    if not decode and model.engine.prefill_graphs is not None:
        reasons = prefill_graph_blockers(model, built, parallel, mode=user.prefill_cuda_graph)
        if reasons:
            result.notes.append(f"prefill launched eagerly: {'; '.join(reasons)}")
        elif ctx.tokens > ctx.prefill_graph_tokens:
            result.notes.append(f"prefill launched eagerly: {ctx.tokens} tokens per rank, above the "
                                f"{ctx.prefill_graph_tokens} that piecewise CUDA graphs capture")
    if not decode and model.engine.eager_prefill_gap and not result.cost_model["cuda_graph"]:
        result.notes.append(f"TTFT may run low here: {model.engine.eager_prefill_gap}")
    if ctx.absorbs_prefix:
        result.notes.append(f"MLA prefill in the absorbed form: {model.engine.name} extends a batch with 1-"
                            f"{ctx.absorbed_prefix_below - 1:,} cached tokens ({ctx.cached_tokens:,} a rank here) "
                            f"over the latent cache instead of expanding it "
                            f"({model.engine.absorbed_prefix_extend.setting} {ctx.absorbed_prefix_below:,}); its "
                            f"attention costs more than over no prefix")
    if user.enable_attn_tp_input_scattered:
        flag = model.engine.scattered_attention_input.flag
        result.notes.append(
            f"{flag} has no effect: {scatter_off}" if scatter_off else
            f"{flag}: a decode step runs as without it; prefill forwards scatter the attention input" if decode else
            f"{flag}: each rank normalizes and down-projects 1/{parallel.tp} of the tokens between a "
            "reduce-scatter and an all-gather of the latent, in place of each layer's MLP all-reduce")
    if ctx.kv_pool_tokens:
        capped = ctx.kv_pool_tokens == ctx.memory.max_total_tokens
        slots = (f"{ctx.kv_pool_tokens:,} slots a rank" + (", --max-total-tokens" if capped else "")
                 if ctx.kv_pool_tokens > 1 or capped else "no memory left for it")
        result.notes.append(f"FP8 KV pool cast ({slots}): {cast_why}")
    if ctx.moe_runner:
        result.notes.append(f"fused MoE: {runner_why}")
    rule = model.engine.static_memory
    if rule is not None and user.mem_fraction_static is None:
        share, reserved = default_memory_share(rule, model.engine_version, device, built, ctx, config,
                                               speculative=spec is not None,
                                               capture_tokens=user.prefill_cuda_graph_max_tokens)
        if share < ctx.memory.fraction:
            used, engine = ctx.memory.fraction, f"{model.engine.name} {model.engine_version or ''}".strip()
            kept = f"{reserved / 1024:.1f} GiB kept for activations and CUDA graphs" + (
                ", then scaled for the vision tower" if built.sim.vision is not None else "")
            result.notes.append(
                f"memory: priced at {used:g} of each device; {engine} defaults to {share:.3f} here ({kept}; "
                f"server_args.py): launch it with --mem-fraction-static {used:g}, or give --mem-fraction-static "
                f"{share:.3f} to price its default" if share > 0 else
                f"memory: priced at {used:g} of each device; {engine}'s default keeps {reserved / 1024:.1f} GiB back "
                f"here, more than the device holds (server_args.py): launch it with --mem-fraction-static {used:g}")
    if 0 < ctx.tokens <= ctx.all_reduce_fusion_tokens and not ctx.scatters_attn_input:
        result.notes.append(f"all-reduce fusion: {fusion_why}; each decoder layer's all-reduce carries the residual "
                            "add and RMSNorm after it (the last layer's all-reduce apart), priced as the all-reduce")
    if ctx.moe_dispatch == "local":
        why = standard_dispatch_reason(model, ctx, user.moe_all_to_all)
        result.notes.append(f"expert parallelism without an all-to-all: {why}; each "
                            "rank runs its local experts over all " + (
                                "gathered tokens and a reduce-scatter (decode) or an all-reduce (prefill) sums them"
                                if parallel.dp > 1 else "tokens and an all-reduce sums them")
                            + ("; --enable-shared-expert-tp changes nothing: the shared experts are sharded over "
                               "every rank" if parallel.shared_expert_tp else ""))
    generic = [row for row in result.ops if row.name.startswith("fused_moe") and row.source == "analytic"
               and "(--moe-kernel)" in row.origin and " stream" not in row.origin]
    if generic:
        result.notes.append(f"--moe-kernel {user.moe_kernel}: no table and no figure of its own for "
                            f"{quant.routed_experts.kernel_dtype} experts on {device.name}: the fused MoE is priced at "
                            "the device's generic GEMM figures (check the engine runs this kernel for these experts)")
    window, windowed = sliding_window_layers(text)
    if windowed and window < context + query_length:
        held = (f"their KV cache as {model.engine.name} keeps it: {model.engine.sliding_kv.source}"
                if model.engine.sliding_kv else
                f"their KV cache is held for the whole context ({model.engine.name} is taken to have no hybrid "
                "cache allocator; vLLM's and sglang's keep less, so more requests fit there)")
        result.notes.append(f"sliding-window attention: {windowed} of {text.num_hidden_layers} layers attend to the "
                            f"last {window:,} of the {context + query_length:,} tokens, priced so; {held}")
    if user.model is None:
        entry = next((ref for ref, _ in manager.models() if ref.ref == model_ref), None)
        result.notes.append(f"no model given: simulated the default, {model_ref}"
                            + (f" ({entry.description})" if entry and entry.description else ""))
    if vision:
        result.images = {"per_request": user.image_batch_size, "height": vision.height, "width": vision.width,
                         "grid": [vision.grid_h, vision.grid_w], "patches_per_image": vision.patches,
                         "tokens_per_image": vision.tokens, "encoded_per_rank": images,
                         "vision_ms": sum(t.seconds * r.count for r, t in result._timed if r.path.startswith("vision")) * 1e3}
    result.simulation_wall_s = time.perf_counter() - started
    return result


def resolve_profile(model_ref: str, config: Any, manager: Any) -> Any:
    """The adapter profile of ``config``'s model type, with the tokenizer kind of the class the
    checkpoint names (``config.tokenizer_class``, from its config.json or tokenizer_config.json)
    in place of the family's: Kimi-K2's checkpoints load as ``deepseek_v3`` but tokenize with tiktoken."""
    profile = manager.profile_for(config.model_type)
    if profile is None:
        raise InfercastError(
            f"{model_ref}: no adapter profile for model_type {config.model_type!r}. "
            f"Profiles exist for: {', '.join(sorted(manager.profiles()))}. Install an adapter plugin for it."
        )
    name = getattr(config, "tokenizer_class", None)
    kind = tokenizer_kind_of(name) if isinstance(name, str) else None
    return profile if kind in (None, profile.tokenizer) else replace(profile, tokenizer=kind)


def routed_experts(text: Any, profile: Any) -> int | None:
    """Routed experts per MoE layer (None for dense models), read through the profile's key."""
    if not profile.is_moe:
        return None
    return getattr(text, profile.routed_experts_key, None)


@dataclass
class SpecRequest:
    algorithm: str
    draft_model: str | None
    draft_config: Any
    settings: Any
    accept_length: float
    acceptance: str


def speculative_request(user: UserInput, text: Any, profile: Any, manager: Any) -> SpecRequest | None:
    """What ``user`` asks of speculative decoding, resolved against the family's registered
    options (default setting, published acceptance); None without it."""
    from infercast import acceptance as acc
    from infercast.plugins import known_model_refs

    algorithm = (user.speculative_algorithm or ("MTP" if user.num_mtp_tokens else "")).upper()
    if not algorithm:
        return None
    draft_ref = user.speculative_draft_model
    mtp = algorithm in ("MTP", "EAGLE", "NEXTN") and not draft_ref
    options = [o for o in manager.speculative_options(profile.model_type)
               if (o.algorithm == "MTP") == mtp and (mtp or not draft_ref or (o.draft or "").lower() == draft_ref.lower())]
    option = options[0] if options else None
    if algorithm == "EAGLE3" and not draft_ref:
        drafts = [o.draft for o in manager.speculative_options(profile.model_type) if o.draft]
        raise InfercastError("--speculative-algorithm EAGLE3 needs --speculative-draft-model (a hub id, a local "
                             f"directory, or a registered draft{': ' + ', '.join(drafts) if drafts else ''})")
    draft_config = None
    if mtp:
        if not getattr(text, "num_nextn_predict_layers", 0):
            raise InfercastError(f"{profile.model_type} has no MTP layer (num_nextn_predict_layers = 0); use "
                                 "--speculative-algorithm EAGLE3 with a draft model")
    else:
        from infercast_eagle3.config import from_transformers
        from infercast_eagle3.measure import check_fits

        draft_config = load_config(draft_ref, manager=manager, known_models=known_model_refs(manager))
        # a published draft ships its d2t map, so a smaller draft vocabulary is fine here
        check_fits(from_transformers(draft_config), text.hidden_size, text.vocab_size, has_d2t=True)
    default = (option.steps, option.topk, option.draft_tokens) if option else (3, 1, 4)
    if mtp and user.num_mtp_tokens:
        if user.speculative_num_steps not in (None, user.num_mtp_tokens):
            raise InfercastError(f"--num-mtp-tokens {user.num_mtp_tokens} and --speculative-num-steps "
                                 f"{user.speculative_num_steps} disagree; give one")
        default = (user.num_mtp_tokens, 1, user.num_mtp_tokens + 1)
    s = user.speculative_num_steps if user.speculative_num_steps is not None else default[0]
    k = user.speculative_eagle_topk if user.speculative_eagle_topk is not None else (
        default[1] if user.speculative_num_steps is None else 1)
    n = user.speculative_num_draft_tokens
    if n is None and user.speculative_num_steps is None and user.speculative_eagle_topk is None:
        n = default[2]
    settings = acc.settings(s, k, n)

    source = None
    if user.accept_length is not None:
        model = acc.MeasuredLength(float(user.accept_length))
    elif user.acceptance_rates is not None:
        model = acc.ChainRates(acc.parse_rates(user.acceptance_rates))
    elif user.acceptance_matrix is not None:
        model = acc.TreeMatrix(acc.parse_matrix(user.acceptance_matrix))
    elif user.accept_length_from is not None:
        value, samples = acc.accept_length_from_log(user.accept_length_from)
        model, source = acc.MeasuredLength(value), f"{samples} samples in {user.accept_length_from}"
    else:
        known = acc.presets(manager)
        name = user.acceptance_preset or (option.name if option and option.name in known else None)
        if name is None:
            raise InfercastError(
                f"no published acceptance for {draft_ref or profile.model_type + ' MTP'}; give --accept-length, "
                f"--acceptance-rates, --acceptance-matrix, --accept-length-from or --acceptance-preset "
                f"({', '.join(known)})")
        found = acc.preset(name, manager)
        source = found.describe(settings.num_steps)
        model = found.model()
    tau = model.expected_accept_length(settings)
    return SpecRequest("MTP" if mtp else algorithm, None if mtp else draft_ref, draft_config, settings, tau,
                       source or model.describe())
