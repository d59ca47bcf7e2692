"""``infercast plan``: the frontier is non-dominated and respects memory and SLOs; the launch
commands use real engine flags; the plot is written."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from infercast.cli import main
from infercast.plan import (
    Config,
    Layout,
    Planner,
    PlanRequest,
    SpecChoice,
    launch_commands,
    launch_notes,
    pareto,
    sglang_command,
    trtllm_command,
    vllm_command,
)
from infercast.simulate import UserInput
from infercast_adapters import InfercastError

# From sglang's documented server arguments (docs/advanced_features/server_arguments.md).
SGLANG_SERVER_ARGS = {
    "--model-path", "--tokenizer-path", "--host", "--port", "--tp-size", "--dp-size", "--ep-size", "--pp-size",
    "--enable-dp-attention", "--nnodes", "--node-rank", "--dist-init-addr", "--quantization", "--kv-cache-dtype",
    "--max-running-requests", "--mem-fraction-static", "--context-length", "--trust-remote-code",
    "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
    "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--enable-two-batch-overlap", "--moe-a2a-backend",
    "--ep-num-redundant-experts", "--chunked-prefill-size", "--cuda-graph-max-bs", "--enable-mixed-chunk",
    "--deepep-mode", "--disable-overlap-schedule", "--scheduler-recv-interval", "--max-total-tokens", "--dtype",
}
# From vLLM's documented `vllm serve` arguments.
VLLM_SERVE_ARGS = {
    "--tensor-parallel-size", "--data-parallel-size", "--pipeline-parallel-size", "--enable-expert-parallel",
    "--max-num-seqs", "--kv-cache-dtype", "--quantization", "--speculative-config", "--trust-remote-code",
    "--max-model-len", "--gpu-memory-utilization", "--max-num-batched-tokens", "--all2all-backend",
    "--async-scheduling", "--no-async-scheduling", "--dtype",
}

SMALL = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1, 2),
                    batches=(1, 4, 16, 64, 256, 1024), tpot_slo_ms=12.0, ttft_slo_ms=500.0, input_length=2048,
                    output_length=1024,
                    speculative=UserInput(speculative_algorithm="EAGLE3",
                                          speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                          acceptance_rates="0.8,0.7,0.6,0.5"),
                    spec_grid=(SpecChoice(1, 1, 2), SpecChoice(2, 1, 3), SpecChoice(3, 1, 4)))


@pytest.fixture(scope="module")
def small_plan():
    return Planner(SMALL).run()


def test_every_configuration_is_evaluated_once_and_shapes_are_reused() -> None:
    # one request's prefill alone and the decode step at each batch (the serving model on top
    # of these is counted in tests/simulator/test_serving.py)
    small_plan = Planner(replace(SMALL, mode="static")).run()
    # 1 GPU: TP1; 2 GPUs: TP2 (a dense model has no EP layouts); 6 batches; off + 3 chains
    assert small_plan.evaluated == 2 * 6 * 4
    # per (layout, batch): decode, verify at n = 2, 3, 4, one draft step shape (topk 1), extend at n = 2, 3, 4;
    # one prefill per layout. Unshared, every configuration would trace its own (about 156).
    assert small_plan.traces == 2 * 6 * (1 + 3 + 1 + 3) + 2


def test_the_frontier_is_non_dominated_and_respects_memory_and_slos(small_plan) -> None:
    usable = [c for c in small_plan.configs if c.fits and c.meets_slo]
    assert small_plan.frontier and all(c in usable for c in small_plan.frontier)
    for f in small_plan.frontier:
        assert f.tpot_ms <= 12.0 and f.ttft_ms <= 500.0 and f.fits
        assert not any(c.tokens_per_s_per_user >= f.tokens_per_s_per_user and
                       c.tokens_per_s_per_device > f.tokens_per_s_per_device for c in usable)
    missing = [c for c in usable if c not in small_plan.frontier]
    assert all(any(f.tokens_per_s_per_user >= c.tokens_per_s_per_user and
                   f.tokens_per_s_per_device >= c.tokens_per_s_per_device for f in small_plan.frontier) for c in missing)
    assert small_plan.best is max(small_plan.frontier, key=lambda c: c.tokens_per_s_per_device)
    too_big = [c for c in small_plan.configs if c.batch == 1024 and c.layout.num_devices == 1]
    assert too_big and not any(c.fits for c in too_big)  # 1024 x 3K tokens of KV do not fit one H100


def test_pareto_on_hand_made_points() -> None:
    def point(user, device):
        c = Config(Layout(1, 1, 1, 1), None, 1, None)
        c.tokens_per_s_per_user, c.tokens_per_s_per_device = user, device
        return c

    a, b, c, d = point(100, 10), point(50, 50), point(40, 40), point(10, 80)
    assert pareto([a, b, c, d]) == [a, b, d]


def test_launch_commands_use_documented_flags(small_plan) -> None:
    best = small_plan.best
    spec = Planner(SMALL).spec_request
    wide = Config(Layout(16, 8, 2, 16), "fp8", 64, SpecChoice(3, 1, 4))
    for config in (best, wide):
        cmd = sglang_command(SMALL, config, 8, spec, expert_dtype="fp8_block", cuda_arch=90)
        assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
        flags = {part for part in cmd if part.startswith("--")}
        assert flags <= SGLANG_SERVER_ARGS, flags - SGLANG_SERVER_ARGS
        assert shlex.split(shlex.join(cmd)) == cmd
        vllm = vllm_command(SMALL, config, spec)
        assert {p for p in vllm if p.startswith("--")} <= VLLM_SERVE_ARGS
    cmd = sglang_command(SMALL, wide, 8, spec, expert_dtype="fp8_block", cuda_arch=90)
    assert cmd[cmd.index("--tp-size") + 1] == "16" and cmd[cmd.index("--dp-size") + 1] == "2"
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--speculative-num-draft-tokens") + 1] == "4"
    vllm = vllm_command(SMALL, wide, spec)
    # sglang takes the instance's running requests; each of vLLM's 2 DP ranks schedules its own half
    assert cmd[cmd.index("--max-running-requests") + 1] == "64" and vllm[vllm.index("--max-num-seqs") + 1] == "32"
    config = json.loads(vllm[vllm.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


def test_cli_plan_prints_frontier_writes_plot_and_json(tmp_path, capsys) -> None:
    stem = str(tmp_path / "frontier")
    code = main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1,2",
                 "--batch-sizes", "1,8,64", "--tpot-slo-ms", "15", "--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "--accept-length", "2.2",
                 "--speculative-grid", "s2,s3", "--plot", stem, "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["configurations_evaluated"] == 2 * 3 * 3 and report["sweep_s"] > 0
    assert report["best"] is not None and report["launch"]["sglang"].startswith("python -m sglang.launch_server")
    assert (tmp_path / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp_path / "frontier.svg").read_text()


def test_plan_json_is_strict_where_a_queue_never_drains(capsys) -> None:
    """1,000 requests/s swamp one H100: the TTFT of its queue does not exist; JSON says null, not Infinity."""
    main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1", "--batch-sizes",
          "1,64", "--tpot-slo-ms", "10", "--request-rate", "1000", "--mode", "both", "--no-speculative", "--json"])

    def refuse(constant: str):
        raise AssertionError(f"{constant} in the JSON")

    report = json.loads(capsys.readouterr().out, parse_constant=refuse)
    rows = report["closest"] + report["disagg"]["closest"]
    assert rows and any(row["ttft_ms"] is None for row in rows)
    assert all(row["serving"]["stable"] is False for row in report["closest"] if row["ttft_ms"] is None)


def test_an_slo_nothing_meets_is_reported_with_the_closest(capsys) -> None:
    code = main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1",
                 "--batch-sizes", "1,8", "--tpot-slo-ms", "0.5"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1
    assert "no configuration meets the targets; the closest ones" in out and "0 also meet the targets" in out


@pytest.mark.parametrize("argv, message", [
    (["--num-devices", "eight"], "--num-devices takes a list"),
    (["--tpot-slo-ms", "-3"], "--tpot-slo-ms must be a positive number"),
    (["--speculative-grid", "s3"], "--speculative-grid: .* has no speculative option its adapter offers"),
    (["--no-speculative", "--num-mtp-tokens", "2"], "--no-speculative .* cannot go with --num-mtp-tokens"),
    (["--num-mtp-tokens", "2"], "llama has no MTP layer"),
    (["--quantization", "fp8,int3"], "unknown --quantization 'int3'; valid: checkpoint .* FP8_BLOCK"),
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
      "--accept-length", "2", "--speculative-grid", "3-2-5"], "trees .* need --acceptance-matrix"),
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
      "--accept-length", "2", "--speculative-grid", "3-1-6"], r"num_steps \+ 1 = 4"),
])
def test_bad_plan_input_exits_2(capsys, argv, message) -> None:
    import re

    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", *argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert re.search(message, err), err


def test_the_launch_command_follows_the_engine() -> None:
    config = Config(Layout(16, 8, 2, 16), None, 64, None)
    for engine in ("sglang", "vllm", "trtllm"):
        commands = launch_commands(replace(SMALL, engine=engine), config, 8, expert_dtype="bf16", cuda_arch=90)
        assert list(commands)[0] == engine and set(commands) == {"sglang", "vllm", "trtllm"}
    trt = launch_commands(replace(SMALL, engine="trtllm"), config, 8, expert_dtype="bf16", cuda_arch=90)["trtllm"]
    assert trt[:2] == ["trtllm-serve", SMALL.model] and trt[trt.index("--ep_size") + 1] == "16"


def test_launch_commands_load_the_model_an_engine_can_find(tmp_path) -> None:
    """An alias infercast resolves offline is not a name an engine can load: the commands carry
    the model reference behind it, and a config.json's directory rather than the file."""
    config = Config(Layout(8, 8, 1, 1), None, 8, None)
    loaded = {"deepseek-r1": "deepseek-ai/DeepSeek-R1", "Llama-3.1-70B": "meta-llama/Llama-3.1-70B-Instruct",
              # a base model's hub id is served as asked, though its architecture is read from the Instruct one
              "meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B", SMALL.model: SMALL.model}
    checkpoint = tmp_path / "gpt-oss-20b"  # a local directory named like an alias is the directory
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    loaded[str(checkpoint / "config.json")] = str(checkpoint.resolve())
    loaded[str(checkpoint)] = str(checkpoint.resolve())
    for given, expected in loaded.items():
        commands = launch_commands(replace(SMALL, model=given), config, 8, expert_dtype="bf16", cuda_arch=90)
        sglang, vllm, trt = commands["sglang"], commands["vllm"], commands["trtllm"]
        assert sglang[sglang.index("--model-path") + 1] == expected, given
        assert vllm[2] == expected and trt[1] == expected, given


def test_trtllm_takes_dp_attention_and_speculation_from_its_options_file() -> None:
    """trtllm-serve has no flag for either: the command names the YAML file and a note gives it."""
    spec = Planner(SMALL).spec_request  # EAGLE3 with a draft model
    eagle = Config(Layout(8, 1, 8, 1), None, 64, SpecChoice(3, 1, 4))
    cmd = trtllm_command(SMALL, eagle, spec)
    assert cmd[cmd.index("--extra_llm_api_options") + 1] == "extra_llm_api_options.yaml"
    (note,) = [n for n in launch_notes(SMALL, eagle, spec, expert_dtype="bf16", cuda_arch=90) if "extra_llm_api_options" in n]
    assert json.loads(note.split(" holds ", 1)[1]) == {
        "enable_attention_dp": True,
        "speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3,
                               "speculative_model_dir": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}
    mtp = Config(Layout(8, 8, 1, 1), None, 64, SpecChoice(2, 1, 3))
    (note,) = [n for n in launch_notes(SMALL, mtp, None, expert_dtype="bf16", cuda_arch=90) if "extra_llm_api_options" in n]
    assert json.loads(note.split(" holds ", 1)[1]) == {
        "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 2}}
    plain = Config(Layout(8, 8, 1, 1), None, 64, None)
    assert "--extra_llm_api_options" not in trtllm_command(SMALL, plain)
    assert not any("trtllm" in n for n in launch_notes(SMALL, plain, expert_dtype="bf16", cuda_arch=90))
    # attention TP inside DP groups: TensorRT-LLM's attention DP is one rank per group
    assert any("TensorRT-LLM has no setting for" in n
               for n in launch_notes(SMALL, Config(Layout(16, 8, 2, 16), None, 64, None), expert_dtype="bf16", cuda_arch=90))


def test_overlap_scheduling_off_or_on_reaches_every_engines_launch() -> None:
    """sglang --disable-overlap-schedule; vLLM --no-async-scheduling (from 0.14.0, where it is
    the default; before, off is the default and has no flag) or --async-scheduling;
    TensorRT-LLM's disable_overlap_scheduler in its options file. auto adds nothing."""
    plain = Config(Layout(1, 1, 1, 1), None, 64, None)
    flags = {"sglang": "--disable-overlap-schedule", "vllm": "-async-scheduling"}

    def commands(**fields):
        return launch_commands(replace(SMALL, **fields), plain, 8, expert_dtype="bf16", cuda_arch=90)

    auto = commands()
    assert not any(flag in part for engine, flag in flags.items() for part in auto[engine])
    assert "--extra_llm_api_options" not in auto["trtllm"]
    off = commands(overlap_scheduling="off")
    assert "--disable-overlap-schedule" in off["sglang"] and "--no-async-scheduling" in off["vllm"]
    assert {p for p in off["sglang"] if p.startswith("--")} <= SGLANG_SERVER_ARGS
    assert {p for p in off["vllm"] if p.startswith("--")} <= VLLM_SERVE_ARGS
    (note,) = [n for n in launch_notes(replace(SMALL, overlap_scheduling="off"), plain, expert_dtype="bf16",
                                       cuda_arch=90) if "extra_llm_api_options" in n]
    assert json.loads(note.split(" holds ", 1)[1]) == {"disable_overlap_scheduler": True}
    assert "--async-scheduling" in commands(overlap_scheduling="on", engine="vllm", engine_version="0.13.0")["vllm"]


def test_a_receive_interval_is_priced_in_ttft_and_launched_where_sglang_takes_it() -> None:
    """--scheduler-recv-interval: TTFT under load grows, TPOT does not; the sglang command carries
    the flag; a DP-attention layout, which sglang refuses it with, is priced and launched without."""
    from infercast.serving import ServingOptions

    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(64,),
                          speculative=(), serving=ServingOptions(concurrency=16))
    every, tenth = (Planner(replace(request, serving=ServingOptions(concurrency=16, scheduler_recv_interval=r)))
                    .run().configs[0] for r in (1, 10))
    assert tenth.tpot_ms == pytest.approx(every.tpot_ms, rel=0.01)  # the closed loop slows a little
    assert tenth.ttft_ms > every.ttft_ms + 3 * every.tpot_ms  # waits for a poll: up to ten decode steps
    assert tenth.serving["scheduler_recv_interval"] == 10
    asked = replace(request, serving=ServingOptions(concurrency=16, scheduler_recv_interval=10))
    command = sglang_command(asked, tenth, 8, expert_dtype="bf16", cuda_arch=90)
    assert command[command.index("--scheduler-recv-interval") + 1] == "10"
    assert {p for p in command if p.startswith("--")} <= SGLANG_SERVER_ARGS
    assert "--scheduler-recv-interval" not in sglang_command(request, every, 8, expert_dtype="bf16", cuda_arch=90)
    notes = launch_notes(asked, tenth, expert_dtype="bf16", cuda_arch=90)
    assert any("no equivalent of sglang's --scheduler-recv-interval 10" in n for n in notes)
    wide = PlanRequest(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=(16,), batches=(64,),
                       speculative=(), serving=ServingOptions(concurrency=64, scheduler_recv_interval=10))
    planner = Planner(wide)
    dp = next(c for c in planner.run().configs if c.layout.dp > 1)
    assert dp.serving["scheduler_recv_interval"] == 1
    assert "--enable-dp-attention" in (cmd := sglang_command(wide, dp, 8, expert_dtype="fp8_block", cuda_arch=90))
    assert "--scheduler-recv-interval" not in cmd
    assert any("refused with DP attention" in n for n in launch_notes(wide, dp, expert_dtype="fp8_block", cuda_arch=90))


def test_mixed_chunk_off_prices_and_launches_sglangs_default_of_prompt_steps_apart(capsys) -> None:
    """--mixed-chunk off: a prompt step carries no decodes, so it ends sooner (TTFT) while every
    decode waits it out (TPOT); sglang's command drops --enable-mixed-chunk; engines whose
    scheduler always mixes refuse it."""
    from infercast.cli import main
    from infercast.serving import ServingOptions

    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(64,),
                          speculative=(), serving=ServingOptions(concurrency=16))
    apart_request = replace(request, serving=ServingOptions(concurrency=16, mixed_chunk=False))
    mixed, apart = (Planner(r).run().configs[0] for r in (request, apart_request))
    assert (mixed.serving["policy"], apart.serving["policy"]) == ("mixed", "separate")
    assert apart.ttft_ms < mixed.ttft_ms and apart.tpot_ms > mixed.tpot_ms
    assert "--enable-mixed-chunk" in sglang_command(request, mixed, 8, expert_dtype="bf16", cuda_arch=90)
    assert "--enable-mixed-chunk" not in sglang_command(apart_request, apart, 8, expert_dtype="bf16", cuda_arch=90)
    assert any("always mix prompt chunks" in n for n in launch_notes(apart_request, apart, expert_dtype="bf16",
                                                                      cuda_arch=90))
    with pytest.raises(InfercastError, match="vllm's scheduler always mixes"):
        Planner(replace(apart_request, engine="vllm"))
    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--mixed-chunk", "no"]) == 2
    assert "unknown --mixed-chunk 'no'; valid: on, off" in capsys.readouterr().err


def test_the_scheduler_runs_one_step_ahead_where_the_engine_overlaps() -> None:
    """sglang overlaps by default, not with speculative decoding (before spec v2); vLLM from
    0.14.0; --overlap-scheduling decides where given. One step ahead, a loaded TTFT waits one
    more step."""
    from infercast.engines import engine_named
    from infercast.serving import ServingOptions

    sglang, vllm = engine_named("sglang"), engine_named("vllm")
    assert sglang.overlapped("0.5.9") and not sglang.overlapped("0.5.9", speculative=True)
    assert not sglang.overlapped("0.5.9", "off")
    assert not vllm.overlapped("0.13.0") and vllm.overlapped("0.14.0") and vllm.overlapped("0.13.0", "on")
    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(64,),
                          speculative=(), serving=ServingOptions(concurrency=16))
    ahead, every = (Planner(replace(request, overlap_scheduling=m)).run().configs[0] for m in ("auto", "off"))
    # the host step differs too (0.31 ms overlapped, 0.097 + 0.103 ms a request without)
    assert ahead.ttft_ms > every.ttft_ms + 0.5 * ahead.tpot_ms


def test_the_planner_prices_the_overlap_mode_it_launches() -> None:
    """vLLM's TPOT and TTFT carry its whole engine loop with --overlap-scheduling off (0.54 ms +
    12.7 us a request) and the overlapped 0.31 ms by default (its newest tables' version)."""
    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1,), batches=(16,),
                          speculative=(), engine="vllm", mode="static")
    auto, off = (Planner(replace(request, overlap_scheduling=m)).run().configs[0] for m in ("auto", "off"))
    assert off.tpot_ms - auto.tpot_ms == pytest.approx(0.54 + 16 * 0.0127 - 0.31, rel=1e-6)
    assert off.ttft_ms - auto.ttft_ms == pytest.approx(0.54 + 0.0127 - 0.31, rel=1e-6)


def test_the_planner_prices_the_moe_kernel_it_is_told_and_notes_the_launch_cannot_select_it() -> None:
    """gpt-oss-20b's MXFP4 experts on one H100 with vLLM: launched with Marlin (--moe-kernel
    marlin) its 2,048-token prefill takes longer than on the Triton kernel the table times,
    every MoE priced at Marlin's figure, and the plan says its commands leave the kernel to the
    engine's own option."""
    request = PlanRequest(model="openai/gpt-oss-20b", device="H100", num_devices=(1,), batches=(8,), speculative=(),
                          engine="vllm", mode="static")
    triton = Planner(request)
    marlin = Planner(replace(request, moe_kernel="marlin"))
    auto, forced = triton.run().configs[0], marlin.run().configs[0]
    assert forced.ttft_ms > 1.2 * auto.ttft_ms
    assert "(fused MoE: marlin only)" in marlin.costs.describe() and "marlin" not in triton.costs.describe()
    notes = launch_notes(marlin.request, forced, expert_dtype="mxfp4", cuda_arch=90)
    assert any("fused-MoE kernel the plan priced (marlin" in note for note in notes)
    assert not any("fused-MoE kernel" in note for note in launch_notes(request, auto, expert_dtype="mxfp4",
                                                                           cuda_arch=90))


def test_expert_parallel_launches_through_deepep_as_it_is_priced() -> None:
    """sglang prices FP8 experts under EP with DeepEP (normal kernels for prompt steps,
    low-latency for decode), as its --deepep-mode auto runs them; vLLM takes one mode and the
    plan says so."""
    fp8 = {"expert_dtype": "fp8_block", "cuda_arch": 90}
    served = Config(Layout(16, 1, 16, 16), None, 64, None, serving={"chunked_prefill_size": 8192, "policy": "mixed"})
    commands = launch_commands(SMALL, served, 8, **fp8)
    sglang, vllm = commands["sglang"], commands["vllm"]
    assert sglang[sglang.index("--moe-a2a-backend") + 1] == "deepep"
    assert sglang[sglang.index("--deepep-mode") + 1] == "auto"
    assert vllm[vllm.index("--all2all-backend") + 1] == "deepep_low_latency"
    assert any("one DeepEP mode" in note for note in launch_notes(SMALL, served, **fp8))
    # TP attention with EP: sglang still dispatches through DeepEP; vLLM uses all-to-all kernels
    # only across data-parallel ranks, so no backend flag and a note that it runs local experts
    tp_ep = Config(Layout(16, 16, 1, 16), None, 64, None)
    commands = launch_commands(SMALL, tp_ep, 8, **fp8)
    assert commands["sglang"][commands["sglang"].index("--deepep-mode") + 1] == "auto"
    assert "--enable-expert-parallel" in commands["vllm"] and "--all2all-backend" not in commands["vllm"]
    assert any(note.startswith("vllm: its expert parallelism here runs local experts")
               for note in launch_notes(SMALL, tp_ep, **fp8))
    dense = Config(Layout(16, 16, 1, 1), None, 64, None)
    commands = launch_commands(SMALL, dense, 8, **fp8)
    assert "--moe-a2a-backend" not in commands["sglang"] and "--all2all-backend" not in commands["vllm"]
    assert not any("DeepEP" in note for note in launch_notes(SMALL, dense, **fp8))


def test_moe_all_to_all_off_prices_and_launches_the_standard_dispatcher() -> None:
    """sglang serves --ep-size without --moe-a2a-backend through its standard dispatcher (every
    rank's local experts over every token, an all-reduce after): MiniMax-M2.5's FP8 experts on
    8 x H100 at EP8, one request, as the sgl-cookbook's MiniMax-M2.5 page launches it. Priced so,
    the decode step's layers communicate by all-reduce only (DeepEP's adds an all-to-all, an
    all-gather and a reduce-scatter), and the launch commands name no all-to-all backend (vLLM's
    DP ranks gather and reduce-scatter)."""
    from infercast.simulate import simulate

    step = dict(model="MiniMaxAI/MiniMax-M2.5", device="H100", num_devices=8, ep_size=8, decode=True,
                context_length=1100)
    deepep, standard = (simulate(UserInput(moe_all_to_all=mode, **step)) for mode in ("auto", "off"))
    layer_comms = {mode: {op.name.split(" ")[0] for op in r.ops if "(layers." in op.name and op.bound == "communication"}
                   for mode, r in (("auto", deepep), ("off", standard))}
    assert {"all_to_all", "all_gather", "reduce_scatter"} <= layer_comms["auto"]
    assert layer_comms["off"] == {"all_reduce"}
    assert any("without an all-to-all: --moe-all-to-all off" in note for note in standard.notes)
    assert standard.tpot_ms < deepep.tpot_ms  # one token: DeepEP's low-latency round trips cost more here
    with pytest.raises(InfercastError, match="--moe-all-to-all on: sglang has no all-to-all MoE path for w4a16"):
        simulate(UserInput(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8, ep_size=8, decode=True,
                           moe_all_to_all="on"))
    off = replace(SMALL, moe_all_to_all="off")
    commands = launch_commands(off, Config(Layout(16, 1, 16, 16), None, 64, None), 8, expert_dtype="fp8",
                               cuda_arch=90)
    assert "--moe-a2a-backend" not in commands["sglang"]
    assert commands["vllm"][commands["vllm"].index("--all2all-backend") + 1] == "allgather_reducescatter"


def test_moe_all_to_all_on_applies_to_expert_parallel_layouts_only() -> None:
    """``on`` refuses only an expert-parallel layout the engine cannot run behind an all-to-all:
    a dense model or EP 1 is priced as by default, and the planner leaves out the layouts vLLM
    serves without one (TP attention) instead of failing the sweep."""
    from infercast.simulate import simulate

    dense = dict(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, engine="vllm", decode=True)
    assert simulate(UserInput(moe_all_to_all="on", **dense)).tpot_ms == simulate(UserInput(**dense)).tpot_ms
    request = PlanRequest(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=(8,), batches=(64,),
                          speculative=(), engine="vllm", mode="static", moe_all_to_all="on")
    planner = Planner(request)
    kept = {point[0] for point in planner.grid()}
    auto = {point[0] for point in Planner(replace(request, moe_all_to_all="auto")).grid()}
    assert kept < auto and all(x.ep == 1 or x.dp > 1 for x in kept)
    assert {x for x in auto - kept} == {x for x in auto if x.ep > 1 and x.dp == 1}
    assert any(note.startswith("--moe-all-to-all on: expert-parallel layouts vllm cannot serve")
               for note in planner.run().notes)


@pytest.mark.parametrize("dtype", ["w4a16", "bf16"])
def test_sglang_serves_experts_it_cannot_run_behind_deepep_without_it(dtype) -> None:
    """sglang's DeepEP MoE runs FP8 experts only (INT4 and BF16 methods take the standard
    dispatcher's output): its command names no a2a backend, and vLLM's DeepEP is noted."""
    served = Config(Layout(16, 1, 16, 16), None, 64, None)
    commands = launch_commands(SMALL, served, 8, expert_dtype=dtype, cuda_arch=90)
    sglang, vllm = commands["sglang"], commands["vllm"]
    assert sglang[sglang.index("--ep-size") + 1] == "16" and "--enable-dp-attention" in sglang
    assert "--moe-a2a-backend" not in sglang and "--deepep-mode" not in sglang
    assert vllm[vllm.index("--all2all-backend") + 1] == "deepep_low_latency"
    notes = launch_notes(SMALL, served, expert_dtype=dtype, cuda_arch=90)
    assert "vllm: its expert parallelism here runs an all-to-all, where sglang, whose price the plan shows, runs " \
           "local experts over every token gathered from the DP ranks" in notes
    assert "trtllm: its expert parallelism here runs an all-to-all" not in " ".join(notes)  # both gather, as priced
    assert not any("one DeepEP mode" in note for note in notes)


# ------------------------------------------------------------------------------ default drafts, fixes


def test_kimi_plans_its_eagle3_draft_by_default_and_launches_it(capsys) -> None:
    """No speculative flag: the Kimi adapter's registered draft is swept (chains s1..s5 beside
    off); at batch 1, where a step is latency-bound, a draft cycle that yields ~3 tokens wins,
    so the chosen command launches it and the JSON carries it."""
    code = main(["plan", "moonshotai/Kimi-K2.5", "--device", "H200", "--num-devices", "8", "--batch-sizes", "1",
                 "--tpot-slo-ms", "50", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    options = {c["spec"]["option"] for c in plan["frontier"] if c["spec"]}
    assert options == {"kimi-k2.5-eagle3-mla"}
    best = plan["best"]
    assert best["spec"] is not None and best["accept_length"] > 2
    sglang = shlex.split(plan["launch"]["sglang"])
    assert sglang[sglang.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert sglang[sglang.index("--speculative-draft-model-path") + 1] == "lightseekorg/kimi-k2.5-eagle3-mla"
    assert sglang[sglang.index("--speculative-num-steps") + 1] == str(best["spec"]["num_steps"])
    assert any("swept by default: kimi-k2.5-eagle3-mla" in note for note in plan["notes"])


def test_no_speculative_sweeps_off_only(capsys) -> None:
    assert main(["plan", "moonshotai/Kimi-K2.5", "--num-devices", "8", "--batch-sizes", "1", "--no-speculative",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # TP8 and TP8 + EP8 (DP8 needs 8 requests): off only
    assert plan["configurations_evaluated"] == 2 and all(c["spec"] is None for c in plan["frontier"])


def test_num_mtp_tokens_sweeps_that_many_mtp_steps(capsys) -> None:
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--num-devices", "8", "--batch-sizes", "1", "--num-mtp-tokens",
                 "2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    specs = {(c["spec"]["num_steps"], c["spec"]["num_draft_tokens"]) for c in plan["frontier"] if c["spec"]}
    assert specs == {(2, 3)}
    sglang = shlex.split(plan["launch"]["sglang"])
    if plan["best"]["spec"]:
        assert sglang[sglang.index("--speculative-algorithm") + 1] == "EAGLE"  # sglang's name for MTP (NEXTN)
        assert "--speculative-draft-model-path" not in sglang


@pytest.mark.parametrize("quantization, sglang_flag, vllm_flag", [
    ("FP8", ["--quantization", "fp8"], ["--quantization", "fp8"]),  # both engines quantize a 16-bit checkpoint
    ("W4A16", [], []),  # needs a GPTQ/AWQ checkpoint: no flag, a note
    (None, [], []),  # the checkpoint's own
])
def test_quantization_in_launch_commands_is_a_real_engine_value(quantization, sglang_flag, vllm_flag) -> None:
    config = Config(Layout(8, 8, 1, 1), quantization, 16, None)
    sglang, vllm = sglang_command(SMALL, config, 8, expert_dtype="bf16", cuda_arch=90), vllm_command(SMALL, config)
    assert ("--quantization" in sglang) == bool(sglang_flag) and ("--quantization" in vllm) == bool(vllm_flag)
    if sglang_flag:
        assert sglang[sglang.index("--quantization") + 1] == sglang_flag[1]
        assert vllm[vllm.index("--quantization") + 1] == vllm_flag[1]
    notes = launch_notes(SMALL, config, expert_dtype="bf16", cuda_arch=90)
    if quantization == "W4A16":
        assert notes and all("int4 weight-only checkpoint (GPTQ or AWQ" in n for n in notes)
    else:
        assert all(quantization and "trtllm" in n for n in notes)  # trtllm-serve takes no online FP8 flag


def test_when_nothing_fits_the_closest_are_shown_with_the_reason(capsys) -> None:
    code = main(["plan", "meta-llama/Llama-3.1-70B-Instruct", "--device", "H100", "--num-devices", "1",
                 "--batch-sizes", "1,8", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 1 and plan["best"] is None and plan["fits"] == 0
    assert plan["closest"] and plan["closest"][0]["batch"] == 1  # the smallest memory first
    (note,) = [n for n in plan["notes"] if n.startswith("nothing fits")]
    assert f"needs {plan['closest'][0]['memory_gib']:.1f} GiB per device" in note and "GiB is usable" in note


def test_memory_limits_decide_what_fits_and_reach_the_launch_commands(capsys) -> None:
    request = PlanRequest(model="deepseek-ai/DeepSeek-V3", batches=(32, 64, 128), speculative=(), mode="static")
    capped = Planner(replace(request, max_total_tokens=131072)).run().configs
    # each request holds 1,024 + 1,024 slots on every rank of its TP group: 64 fill 131,072, and
    # 128 fit only where DP attention spreads them over 8 ranks
    assert {(c.layout, c.batch) for c in capped if not c.fits} == {(c.layout, 128) for c in capped if c.layout.dp == 1}
    assert all(c.fits for c in Planner(request).run().configs)
    # half of 140.4 GiB is 70.2 GiB, where 79 GiB of weights do not fit
    tight = Planner(replace(request, mem_fraction_static=0.5)).run().configs
    assert not any(c.fits for c in tight)
    assert [c.memory_gib for c in tight] == [c.memory_gib for c in capped]

    argv = ["plan", "deepseek-ai/DeepSeek-V3", "--batch-sizes", "64", "--no-speculative", "--json"]
    assert main(argv + ["--max-total-tokens", "131072", "--mem-fraction-static", "0.85"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["memory"]["fraction"] == 0.85 and plan["memory"]["max_total_tokens"] == 131072
    assert plan["memory"]["usable_gib_per_device"] == pytest.approx(0.85 * 143771 / 1024)
    sglang = shlex.split(plan["launch"]["sglang"])
    assert sglang[sglang.index("--mem-fraction-static") + 1] == "0.85"
    assert sglang[sglang.index("--max-total-tokens") + 1] == "131072"
    vllm = shlex.split(plan["launch"]["vllm"])
    assert vllm[vllm.index("--gpu-memory-utilization") + 1] == "0.85"
    assert any("--max-total-tokens" in note for note in plan["launch_notes"])
    assert main(argv + ["--mem-fraction-static", "1.5"]) == 2
    assert "--mem-fraction-static must be between 0.05 and 1, got 1.5" in capsys.readouterr().err
    with pytest.raises(InfercastError, match="--max-total-tokens must be between 1"):
        Planner(replace(request, max_total_tokens=0))


def test_sglangs_launch_asks_for_the_memory_share_the_plan_priced() -> None:
    """sglang's own default on one H100 is 0.835 of the card, on one H200 0.907: the plan prices
    0.9, so only the H100's command needs --mem-fraction-static to serve it."""
    for device, flagged in (("H100", True), ("H200", False)):
        request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device=device, num_devices=(1,), batches=(8,),
                              speculative=(), mode="static")
        planner = Planner(request)
        (config,) = planner.run().configs
        fraction = planner.launch_fraction(config.layout, config.quantization, False)
        assert fraction == (0.9 if flagged else None)
        cmd = sglang_command(request, config, 8, expert_dtype="bf16", cuda_arch=90, mem_fraction=fraction)
        given = cmd[cmd.index("--mem-fraction-static") + 1] if "--mem-fraction-static" in cmd else None
        assert given == ("0.9" if flagged else None)
        asked = Planner(replace(request, mem_fraction_static=0.8))
        assert asked.launch_fraction(config.layout, config.quantization, False) == 0.8


def test_a_disaggregated_pool_keeps_no_memory_back_for_prefill_graphs() -> None:
    """sglang captures no piecewise prefill graphs under PD disaggregation: Llama-3.1-70B on
    4 x H200 defaults to 0.897 aggregated (graphs kept back, below the priced 0.9) and to 0.9 in a
    disaggregated pool, whose command then needs no --mem-fraction-static."""
    request = PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="H200", num_devices=(4,), batches=(8,),
                          speculative=(), mode="static")
    planner = Planner(request)
    (config,) = planner.run().configs
    assert planner.launch_fraction(config.layout, config.quantization, False) == 0.9
    assert planner.launch_fraction(config.layout, config.quantization, False, disaggregated=True) is None


def test_the_plot_legend_names_speculation_only_when_swept(tmp_path) -> None:
    from infercast.plan import plot

    result = Planner(replace(SMALL, speculative=(), spec_grid=None, num_devices=(1,), batches=(1, 16))).run()
    (png, svg) = plot(result, str(tmp_path / "off"))
    assert "speculative" not in (tmp_path / "off.svg").read_text()
    assert png.endswith(".png") and svg.endswith(".svg")
