"""sglang's ``--enable-attn-tp-input-scattered``: an MLA prefill's attention input kept
reduce-scattered over TP, each rank normalizing and down-projecting its share of the tokens.

The golden tests' small DeepSeek-V3 (3 layers, q_lora_rank 96, latent 64 + 16, FP8 blocks) on
2 x H100 at TP2, one prompt of 7 tokens: each rank's share is 4 rows (7 padded to 8)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infercast.cli import main
from infercast.simulate import UserInput, simulate
from .toy_models import DEEPSEEK_V3

LAYERS, TOKENS, TP = DEEPSEEK_V3["num_hidden_layers"], 7, 2
LOCAL = -(-TOKENS // TP)
LATENT = 96 + 64 + 16  # q_lora_rank + kv_lora_rank + qk_rope_head_dim: fused_qkv_a_proj's output


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("deepseek") / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V3))
    return str(path)


def run(config_path: str, **fields):
    base = dict(model=config_path, device="H100", num_devices=TP, tp_size=TP, query_length=TOKENS,
                prefill_cuda_graph="off", trace_every_layer=True)
    return simulate(UserInput(**{**base, **fields}))


def calls(result, name: str) -> Counter:
    """Calls of ``infercast::name`` by module path."""
    return Counter(r.path for r, _ in result._timed if r.name == f"infercast::{name}" for _ in range(r.count))


def rows_in(result, name: str, path_end: str) -> set[int]:
    return {r.tensors()[0].shape[0] for r, _ in result._timed
            if r.name == f"infercast::{name}" and r.path.endswith(path_end)}


def test_each_layer_reduce_scatters_then_gathers_the_latent(config_path: str) -> None:
    plain, scattered = run(config_path), run(config_path, enable_attn_tp_input_scattered=True)
    # without: the embedding's all-reduce and two a layer (attention, MLP)
    assert sum(calls(plain, "all_reduce").values()) == 1 + 2 * LAYERS
    assert not calls(plain, "reduce_scatter") and not calls(plain, "all_gather").keys() - {"head"}
    # with: each layer reduce-scatters its input (the embedding's or the previous MLP's partial
    # sums), all-gathers the latent and all-reduces attention; the head sums the last MLP
    assert sum(calls(scattered, "reduce_scatter").values()) == LAYERS
    assert calls(scattered, "all_gather") == Counter({f"layers.{i}.self_attn": 1 for i in range(LAYERS)} | {"head": 1})
    assert calls(scattered, "all_reduce") == Counter({f"layers.{i}": 1 for i in range(LAYERS)} | {"head": 1})
    # the input norm and the down projection see this rank's rows; the gathered latent all of them
    assert rows_in(scattered, "fused_add_rms_norm", "input_layernorm") == {LOCAL}
    assert rows_in(scattered, "quant_gemm", "fused_qkv_a_proj") == {LOCAL}
    assert rows_in(plain, "quant_gemm", "fused_qkv_a_proj") == {TOKENS}
    gathered = [r for r, _ in scattered._timed if r.name == "infercast::all_gather" and r.path.endswith("self_attn")]
    assert {tuple(r.tensors()[0].shape) for r in gathered} == {(LOCAL, LATENT)}
    # everything after the attention's all-reduce runs on every token, as without the flag
    assert rows_in(scattered, "quant_gemm", "o_proj") == rows_in(plain, "quant_gemm", "o_proj") == {TOKENS}
    assert any("each rank normalizes and down-projects 1/2 of the tokens" in n for n in scattered.notes)


def test_a_decode_step_is_unchanged(config_path: str) -> None:
    plain = run(config_path, query_length=None, decode=True, context_length=64)
    flagged = run(config_path, query_length=None, decode=True, context_length=64, enable_attn_tp_input_scattered=True)
    assert flagged.step_latency_ms == plain.step_latency_ms
    assert any("a decode step runs as without it" in n for n in flagged.notes)


@pytest.mark.parametrize(("fields", "reason"), [
    (dict(num_devices=2, tp_size=1, dp_size=2), "DP attention"),
    (dict(num_devices=1, tp_size=1), "no tensor parallelism"),
    (dict(prefill_cuda_graph="auto"), "piecewise CUDA graphs in prefill"),
    (dict(engine_version="0.5.5"), "sglang 0.5.5 has no --enable-attn-tp-input-scattered (from 0.5.6)"),
])
def test_sglang_keeps_it_off_where_its_checks_fail_and_says_why(config_path: str, fields: dict, reason: str) -> None:
    plain = run(config_path, **fields)
    flagged = run(config_path, enable_attn_tp_input_scattered=True, **fields)
    assert not calls(flagged, "reduce_scatter")
    assert flagged.step_latency_ms == plain.step_latency_ms
    assert any(n.startswith("--enable-attn-tp-input-scattered has no effect") and reason in n for n in flagged.notes)


def test_a_model_without_mla_keeps_it_off() -> None:
    result = simulate(UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=2, tp_size=2,
                                query_length=64, prefill_cuda_graph="off", enable_attn_tp_input_scattered=True))
    assert not calls(result, "reduce_scatter")
    assert any("a model without MLA and a query LoRA" in n for n in result.notes)


def test_an_engine_without_the_flag_is_a_flag_error(capsys) -> None:
    code = main(["simulate", "deepseek-ai/DeepSeek-V3", "--engine", "vllm", "--query-length", "64",
                 "--enable-attn-tp-input-scattered"])
    err = capsys.readouterr().err
    assert code != 0 and "--enable-attn-tp-input-scattered is an sglang server flag" in err and "vllm" in err


def test_it_turns_the_all_reduce_fusion_off(config_path: str) -> None:
    """sglang fuses no all-reduce with the norm after it while the input is scattered
    (``should_fuse_mlp_allreduce_with_next_layer`` returns False; the attention's all-reduce and
    the norm run apart)."""
    plain, scattered = run(config_path), run(config_path, enable_attn_tp_input_scattered=True)
    assert any(n.startswith("all-reduce fusion") for n in plain.notes)
    assert sum(calls(plain, "fused_add_rms_norm").values()) < 2 * LAYERS + 1  # norms folded into all-reduces
    assert not any(n.startswith("all-reduce fusion") for n in scattered.notes)
    norms = calls(scattered, "fused_add_rms_norm") + calls(scattered, "rms_norm")
    assert all(norms[f"layers.{i}.{norm}"] == 1 for i in range(LAYERS)
               for norm in ("input_layernorm", "post_attention_layernorm"))


def test_a_multimodal_wrapper_keeps_the_embeddings_all_reduce() -> None:
    """sglang's multimodal models embed the tokens before the language model's forward
    (``general_mm_embed_routine``), outside the scattered context: Kimi-K2.5 keeps the
    embedding's all-reduce, and its first layer still reduce-scatters."""
    result = simulate(UserInput(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8, tp_size=8,
                                query_length=256, prefill_cuda_graph="off", enable_attn_tp_input_scattered=True))
    reduced = calls(result, "all_reduce")
    assert reduced["embed_tokens"] == 1 and sum(calls(result, "reduce_scatter").values()) == 61


def planner_for(config_path: str, **fields):
    from infercast.plan import Planner, PlanRequest

    return Planner(PlanRequest(model=config_path, device="H100", num_devices=(TP,), input_length=TOKENS,
                               output_length=8, batches=(1,), speculative=(), **fields))


def test_the_planner_prices_and_launches_it_as_simulate_does(config_path: str) -> None:
    from infercast.plan import Layout

    layout = Layout(TP, TP, 1, 1)
    on = planner_for(config_path, enable_attn_tp_input_scattered=True, prefill_cuda_graph="off")
    off = planner_for(config_path, prefill_cuda_graph="off")
    assert on.scattered_input(layout, None) == (True, None)
    assert off.scattered_input(layout, None) == (False, None)
    # one prompt's TTFT moves by what simulate's prefill step moves with the flag
    planned = on.evaluate(layout, None, 1, None).ttft_ms - off.evaluate(layout, None, 1, None).ttft_ms
    simulated = (run(config_path, enable_attn_tp_input_scattered=True, trace_every_layer=False).step_latency_ms
                 - run(config_path, trace_every_layer=False).step_latency_ms)
    assert planned == pytest.approx(simulated) and planned != 0
    config = on.evaluate(layout, None, 1, None)
    assert "--enable-attn-tp-input-scattered" in on.commands_for(config)["sglang"]
    assert "--enable-attn-tp-input-scattered" not in off.commands_for(config)["sglang"]
    (note,) = [n for n in on.notes_for(config) if "scattered" in n]
    assert note.startswith("vllm, trtllm: no equivalent of sglang's --enable-attn-tp-input-scattered")
    assert not any("scattered" in n for n in off.notes_for(config))


def test_a_prefill_pool_scatters_where_the_aggregated_server_cannot(config_path: str) -> None:
    """sglang 0.5.14 captures prefill in piecewise CUDA graphs, which keep the scattered input
    off; a disaggregated prefill pool captures none, so there it is on."""
    from infercast.plan import Layout

    layout = Layout(TP, TP, 1, 1)
    planner = planner_for(config_path, enable_attn_tp_input_scattered=True, engine_version="0.5.14")
    on, why = planner.scattered_input(layout, None)
    assert not on and "piecewise CUDA graphs in prefill" in why
    assert planner.scattered_input(layout, None, disaggregated=True) == (True, None)
    config = planner.evaluate(layout, None, 1, None)
    assert "--enable-attn-tp-input-scattered" not in planner.commands_for(config)["sglang"]
    (note,) = [n for n in planner.notes_for(config) if "scattered" in n]
    assert "has no effect on TP2 DP1 EP1" in note and "piecewise CUDA graphs in prefill" in note
    # DP attention keeps it off in a prefill pool too
    assert planner.scattered_input(Layout(TP, 1, TP, 1), None, disaggregated=True)[1].endswith("DP attention")


def test_a_prefill_pool_keeps_the_faster_of_with_and_without(config_path: str) -> None:
    """Unasked, a disaggregated prefill pool where sglang would run the scattered input is priced
    both ways and keeps the one that serves more requests/s; asked, it runs it; vLLM has none."""
    from infercast.disagg import prefill_choice, scatter_options
    from infercast.plan import Layout
    from infercast.serving import LengthDist

    layout, lengths = Layout(TP, TP, 1, 1), LengthDist.fixed(4096, 1)
    planner = planner_for(config_path, engine_version="0.5.14")
    assert scatter_options(planner, layout, None) == [False, True]
    assert scatter_options(planner, Layout(TP, 1, TP, 1), None) == [False]  # DP attention
    assert scatter_options(planner_for(config_path, enable_attn_tp_input_scattered=True), layout, None) == [True]
    assert scatter_options(planner_for(config_path, engine="vllm"), layout, None) == [False]
    plain, scattered = (prefill_choice(planner, planner.pricer, layout, None, lengths, scatter=(on,))
                        for on in (False, True))
    assert plain.rate != scattered.rate and not plain.scattered and scattered.scattered
    chosen = prefill_choice(planner, planner.pricer, layout, None, lengths)
    faster = max(plain, scattered, key=lambda c: c.rate)
    assert (chosen.rate, chosen.scattered, chosen.chunk) == (faster.rate, faster.scattered, faster.chunk)
    assert chosen.describe().endswith(", scattered") == chosen.scattered


def test_a_scattered_prefill_pool_is_launched_with_the_flag(config_path: str) -> None:
    from types import SimpleNamespace

    from infercast.disagg import launch_commands, launch_notes, prefill_choice
    from infercast.plan import Layout
    from infercast.serving import LengthDist

    layout = Layout(TP, TP, 1, 1)
    planner = planner_for(config_path, engine_version="0.5.14")
    pool = prefill_choice(planner, planner.pricer, layout, None, LengthDist.fixed(4096, 1), scatter=(True,))
    decode = SimpleNamespace(layout=layout, quantization=None, batch=8, spec=None, two_batch_overlap=False)
    config = SimpleNamespace(prefill=pool, decode=decode, prefill_instances=1, decode_instances=1)
    (sg_prefill, sg_decode, _), (vl_prefill, _, _) = launch_commands(planner, config).values()
    assert "--enable-attn-tp-input-scattered" in sg_prefill
    assert "--enable-attn-tp-input-scattered" not in sg_decode + vl_prefill
    assert any(note.startswith("prefill pool, vllm: no equivalent") for note in launch_notes(planner, config))
