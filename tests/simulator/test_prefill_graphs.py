"""Piecewise CUDA graphs in prefill: which engine versions and deployments capture them, and
what the host then launches (attention eagerly, one replay per piece)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from infercast import step
from infercast.engines import ENGINES
from infercast.request import FieldError
from infercast.simulate import UserInput, simulate

LLAMA = dict(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1)


def _graphs(result) -> tuple[bool, bool]:
    return result.cost_model["cuda_graph"], result.cost_model["piecewise"]


def _launch_row(result) -> float:
    return sum(row.total_ms for row in result.ops if row.name.startswith("host:") and "launch" in row.name)


@pytest.mark.parametrize(("version", "captured"), [("0.5.6.post2", False), ("0.5.9", False), ("0.5.10", True),
                                                   ("0.5.14", True)])
def test_sglang_captures_prefill_by_default_from_0_5_10(version: str, captured: bool) -> None:
    assert ENGINES["sglang"].prefill_graphs.applies(version) is captured
    result = simulate(UserInput(**LLAMA, query_length=64, engine_version=version))
    assert _graphs(result) == (captured, captured)
    notes = " ".join(result.notes)
    assert ("only on request" in notes) is not captured
    # 64 tokens: the GPU is shorter than 32 layers of eager launches, which only eager pays in full
    eager_layer_launches = _launch_row(result)
    assert (eager_layer_launches > 2.0) is not captured


@pytest.mark.parametrize(("engine", "version", "tokens", "eager", "warned"),
                         [("sglang", "0.5.9", 64, True, True), ("sglang", "0.5.9", 8192, True, True),
                          ("sglang", "0.5.14", 64, False, False), ("trtllm", None, 64, True, False)])
def test_an_eager_sglang_prefill_warns_that_measured_ttfts_ran_higher(engine: str, version: str | None, tokens: int,
                                                                      eager: bool, warned: bool) -> None:
    """sglang servers measured more TTFT than simulated where they launched prefill eagerly: said
    with such a prefill at any length, not under piecewise graphs, and not for an engine (here
    TensorRT-LLM, also eager) with no such gap known."""
    result = simulate(UserInput(**LLAMA, query_length=tokens, engine=engine, engine_version=version))
    assert (not result.cost_model["cuda_graph"]) is eager
    assert any(note.startswith("TTFT may run low here") for note in result.notes) is warned


def test_a_decode_step_does_not_warn_about_ttft() -> None:
    result = simulate(UserInput(**LLAMA, decode=True, num_queries=512, engine_version="0.5.9"))
    assert not any(note.startswith("TTFT may run low here") for note in result.notes)


@pytest.mark.parametrize(("version", "captured"), [("0.5.6", False), ("0.5.14", True)])
def test_a_version_sets_its_defaults_under_the_analytic_cost_model_too(version: str, captured: bool) -> None:
    result = simulate(UserInput(**LLAMA, query_length=64, cost_model="analytic", engine_version=version))
    assert _graphs(result) == (captured, captured)
    assert result.cost_model["engine_version"] == version


def test_sglang_launch_time_reproduces_the_eager_forward_it_comes_from() -> None:
    """SGLANG_EAGER is the launch time at which the traced eager forward of sglang PR 12160's batch
    (DeepSeek-V3, one new token over one cached, TP8) takes its logged 82.6 ms
    (benchmarks/derive_engine_constants.py); a tracer change that adds or drops kernels there
    breaks this until the constant is derived again."""
    result = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, tp_size=8,
                                query_length=1, context_length=1, engine_version="0.5.3", prefill_cuda_graph="off"))
    per_step = sum(row.total_ms for row in result.ops if row.name.startswith("host: scheduling"))
    assert result.step_latency_ms - per_step == pytest.approx(82.64, rel=0.01)
    # host-bound: launches are all but the GPU's 12 ms of it
    assert _launch_row(result) > 0.8 * result.step_latency_ms


def test_vllm_launch_time_reproduces_the_forward_without_graphs_it_comes_from() -> None:
    """VLLM_EAGER is the launch time at which the traced step of vLLM issue 45709's decode batch
    (Qwen3-30B-A3B bf16, TP4, 8 requests over about 4,250 tokens, compiled, cudagraph_mode NONE,
    PyNCCL all-reduce), its per-step host row included, takes the measured TPOT of 34.4 ms
    (benchmarks/derive_engine_constants.py)."""
    batch = dict(model="Qwen/Qwen3-30B-A3B", device="H100", num_devices=4, tp_size=4, num_queries=8, query_length=1,
                 context_length=4250, engine="vllm", all_reduce_fusion="off")
    result = simulate(UserInput(**batch, prefill_cuda_graph="off"))
    assert result.step_latency_ms == pytest.approx(34.4, rel=0.01)
    assert _launch_row(result) > 0.7 * result.step_latency_ms
    # under its piecewise graphs the same batch launches attention and one replay a layer, which the
    # GPU's time hides: no launch row
    graphed = simulate(UserInput(**batch))
    assert graphed.cost_model["piecewise"] and _launch_row(graphed) < 0.05 * _launch_row(result)


@pytest.mark.parametrize(("engine", "version", "mode"), [("sglang", "0.5.6.post2", "off"), ("sglang", "0.5.9", "off"),
                                                         ("sglang", "0.5.10", "auto"), ("sglang", None, "auto"),
                                                         ("vllm", "0.10.0", "auto"), ("trtllm", "1.0", "auto")])
def test_prefill_graphs_as_a_version_reproduces_its_default_under_newer_tables(engine, version, mode) -> None:
    assert ENGINES[engine].prefill_graphs_as(version) == mode
    if engine == "sglang" and version:
        # priced with the newest tables, the mode launches prefill as the named version did
        ran = simulate(UserInput(**LLAMA, query_length=64, prefill_cuda_graph=mode))
        assert _graphs(ran) == _graphs(simulate(UserInput(**LLAMA, query_length=64, engine_version=version)))


def test_piecewise_counts_attention_launches_and_one_replay_per_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = {"infercast::gemm": 3, "infercast::attention": 1, "infercast::kv_cache_write": 1, "infercast::rope": 1}
    monkeypatch.setattr(step, "cost_of", lambda record: SimpleNamespace(kernels=kernels[record.name]))

    def layer_ops(gpu_each: float):
        return [(SimpleNamespace(name=name, layer=0, layers=(0, 1), count=2, path="layers.0"),
                 SimpleNamespace(seconds=gpu_each)) for name in kernels]

    launch = 10e-6
    # two identical layers, 6 kernels each: eagerly 60 us of launches a layer, piecewise 1 attention
    # + 1 cache write + 1 replay = 30 us; GPU 40 us a layer
    assert step.exposed_launch(layer_ops(10e-6), launch) == pytest.approx(2 * (60e-6 - 40e-6))
    assert step.exposed_launch(layer_ops(10e-6), launch, piecewise=True) == 0.0
    # GPU 20 us a layer: piecewise still waits 10 us a layer
    assert step.exposed_launch(layer_ops(5e-6), launch, piecewise=True) == pytest.approx(2 * (30e-6 - 20e-6))


@pytest.mark.parametrize(("user", "reason"), [
    (UserInput(model="deepseek-ai/DeepSeek-V3", num_devices=16, tp_size=8, dp_size=2, ep_size=16, query_length=512),
     "DP attention"),
    (UserInput(model="deepseek-ai/DeepSeek-V3", num_devices=16, tp_size=16, ep_size=16, query_length=512),
     "all-to-all"),
    (UserInput(model="moonshotai/Kimi-K2.5", query_length=512), "multimodal"),
])
def test_deployments_sglang_keeps_eager_say_why(user: UserInput, reason: str) -> None:
    result = simulate(user)
    assert _graphs(result) == (False, False)
    assert any("prefill launched eagerly" in n and reason in n for n in result.notes), result.notes


def test_mla_prefill_is_captured_up_to_2048_tokens_per_rank() -> None:
    at = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", query_length=2048))
    above = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", query_length=2049))
    assert _graphs(at) == (True, True) and _graphs(above) == (False, False)
    assert any("2049 tokens per rank, above the 2048" in n for n in above.notes)
    # GQA: captured up to the chunked-prefill size (8,192 on an H100)
    assert _graphs(simulate(UserInput(**LLAMA, query_length=8192))) == (True, True)
    assert _graphs(simulate(UserInput(**LLAMA, query_length=8193))) == (False, False)


def test_vllm_captures_prefill_up_to_512_tokens_per_rank() -> None:
    """vLLM's largest captured size is min(2 x max_num_seqs, 512) tokens: a longer prompt runs its
    compiled pieces without graphs, whatever the chunk (8,192), and says so."""
    at = simulate(UserInput(**LLAMA, query_length=512, engine="vllm"))
    above = simulate(UserInput(**LLAMA, query_length=513, engine="vllm"))
    assert _graphs(at) == (True, True) and _graphs(above) == (False, False)
    assert any("513 tokens per rank, above the 512" in n for n in above.notes)


def test_engines_without_prefill_graphs_launch_eagerly_without_a_note() -> None:
    result = simulate(UserInput(**LLAMA, query_length=64, engine="trtllm"))
    assert _graphs(result) == (False, False) and not any("prefill" in n for n in result.notes)
    assert _graphs(simulate(UserInput(**LLAMA, query_length=64, engine="vllm"))) == (True, True)


def test_the_planner_prices_a_speculative_deployments_prefill_eagerly() -> None:
    from dataclasses import replace

    from infercast.plan import Planner, PlanRequest, SpecChoice

    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(1,),
                          input_length=64, output_length=64, mode="static",
                          speculative=UserInput(speculative_algorithm="EAGLE3",
                                                speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                                acceptance_rates="0.8,0.7"),
                          spec_grid=(SpecChoice(2, 1, 3),))
    configs = Planner(request).run().configs
    plain = next(c for c in configs if c.spec is None)
    speculative = next(c for c in configs if c.spec is not None)
    # sglang switches prefill graphs off with speculative decoding: 64 tokens launch-bound eagerly
    assert speculative.ttft_ms > plain.ttft_ms + 2.0
    eager = Planner(replace(request, engine_version="0.5.9", speculative=None, spec_grid=())).run().configs[0]
    assert eager.ttft_ms > plain.ttft_ms + 2.0


def test_prefill_cuda_graph_on_and_off_override_the_version_default() -> None:
    off = simulate(UserInput(**LLAMA, query_length=64, prefill_cuda_graph="off"))
    assert _graphs(off) == (False, False) and "prefill launched eagerly: --prefill-cuda-graph off" in off.notes
    on = simulate(UserInput(**LLAMA, query_length=64, engine_version="0.5.9", prefill_cuda_graph="on"))
    assert _graphs(on) == (True, True)
    # "on" keeps the engine's own rules: a multimodal model still launches eagerly
    kimi = simulate(UserInput(model="moonshotai/Kimi-K2.5", query_length=64, prefill_cuda_graph="on"))
    assert _graphs(kimi) == (False, False)


def test_prefill_cuda_graph_on_for_an_engine_without_them_is_a_flag_error(capsys) -> None:
    from infercast.cli import main

    assert main(["simulate", "meta-llama/Llama-3.1-8B-Instruct", "--query-length", "64", "--engine", "trtllm",
                 "--prefill-cuda-graph", "on"]) == 2
    err = capsys.readouterr().err
    assert "--prefill-cuda-graph" in err and "trtllm" in err and "auto or off" in err


def test_speculative_and_disaggregated_prefill_follow_the_engines_rules() -> None:
    from infercast.layers import SimContext
    from infercast.parallel import MixedWorkload, Parallel, Workload
    from infercast.pricing import phase_of

    ctx = SimContext(parallel=Parallel(1, 1, 1, 1), workload=Workload(1, 512, 0, False), quant=None,
                     prefill_graph_tokens=2048)
    models = {name: SimpleNamespace(engine=ENGINES[name]) for name in ("sglang", "vllm")}
    assert phase_of(models["sglang"], ctx, False).piecewise
    assert not phase_of(models["sglang"], ctx, False, speculative=True).piecewise
    assert not phase_of(models["sglang"], ctx, False, disaggregated=True).piecewise
    assert phase_of(models["vllm"], ctx, False, speculative=True, disaggregated=True).piecewise  # vLLM keeps them
    # a mixed step is measured by its prompt chunk (sglang takes the decodes out of the chunk budget)
    with ctx.using(MixedWorkload(Workload(64, 1, 1000, True), Workload(1, 2048, 0, False))):
        assert phase_of(models["sglang"], ctx, False).piecewise
    with ctx.using(MixedWorkload(Workload(64, 1, 1000, True), Workload(1, 2049, 0, False))):
        assert not phase_of(models["sglang"], ctx, False).piecewise


@pytest.mark.parametrize(("mode", "version", "flags"), [
    ("auto", None, []), ("off", None, ["--disable-piecewise-cuda-graph"]), ("on", None, []),
    ("on", "0.5.9", ["--enable-piecewise-cuda-graph"]), ("off", "0.5.9", []), ("off", "0.5.10", ["--disable-piecewise-cuda-graph"]),
])
def test_sglang_launch_flags_follow_the_mode_and_the_version_default(mode: str, version, flags) -> None:
    from infercast.plan import sglang_prefill_graph_flags

    assert sglang_prefill_graph_flags(mode, version) == flags


@pytest.mark.parametrize(("engine", "flag"), [("sglang", "--disable-piecewise-cuda-graph"),
                                              ("vllm", "-cc.cudagraph_mode=FULL_DECODE_ONLY")])
def test_plan_launch_commands_carry_prefill_cuda_graph_off(engine: str, flag: str, capsys) -> None:
    import json

    from infercast.cli import main

    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1",
                 "--batch-sizes", "1", "--engine", engine, "--prefill-cuda-graph", "off",
                 "--json"]) == 0
    launch = json.loads(capsys.readouterr().out)["launch"]
    assert flag in launch[engine].split()
    assert "--disable-piecewise-cuda-graph" in launch["sglang"].split()  # the other engines' equivalents too


def test_a_larger_capture_size_replays_a_vllm_prefill_its_default_launches_kernel_by_kernel() -> None:
    """vLLM captures forwards of up to 512 tokens by default; --prefill-cuda-graph-max-tokens
    (vLLM's --max-cudagraph-capture-size) of 2,048 replays a 920-token prompt's pieces, leaving
    the host attention and one replay a layer, and 256 keeps a 300-token prompt eager."""
    llama = dict(model="meta-llama/Llama-3.1-70B-Instruct", device="H200", num_devices=8, engine="vllm",
                 context_length=0)
    eager = simulate(UserInput(**llama, query_length=920))
    captured = simulate(UserInput(**llama, query_length=920, prefill_cuda_graph_max_tokens=2048))
    assert _graphs(eager) == (False, False) and _graphs(captured) == (True, True)
    assert _launch_row(captured) < 0.1 * _launch_row(eager)
    assert captured.step_latency_ms < eager.step_latency_ms
    smaller = simulate(UserInput(**llama, query_length=300, prefill_cuda_graph_max_tokens=256))
    assert _graphs(smaller) == (False, False)
    assert _graphs(simulate(UserInput(**llama, query_length=300))) == (True, True)


def test_vllm_captures_gpt_oss_up_to_1024_tokens_by_default() -> None:
    """vLLM's GptOssForCausalLMConfig sets max_cudagraph_capture_size to 1,024 when the launch
    sets none."""
    gpt_oss = dict(model="openai/gpt-oss-120b", device="H200", num_devices=8, engine="vllm", context_length=0)
    assert _graphs(simulate(UserInput(**gpt_oss, query_length=920))) == (True, True)
    assert _graphs(simulate(UserInput(**gpt_oss, query_length=1100))) == (False, False)


def test_vllms_capture_size_bounds_its_decode_graphs_too() -> None:
    """vLLM builds one size list for full decode graphs and piecewise ones: a launch capturing 64
    tokens decodes 128 requests without a graph, where by default (512) it replays one."""
    llama = dict(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, engine="vllm", decode=True,
                 num_queries=128, context_length=256)
    assert simulate(UserInput(**llama)).cost_model["cuda_graph"]
    bounded = simulate(UserInput(**llama, prefill_cuda_graph_max_tokens=64))
    assert not bounded.cost_model["cuda_graph"] and _launch_row(bounded) > 0
    # sglang's decode graphs follow --cuda-graph-max-bs, not its prefill capture size
    sglang = simulate(UserInput(**dict(llama, engine="sglang"), prefill_cuda_graph_max_tokens=64))
    assert sglang.cost_model["cuda_graph"]


def test_sglang_captures_mla_prefills_past_2048_tokens_when_launched_so() -> None:
    """sglang caps piecewise capture at 2,048 tokens with MLA by default; --piecewise-cuda-graph-max-tokens
    8192 (as sglang PR 12996 launched DeepSeek-R1) captures a 4,096-token prompt."""
    deepseek = dict(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, query_length=4096,
                    context_length=0, engine_version="0.5.14")
    assert _graphs(simulate(UserInput(**deepseek))) == (False, False)
    assert _graphs(simulate(UserInput(**deepseek, prefill_cuda_graph_max_tokens=8192))) == (True, True)


@pytest.mark.parametrize(("fields", "message"), [
    ({"engine": "trtllm"}, "no prefill CUDA graphs for trtllm"),
    ({"engine": "vllm", "prefill_cuda_graph": "off"}, "captures nothing"),
])
def test_a_capture_size_without_captured_prefill_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(FieldError, match=message):
        simulate(UserInput(**LLAMA, query_length=64, prefill_cuda_graph_max_tokens=1024, **fields))


def test_the_launch_command_carries_the_capture_size() -> None:
    from infercast.plan import Config, Layout, PlanRequest, launch_commands

    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(8,),
                          speculative=(), engine="vllm", prefill_cuda_graph_max_tokens=2048)
    commands = launch_commands(request, Config(Layout(1, 1, 1, 1), None, 8, None), 8, expert_dtype="bf16",
                               cuda_arch=90)
    vllm, sglang = commands["vllm"], commands["sglang"]
    assert vllm[vllm.index("--max-cudagraph-capture-size") + 1] == "2048"
    assert sglang[sglang.index("--piecewise-cuda-graph-max-tokens") + 1] == "2048"
    # without one, vLLM captures at most twice --max-num-seqs (8): the command sets the 512 the plan priced
    default = launch_commands(replace(request, prefill_cuda_graph_max_tokens=None),
                              Config(Layout(1, 1, 1, 1), None, 8, None), 8, expert_dtype="bf16", cuda_arch=90,
                              capture=512)["vllm"]
    assert default[default.index("--max-cudagraph-capture-size") + 1] == "512"
    wide = launch_commands(replace(request, prefill_cuda_graph_max_tokens=None),
                           Config(Layout(1, 1, 1, 1), None, 256, None), 8, expert_dtype="bf16", cuda_arch=90,
                           capture=512)["vllm"]
    assert "--max-cudagraph-capture-size" not in wide


@pytest.mark.parametrize(("asked", "captured"), [(1, 1), (3, 2), (7, 4), (8, 8), (300, 288), (2048, 2048)])
def test_vllm_rounds_a_capture_size_down_to_its_grid(asked: int, captured: int) -> None:
    """vLLM captures 1, 2, 4, every 8 up to 248 and every 16 from 256; a size between two
    captures the lower (300 -> 288)."""
    result = simulate(UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1,
                                engine="vllm", query_length=64, prefill_cuda_graph_max_tokens=asked))
    assert result.cost_model["prefill_graph_tokens"] == captured


@pytest.mark.parametrize(("asked", "captured"), [(4, 4), (30, 28), (300, 288), (1100, 1024), (1279, 1024),
                                                 (3000, 2816), (6000, 5632), (8192, 8192)])
def test_sglang_rounds_a_capture_size_down_to_its_grid(asked: int, captured: int) -> None:
    """sglang captures every 4 up to 32, every 16 from 48 to 256, every 32 from 288 to 512, every
    64 from 576 to 1,024, every 256 from 1,280 to 4,096 and every 512 from 4,608, up to the
    launch's size: 1,100 captures up to 1,024, 3,000 up to 2,816."""
    result = simulate(UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1,
                                engine="sglang", query_length=64, prefill_cuda_graph_max_tokens=asked))
    assert result.cost_model["prefill_graph_tokens"] == captured


def test_a_prompt_above_sglangs_largest_captured_size_launches_eagerly() -> None:
    """Launched with 1,100, sglang captures up to 1,024: a 1,050-token prompt runs without graphs,
    a 1,000-token one in them."""
    graphed = [_graphs(simulate(UserInput(**LLAMA,
                                          engine="sglang", query_length=tokens,
                                          prefill_cuda_graph_max_tokens=1100)))[1] for tokens in (1000, 1050)]
    assert graphed == [True, False]


def test_vllm_caps_a_capture_size_at_the_chunk_before_its_grid_and_sglang_does_not() -> None:
    """vLLM builds its sizes up to min(chunk, N) and rounds that down (chunk 300, N 1,024: 288, as
    with no N), for decode too; sglang builds its grid up to N and the chunk bounds the forwards."""
    from infercast.costmodel import CostModel
    from infercast.plugins import get_devices
    from infercast.pricing import decode_graph_tokens

    h100 = get_devices().get("H100")
    vllm, sglang = CostModel(h100, "vllm"), CostModel(h100, "sglang")
    assert decode_graph_tokens(vllm, 1024, 300) == 288 and decode_graph_tokens(vllm, 1024) == 1024
    assert decode_graph_tokens(sglang, 1024, 300) is None
    assert vllm.engine.prefill_graphs.clamps_to_chunk and not sglang.engine.prefill_graphs.clamps_to_chunk


def test_a_plan_built_in_code_refuses_a_capture_size_below_one() -> None:
    from infercast.plan import PlanRequest, Planner
    from infercast_adapters import InfercastError

    with pytest.raises(InfercastError, match="--prefill-cuda-graph-max-tokens must be between 1 and .*, got 0"):
        Planner(PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,),
                            batches=(8,), speculative=(), engine="vllm", prefill_cuda_graph_max_tokens=0))


def test_a_plan_sets_vllms_capture_size_only_for_what_it_priced_on_vllm() -> None:
    """A vLLM plan whose --max-num-seqs would capture less than it priced sets the size it priced;
    an sglang plan's vLLM alternative, priced on sglang, does not."""
    from infercast.plan import Config, Layout, PlanRequest, Planner

    config = Config(Layout(1, 1, 1, 1), None, 8, None)
    for engine, expected in (("vllm", True), ("sglang", False)):
        planner = Planner(PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,),
                                      batches=(8,), speculative=(), engine=engine))
        assert ("--max-cudagraph-capture-size" in planner.commands_for(config)["vllm"]) is expected, engine
