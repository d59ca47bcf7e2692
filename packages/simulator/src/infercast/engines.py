"""Serving engines: which kernels they launch, when CUDA graphs run, and what the host costs.

An :class:`Engine` says what the GPU tables cannot: which measured kernel a layer uses (an
INT4 MoE runs marlin in sglang and vLLM), whether a step is replayed from a CUDA graph
(decode up to the capture size) or launched kernel by kernel from Python (prefill), and the
host time a step or a request costs outside the kernels. Each host figure is its own priced
row in the output, with its source; none is folded into a kernel's efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from infercast_adapters import InfercastError

from infercast.request import OVERLAP_MODES


@dataclass(frozen=True)
class HostCost:
    """Host time: ``seconds`` plus ``per_item_s`` for each item (a running request for a
    step, a prompt token for a request), with where the figures come from."""

    seconds: float
    source: str
    per_item_s: float = 0.0

    def at(self, items: int = 0) -> float:
        return self.seconds + self.per_item_s * items


EAGER_UNDER_PIECEWISE = frozenset({"attention", "mla_attention", "mla_prefill_attention", "kv_cache_write",
                                   "rope_kv_cache_write"})
"""Operators a piecewise CUDA graph leaves out: attention and the cache write inside it run
eagerly between the captured pieces (sglang's and vLLM's split op wraps the attention backend's
forward, which stores the new keys and values)."""


@dataclass(frozen=True)
class SlidingKV:
    """How an engine's cache holds a sliding-window layer's keys and values: ``window``, only the
    tokens still inside the window (the rest freed as the context grows), or ``pool``, a pool of
    ``ratio`` times the full layers' tokens shared by the sliding layers."""

    kind: str
    source: str
    ratio: float = 1.0

    def held(self, tokens: int, window: int) -> float:
        """Tokens a sliding layer keeps for a request of ``tokens``."""
        return min(tokens, window) if self.kind == "window" else self.ratio * tokens


@dataclass(frozen=True)
class FP32Router:
    """The MoE families (:class:`~infercast_adapters.arch.MoEArchitecture` ``family``) whose router
    GEMM the engine computes in FP32: FP32 weights, the hidden states cast to FP32, and PyTorch's
    default float32 matmul precision ("highest"), so the GEMM runs on the CUDA cores and not the
    tensor cores. ``cast_kernel``: the cast is a kernel of its own (else compiled into the kernel
    before it)."""

    families: frozenset[str]
    cast_kernel: bool
    source: str


@dataclass(frozen=True)
class ArchMoERunner:
    """The fused-MoE kernel an engine's defaults launch by model architecture on some GPUs, with
    the standard dispatcher (no MoE all-to-all backend): ``kernel`` where a rule names the
    architecture and the experts' table dtype at the engine version, else, for an architecture
    whose branch was read, the engine's generic kernel for that dtype (``otherwise``). Versions
    before ``checked_since``, architectures not read, the ``undecided`` spans and the dtypes
    ``otherwise`` leaves out decide nothing (None: the engine's kernel list)."""

    kernel: str
    cuda_archs: frozenset[int]
    rules: tuple[tuple[frozenset[str], str, str], ...]
    """(architectures, table dtype, the first version that launches ``kernel`` for them)."""
    otherwise: Mapping[str, str]
    read: frozenset[str]
    """Architectures whose branch was read: beyond ``rules`` they run ``otherwise``."""
    checked_since: str
    source: str
    undecided: tuple[tuple[frozenset[str], str, str, str], ...] = ()
    """(architectures, table dtype, first, last version) where the engine does something else first
    (quantizes the checkpoint online): not priced."""
    quantizations: frozenset[str] = frozenset()
    """Checkpoint methods (:attr:`~infercast.quant.QuantPlan.checkpoint_method`) the rules' engine
    check does not match, so their experts run ``otherwise``."""

    def launched(self, version: str | None, architecture: str, dtype: str, cuda_arch: int,
                 method: str = "") -> str | None:
        """The kernel ``version`` launches for ``architecture``'s ``dtype`` experts, loaded from a
        checkpoint of ``method``, on sm_``cuda_arch`` (None where this rule does not decide)."""
        if (cuda_arch not in self.cuda_archs or dtype not in self.otherwise or architecture not in self.read
                or not reaches(version, self.checked_since)):
            return None
        if any(architecture in names and dtype == d and reaches(version, first) and not reaches(version, _after(last))
               for names, d, first, last in self.undecided):
            return None
        if method not in self.quantizations and any(
                architecture in names and dtype == d and reaches(version, since) for names, d, since in self.rules):
            return self.kernel
        return self.otherwise[dtype]


def _after(version: str) -> str:
    """The patch release after ``version`` (0.5.10 -> 0.5.11), for a span's upper bound."""
    *head, last = version.split(".")
    return ".".join([*head, str(int(last) + 1)])


def reaches(version: str | None, since: str) -> bool:
    """Whether engine ``version`` is ``since`` or newer; an unknown (None) or unparsable version
    is taken as the newest, as the default tables are."""
    from packaging.version import InvalidVersion, Version

    try:
        return version is None or Version(version) >= Version(since)
    except InvalidVersion:
        return True


@dataclass(frozen=True)
class PointwiseFusions:
    """Pointwise kernels an engine does not launch on their own, each folded into a neighbour."""

    rope_in_cache_write: bool
    """RoPE on q and k and the K/V cache write are one preprocessing kernel before attention
    (GQA/MHA layers; MLA keeps its own kernels here)."""
    fp8_swiglu: bool
    """SiLU-and-mul writes the down projection's FP8 input (FP8 without block scales, the
    engine's per-tensor FP8): no quantize kernel before ``down_proj``."""
    fp8_attention_output: bool
    """With an FP8 KV cache, attention writes ``o_proj``'s FP8 input: no quantize kernel before it."""
    source: str
    fp8_norm: bool = False
    """The RMSNorm before attention and before a dense MLP writes ``qkv_proj``'s and
    ``gate_up_proj``'s FP8 input (FP8 without block scales): no quantize kernel before them."""


@dataclass(frozen=True)
class PrefillGraphs:
    """Prefill replayed from piecewise CUDA graphs: every operator but attention is captured, so
    a forward launches its attention kernels and one replay per piece instead of every kernel."""

    since: str | None
    """The first engine version that captures prefill by default (None: every version)."""
    max_tokens_mla: int | None
    """The most tokens per rank a forward may have to be captured with MLA attention (None: as
    without MLA, up to the chunked-prefill size)."""
    blocked_by: Mapping[str, str]
    """Deployment features that switch capture off, each with the engine's own reason."""
    source: str
    max_tokens: int | None = None
    """The most tokens per rank any forward is captured with (None: up to the chunked-prefill
    size); a larger prefill launches its compiled pieces without graphs."""
    max_tokens_by_arch: Mapping[str, int] = field(default_factory=dict)
    """``max_tokens`` where the engine sets another default for a model class."""
    bounds_decode: bool = False
    """Whether a launch's capture size (``--prefill-cuda-graph-max-tokens``) also bounds decode
    graphs: vLLM builds one size list for its full decode and piecewise graphs."""
    clamps_to_chunk: bool = False
    """Whether the engine caps a launch's capture size at the chunk before rounding it to its grid
    (vLLM's ``_set_cudagraph_sizes``: min(max_num_batched_tokens, size)); else the grid is built
    up to the launch's size and the chunk only bounds the forwards (sglang)."""
    flag: str = ""
    """The launch flag that sets the capture size."""
    captured: Callable[[int], int] | None = None
    """The largest size the engine captures under a launch's capture size (its grid of sizes
    rounds the launch's down); None: the launch's own."""

    def launched(self, tokens: int) -> int:
        """The largest size captured under a launch's capture size ``tokens``."""
        return self.captured(tokens) if self.captured else tokens

    def applies(self, version: str | None) -> bool:
        """Whether ``version`` captures prefill by default (an unknown version is taken as the
        newest, as the default tables are)."""
        return self.since is None or reaches(version, self.since)


@dataclass(frozen=True)
class FusionEra:
    """Where one range of engine versions fuses the all-reduce with the norm after it."""

    since: str
    architectures: frozenset[str] | None
    """The model classes (``config.architectures[0]``) the engine turns the fusion on for (None:
    every one, a compiler pass that finds the all-reduce and the norm in any model)."""
    cuda_archs: frozenset[int]
    """Compute capabilities it runs on (90: Hopper, 100: Blackwell)."""
    excludes_h20: bool = False
    """Whether it leaves H20 out (a FlashInfer bug; sglang matches "H20" but not "H200" in the name)."""
    multi_node_archs: frozenset[int] = frozenset()
    """Compute capabilities on which it also fuses across nodes (else one node only)."""
    max_bytes: Mapping[int, Mapping[int, float]] | None = None
    """The largest all-reduce it fuses, in bytes, by compute capability and TP size; a TP size not
    listed does not fuse (None: up to the fusion's ``max_tokens`` at any TP size)."""


@dataclass(frozen=True)
class AllReduceFusion:
    """The engine folds each decoder layer's tensor-parallel all-reduce into the residual add and
    RMSNorm that follow it (one kernel: FlashInfer's all-reduce fusion), for steps of up to
    ``max_tokens`` tokens (or its era's ``max_bytes``), without DP attention or an MoE
    all-to-all backend."""

    eras: tuple[FusionEra, ...]
    """Oldest first; a version takes the last era it has reached (an unknown version the newest)."""
    max_tokens: int
    source: str

    def era(self, version: str | None) -> FusionEra | None:
        reached = [e for e in self.eras if reaches(version, e.since)]
        return reached[-1] if reached else None

    def has_path_for(self, architecture: str) -> bool:
        """Whether some version fuses for this model class (its engine code has the fused path)."""
        return any(e.architectures is None or architecture in e.architectures for e in self.eras)

    def refusal(self, version: str | None, architecture: str, device: Any, nodes: int = 1,
                tp: int | None = None) -> str | None:
        """Why ``version`` does not fuse for this model class on ``device`` (a
        :class:`~infercast.devices.DeviceSpec`) over ``nodes`` nodes at TP ``tp``; None when it does."""
        named = f"{version or 'the newest version'}"
        era = self.era(version)
        if era is None:
            return f"{named} has no all-reduce fusion"
        if era.architectures is not None and architecture not in era.architectures:
            return f"{named} does not fuse for {architecture or 'a config without architectures'}"
        if device.cuda_arch not in era.cuda_archs:
            return f"{named} fuses only on sm_{'/sm_'.join(map(str, sorted(era.cuda_archs)))}"
        if era.excludes_h20 and "H20" in device.name and "H200" not in device.name:
            return f"{named} leaves {device.name} out"
        if nodes > 1 and device.cuda_arch not in era.multi_node_archs:
            return f"{named} fuses within one node"
        sizes = (era.max_bytes or {}).get(device.cuda_arch)
        if era.max_bytes is not None and tp is not None and tp not in (sizes or {}):
            return f"{named} fuses at TP {', '.join(map(str, sorted(sizes or {})))} only"
        return None

    def token_limit(self, version: str | None, device: Any, tp: int, bytes_per_token: float) -> int:
        """The most tokens per rank whose all-reduce ``version`` fuses (an all-reduce of
        ``bytes_per_token`` a token): the era's byte limit for the device and TP size, else
        ``max_tokens``."""
        era = self.era(version) or self.eras[-1]
        if era.max_bytes is None:
            return self.max_tokens
        limit = era.max_bytes.get(device.cuda_arch, {}).get(tp)
        return int(limit // bytes_per_token) if limit else 0


_SGLANG_056 = frozenset({"DeepseekV3ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
                         "GptOssForCausalLM"})
_SGLANG_057 = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM", "Qwen3MoeForCausalLM"})
_SGLANG_058 = _SGLANG_057 | {"Glm4MoeLiteForCausalLM"}
_SGLANG_059 = _SGLANG_058 | {"KimiK25ForConditionalGeneration"}
_SGLANG_0510 = _SGLANG_059 | {"Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration"}
_SGLANG_0511 = _SGLANG_0510 | {"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "Qwen3NextForCausalLM"}
_SGLANG_0512 = _SGLANG_0511 | {"InternS2PreviewForConditionalGeneration"}
_SGLANG_0513 = _SGLANG_0512 | {"MistralLarge3ForCausalLM"}
_SGLANG_0514 = _SGLANG_0513 | {"Qwen3VLMoeForConditionalGeneration", "NemotronHForCausalLM",
                               "NemotronHPuzzleForCausalLM"}
_HOPPER_BLACKWELL = frozenset({90, 100})
SGLANG_ALL_REDUCE_FUSION = AllReduceFusion(
    eras=(
        FusionEra("0", _SGLANG_056, frozenset({100})),  # read in 0.5.6.post2; earlier releases not checked
        FusionEra("0.5.7", _SGLANG_057, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.8", _SGLANG_058, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.9", _SGLANG_059, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.10", _SGLANG_0510, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.11", _SGLANG_0511, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.12", _SGLANG_0512, _HOPPER_BLACKWELL, excludes_h20=True),
        FusionEra("0.5.13", _SGLANG_0513, _HOPPER_BLACKWELL),
        FusionEra("0.5.14", _SGLANG_0514, _HOPPER_BLACKWELL, multi_node_archs=frozenset({100})),
    ),
    max_tokens=2048,
    source="sglang server_args.py turns enable_flashinfer_allreduce_fusion on by model class: 0.5.6.post2 for "
    "DeepseekV3 (and Mistral Large 3, Pixtral, GptOss) on sm100; from 0.5.7 on sm90 too, for DeepseekV3, GptOss, "
    "Qwen3 MoE and GLM-4 MoE; KimiK25 from 0.5.9; two-batch overlap needs an all-to-all backend, so never with it; "
    "never with DP attention or an MoE all-to-all backend, one node only (sm100 also across nodes from 0.5.14), "
    "H20 left out from 0.5.7 to 0.5.12 (flashinfer issue 2204). communicator.py fuses the all-reduce after "
    "attention and after the MLP (not the last layer's) into the next RMSNorm for up to 2,048 tokens",
)


_MIB = 1 << 20
VLLM_ALL_REDUCE_FUSION = AllReduceFusion(
    eras=(FusionEra("0.17.0", None, _HOPPER_BLACKWELL, max_bytes={
        90: {2: 64 * _MIB, 4: 2 * _MIB, 8: 0.5 * _MIB}, 100: {2: 64 * _MIB, 4: 32 * _MIB, 8: 1 * _MIB}}),),
    max_tokens=0,
    source="vLLM's default optimization level (-O2) turns fuse_allreduce_rms on from 0.17.0 (config/vllm.py, "
    "enable_allreduce_rms_fusion: TP > 1, sm_90 or sm_100, FlashInfer installed, which vLLM's CUDA wheels require, "
    "DP 1 and PP 1; 0.14-0.16 keep it off at every level): a compiler pass fuses each all-reduce with the residual "
    "add and RMSNorm after it, in any model, while the all-reduce is at most FI_ALLREDUCE_FUSION_MAX_SIZE_MB "
    "(compilation/passes/fusion/allreduce_rms_fusion.py, 0.17.0-0.19.0; 0.18 adds sm_103): sm_90 64 / 2 / 0.5 MiB "
    "at TP 2 / 4 / 8, sm_100 64 / 32 / 1 MiB. vLLM's pass also fuses the embedding's all-reduce with the first input "
    "norm and the last one with the final norm, which are priced apart here (two norms a step)",
)


@dataclass(frozen=True)
class MlaPoolCast:
    """An MLA decode that reads an FP8 latent cache by casting the layer's whole KV pool (every
    slot, live or not) to bf16 first, in every layer of every forward, CUDA graphs included."""

    archs: frozenset[int]
    """The CUDA architectures whose default MLA backend does it."""
    source: str


@dataclass(frozen=True)
class AbsorbedPrefixExtend:
    """An MLA prefill over a short cached prefix that runs in the absorbed form (attention over
    the 576-wide latent cache, as decode does) rather than expanding every cached latent to
    K and V: a forward whose requests have between 1 and ``below - 1`` cached tokens in all."""

    below: int
    setting: str
    """Where a user changes ``below``."""
    archs: frozenset[int]
    """The CUDA architectures whose default MLA backend takes this rule."""
    source: str


SGLANG_ABSORBED_PREFIX_EXTEND = AbsorbedPrefixExtend(
    8192, "SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD", frozenset({90}),
    "sglang's DeepSeek attention dispatch (_handle_attention_backend, models/deepseek_common/"
    "attention_backend_handler.py, 0.5.9) runs an extend in the expanded MHA form only when the batch has no cached "
    "prefix or at least SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD (8,192) cached tokens in all, and the absorbed MLA "
    "form otherwise, for its fa3, flashinfer and flashmla backends (Hopper's default: fa3); Blackwell's "
    "trtllm_mla expands any prefix (handle_attention_trtllm_mla)",
)


@dataclass(frozen=True)
class ScatteredAttentionInput:
    """An opt-in prefill layout for MLA with a query LoRA under attention TP: the MLP's partial
    sums are reduce-scattered instead of all-reduced, so each rank normalizes and down-projects
    (``fused_qkv_a_proj``) 1/TP of the tokens, then all-gathers the narrow latent. The attention's
    all-reduce and everything after it run on every token, as without it."""

    flag: str
    since: str
    """The first version that has ``flag``."""
    source: str


SGLANG_SCATTERED_ATTENTION_INPUT = ScatteredAttentionInput(
    "--enable-attn-tp-input-scattered", "0.5.6",
    "sglang PR 10568 (first in 0.5.6; layers/communicator.py, AttnTpContext): with the flag, a DeepSeek-style model "
    "with q_lora_rank, TP > 1, no DP attention, no MoE all-to-all backend, no piecewise CUDA graphs, no EAGLE3 and "
    "no two-batch overlap runs each extend forward (not target-verify or draft-extend) with its hidden states "
    "scattered: prepare_attn reduce-scatters the previous MLP's (or the embedding's) partial sums, fetch_qkv_latent "
    "all-gathers fused_qkv_a_proj's output, prepare_mlp adds the residual to this rank's rows, all-reduces and "
    "normalizes, and the last layer all-reduces its MLP as usual; on H20 TP8 with 16K-token chunks "
    "fused_qkv_a_proj went from 205.1 to 26.1 ms and RMSNorm from 82.3 to 43.4 ms of the profile",
)


SGLANG_MLA_POOL_CAST = MlaPoolCast(
    frozenset({90}),
    "sglang's fa3 MLA backend, its default on Hopper, and flashinfer_mla read an FP8 cache through "
    "get_key_buffer(layer_id).to(q.dtype), a copy of the layer's whole pool (sglang issue 35291: DeepSeek-R1 on "
    "8 x H200 with a 131,072-token pool, one 225.79 us kernel 61 times a step, 13.77 ms of 31.52; the fixes, PRs "
    "36087 and 35322, were open in September 2026); aiconfigurator's sglang 0.5.14 MLA decode tables on H100 and "
    "H200 carry it over a pool of the batch's own tokens (FP8 minus bf16: 1.67 and 1.62 ns a pool token)",
)


@dataclass(frozen=True)
class StaticMemory:
    """How the engine sizes its share of each device when not told (sglang's default
    ``--mem-fraction-static``): the memory it keeps back for activations, CUDA graphs and the
    like, by device and launch, the rest for weights and the KV cache."""

    source: str

    def default(self, version: str | None, memory_bytes: float, *, tp: int, dp: int, chunk: int,
                prefill_graphs: bool, mla: bool, speculative: bool, vision: Any = None,
                capture_tokens: int | None = None) -> tuple[float, float]:
        """(the share of each device, the MiB kept back) that sglang ``version`` (None: the
        newest) takes by default for a deployment of ``tp`` GPUs (sglang's --tp-size, DP ranks
        included) with DP attention over ``dp`` ranks, ``chunk`` prompt tokens a step, piecewise
        prefill CUDA graphs or not (captured up to ``capture_tokens``, the launch's
        --piecewise-cuda-graph-max-tokens, else the chunk, 2,048 with MLA), an MLA model or not,
        speculative decoding or not, and the vision tower ``vision`` (a config with
        ``num_hidden_layers`` and ``hidden_size``; None for a text model). The share can be zero
        or less where the reserve outgrows the device."""
        mib = memory_bytes / 2**20
        graph_bs = 8 if mib < 20 * 1024 else (24 if tp < 4 else 80) if mib < 35 * 1024 else (
            32 if tp < 4 else 160) if mib < 60 * 1024 else (256 if tp < 4 else 512) if mib < 160 * 1024 else 512
        reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
        if dp > 1:
            reserved += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
        if prefill_graphs:
            sizes = sglang_capture_sizes(capture_tokens or (SGLANG_PIECEWISE.max_tokens_mla if mla else chunk))
            reserved += 1.5 * 1024 if mla and reaches(version, "0.5.10") else len(sizes) * 8
        if mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if speculative and not reaches(version, "0.5.14"):
            reserved += 4 * 1024 if reaches(version, "0.5.10") else 2 * 1024
        share = round((mib - reserved) / mib, 3)
        if vision is not None:
            layers, width = getattr(vision, "num_hidden_layers", 24), getattr(vision, "hidden_size", 1024)
            share *= 0.95 * max(0.8, min(1.05, 1 - 0.1 * (layers * width**2 / (24 * 1024**2) - 1)))
        return share, reserved


SGLANG_STATIC_MEMORY = StaticMemory(
    "sglang server_args.py, _handle_gpu_memory_settings (0.5.6-0.5.14): --mem-fraction-static defaults to (device "
    "MiB - reserved) / device MiB, reserved = 512 + 1.5 x max(chunk, 2,048) + 2 x the decode CUDA-graph batch (8-512 "
    "by memory and TP) + TP/8 x 1,024, plus 3 (and 1.5 above a graph batch of 300) x graph batch x DP with DP "
    "attention, plus the piecewise prefill graphs (1.5 GiB with MLA from 0.5.10, else 8 MiB a captured size, up to "
    "--piecewise-cuda-graph-max-tokens: the chunk, 2,048 with MLA, by default), at "
    "least 10 GiB above 60 GiB, plus 2 GiB (4 from 0.5.10; none from 0.5.14, which counts the draft's weights "
    "instead) for an EAGLE or MTP draft; a vision-language model's share is then scaled by 0.95 and by its vision "
    "tower's size against ViT-L/14 (adjust_mem_fraction_for_vlm)",
)


@dataclass(frozen=True)
class MoEAllToAll:
    """Where the engine moves tokens to their experts' ranks with an all-to-all backend (DeepEP)
    under expert parallelism. Elsewhere its standard dispatcher runs: every rank computes its
    local experts over all of the group's tokens (gathered first under DP attention) and the
    tensor-parallel all-reduce, or a reduce-scatter, sums the ranks' outputs."""

    cuda_dtypes: frozenset[str] | None
    """Routed-expert kernel dtypes whose MoE method runs behind the all-to-all on NVIDIA GPUs
    (None: every one); other vendors' paths are taken to run every dtype."""
    needs_dp: bool
    """The all-to-all runs only across data-parallel attention ranks."""
    source: str
    min_cuda_arch: int = 0
    """NVIDIA GPUs below this compute capability run no dtype behind it."""
    other_vendors: bool = True
    """Whether other vendors' devices run every dtype behind it (else none)."""

    def refusals(self, kernel_dtype: str, dp: int, cuda_arch: int | None, device: str = "this device") -> list[str]:
        """Why ``kernel_dtype`` experts do not go through the all-to-all at DP size ``dp`` on
        ``device``, of compute capability ``cuda_arch`` (None: another vendor's); empty when they do."""
        reasons = []
        if cuda_arch is None:
            if not self.other_vendors:
                reasons.append(f"runs no all-to-all MoE on {device}")
        elif self.cuda_dtypes is not None and not self.cuda_dtypes:
            reasons.append(f"runs no all-to-all MoE on {device}")
        else:
            if self.cuda_dtypes is not None and kernel_dtype not in self.cuda_dtypes:
                reasons.append(f"has no all-to-all MoE path for {kernel_dtype} experts")
            if cuda_arch < self.min_cuda_arch:
                reasons.append(f"runs no all-to-all MoE before sm_{self.min_cuda_arch}")
        if dp == 1 and self.needs_dp:
            reasons.append("runs its all-to-all only across DP attention ranks")
        return reasons

    def runs(self, kernel_dtype: str, dp: int, cuda_arch: int | None, mode: str = "auto",
             engine: str = "the engine") -> bool:
        """Whether ``kernel_dtype`` experts go through the all-to-all (see :meth:`refusals`):
        ``mode`` is ``--moe-all-to-all``, ``auto`` (wherever the engine can run it), ``on`` (the
        same, refused with the reasons where it cannot) or ``off`` (the standard dispatcher)."""
        if mode == "off":
            return False
        reasons = self.refusals(kernel_dtype, dp, cuda_arch)
        if mode == "on" and reasons:
            raise InfercastError(f"--moe-all-to-all on: {engine} {' and '.join(reasons)}; use auto or off")
        return not reasons


SGLANG_ALL_TO_ALL = MoEAllToAll(
    cuda_dtypes=frozenset({"fp8", "fp8_block"}), needs_dp=False, min_cuda_arch=90,
    source="sglang 0.5.9 and 0.5.14 (ep_moe/layer.py): --moe-a2a-backend deepep makes every MoE layer a DeepEPMoE, "
    "which on CUDA runs FP8 experts (Fp8Config, through DeepGEMM, whose JIT needs sm_90 or newer) and W4AFp8 ones "
    "(on ROCm and Ascend its aiter and NPU paths take every method); for other methods run_moe_core reaches "
    "'assert False, forward_deepgemm_contiguous is deprecated' (INT4 weight-only experts take a "
    "StandardDispatchOutput only, compressed_tensors_wNa16_moe.py; BF16 experts only in 0.5.14's low-latency mode), "
    "so those serve expert parallelism with --moe-a2a-backend none, the standard dispatcher (communicator.py: "
    "ScatterMode.FULL; deepseek_v2.py shards the shared experts over every rank)",
)
VLLM_ALL_TO_ALL = MoEAllToAll(
    cuda_dtypes=None, needs_dp=True,
    source="vLLM fused_moe/config.py: FusedMoEParallelConfig.use_all2all_kernels = dp_size > 1 and use_ep; with "
    "TP attention (DP 1) each rank runs its local experts on every token and the all-reduce combines them",
)


@dataclass(frozen=True)
class SlowTokenizerCall:
    """How an engine's request path calls a slow (Python) tokenizer class: ``tokenizer(text)``,
    which runs transformers' Python pipeline, or ``tokenizer.encode(text)``, which a tiktoken
    class (Kimi's ``TikTokenTokenizer``) answers from tiktoken directly."""

    encode_since: str | None
    """The first version that calls ``encode()`` (None: every version modelled does); before it,
    ``tokenizer(text)``."""
    source: str

    def encodes(self, version: str | None) -> bool:
        return self.encode_since is None or reaches(version, self.encode_since)


TIKTOKEN_ENCODE_PER_TOKEN_S = 47e-3 / 80e3
TIKTOKEN_PIPELINE_PER_TOKEN_S = 308e-3 / 80e3
"""Kimi-K2.5's ``TikTokenTokenizer`` on one 80K-token text: ``tok.encode(text)`` 47 ms (0.59 us a
token), ``tok([text])`` 308 ms (3.85 us a token; sglang PR 25265's microbenchmark)."""


@dataclass(frozen=True)
class Engine:
    name: str
    tables: str
    """aiconfigurator-core's directory name for this engine's measured tables."""
    attention_lanes: tuple[str, ...]
    """The engine's default attention kernels, in preference order (names inside the tables'
    ``kernel_source``)."""
    moe_kernels: Mapping[str, tuple[str, ...]]
    """Fused-MoE kernel by kernel dtype, in preference order (``marlin``, ``triton``, ...)."""
    custom_all_reduce: bool
    """One-node all-reduces use the engine's own kernel (else NCCL)."""
    decode_graph_max_batch: int
    """Decode steps with up to this many requests per rank replay a CUDA graph."""
    prefill_graphs: PrefillGraphs | None
    """When prefill runs under piecewise CUDA graphs (None: it always launches eagerly)."""
    eager_launch: HostCost
    """Host time to launch one kernel eagerly (prefill): the GPU idles when kernels are shorter."""
    step: HostCost
    """Host time per step the GPU waits for: scheduling, input preparation, sampling, output."""
    request: HostCost
    """Per request, inside a client-measured TTFT: HTTP, tokenization, queueing into the
    scheduler, detokenizing and streaming the first token."""
    step_without_overlap: HostCost | None = None
    """Host time per step when the engine cannot overlap it with the GPU (default: ``step``)."""
    overlap_since: str | None = None
    """The first version that prepares the next step while the GPU runs this one by default, so
    that only ``step`` is exposed (None: every version modelled); before it, ``step_without_overlap``."""
    spec_overlap: bool = True
    """Whether speculative decoding keeps the overlapped scheduler (else ``step_without_overlap``
    is paid every cycle)."""
    all_reduce_fusion: AllReduceFusion | None = None
    """When the all-reduce and the norm after it run as one kernel (None: never modelled)."""
    pointwise: PointwiseFusions | None = None
    """Pointwise work the engine folds into its neighbours' kernels (None: each its own kernel)."""
    dense_kernels: Mapping[str, str] = field(default_factory=dict)
    """Dense weight-only GEMM kernel family by kernel dtype (``w4a16``: ``marlin``), priced at
    the device's figure for that family where it has one
    (:attr:`~infercast.devices.Efficiency.streams`)."""

    moe_all_to_all: MoEAllToAll = MoEAllToAll(None, False, "assumed: an all-to-all for every expert dtype and layout")
    """When expert parallelism runs through an all-to-all backend rather than the standard dispatcher."""
    nvfp4_needs_fp4_cores: str | None = None
    """Where the engine serves NVFP4 weights only on GPUs with FP4 tensor cores (sm_100 and
    later), its source; None: elsewhere it runs them through Marlin's FP4 weight-only kernels."""
    fp8_needs_fp8_cores: str | None = None
    """Where the engine serves FP8 weights only on GPUs with FP8 tensor cores (sm_89 and later),
    its source; None: elsewhere (Ampere) it runs them through Marlin's FP8 weight-only kernels."""
    modelopt_fp8_needs_fp8_cores: str | None = None
    """Where the engine loads a ModelOpt FP8 checkpoint only on GPUs with FP8 tensor cores, though
    it runs other FP8 weights through Marlin below them, its source; None: no such limit."""
    attention_writes_cache: bool = False
    """The engine's attention call stores the step's new keys and values (and, in TensorRT-LLM,
    applies RoPE) inside it, so the tables' attention rows include that write."""
    fp8_prefill_attention: bool = False
    """With an FP8 KV cache, prefill attention casts its queries to FP8 and runs in FP8 (head
    dims up to 256), so it is read from the tables' FP8/FP8 rows, not their bf16-query ones."""
    mixed_chunk_flag: str | None = None
    """The server flag that mixes prompt chunks into decode steps, off by default (None: the
    engine's scheduler always mixes them)."""
    recv_interval_flag: str | None = None
    """The server flag that makes the scheduler poll for requests only every N decode steps
    (None: the engine polls every step)."""
    mla_pool_cast: MlaPoolCast | None = None
    """Where the engine's MLA decode casts the whole FP8 KV pool to bf16 (None: it reads FP8)."""
    absorbed_prefix_extend: AbsorbedPrefixExtend | None = None
    """When an MLA prefill over a short cached prefix runs in the absorbed form (None: always
    the expanded form)."""
    absorbed_in_prefill_graphs: bool = False
    """An MLA prefill that replays piecewise CUDA graphs attends in the absorbed form."""
    scattered_attention_input: ScatteredAttentionInput | None = None
    """The engine's opt-in scattered layout for an MLA prefill's attention input (None: none)."""
    static_memory: StaticMemory | None = None
    """How the engine sizes its share of each device by default (None: a fixed share, taken as
    :data:`~infercast.memory.DEFAULT_MEMORY_FRACTION`)."""
    eager_prefill_gap: str | None = None
    """What published runs measured beyond the simulator where this engine launched prefill
    eagerly, printed with such a prefill (None: no such gap known)."""
    slow_tokenizer: SlowTokenizerCall | None = None
    """How the request path calls a slow tokenizer class (None: not known, taken as
    ``tokenizer(text)``)."""
    sliding_kv: SlidingKV | None = None
    """What the KV cache holds for a sliding-window layer (None: every token of the context,
    as an allocator without hybrid pools does)."""
    fp32_router: FP32Router | None = None
    """Which MoE families' router GEMM runs in FP32 (None: every router in the checkpoint's
    dtype, bf16)."""
    arch_moe_runner: ArchMoERunner | None = None
    """The fused-MoE kernel the engine's defaults pick by model architecture (None: by dtype
    alone, :attr:`moe_kernels`)."""
    moe_kernels_by_arch: Mapping[int, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    """:attr:`moe_kernels` entries that a compute capability (100: Blackwell) orders otherwise."""

    def moe_kernels_on(self, cuda_arch: int) -> Mapping[str, tuple[str, ...]]:
        """:attr:`moe_kernels` on sm_``cuda_arch``."""
        return {**self.moe_kernels, **self.moe_kernels_by_arch.get(cuda_arch, {})}

    def prefill_graphs_as(self, version: str | None) -> str:
        """The ``--prefill-cuda-graph`` mode that prices prefill launched as engine ``version``
        launched it by default, whichever tables price the kernels: ``off`` for a version that
        predates its engine's default capture, else ``auto``."""
        policy = self.prefill_graphs
        return "auto" if policy is None or version is None or policy.applies(version) else "off"

    def request_cost(self, tokenizer: str, version: str | None) -> HostCost:
        """The per-request host time (``request``) for a model whose tokenizer is of kind
        ``tokenizer`` (``fast`` or ``tiktoken``, :data:`infercast_adapters.profile.TOKENIZER_KINDS`)
        at engine ``version`` (None: the newest)."""
        if tokenizer == "fast":
            return self.request
        if tokenizer != "tiktoken":
            from infercast_adapters.profile import TOKENIZER_KINDS

            raise InfercastError(f"unknown tokenizer kind {tokenizer!r}; known: {', '.join(TOKENIZER_KINDS)}")
        call = self.slow_tokenizer
        if call is not None and call.encodes(version):
            rate, how = TIKTOKEN_ENCODE_PER_TOKEN_S, "tokenizer.encode(text), tiktoken's own path"
        else:
            rate, how = TIKTOKEN_PIPELINE_PER_TOKEN_S, "tokenizer(text), transformers' Python pipeline"
        when = call.source if call is not None else "not known for this engine, taken as tokenizer(text)"
        return replace(self.request, per_item_s=rate, source=(
            f"{self.request.source}; but this model's tiktoken tokenizer, called as {how}, takes "
            f"{rate * 1e6:.2f} us a token (sglang PR 25265's microbenchmark) in {self.name} "
            f"{version or 'newest'} ({when})"))

    def host_step(self, version: str | None, mode: str = "auto", *, speculative: bool = False) -> HostCost:
        """The host time a step (a speculative cycle) waits for at engine ``version``:
        ``step`` when the scheduler runs one step ahead of the GPU, ``step_without_overlap`` when
        it does not. ``mode``: ``auto`` (the version's default), ``on`` or ``off``
        (``--overlap-scheduling``); speculative cycles of an engine without ``spec_overlap``
        never overlap."""
        if not self.overlapped(version, mode, speculative=speculative):
            return self.step_without_overlap or self.step
        return self.step

    def overlapped(self, version: str | None, mode: str = "auto", *, speculative: bool = False) -> bool:
        """Whether the scheduler prepares each step while the GPU runs the one before, at engine
        ``version`` and ``--overlap-scheduling`` ``mode`` (speculative cycles of an engine without
        ``spec_overlap`` never do)."""
        if mode not in OVERLAP_MODES:
            raise InfercastError(f"unknown --overlap-scheduling {mode!r}; valid: {', '.join(OVERLAP_MODES)}")
        overlapped = mode == "on" or (mode == "auto" and (self.overlap_since is None
                                                         or reaches(version, self.overlap_since)))
        return overlapped and (self.spec_overlap or not speculative)

    def describe(self) -> str:
        return self.name


ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    ENGINES[engine.name] = engine
    return engine


def engine_named(name: str) -> Engine:
    try:
        return ENGINES[name.lower()]
    except KeyError:
        raise InfercastError(f"unknown --engine {name!r}; valid: {', '.join(ENGINES)}") from None


# -- sources -------------------------------------------------------------------------------

SGLANG_EAGER = HostCost(
    47.1e-6,
    "sglang launching eagerly: a 1-token DeepSeek-V3 prefill forward took 82.6 ms eager vs 23.1 ms under a CUDA "
    "graph (sglang PR #12160 log, 'forward cost'); host-bound, so the launch time at which infercast's eager "
    "forward of that batch (1,753 kernels) takes 82.6 ms: 47.1 us per kernel (benchmarks/derive_engine_constants.py)",
)
SGLANG_EAGER_PREFILL_GAP = (
    "sglang servers whose prefill launched eagerly measured more client TTFT than infercast gives them: "
    "15-190 ms more at 600-1,000-token prompts (sgl-cookbook's DeepSeek-R1, Qwen3-235B and Llama-3.1-70B pages, "
    "InferenceX's DeepSeek-R1 runs on H200, M1's Kimi-K2.5), and from 44 ms less to about 200 ms more at "
    "4,000-8,000 tokens; the cause is not found: docs/fidelity.md, \"M1's TTFT: what is known\""
)
TORCH_EAGER = HostCost(
    8e-6,
    "eager PyTorch host submit cost of one CUDA kernel, 8 us per op on an A100 (flagos-ai/Torch-FL PR #27)",
)
VLLM_EAGER = HostCost(
    41.5e-6,
    "vLLM launching a compiled forward without CUDA graphs: Qwen3-30B-A3B bf16 on 4 x L20 at TP4 decoded 8 requests "
    "at a TPOT of 34.4 ms with cudagraph_mode NONE and 11.8 ms with PIECEWISE (vLLM issue 45709, vLLM 0.28.1rc1, "
    "PyNCCL all-reduce, 3,500-token prompts); host-bound, so the launch time at which infercast's step of that batch "
    "without graphs (821 kernels, with its per-step host row) takes 34.4 ms: 41.5 us per kernel "
    "(benchmarks/derive_engine_constants.py), likely the Python around each kernel (custom ops, the fused MoE, "
    "Inductor's wrapper) more than PyTorch's 8 us dispatch; the host's CPU is not named",
)
SGLANG_STEP = HostCost(
    0.31e-3,
    "sglang's per-token framework time with a mocked 2.632 ms forward: median TPOT 2.94 ms at concurrency 1, "
    "0.31 ms not hidden by the overlap scheduler (tenstorrent/tt-inference-server issue #3560)",
)
TOKENIZE_PER_TOKEN_S = 4 / 1.74e6
"""A Rust BPE tokenizer on one thread: HuggingFace ``tokenizers`` (GPT2TokenizerFast) encodes
1.74 MB/s single-threaded (openai/tiktoken README, perf.svg: the 1-thread bar, 12 of 69 points
per 10 MB/s) at about 4 bytes per token (the same README), 2.3 us a token."""
SGLANG_REQUEST = HostCost(
    6.9e-3 - 128 * TOKENIZE_PER_TOKEN_S,
    "median TTFT 9.54 ms with a mocked 2.63 ms forward for a 128-token prompt (tenstorrent/tt-inference-server "
    "issue #3560): 6.9 ms of HTTP, chat template, tokenization, scheduling, first token and streaming; of it, "
    "tokenizing scales with the prompt at 2.3 us a token (HuggingFace tokenizers single-threaded, 1.74 MB/s at "
    "about 4 bytes a token: openai/tiktoken README benchmark), the rest is per request",
    per_item_s=TOKENIZE_PER_TOKEN_S,
)
PYTHON_STEP_NO_OVERLAP = HostCost(
    0.097e-3,
    "a Python engine's per-step output processing when nothing overlaps it: 0.2 ms at batch 1 and 3.4 ms at batch "
    "32 (vLLM, Llama-3-70B on 4 x H100, issue #6913), a line of 0.097 ms + 0.103 ms per running request",
    per_item_s=0.103e-3,
)
VLLM_STEP = HostCost(
    0.54e-3,
    "vLLM's engine loop: 540.9 us per step amortised over a 128-request decode workload, and the scheduler's cost "
    "growing 12.7 us per running request (vLLM 0.27.1, openfabric-systems/simllm PR #204); not hidden "
    "(without --async-scheduling)",
    per_item_s=12.7e-6,
)
VLLM_ASYNC_SINCE = "0.14.0"
"""vLLM schedules one step ahead of the GPU by default from 0.14.0: ``SchedulerConfig.async_scheduling``
defaults to None there, which ``VllmConfig`` resolves to True for the ``uni`` (TP 1) and ``mp``
(TP > 1) executors unless a non-EAGLE/MTP draft forbids it (and, in 0.14.x, pipeline
parallelism) (0.13.0: ``async_scheduling: bool = False``, opt-in with --async-scheduling);
EAGLE and MTP keep it (PR 31998)."""
VLLM_ASYNC_STEP = replace(
    SGLANG_STEP, source=f"assumed equal to sglang's (vLLM's async scheduling, the default from {VLLM_ASYNC_SINCE}, "
    "prepares step N+1 while the GPU runs step N, as sglang's overlap scheduler does): " + SGLANG_STEP.source)

TRTLLM_POINTWISE = PointwiseFusions(
    rope_in_cache_write=True, fp8_swiglu=True, fp8_attention_output=True,
    source="TensorRT-LLM's PyTorch backend (NVIDIA/TensorRT-LLM): the TRTLLM attention backend fuses RoPE "
    "(_torch/attention_backend/trtllm.py, support_fused_rope) into its QKV preprocessing kernel, which also writes "
    "the KV cache (cpp attentionOp.cpp: invokeQKVPreprocessing -> invokeApplyBiasRopeUpdateKVCacheDispatch); "
    "GatedMLP calls swiglu(x, quant_scale=down_proj.input_scale) for FP8 per-tensor weights "
    "(_torch/modules/gated_mlp.py); attention emits FP8 output when the weights are FP8 per-tensor and the KV cache "
    "FP8 (_torch/attention_backend/trtllm.py). The RMSNorm stays bf16 at TP1 and the FP8 linear quantizes its input "
    "(modules/linear.py, static_quantize_e4m3_per_tensor); the all-reduce + RMSNorm + FP8 quantize fusion at TP > 1 "
    "is not modelled",
)

VLLM_POINTWISE = PointwiseFusions(
    rope_in_cache_write=False, fp8_swiglu=True, fp8_attention_output=False, fp8_norm=True,
    source="vLLM compiles the model with Inductor, which runs its custom ops as fused Triton kernels: 'By default, "
    "all custom ops are enabled when running without Inductor and disabled when running with Inductor ... Inductor "
    "generates (fused) Triton kernels for disabled custom ops' (config/compilation.py, CompilationConfig.custom_ops, "
    "0.17.0); with rms_norm, silu_and_mul and quant_fp8 left to it, 'Inductor handles fusion' of the RMSNorm and of "
    "SiLU-and-mul with the FP8 quantization after them (config/vllm.py, enable_norm_fusion, enable_act_fusion), so "
    "qkv_proj, gate_up_proj and down_proj take FP8 inputs without a kernel of their own. Attention, a custom op "
    "that splits the compiled graph, keeps its output apart, so o_proj still quantizes; RoPE and the cache write "
    "stay two kernels. vLLM V1 (0.8 on), whose default compiles",
)


def vllm_captured_size(tokens: int) -> int:
    """The largest size vLLM captures under ``max_cudagraph_capture_size=tokens``: its sizes are
    1, 2, 4, then every 8 up to 248 and every 16 from 256 (config/vllm.py, _set_cudagraph_sizes,
    0.16.0), and a launch's size between two is rounded down to the lower."""
    if tokens < 8:
        return max(size for size in (1, 2, 4) if size <= tokens)
    return tokens // 8 * 8 if tokens < 256 else 256 + (tokens - 256) // 16 * 16


SGLANG_CAPTURE_STEPS = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256),
                        (4608, None, 512))
"""sglang's grid of piecewise prefill sizes: (first, last, step) runs, the last one open
(server_args.py, ``_generate_piecewise_cuda_graph_tokens`` in 0.5.9,
``_generate_prefill_cuda_graph_batch_sizes`` in 0.5.14), each size up to the launch's largest."""


def sglang_capture_sizes(tokens: int) -> list[int]:
    """The sizes sglang captures under ``--piecewise-cuda-graph-max-tokens tokens``: its grid,
    :data:`SGLANG_CAPTURE_STEPS`, up to ``tokens``."""
    return [size for first, last, step in SGLANG_CAPTURE_STEPS
            for size in range(first, min(tokens, last or tokens) + 1, step)]


def sglang_captured_size(tokens: int) -> int:
    """The largest size sglang captures under ``--piecewise-cuda-graph-max-tokens tokens`` (3,000
    captures up to 2,816; 0 below 4, where nothing is captured)."""
    return max(sglang_capture_sizes(tokens), default=0)


SGLANG_PIECEWISE = PrefillGraphs(
    since="0.5.10", max_tokens_mla=2048, flag="--piecewise-cuda-graph-max-tokens", captured=sglang_captured_size,
    blocked_by={
        "speculative": "speculative decoding",
        "dp_attention": "DP attention",
        "moe_all_to_all": "an MoE all-to-all backend (DeepEP)",
        "multimodal": "a multimodal model",
        "disaggregated": "PD disaggregation",
    },
    source="sglang server_args.py: piecewise CUDA graphs are opt-in up to 0.5.9 (--enable-piecewise-cuda-graph) and "
    "on by default from 0.5.10 (--disable-piecewise-cuda-graph; from 0.5.14 the tc_piecewise prefill backend), "
    "switched off automatically for speculative decoding, DP attention, an MoE all-to-all backend, multimodal "
    "models and PD disaggregation (_handle_piecewise_cuda_graph); captured up to the chunked-prefill size, 2,048 "
    "tokens with MLA",
)

_QWEN3_MOE = frozenset({"Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration", "Qwen3NextForCausalLM"})
# up to 0.5.11 sglang rewrites a deepseek_v32 config that transformers does not know to DeepseekV3ForCausalLM
_DEEPSEEK = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})
_DEEPSEEK_BRANCH = _DEEPSEEK | {"KimiK25ForConditionalGeneration", "GlmMoeDsaForCausalLM"}
SGLANG_BLACKWELL_MOE_RUNNER = ArchMoERunner(
    kernel="trtllm", cuda_archs=frozenset({100, 103}),
    rules=((_DEEPSEEK, "fp8_block", "0.5.6"), (_DEEPSEEK_BRANCH - _DEEPSEEK, "fp8_block", "0.5.9"),
           (_DEEPSEEK_BRANCH, "bf16", "0.5.12"),
           (_QWEN3_MOE, "fp8_block", "0.5.6"), (_QWEN3_MOE, "bf16", "0.5.8"),
           (frozenset({"Qwen3_5MoeForConditionalGeneration"}), "fp8_block", "0.5.9"),
           (frozenset({"Qwen3_5MoeForConditionalGeneration"}), "bf16", "0.5.9")),
    otherwise={"bf16": "triton", "fp8_block": "triton"},
    read=_DEEPSEEK_BRANCH | _QWEN3_MOE | {"Qwen3_5MoeForConditionalGeneration", "Glm4MoeForCausalLM",
                                          "MiniMaxM2ForCausalLM"},
    checked_since="0.5.6", undecided=((_DEEPSEEK, "bf16", "0.5.6", "0.5.10"),),
    quantizations=frozenset({"compressed-tensors"}),
    source="sglang server_args.py _handle_model_specific_adjustments (0.5.6 to 0.5.14 read): on sm_100 with "
    "--moe-a2a-backend none and --moe-runner-backend auto, flashinfer_trtllm for the DeepSeek branch's "
    "architectures in fp8 (DeepSeek-V3 and V3.2 from 0.5.6, KimiK25ForConditionalGeneration and "
    "GlmMoeDsaForCausalLM from 0.5.9) and unquantized from 0.5.12, for Qwen3-MoE in fp8 from 0.5.6 and "
    "unquantized from 0.5.8, for Qwen3.5-MoE in both from 0.5.9; a compressed-tensors checkpoint's quantization "
    "is not in those lists; GLM-4.x (bf16, FP8 blocks) and MiniMax-M2 run sglang's Triton fused MoE. Up to 0.5.10 "
    "an unquantized DeepSeek-V3 checkpoint is quantized to FP8 online first, which is not priced",
)
"""sglang's MoE runner on Blackwell by architecture (:class:`ArchMoERunner`)."""

register(Engine(
    name="sglang", tables="sglang",
    attention_lanes=("fa3", "trtllm_mha", "flashinfer", "flash_attention"),
    moe_kernels={"w4a16": ("marlin",), "bf16": ("triton", "flashinfer_cutlass"), "fp8_block": ("triton", "deepgemm"),
                 "fp8": ("triton",), "mxfp4_w4a16": ("triton", "marlin"), "nvfp4": ("trtllm", "flashinfer_cutlass")},
    # ModelOptFp4Config.get_min_capability() is 100; on sm_100 server_args.py picks the flashinfer_trtllm
    # MoE runner for modelopt_fp4 DeepSeek, Qwen3 and GLM models (0.5.9)
    nvfp4_needs_fp4_cores="sglang's ModelOptFp4Config needs compute capability 10.0 (get_min_capability, 0.5.9)",
    modelopt_fp8_needs_fp8_cores="sglang's ModelOptFp8Config needs compute capability 8.9 (get_min_capability, "
    "0.5.9), where its Fp8Config (FP8 and FP8-block checkpoints, online FP8) needs 8.0 and runs Marlin below 8.9 "
    "and compressed-tensors FP8 falls back to W8A16 Marlin",
    custom_all_reduce=True, decode_graph_max_batch=256, prefill_graphs=SGLANG_PIECEWISE,
    eager_launch=SGLANG_EAGER, step=SGLANG_STEP, request=SGLANG_REQUEST, all_reduce_fusion=SGLANG_ALL_REDUCE_FUSION,
    eager_prefill_gap=SGLANG_EAGER_PREFILL_GAP,
    # speculative decoding runs without the overlap scheduler unless SGLANG_ENABLE_SPEC_V2 is set
    # (sglang docs, advanced_features/speculative_decoding.md: "SpecV2 ... overlap scheduler (experimental)")
    spec_overlap=False,
    step_without_overlap=replace(PYTHON_STEP_NO_OVERLAP, source="assumed for sglang (both engines process outputs "
                                 "per request in Python): " + PYTHON_STEP_NO_OVERLAP.source),
    # GPTQ and AWQ checkpoints run through gptq_marlin / awq_marlin (sglang's only MPLinearKernel is Marlin)
    dense_kernels={"w4a16": "marlin"},
    moe_all_to_all=SGLANG_ALL_TO_ALL,
    # managers/scheduler_recv_skipper.py (0.5.9): polls after prompt steps, while idle, and every N decode steps
    recv_interval_flag="--scheduler-recv-interval", mixed_chunk_flag="--enable-mixed-chunk",
    # FlashAttentionBackend.forward_extend casts q to the cache dtype when kv_cache_dtype != "auto"
    # and head_dim <= 256 (layers/attention/flashattention_backend.py, 0.5.9); aiconfigurator's
    # fa3 and trtllm_mha context tables hold fp8/fp8 rows and no bf16/fp8 ones
    fp8_prefill_attention=True,
    # RadixAttention.forward -> backend.forward(..., save_kv_cache=True) stores k/v in the same call
    attention_writes_cache=True,
    mla_pool_cast=SGLANG_MLA_POOL_CAST,
    absorbed_prefix_extend=SGLANG_ABSORBED_PREFIX_EXTEND,
    # _handle_attention_backend and handle_attention_trtllm_mla return AttnForwardMethod.MLA
    # first thing when is_in_piecewise_cuda_graph() (models/deepseek_common/attention_backend_handler.py, 0.5.9)
    absorbed_in_prefill_graphs=True,
    scattered_attention_input=SGLANG_SCATTERED_ATTENTION_INPUT,
    static_memory=SGLANG_STATIC_MEMORY,
    sliding_kv=SlidingKV("pool", "sglang's hybrid SWA memory pool (SWAKVPool): the sliding layers share a pool of "
                         "--swa-full-tokens-ratio (default 0.8, server_args.py) times the full layers' tokens", 0.8),
    arch_moe_runner=SGLANG_BLACKWELL_MOE_RUNNER,
    fp32_router=FP32Router(
        frozenset({"minimax_m2"}), True,
        "MiniMaxM2MoE.forward_normal calls its gate, a ReplicatedLinear(params_dtype=torch.float32), on "
        "hidden_states.to(torch.float32) (sglang/srt/models/minimax_m2.py in 0.5.6, 0.5.9 and 0.5.14; GLM-4.x's "
        "Glm4MoeGate is bf16)"),
    slow_tokenizer=SlowTokenizerCall(
        "0.5.12", "TokenizerManager._tokenize_texts calls tokenizer(texts) up to 0.5.11 and, for a tokenizer that is "
        "not is_fast, encode() on each text from 0.5.12 (PR 25265); the opt-in --enable-dynamic-batch-tokenizer "
        "path still calls tokenizer(text) (issue 29163)"),
))
register(Engine(
    name="vllm", tables="vllm",
    attention_lanes=("fa3", "flashinfer_trtllm", "flash_attn", "triton"),
    # select_nvfp4_moe_backend tries FlashInfer's TRT-LLM kernels first, then CuteDSL, FlashInfer's CUTLASS, vLLM's
    # CUTLASS and Marlin, the one left before sm_100 (fused_moe/oracle/nvfp4.py, 0.16.0)
    moe_kernels={"w4a16": ("marlin",), "bf16": ("triton",), "fp8_block": ("triton", "flashinfer_cutlass"),
                 "fp8": ("flashinfer_cutlass", "cutlass"), "mxfp4_w4a16": ("triton", "marlin"),
                 "nvfp4": ("trtllm", "flashinfer_cutlass")},
    # select_fp8_moe_backend tries FlashInfer's TRT-LLM kernels, its CUTLASS, DeepGEMM (block FP8), then Triton
    # (vLLM's CUTLASS left out unless the quantization allows it; fused_moe/oracle/fp8.py, 0.15.1, 0.17.0, 0.19.0);
    # from 0.17 block FP8 on Hopper puts Triton first under TP and FlashInfer's CUTLASS under EP
    # (_get_priority_backends), the TP case of which the Hopper list follows; the TRT-LLM kernels run on sm_100
    # only, FlashInfer's CUTLASS takes block FP8 on sm_90 only, and which routing methods each takes is not modelled
    moe_kernels_by_arch={arch: {"fp8_block": ("trtllm", "flashinfer_cutlass", "deepgemm", "triton"),
                                "fp8": ("trtllm", "flashinfer_cutlass", "cutlass", "triton")} for arch in (100, 103)},
    modelopt_fp8_needs_fp8_cores="vLLM's ModelOptFp8Config needs compute capability 8.9 (get_min_capability, "
    "quantization/modelopt.py, 0.16.0), where its Fp8Config (FP8 and FP8-block checkpoints, online FP8) needs 7.5 "
    "and runs Marlin below 8.9 and compressed-tensors FP8 falls back to W8A16 Marlin",
    custom_all_reduce=True, decode_graph_max_batch=512,
    prefill_graphs=PrefillGraphs(since=None, max_tokens_mla=None, blocked_by={}, max_tokens=512,
                                 max_tokens_by_arch={"GptOssForCausalLM": 1024}, bounds_decode=True,
                                 clamps_to_chunk=True,
                                 flag="--max-cudagraph-capture-size", captured=vllm_captured_size,
                                 source="vLLM V1 compiles the model with torch.compile and replays piecewise CUDA "
                                 "graphs with attention left out of them as a non-CUDA-graph op (vLLM docs, "
                                 "design/torch_compile), captured for batches of up to max_cudagraph_capture_size "
                                 "tokens, by default min(2 x max_num_seqs, 512) (config/vllm.py _set_cudagraph_sizes, "
                                 "0.16.0; max_num_seqs defaults to 1,024 on GPUs of 70 GiB or more, 256 on others: "
                                 "512 either way; GptOssForCausalLMConfig sets 1,024 for gpt-oss; an explicit "
                                 "--max-cudagraph-capture-size, or without one a smaller --max-num-seqs, sets another: "
                                 "--prefill-cuda-graph-max-tokens, which bounds the decode graphs too, as vLLM's one "
                                 "size list does); a larger "
                                 "forward runs the compiled pieces without graphs, launching every kernel"),
    eager_launch=VLLM_EAGER, step=VLLM_ASYNC_STEP, step_without_overlap=VLLM_STEP, overlap_since=VLLM_ASYNC_SINCE,
    all_reduce_fusion=VLLM_ALL_REDUCE_FUSION, pointwise=VLLM_POINTWISE,
    request=replace(SGLANG_REQUEST, source="assumed equal to sglang's (both serve the OpenAI API from Python): "
                    + SGLANG_REQUEST.source),
    # choose_mp_linear_kernel prefers Machete on sm_90 and Marlin elsewhere; below 32 rows Machete is no
    # faster than Marlin (pytorch/FBGEMM PR 3259), so both are priced at Marlin's figure
    dense_kernels={"w4a16": "marlin"},
    moe_all_to_all=VLLM_ALL_TO_ALL,
    sliding_kv=SlidingKV("window", "vLLM V1's hybrid KV cache manager: a sliding-window layer's blocks that fall "
                         "out of its window are freed (SlidingWindowManager), so it holds about the window"),
    fp32_router=FP32Router(
        frozenset({"minimax_m2", "glm4_moe"}), False,
        "MiniMaxM2MoE's gate is a ReplicatedLinear(params_dtype=torch.float32) called on hidden_states.to(torch."
        "float32) (0.16.0) or a GateLinear with FP32 weights (0.24.0, whose own FP32 kernel takes up to 32 tokens); "
        "Glm4MoE's gate is nn.Linear(dtype=torch.float32) on hidden_states.to(torch.float32) (0.16.0, 0.24.0); "
        "VLLM_FLOAT32_MATMUL_PRECISION defaults to 'highest'; Inductor compiles the cast into the kernel before "
        "it (0.24.0's GateLinear casts with x.float() inside its custom op above 32 tokens, a kernel of its own, left "
        "out)"),
    slow_tokenizer=SlowTokenizerCall(
        "0.24.0", "the OpenAI server tokenizes prompts through AsyncMicrobatchTokenizer, which calls tokenizer(prompt) "
        "(vllm/utils/async_utils.py in 0.16.0, 0.20.0, 0.22.0 and 0.23.0; vLLM issue 39590; earlier versions not "
        "checked, taken the same), and from 0.24.0 through the renderer's _encode, tokenizer.encode(prompt) "
        "(vllm/renderers/base.py)"),
))
register(Engine(
    name="trtllm", tables="trtllm",
    attention_lanes=("torch_flow", "default"),
    # its attention op takes the fused QKV and applies RoPE, appends to the cache and attends in
    # one call (aiconfigurator collector/trtllm/collect_attn.py times attn.forward(input_qkv, ...))
    attention_writes_cache=True,
    moe_kernels={"bf16": ("cutlass",), "fp8_block": ("cutlass", "deepgemm"), "fp8": ("cutlass",),
                 "mxfp4_w4a16": ("moe_torch_flow",), "nvfp4": ("cutlass", "trtllm")},
    nvfp4_needs_fp4_cores="TensorRT Model Optimizer's support matrix: FP4 weights and activations on Blackwell "
    "and later GPUs, deployed with TensorRT-LLM",
    fp8_needs_fp8_cores="TensorRT-LLM's support matrix (0.18): Ampere (SM80, SM86) runs FP32, FP16, BF16, INT8 and "
    "INT4; FP8 from Ada (SM89)",
    custom_all_reduce=True, decode_graph_max_batch=128, prefill_graphs=None,
    eager_launch=TORCH_EAGER,
    step=replace(SGLANG_STEP, source="assumed equal to sglang's (TensorRT-LLM also overlaps scheduling; its overlap "
                 "scheduler gains 1.03x at batch 1, TensorRT-LLM tech blog 2): " + SGLANG_STEP.source),
    step_without_overlap=replace(PYTHON_STEP_NO_OVERLAP, source="assumed for TensorRT-LLM with "
                                 "disable_overlap_scheduler (its PyTorch executor processes outputs in Python): "
                                 + PYTHON_STEP_NO_OVERLAP.source),
    request=replace(SGLANG_REQUEST, source="assumed equal to sglang's: " + SGLANG_REQUEST.source),
    pointwise=TRTLLM_POINTWISE,
    slow_tokenizer=SlowTokenizerCall(
        None, "its DefaultInputProcessor tokenizes a text prompt with tokenizer.encode(prompt) (tensorrt_llm/inputs/"
        "registry.py as of 2026; earlier versions not checked)"),
    moe_all_to_all=MoEAllToAll(
        frozenset(), needs_dp=True, other_vendors=False,
        source="TensorRT-LLM's wide-EP fused MoE (select_alltoall_method_type): no all-to-all without attention DP, "
        "at TP 1 or with EP no larger than top-k; with them, MNNVL's on multi-node NVLink (GB200 NVL72, not a built-in "
        "device) or DeepEP's only on request (TRTLLM_CAN_USE_DEEP_EP=1, bf16); else tokens are all-gathered and "
        "reduce-scattered, as the standard dispatcher here"),
))
