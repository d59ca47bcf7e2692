"""``infercast export``: the real transformers forward as static prefill and decode graphs.

Resolve the config through the adapters (phase-1 config patches), keep the text model of a
vision-language model (its profile names ``text_config_key``), force eager attention, build the
causal LM on meta under the adapters' class patches, wrap it in the ABIs of
:mod:`infercast.export.abi`, extract each with pytorch-ir, and write ``STEM_prefill_ir.json``,
``STEM_decode_ir.json`` and ``STEM_kv_mapping.json``. The patches are restored on exit.
"""

from __future__ import annotations

import json
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from infercast_adapters import InfercastError, patched
from infercast_adapters.arch import text_config_of
from infercast_adapters.config import apply_num_hidden_layers_override, load_config, to_transformers

from infercast.export import DTYPE_NAMES, PHASES, abi
from infercast.export.graph import extract, require_pytorch_ir, untraceable, write_ir

DTYPES = {name: getattr(torch, attr) for name, attr in DTYPE_NAMES.items()}
FORMAT_VERSION = 1

Progress = Callable[[str, str], None]
"""``progress(phase, stage)``: called as each phase reaches a stage (build, export, write, done)."""


@dataclass(frozen=True)
class ExportRequest:
    """What to export; the fields are the command line's flags."""

    model: str
    phase: str = "both"
    seq_len: int = 128
    """Prompt tokens per sequence in the prefill graph; the first decode position."""
    max_cache_len: int | None = None
    """Cache slots per sequence in the decode graph (needed for decode)."""
    batch: int = 1
    layers: int | None = None
    """Export only the first N decoder layers (default: all)."""
    dtype: str = "bf16"
    out_dir: str | Path = "."
    name: str | None = None
    """File stem (default: from the model reference, ``kimi-k2.5``)."""

    @property
    def phases(self) -> tuple[str, ...]:
        return ("prefill", "decode") if self.phase == "both" else (self.phase,)


@dataclass
class PhaseResult:
    phase: str
    path: Path
    nodes: int
    inputs: int
    outputs: int
    weights: int
    seconds: float
    """Building the ABI's example inputs, torch.export and conversion (not writing)."""
    peak_rss_mib: float
    """The process's peak resident memory when the phase was done."""
    bytes_written: int


@dataclass
class ExportResult:
    model: str
    model_type: str
    text_model_type: str
    layers: int
    model_layers: int
    dtype: str
    phases: list[PhaseResult]
    kv_mapping: Path | None
    build_seconds: float
    total_seconds: float
    notes: list[str] = field(default_factory=list)


def file_stem(model_ref: str) -> str:
    """``moonshotai/Kimi-K2.5`` -> ``kimi-k2.5``; a path -> its directory or file name."""
    path = Path(model_ref)
    base = path.parent.name if path.name == "config.json" else (path.stem if path.suffix == ".json" else path.name)
    return re.sub(r"[^a-z0-9._-]+", "_", base.lower()).strip("_") or "model"


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InfercastError(f"{name} must be a positive whole number, got {value!r}")


def validate_request(request: ExportRequest) -> None:
    """Checks that need no config (the flags alone)."""
    if request.phase not in PHASES:
        raise InfercastError(f"--phase {request.phase!r}: choose one of {', '.join(PHASES)}")
    if request.dtype not in DTYPES:
        raise InfercastError(f"--dtype {request.dtype!r}: choose one of {', '.join(DTYPES)}")
    _positive("--seq-len", request.seq_len)
    _positive("--batch", request.batch)
    if request.layers is not None:
        _positive("--layers", request.layers)
    if "decode" in request.phases:
        if request.max_cache_len is None:
            raise InfercastError("the decode graph needs --max-cache-len (cache slots per sequence)")
        _positive("--max-cache-len", request.max_cache_len)
        if request.seq_len >= request.max_cache_len:
            raise InfercastError(
                f"--seq-len {request.seq_len} does not fit --max-cache-len {request.max_cache_len}: decode writes "
                f"the token after the prompt at slot {request.seq_len}, so the cache needs more than "
                f"{request.seq_len} slots")


def validate_against_config(request: ExportRequest, text: Any) -> None:
    """Checks against the model: its context, its layer count, attention the ABI cannot express."""
    context = getattr(text, "max_position_embeddings", None)
    longest = max(request.seq_len, request.max_cache_len or 0) if "decode" in request.phases else request.seq_len
    if context and longest > context:
        flag = "--max-cache-len" if longest != request.seq_len else "--seq-len"
        raise InfercastError(f"{flag} {longest} exceeds the model's context of {context} positions "
                             "(max_position_embeddings)")
    total = text.num_hidden_layers
    if request.layers is not None and request.layers > total:
        raise InfercastError(f"--layers {request.layers}: the model has {total} decoder layers")
    kinds = set(getattr(text, "layer_types", None) or ())
    window = getattr(text, "sliding_window", None)
    if kinds - {"full_attention"} or (window and getattr(text, "use_sliding_window", True) and longest > window):
        raise InfercastError(f"{request.model} uses sliding-window attention ({sorted(kinds) or window}); the static "
                             "ABI's causal mask covers full attention only")


def build_causal_lm(text: Any, dtype: torch.dtype) -> torch.nn.Module:
    """The causal LM for ``text`` on meta (no weights allocated), in eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with torch.device("meta"), no_init_weights():
        try:
            lm = AutoModelForCausalLM.from_config(text, dtype=dtype)
        except Exception as exc:  # a config transformers cannot build as a causal LM
            raise InfercastError(f"transformers could not build a {text.model_type} causal LM on meta: {exc}") from exc
    return lm.eval()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _meta(shape, dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device="meta")


def cache_shapes(lm: torch.nn.Module, batch: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Each cache tensor's shape (one token) and dtype, from a one-token prefill on meta."""
    module = abi.PrefillABI(lm)
    with torch.no_grad():
        try:
            out = module(_meta((batch, 1), torch.int64))
        except InfercastError:
            raise
        except Exception as exc:  # the forward itself fails on meta: name the module
            raise untraceable(exc, module, "the forward failed in", prefix=abi.LM_PREFIX) from None
    return [(tuple(t.shape), t.dtype) for t in out[1:]]


def export_model(request: ExportRequest, *, manager=None, progress: Progress | None = None) -> ExportResult:
    """Export the graphs ``request`` asks for; see the module docstring."""
    from infercast.plugins import get_manager, known_model_refs

    started = time.perf_counter()
    note = progress or (lambda phase, stage: None)
    validate_request(request)
    require_pytorch_ir()
    manager = manager or get_manager()
    # the model view builds transformers' own model: a plain config becomes its native class
    config = to_transformers(load_config(request.model, manager=manager, known_models=known_model_refs(manager)))
    manager.patch_config(config)
    profile = manager.profile_for(config.model_type)
    if profile is None:
        raise InfercastError(f"{request.model}: no adapter profile for model_type {config.model_type!r}. Profiles "
                             f"exist for: {', '.join(sorted(manager.profiles()))}. Install an adapter plugin for it.")
    text = text_config_of(config) if profile.text_config_key else config
    validate_against_config(request, text)
    model_layers = text.num_hidden_layers
    if request.layers is not None:
        apply_num_hidden_layers_override(config, request.layers)
    text._attn_implementation = "eager"
    out_dir = Path(request.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InfercastError(f"cannot create --out {out_dir}: {exc.strerror or exc}") from exc
    stem = request.name or file_stem(request.model)
    dtype = DTYPES[request.dtype]
    layers = text.num_hidden_layers
    roles = abi.cache_roles(profile.attention_kind)
    meta = {"format": "infercast-ir", "version": FORMAT_VERSION, "model": request.model,
            "model_type": config.model_type, "text_model_type": text.model_type, "batch": request.batch,
            "seq_len": request.seq_len, "max_cache_len": request.max_cache_len, "layers": layers,
            "model_layers": model_layers, "dtype": request.dtype, "attention_kind": profile.attention_kind,
            "cache_roles": list(roles)}

    results: list[PhaseResult] = []
    irs: dict[str, Any] = {}
    with patched(manager.class_patches(config), config.model_type):
        note(request.phases[0], "build")
        build_started = time.perf_counter()
        lm = build_causal_lm(text, dtype)
        shapes = cache_shapes(lm, request.batch)
        build_seconds = time.perf_counter() - build_started
        for phase in request.phases:
            note(phase, "export")
            phase_started = time.perf_counter()
            if phase == "prefill":
                module, inputs = abi.PrefillABI(lm), (_meta((request.batch, request.seq_len), torch.int64),)
            else:
                module = abi.DecodeABI.named(lm, abi.cache_input_names(layers, profile.attention_kind))
                slots = [_meta(shape[:abi.SEQ_AXIS] + (request.max_cache_len,) + shape[abi.SEQ_AXIS + 1:], dt)
                         for shape, dt in shapes]
                inputs = (_meta((request.batch, 1), torch.int64), _meta((1,), torch.int64), *slots)
            ir = extract(module, inputs, f"{stem}_{phase}", weight_prefix=abi.LM_PREFIX)
            seconds = time.perf_counter() - phase_started
            note(phase, "write")
            path = out_dir / f"{stem}_{phase}_ir.json"
            written = write_ir(ir, path, {**meta, "phase": phase})
            irs[phase] = ir
            results.append(PhaseResult(phase, path, len(ir.nodes), len(ir.graph_inputs), len(ir.graph_outputs),
                                       len(ir.weights), seconds, _peak_rss_mib(), written))
            note(phase, "done")
    mapping_path = None
    if len(irs) == 2:
        mapping_path = out_dir / f"{stem}_kv_mapping.json"
        mapping = kv_mapping(irs["prefill"], irs["decode"], meta, {p.phase: p.path.name for p in results})
        mapping_path.write_text(json.dumps(mapping, indent=1))
    notes = []
    if layers < model_layers:
        notes.append(f"--layers {layers}: the graphs hold the first {layers} of the model's {model_layers} decoder "
                     "layers (the rest repeat them); they are not the whole model")
    return ExportResult(request.model, config.model_type, text.model_type, layers, model_layers, request.dtype, results,
                        mapping_path, build_seconds, time.perf_counter() - started, notes)


def kv_mapping(prefill: Any, decode: Any, meta: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """Which prefill output feeds which decode input, and which decode output replaces it, per
    layer and cache tensor, from the two graphs' inputs and outputs (both in layer order)."""
    layers, roles = meta["layers"], meta["cache_roles"]
    prefill_cache, decode_in, decode_out = prefill.graph_outputs[1:], decode.graph_inputs[2:], decode.graph_outputs[1:]
    if not len(prefill_cache) == len(decode_in) == len(decode_out) == len(roles) * layers:
        raise InfercastError(f"the graphs disagree on the cache: prefill returns {len(prefill_cache)} cache tensors, "
                             f"decode takes {len(decode_in)} and returns {len(decode_out)}, expected "
                             f"{len(roles) * layers} ({layers} layers x {len(roles)})")
    entries = []
    for layer in range(layers):
        entry: dict[str, Any] = {"layer": layer}
        for r, role in enumerate(roles):
            i = layer * len(roles) + r
            entry[role] = {"prefill_output": prefill_cache[i].name, "decode_input": decode_in[i].name,
                           "decode_output": decode_out[i].name, "prefill_shape": list(prefill_cache[i].shape),
                           "decode_shape": list(decode_in[i].shape), "dtype": decode_in[i].dtype}
        entries.append(entry)
    return {
        "format": "infercast-kv-mapping", "version": FORMAT_VERSION, "model": meta["model"],
        "batch": meta["batch"], "prefill_seq_len": meta["seq_len"], "max_cache_len": meta["max_cache_len"],
        "layers": layers, "model_layers": meta["model_layers"], "sequence_axis": abi.SEQ_AXIS, "cache_roles": roles,
        "protocol": ("run prefill; copy each prefill cache output into slots 0..prefill_seq_len-1 (sequence_axis) "
                     "of its decode input; run decode with cache_position = prefill_seq_len, then +1 per step, "
                     "feeding each decode cache output back as the same input; logits are output 0 of both graphs"),
        "prefill": {"file": files["prefill"], "input_ids": prefill.graph_inputs[0].name,
                    "logits": prefill.graph_outputs[0].name},
        "decode": {"file": files["decode"], "input_ids": decode.graph_inputs[0].name,
                   "cache_position": decode.graph_inputs[1].name, "logits": decode.graph_outputs[0].name},
        "cache": entries,
    }
