"""Pricing a traced step or speculative cycle: the cost model, the step's composition, the rows."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from infercast.engines import StaticMemory
    from infercast.simulate import SpecRequest

from infercast_adapters import InfercastError

from infercast.build import BuiltModel
from infercast.cost import cost_of
from infercast.costmodel import SOURCES, CostModel, Phase, table_dtype
from infercast.devices import GIB, DeviceSpec
from infercast.engines import reaches
from infercast.layers import SimContext, SimMLAAttention, SimMoE
from infercast.memory import kv_pool_tokens, memory
from infercast.parallel import MixedWorkload, Workload
from infercast.request import UserInput
from infercast.results import OpRow, SimResult
from infercast.serving import default_chunk
from infercast.step import HostRow, forward_seconds, price_records, step_time
from infercast.trace import OpRecord, trace


def _path_pattern(path: str) -> str:
    return re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", path)


def cost_model_for(user: UserInput, device: DeviceSpec) -> CostModel:
    """The pricing stack ``user`` asks for: calibration file, measured tables, analytic."""
    from infercast.kernels.calibration import load_calibration

    if user.cost_model not in ("measured", "analytic"):
        raise InfercastError(f"unknown --cost-model {user.cost_model!r}; valid: measured, analytic")
    calibration = load_calibration(user.calibration, device) if user.calibration else None
    return CostModel(device, user.engine, user.engine_version, calibration, measured=user.cost_model == "measured",
                     overlap=user.overlap_scheduling, moe_kernel=user.moe_kernel)


def phase_of(model: CostModel, ctx: SimContext, decode: bool, *, speculative: bool = False,
             disaggregated: bool = False) -> Phase:
    """Decode replays a CUDA graph up to the engine's capture size (its batch limit, or the
    launch's ``ctx.decode_graph_tokens`` where that bounds decode). A prefill forward replays
    piecewise graphs (the all-reduces in them too) up to ``ctx.prefill_graph_tokens`` prompt
    tokens per rank, unless the engine turns them off for a ``speculative`` or
    ``disaggregated`` deployment, and launches eagerly beyond. A mixed step is measured by its
    prompt chunk: sglang takes the decoding tokens out of the chunk budget, so the forward stays
    within the captured size."""
    if decode:
        graph = (ctx.requests <= model.engine.decode_graph_max_batch if ctx.decode_graph_tokens is None
                 else ctx.tokens <= ctx.decode_graph_tokens)
        return Phase(graph=graph, decode=True, scale_up_domain=ctx.parallel.scale_up_domain,
                     kv_pool_tokens=ctx.kv_pool_tokens)
    policy = model.engine.prefill_graphs
    blocked = policy is not None and ((speculative and "speculative" in policy.blocked_by)
                                      or (disaggregated and "disaggregated" in policy.blocked_by))
    workload = ctx.workload
    tokens = workload.chunks.tokens_per_rank(ctx.parallel) if isinstance(workload, MixedWorkload) else ctx.tokens
    piecewise = not blocked and 0 < tokens <= ctx.prefill_graph_tokens
    return Phase(graph=piecewise, decode=False, scale_up_domain=ctx.parallel.scale_up_domain, piecewise=piecewise,
                 kv_pool_tokens=ctx.kv_pool_tokens)


def pool_cast_why(model: CostModel, kv_cache_dtype: torch.dtype, mla: bool) -> str | None:
    """Why each MLA decode attention first casts the whole FP8 KV pool to bf16, or None where
    it reads the cache as it is: the engine's default MLA backend on the device does
    (:attr:`~infercast.engines.Engine.mla_pool_cast`)."""
    cast, device = model.engine.mla_pool_cast, model.device
    if not mla or kv_cache_dtype.itemsize != 1 or cast is None or device.cuda_arch not in cast.archs:
        return None
    return (f"{model.engine.name}'s MLA decode on {device.name} casts each layer's whole FP8 KV pool (every slot, all "
            f"the memory the weights leave) to bf16 before attending, in every forward; sglang's --attention-backend "
            f"flashmla reads FP8 directly (not modelled). Source: {cast.source}")


def has_mla(built: BuiltModel) -> bool:
    """Whether the built model's decoder layers attend with MLA."""
    return any(isinstance(layer.self_attn, SimMLAAttention) for layer in built.sim.layers)


def mla_pool_cast(model: CostModel, built: BuiltModel, ctx: SimContext, *,
                  layers: int | None = None) -> tuple[int, str | None]:
    """(the KV pool's slots per rank that each MLA decode attention casts to bf16 first, 0 for
    none; why, as :func:`pool_cast_why`); ``layers``: the model's real depth
    (:func:`~infercast.memory.kv_pool_tokens`)."""
    why = pool_cast_why(model, ctx.kv_cache_dtype, has_mla(built))
    return (kv_pool_tokens(built, model.device, ctx.memory, layers=layers), why) if why else (0, None)


def absorbed_prefix_below(model: CostModel, built: BuiltModel) -> int:
    """``SimContext.absorbed_prefix_below`` for this deployment: the engine's rule where its
    default MLA backend on the device follows it and the model attends with MLA, else 0."""
    rule = model.engine.absorbed_prefix_extend
    if rule is None or model.device.cuda_arch not in rule.archs or not has_mla(built):
        return 0
    return rule.below


def absorbed_in_graphs(model: CostModel, built: BuiltModel) -> bool:
    """``SimContext.absorbed_in_graphs`` for this deployment: the engine's MLA prefill attends in
    the absorbed form inside piecewise CUDA graphs, and the model attends with MLA."""
    return model.engine.absorbed_in_prefill_graphs and has_mla(built)


def scattered_attention_input(model: CostModel, built: BuiltModel, ctx: SimContext, *,
                              speculative: str | None = None, prefill_graphs: bool | None = None) -> str | None:
    """Why the engine's scattered attention input (its opt-in flag) stays off for this
    deployment, as the engine's own checks decide; None: it is on. Call after
    ``ctx.prefill_graph_tokens`` is set; ``speculative``: the request's algorithm;
    ``prefill_graphs``: whether the server captures prefill graphs, where not as ``ctx`` says (a
    disaggregated prefill pool captures none)."""
    rule, p = model.engine.scattered_attention_input, ctx.parallel
    if rule is None:
        return f"{model.engine.name} has no such layout"
    if model.engine_version is not None and not reaches(model.engine_version, rule.since):
        return f"{model.engine.name} {model.engine_version} has no {rule.flag} (from {rule.since})"
    lora = [layer.self_attn.q_lora_rank for layer in built.sim.layers if isinstance(layer.self_attn, SimMLAAttention)]
    blockers = (("a model without MLA and a query LoRA", len(lora) < len(built.sim.layers) or not all(lora)),
                ("a device that is not CUDA", model.device.cuda_arch is None),
                ("DP attention", p.dp > 1), ("no tensor parallelism", p.tp <= 1),
                ("an MoE all-to-all backend (DeepEP)", ctx.moe_dispatch == "all_to_all"),
                ("two-batch overlap", p.two_batch_overlap),
                ("piecewise CUDA graphs in prefill",
                 ctx.prefill_graph_tokens > 0 if prefill_graphs is None else prefill_graphs),
                ("EAGLE3", speculative == "EAGLE3"))
    hit = [why for why, blocked in blockers if blocked]
    return f"{model.engine.name} keeps it off with {hit[0]}" if hit else None


def default_memory_share(rule: StaticMemory, version: str | None, device: DeviceSpec, built: BuiltModel,
                         ctx: SimContext, config: Any, *, speculative: bool,
                         chunk: int | None = None, prefill_graphs: bool | None = None,
                         capture_tokens: int | None = None) -> tuple[float, float]:
    """(share of each device, MiB kept back) that the engine's ``rule`` at ``version`` takes by
    default for this deployment: sglang's --tp-size counts every GPU, DP attention where DP > 1,
    its default prompt chunk unless ``chunk``, prefill CUDA graphs where ``ctx`` captures them
    (``prefill_graphs`` where given: a disaggregated pool captures none; up to the launch's
    ``capture_tokens`` where given), the vision tower of a vision-language ``config``."""
    vision = getattr(config, "vision_config", None) if built.sim.vision is not None else None
    return rule.default(version, device.memory_bytes, tp=ctx.parallel.num_devices, dp=ctx.parallel.dp,
                        chunk=chunk or default_chunk(device.memory_bytes, "sglang", device.name),
                        prefill_graphs=ctx.prefill_graph_tokens > 0 if prefill_graphs is None else prefill_graphs,
                        mla=has_mla(built), speculative=speculative, vision=vision, capture_tokens=capture_tokens)


def standard_dispatch_reason(model: CostModel, ctx: SimContext, mode: str = "auto") -> str:
    """Why this expert-parallel deployment runs the engine's standard dispatcher, not an all-to-all
    (``mode``: ``--moe-all-to-all``)."""
    engine = model.engine
    reasons = engine.moe_all_to_all.refusals(ctx.quant.routed_experts.kernel_dtype, ctx.parallel.dp,
                                             model.device.cuda_arch, model.device.name)
    if mode == "off" and not reasons:
        return "--moe-all-to-all off"
    return f"{engine.name} " + " and ".join(reasons)


def prefill_graph_blockers(model: CostModel, built: BuiltModel, parallel: Any, *, mode: str = "auto") -> list[str]:
    """Why the engine launches this deployment's prefill eagerly (empty: it captures piecewise
    CUDA graphs); ``mode`` is the request's ``prefill_cuda_graph``. Speculative and
    disaggregated deployments are the planner's, checked in :func:`phase_of`."""
    name, policy = model.engine.name, model.engine.prefill_graphs
    if policy is None:
        return [f"{name} has no prefill CUDA graphs"]
    if mode == "off":
        return ["--prefill-cuda-graph off"]
    if mode != "on" and not policy.applies(model.engine_version):
        return [f"{name} {model.engine_version} captures prefill only on request (default from {policy.since})"]
    features = {"dp_attention": parallel.dp > 1, "moe_all_to_all": built.sim.ctx.moe_dispatch == "all_to_all",
                "multimodal": built.vision_param_count > 0}
    return [f"{name} captures no piecewise CUDA graphs with {reason}"
            for feature, reason in policy.blocked_by.items() if features.get(feature)]


def prefill_graph_tokens(model: CostModel, built: BuiltModel, parallel: Any, chunk: int, *,
                         mode: str = "auto", max_tokens: int | None = None) -> int:
    """Tokens per rank up to which a prefill forward replays piecewise CUDA graphs (0: none):
    the chunked-prefill size ``chunk``, capped where the engine captures fewer (vLLM: 512 tokens;
    sglang with MLA: 2,048) or, where given, at the launch's ``max_tokens`` instead, rounded down
    to the engine's grid of captured sizes (vLLM's, sglang's), which caps the default too (sglang
    captures its chunk only where the chunk is on its grid)."""
    if prefill_graph_blockers(model, built, parallel, mode=mode):
        return 0
    policy = model.engine.prefill_graphs
    if max_tokens is not None:
        return policy.launched(min(chunk, max_tokens)) if policy.clamps_to_chunk else min(
            chunk, policy.launched(max_tokens))
    default = policy.max_tokens_by_arch.get(built.architecture or "", policy.max_tokens)
    caps = (default, policy.max_tokens_mla if built.profile.attention_kind == "mla" else None)
    return policy.launched(min([chunk] + [cap for cap in caps if cap]))


def decode_graph_tokens(model: CostModel, max_tokens: int | None, chunk: int | None = None) -> int | None:
    """The most tokens per rank a decode step replays a CUDA graph for where the launch's
    capture size ``max_tokens`` bounds decode too (vLLM, which caps it at the ``chunk`` first),
    else None (the engine's batch limit)."""
    policy = model.engine.prefill_graphs
    if max_tokens is None or policy is None or not policy.bounds_decode:
        return None
    return policy.launched(min(max_tokens, chunk) if chunk and policy.clamps_to_chunk else max_tokens)


def all_reduce_fusion(model: CostModel, built: BuiltModel, parallel: Any, *, mode: str = "auto") -> tuple[int, str]:
    """(the most tokens per rank for which the engine runs each decoder layer's all-reduce and
    the RMSNorm after it as one kernel, 0 for none; why). ``mode``: the request's
    ``all_reduce_fusion``: ``auto`` follows the engine version's rules, ``on`` and ``off``
    override them where the layout has the all-reduces to fuse."""
    engine, device, fusion = model.engine, model.device, model.engine.all_reduce_fusion
    if mode == "off":
        return 0, "--all-reduce-fusion off"
    if fusion is None:
        return 0, f"{engine.name}: not modelled"
    blockers = [why for why, hit in (("no tensor parallelism", parallel.tp <= 1), ("DP attention", parallel.dp > 1),
                                     ("an MoE all-to-all backend (DeepEP)",
                                      built.sim.ctx.moe_dispatch == "all_to_all"),
                                     ("two-batch overlap", parallel.two_batch_overlap)) if hit]
    if blockers:
        return 0, f"{engine.name} fuses no all-reduce with {blockers[0]}"
    per_token = built.text_config.hidden_size * 2  # the bf16 residual stream each token sends
    if mode == "on":
        if not fusion.has_path_for(built.architecture):
            return 0, f"{engine.name} has no fused path for {built.architecture or 'a config without architectures'}"
        tokens = fusion.token_limit(None, device, parallel.tp, per_token)
        if tokens == 0:
            return 0, f"{engine.name} fuses no all-reduce at TP {parallel.tp} on sm_{device.cuda_arch}"
        return tokens, "--all-reduce-fusion on"
    nodes = -(-parallel.num_devices // device.devices_per_node)
    refusal = fusion.refusal(model.engine_version, built.architecture, device, nodes, parallel.tp)
    if refusal:
        return 0, f"{engine.name} {refusal}"
    tokens = fusion.token_limit(model.engine_version, device, parallel.tp, per_token)
    return tokens, (f"{engine.name} {model.engine_version or 'the newest version'} fuses for "
                    f"{built.architecture} on sm_{device.cuda_arch} up to {tokens:,} tokens a rank")


def moe_runner(model: CostModel, built: BuiltModel, ctx: SimContext) -> tuple[str, str]:
    """(the fused-MoE kernel the engine's defaults launch for this architecture on this device,
    ``""`` where they pick it by the experts' dtype alone; why). A ``--moe-kernel`` the engine was
    launched with, and an MoE all-to-all backend, decide the kernel themselves."""
    rule = model.engine.arch_moe_runner
    if (rule is None or model.moe_kernel != "auto" or ctx.moe_dispatch == "all_to_all"
            or not any(isinstance(m, SimMoE) for m in built.sim.modules())):
        return "", ""
    dtype = table_dtype(ctx.quant.routed_experts.kernel_dtype, model.device)
    kernel = rule.launched(model.engine_version, built.architecture, dtype, model.device.cuda_arch,
                           ctx.quant.checkpoint_method)
    if kernel is None:
        return "", ""
    engine = f"{model.engine.name} {model.engine_version}" if model.engine_version else f"{model.engine.name} (newest)"
    return kernel, (f"{engine} runs {built.architecture}'s {dtype} experts in {kernel} on sm_{model.device.cuda_arch} "
                    f"({rule.source.split(':')[0]})")


def price(user: UserInput, built: BuiltModel, records: list[OpRecord], model: CostModel, ctx: SimContext,
          decode: bool, query_length: int, context: int, quant_text: str, *, micro: list[OpRecord] | None = None,
          extra_weight_bytes: int = 0, extra_kv_per_token: int = 0, speculative: bool = False) -> SimResult:
    """Price every record, compose the step (streams, overlap, host), add memory
    (``extra_*``: a draft's share; ``micro``: one micro-batch's records under two-batch overlap)."""
    p = ctx.parallel
    device = model.device
    phase = phase_of(model, ctx, decode)
    priced = price_records(records, model, phase)
    step = step_time(priced, model, phase, micro=price_records(micro, model, phase) if micro else None,
                     requests=ctx.requests, host_step=not speculative)
    if speculative:
        step.host += spec_host_rows(model, ctx.requests)
    step_s = step.seconds
    # a prefill on cached tokens is a prefix-cache hit: the client still sends, and the engine
    # tokenizes, the whole prompt
    request = model.request_cost(built.profile.tokenizer)
    request_s = 0.0 if decode else request.at(query_length + context)
    total_s = step_s + request_s
    shared = step.compute_s + step.communication_s + sum(h.seconds for h in step.host) + request_s
    # what the shares divide: the kernels back to back, plus the host rows

    rows: dict[tuple[str, str], list] = {}
    for r, t in priced:
        key = (f"{r.name.split('::')[-1]} ({_path_pattern(r.path)})", t.source)
        row = rows.setdefault(key, [0, 0.0, defaultdict(float), t.origin])
        row[0] += r.count
        row[1] += t.seconds * r.count
        row[2][t.bound] += t.seconds * r.count
    ops = [OpRow(name, int(v[0]), float(v[1]) * 1e3, float(v[1]) / shared if shared else 0.0,
                 max(v[2].items(), key=lambda kv: kv[1])[0], source, v[3]) for (name, source), v in rows.items()]
    hosts = step.host + ([HostRow("request: HTTP, tokenization, scheduling, first token out (TTFT)", request_s,
                                  request.source)] if request_s else [])
    ops += [OpRow(h.name, 1, h.seconds * 1e3, h.seconds / shared if shared else 0.0, "host", "engine", h.source)
            for h in hosts]
    ops.sort(key=lambda row: row.total_ms, reverse=True)
    shares = {s: 0.0 for s in (*SOURCES, "engine")}
    for row in ops:
        shares[row.source] += row.share

    usage, max_queries = memory(built, records, device, ctx, extra_weight_bytes, extra_kv_per_token)
    in_memory = usage["total"] <= usage["capacity"]
    in_pool = ctx.memory.max_total_tokens is None or usage["kv_slots_needed"] <= usage["kv_slots"]
    feasible = in_memory and in_pool
    throughput = (user.num_queries * (1 if decode else query_length)) / step_s / p.num_devices
    moe = next((m for m in built.sim.modules() if isinstance(m, SimMoE)), None)
    notes = list(model.notes)
    if not in_memory:
        notes.append(f"does not fit: needs {usage['total']:.1f} GiB per device, {usage['capacity']:.1f} GiB usable "
                     f"({ctx.memory.describe(device)})")
    elif not in_pool:
        notes.append(f"does not fit: needs {usage['kv_slots_needed']:,} KV cache slots a rank, the pool holds "
                     f"{usage['kv_slots']:,} ({ctx.memory.describe(device)})")
    return SimResult(
        model=user.model, model_type=built.profile.model_type, device=device.name, num_devices=p.num_devices,
        parallel={"tp": p.tp, "dp": p.dp, "ep": p.ep, "moe_tp": p.moe_tp, "shared_expert_tp": p.shared_expert_tp,
                  "two_batch_overlap": p.two_batch_overlap},
        phase="decode" if decode else "prefill",
        workload={"num_queries": user.num_queries, "query_length": query_length, "context_length": context,
                  "requests_per_rank": ctx.requests, "tokens_per_rank": ctx.tokens},
        quantization=quant_text, kv_cache_dtype=str(ctx.kv_cache_dtype).replace("torch.", ""),
        step_latency_ms=step_s * 1e3,
        ttft_ms=None if decode else total_s * 1e3,
        tpot_ms=step_s * 1e3 / query_length if decode else None,
        throughput_tokens_per_s_per_device=throughput,
        compute_ms=step.compute_s * 1e3, communication_ms=step.communication_s * 1e3,
        kernel_count=sum(cost_of(r).kernels * r.count for r, _ in priced),
        memory_gib=usage, feasible=feasible, max_num_queries=max_queries,
        parameters_billion=built.param_count / 1e9,
        vision_parameters_billion=built.vision_param_count / 1e9,
        routing_assumption=moe.routing_assumption if moe is not None else None,
        ops=ops, simulation_wall_s=0.0, notes=notes,
        cost_model={"engine": model.engine.name, "engine_version": model.engine_version, "sources": model.describe(),
                    "tokenizer": built.profile.tokenizer,
                    "cuda_graph": phase.graph, "piecewise": phase.piecewise,
                    "prefill_graph_tokens": ctx.prefill_graph_tokens, "measured_share": shares},
        _timed=priced,
    )


def spec_host_rows(model: CostModel, requests: int) -> list[HostRow]:
    """The host time a speculative cycle waits for, in place of the decode step's: without
    the overlapped scheduler every cycle pays the engine's whole per-step host work."""
    cost = model.host_step(speculative=True)
    return [HostRow("host: per-cycle scheduling and output processing (speculative)", cost.at(requests), cost.source)]


def price_speculative(user: UserInput, built: BuiltModel, records: list[OpRecord], model: CostModel, ctx: SimContext,
                      context: int, quant_text: str, spec: SpecRequest, manager: Any) -> SimResult:
    """Price one speculative cycle (draft forwards, verify, extend) against plain decode."""
    from infercast.speculative import (
        cycle_forwards,
        draft_for,
        relabel,
        trace_draft,
        weight_bytes,
    )

    p, s = ctx.parallel, spec.settings
    base = price(user, built, records, model, ctx, True, 1, context, quant_text)
    phase = phase_of(model, ctx, True)
    draft, draft_ctx = draft_for(spec.draft_config, built, ctx, manager, model.engine, model.device)
    draft_weights = weight_bytes(draft)
    cycle: list[OpRecord] = []
    forwards = []
    for forward in cycle_forwards(s.num_steps, s.topk, s.num_draft_tokens):
        workload = Workload(num_queries=user.num_queries, query_length=forward.tokens_per_request,
                            context_length=context, decode=True)
        if forward.model == "target":
            with ctx.using(workload):
                got = trace(built.sim, ctx.tokens)
        else:
            with draft_ctx.using(workload):
                got = trace_draft(draft, draft_ctx.tokens, forward.logits_per_request)
        seconds = forward_seconds(got, model, phase)
        forwards.append({"name": forward.name, "model": forward.model, "tokens_per_request": forward.tokens_per_request,
                         "count": forward.count, "ms_each": seconds * 1e3})
        if forward.count:
            cycle += relabel(got, forward.name, forward.count)
    n = s.num_draft_tokens
    with ctx.using(Workload(num_queries=user.num_queries, query_length=n, context_length=context, decode=True)):
        result = price(user, built, cycle, model, ctx, True, n, context, quant_text, extra_weight_bytes=draft_weights,
                       extra_kv_per_token=draft.kv_bytes_per_token(), speculative=True)
    cycle_ms = result.step_latency_ms
    tpot = cycle_ms / spec.accept_length
    result.workload["num_draft_tokens"] = n
    result.tpot_ms = tpot
    result.throughput_tokens_per_s_per_device = user.num_queries * spec.accept_length / (cycle_ms / 1e3) / p.num_devices
    result.memory_gib["draft_weights"] = draft_weights / GIB
    result.speculative = {
        "algorithm": spec.algorithm, "draft_model": spec.draft_model, "draft_architecture": draft.architecture,
        "num_steps": s.num_steps, "topk": s.topk, "num_draft_tokens": n,
        "acceptance": spec.acceptance, "accept_length": spec.accept_length,
        "accept_rate": (spec.accept_length - 1) / (n - 1),
        "cycle_ms": cycle_ms, "forwards": forwards,
        "baseline_tpot_ms": base.tpot_ms,
        "baseline_throughput_tokens_per_s_per_device": base.throughput_tokens_per_s_per_device,
        "speedup": base.tpot_ms / tpot,
        "draft_parameters_billion": draft.total_logical_params() / 1e9,
        # an MTP layer runs in the target's context, under its own plan where the checkpoint gives it one
        "draft_quantization": (draft_ctx.quant if spec.draft_config is not None else ctx.mtp_quant or ctx.quant
                               ).describe(),
    }
    return result
