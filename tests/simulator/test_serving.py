"""Aggregated serving: mixed steps priced as one forward, the steady-state queueing model
checked against a discrete-event simulation of the same policy and step costs, TPOT rising
with load, the length histogram format, and the planner and command line in agg mode."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from infercast_adapters import InfercastError

from infercast.agg import StepPricer, chunk_shape, closed_loop
from infercast.cli import main
from infercast.parallel import MixedWorkload, Workload
from infercast.plan import Layout, Planner, PlanRequest, sglang_command
from infercast.serving import (
    POLICIES,
    EnginePolicy,
    GridCost,
    LengthDist,
    ServingOptions,
    load_lengths,
    rate_at_utilisation,
    simulate_engine,
    steady_state,
)
from infercast.trace import trace

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TP1 = Layout(1, 1, 1, 1)


@pytest.fixture(scope="module")
def llama():
    planner = Planner(PlanRequest(model=LLAMA, device="H100", input_length=1024, output_length=256))
    return planner, StepPricer(planner)


# ------------------------------------------------------------------------------ mixed steps


def _records(planner, layout, workload):
    built, ctx = planner._model(layout, None)
    with ctx.using(workload):
        return trace(built.sim, ctx.tokens)


def test_a_mixed_step_runs_gemms_over_all_tokens_and_each_part_attention_at_its_context(llama) -> None:
    planner, _ = llama
    mixed = MixedWorkload(Workload(16, 1, 2048, True), Workload(2, 512, 100, False))
    records = _records(planner, TP1, mixed)
    attention = [r for r in records if r.name == "infercast::attention"]
    shapes = sorted((r["num_seqs"], r["q_len"], r["kv_len"]) for r in attention)
    assert shapes == [(2, 512, 612), (16, 1, 2049)]  # decodes at their context, chunks over their prefix
    qkv = next(r for r in records if r.path.endswith("qkv_proj"))
    assert qkv["x"].shape[0] == 16 + 2 * 512  # one GEMM over every token of the step
    lm_head = next(r for r in records if r.path == "head.lm_head")
    assert lm_head["x"].shape[0] == 16 + 2  # a logit row per request: each decode and each chunk's last token


def test_an_mla_mixed_step_absorbs_the_decodes_and_expands_the_chunk() -> None:
    planner = Planner(PlanRequest(model="deepseek-ai/DeepSeek-V3", device="H200"))
    layout = Layout(8, 8, 1, 8)
    records = _records(planner, layout, MixedWorkload(Workload(32, 1, 4000, True), Workload(1, 1024, 0, False)))
    names = {r.name: r for r in records}
    assert names["infercast::mla_attention"]["num_seqs"] == 32
    assert names["infercast::mla_attention"]["kv_len"] == 4001
    assert names["infercast::mla_prefill_attention"]["q_len"] == 1024
    assert {r["x"].shape[1] for r in records if r.name == "infercast::mla_bmm"} == {32}  # decode tokens only
    dispatch = next(r for r in records if r.name == "infercast::all_to_all")
    assert dispatch["mode"] == "normal"  # a mixed step is not a decode step: DeepEP normal mode, no CUDA graph


def test_a_mixed_step_costs_less_than_its_parts_apart_and_more_than_either(llama) -> None:
    _, pricer = llama
    decode, chunk = Workload(64, 1, 1536, True), Workload(2, 1024, 0, False)
    alone = pricer.step(TP1, None, decode) + pricer.step(TP1, None, chunk)
    mixed = pricer.step(TP1, None, MixedWorkload(decode, chunk))
    # the weights are read once for both parts; the attention of each is still paid
    assert max(pricer.step(TP1, None, decode), pricer.step(TP1, None, chunk)) < mixed < alone


# ------------------------------------------------------------------------------ the step-cost table


def test_grid_cost_is_exact_on_its_points_and_linear_between() -> None:
    calls = []

    def exact(b, c):
        return 1.0 + b + 0.01 * c + (2.0 if c else 0.0)

    grid = GridCost([1, 4, 16], [100, 400], lambda b, c: calls.append((b, c)) or exact(b, c))
    assert grid(4, 400) == pytest.approx(exact(4, 400))
    assert grid(10, 0) == pytest.approx(1.0 + 10)  # between the 4 and 16 rows
    assert grid(4, 250) == pytest.approx(1 + 4 + 2.5 + 2.0)
    assert grid(4, 50) == pytest.approx(5 + (8 - 5) * 0.5)  # below the first column: from the no-prompt step
    assert grid(0, 0) == 0.0
    assert len(calls) == len(set(calls))  # every point priced once


def test_chunk_shape_is_the_token_weighted_piece_and_prefix() -> None:
    # 6000 tokens at 4096 per step: a 4096-token piece over no prefix, a 1904-token one over 4096
    shape = chunk_shape(LengthDist.fixed(6000, 10), 4096)
    assert shape.piece == round((4096**2 + 1904**2) / 6000)
    assert shape.prefix == round(1904 * 4096 / 6000)
    assert chunk_shape(LengthDist.fixed(1000, 10), 8192) == type(shape)(1000, 0)


# ------------------------------------------------------------------------------ steady state vs event simulation


HISTOGRAM = LengthDist(((512, 128, 3.0), (2048, 256, 1.0)), "two buckets")
PROMPTS = LengthDist(((512, 1, 3.0), (3000, 1, 1.0)), "two prompt buckets")
# (policy, chunk, max running, lengths, loads): the prompt queue's utilisation; max running high
# enough that the running-request limit does not bind (the planner keeps it below 70%)
DES_CASES = [
    ("mixed", 2048, 512, LengthDist.fixed(1024, 256), (0.3, 0.6, 0.8)),
    ("separate", 2048, 4096, LengthDist.fixed(1024, 256), (0.3, 0.6)),
    ("separate", 8192, 10**9, LengthDist.fixed(2000, 1), (0.3, 0.6, 0.85)),  # a disaggregated prefill instance
    ("separate", 2048, 10**9, PROMPTS, (0.3, 0.6, 0.85)),
    ("mixed", 2048, 512, HISTOGRAM, (0.3, 0.6)),
    ("mixed", 8192, 512, HISTOGRAM, (0.3,)),
]
# Where it is not held (docs/simulate.md, benchmarks/serving_agreement.py): mixed steps near saturation
# (above 80%: the decodes take room from the chunk, and the mean-field model turns the knee later and
# sharper than the event simulation: TTFT low by a quarter to a third at 85%; with mixed prompt
# lengths the capacity is too high and TPOT low), and separate steps at 85% (TPOT high).
TOLERANCE = {"ttft_mean": 0.25, "ttft_p90": 0.30, "tpot": 0.20}


@pytest.mark.parametrize("policy, chunk, running, lengths, loads", DES_CASES)
def test_the_steady_state_agrees_with_an_event_simulation_of_the_same_policy(llama, policy, chunk, running,
                                                                             lengths, loads) -> None:
    """Stated tolerance: mean TTFT within 25%, p90 TTFT within 30%, mean TPOT within 20%."""
    _, pricer = llama
    cost = pricer.grid(TP1, None, min(running, 512), None, chunk_shape(lengths, chunk), chunk)
    engine = EnginePolicy(chunk, running, policy)
    errors = []
    for load in loads:
        rate = rate_at_utilisation(cost, engine, lengths, load)
        model = steady_state(cost, engine, lengths, rate)
        sim = simulate_engine(cost, engine, lengths, rate, requests=6000, warmup=1000, seed=3)
        got = {"ttft_mean": (model.ttft_mean_s, statistics.mean(sim.ttft_s)),
               "ttft_p90": (model.ttft_p_s, sim.quantile(sim.ttft_s, 0.9))}
        if sim.tpot_s:
            got["tpot"] = (model.tpot_s, statistics.mean(sim.tpot_s))
        for key, (a, b) in got.items():
            errors.append((load, key, (a - b) / b))
    misses = [e for e in errors if abs(e[2]) > TOLERANCE[e[1]]]
    assert not misses, misses


def test_decodes_in_a_mixed_step_take_their_tokens_out_of_the_chunk() -> None:
    """sglang's PrefillAdder (and vLLM's token budget) give the running batch its tokens first:
    a mixed step with B decodes takes at most chunk - B prompt tokens; a separate one the chunk."""
    def cost(b, c):
        return 1e-3 + 1e-5 * b + 2e-6 * c

    lengths, chunk = LengthDist.fixed(1500, 400), 512
    steps = {}
    for policy in ("mixed", "separate"):
        seen = []
        simulate_engine(lambda b, c: seen.append((b, c)) or cost(b, c), EnginePolicy(chunk, 10**6, policy),
                        lengths, 60.0, requests=800, warmup=100, seed=1)
        steps[policy] = seen
    mixed = [(b, c) for b, c in steps["mixed"] if b and c]
    assert mixed and all(c <= chunk - b for b, c in mixed)
    assert any(c == chunk - b for b, c in mixed)  # a backlog fills what the decodes leave
    assert max(c for _, c in steps["separate"]) == chunk
    # the steady state serves prompt tokens at chunk - B per full step
    point = steady_state(cost, EnginePolicy(chunk, 10**6, "mixed"), lengths, 60.0)
    room = chunk - point.decode_batch
    assert point.stable and 0 < room < chunk
    assert point.utilisation == pytest.approx(60.0 * 1500 * cost(point.decode_batch, room) / room)


def test_tpot_rises_with_the_arrival_rate_in_the_model_and_the_simulation(llama) -> None:
    _, pricer = llama
    lengths = LengthDist.fixed(1024, 256)
    cost = pricer.grid(TP1, None, 512, None, chunk_shape(lengths, 2048), 2048)
    engine = EnginePolicy(2048, 512, "mixed")
    top = rate_at_utilisation(cost, engine, lengths, 0.8)
    rates = [top * f for f in (0.1, 0.4, 0.7, 1.0)]
    model = [steady_state(cost, engine, lengths, r).tpot_s for r in rates]
    sim = [statistics.mean(simulate_engine(cost, engine, lengths, r, requests=3000, warmup=500).tpot_s) for r in rates]
    assert model == sorted(model) and model[-1] > 1.5 * model[0]
    assert sim == sorted(sim) and sim[-1] > 1.5 * sim[0]
    assert model[0] >= cost(1, 0)  # never below a decode step alone


def test_with_a_receive_interval_prompts_start_only_after_a_poll() -> None:
    """sglang --scheduler-recv-interval R: the scheduler polls after every prompt step, when idle,
    and otherwise every R-th decode step, so every run of decode steps that ends in a prompt
    step is a whole number of intervals long."""
    steps = []
    lengths, R = LengthDist(((300, 40, 1.0), (900, 60, 1.0)), "two"), 5
    simulate_engine(lambda b, c: steps.append((b, c)) or 1e-3 + 1e-5 * b + 2e-6 * c,
                    EnginePolicy(512, 10**6, "separate", recv_interval=R), lengths, 150.0, requests=1500,
                    warmup=100, seed=2)
    runs, run = [], 0
    for b, c in steps:
        if c:
            runs.append(run) if run else None
            run = 0
        else:
            run += 1
    assert len(runs) > 100 and all(n % R == 0 for n in runs), sorted(set(runs))
    assert any(n > R for n in runs)  # a poll that found nothing waits a whole interval more


@pytest.mark.parametrize("policy", POLICIES)
def test_a_receive_interval_delays_arrivals_during_decodes_in_the_model_as_simulated(policy) -> None:
    """A request arriving while others decode waits for the next poll (up to R decode steps) and
    is prefilled with the others of that interval. Stated tolerance: the steady state's mean and
    p90 TTFT within 15% of the event simulation's up to 30% utilisation (docs/simulate.md); a
    lone client meets an idle engine, which polls at once."""
    cost = GridCost([1, 4, 16, 64, 256, 512], [512, 2048], lambda b, c: 8e-3 + 2e-5 * b + 1.5e-5 * c)
    lengths = LengthDist(((600, 200, 1.0), (1000, 300, 1.0), (1400, 400, 1.0)), "three")
    base = EnginePolicy(2048, 512, policy)
    for load in (0.1, 0.3):
        rate = rate_at_utilisation(cost, base, lengths, load)
        means = []
        for R in (1, 10, 30):
            engine = EnginePolicy(2048, 512, policy, recv_interval=R)
            model = steady_state(cost, engine, lengths, rate)
            sim = simulate_engine(cost, engine, lengths, rate, requests=6000, warmup=1000, seed=3)
            assert model.ttft_mean_s == pytest.approx(statistics.mean(sim.ttft_s), rel=0.15)
            assert model.ttft_p_s == pytest.approx(sim.quantile(sim.ttft_s, 0.9), rel=0.15)
            means.append(model.ttft_mean_s)
        # most arrivals find decodes: each ten more steps between polls add about half of ten steps
        assert means[0] < means[1] < means[2] and means[2] - means[1] > 5 * cost(1, 0)
    alone = [simulate_engine(cost, EnginePolicy(2048, 512, policy, recv_interval=R), lengths, clients=1,
                             requests=30, warmup=3).ttft_s for R in (1, 30)]
    assert alone[0] == pytest.approx(alone[1])


@pytest.mark.parametrize("policy", POLICIES)
def test_one_step_ahead_an_arrival_misses_the_step_already_formed(policy) -> None:
    """sglang's overlap scheduler and vLLM's async scheduling form each step while the GPU runs
    the one before: a request arriving while the engine runs starts one step later than it would
    otherwise, and one meeting an idle engine does not. Stated tolerance: the steady state within
    15% of the event simulation polling every step (mean and p90 TTFT, up to 60% utilisation with
    mixed steps, 30% with separate ones, which near saturation are a known gap); with a receive
    interval as well, p90 within 15% and the mean within 25%."""
    cost = GridCost([1, 4, 16, 64, 256, 512], [512, 2048], lambda b, c: 8e-3 + 2e-5 * b + 1.5e-5 * c)
    for lengths in (LengthDist(((600, 200, 1.0), (1000, 300, 1.0), (1400, 400, 1.0)), "three"),
                    LengthDist(((3000, 200, 1.0), (5000, 300, 1.0)), "prompts over two or three chunks")):
        _compare_ahead(cost, lengths, policy)
    alone = [simulate_engine(cost, EnginePolicy(2048, 512, policy, lookahead=ahead), LengthDist.fixed(1000, 300),
                             clients=1, requests=30, warmup=3).ttft_s for ahead in (False, True)]
    assert alone[0] == pytest.approx(alone[1])


def _compare_ahead(cost, lengths, policy) -> None:
    """The steady state against the event simulation, polling every step and every 10th, with and
    without lookahead (the tolerances of the test above)."""
    base = EnginePolicy(2048, 512, policy)
    for load in (0.1, 0.3, 0.6) if policy == "mixed" else (0.1, 0.3):
        rate = rate_at_utilisation(cost, base, lengths, load)
        sims = {}
        for R, ahead in ((1, False), (1, True), (10, True)):
            engine = EnginePolicy(2048, 512, policy, recv_interval=R, lookahead=ahead)
            model = steady_state(cost, engine, lengths, rate)
            sim = simulate_engine(cost, engine, lengths, rate, requests=6000, warmup=1000, seed=3)
            sims[R, ahead] = statistics.mean(sim.ttft_s)
            if (R, ahead) != (1, False):
                assert model.ttft_p_s == pytest.approx(sim.quantile(sim.ttft_s, 0.9), rel=0.15)
                assert model.ttft_mean_s == pytest.approx(sims[R, ahead], rel=0.15 if R == 1 else 0.25)
        # most arrivals find a step running, and wait out one more
        assert sims[1, True] - sims[1, False] > 0.5 * cost(1, 0)


def test_a_receive_interval_is_a_whole_number_of_steps() -> None:
    for bad in (0, 2.5, True):
        with pytest.raises(InfercastError, match="--scheduler-recv-interval must be a whole number"):
            EnginePolicy(512, 64, "mixed", recv_interval=bad)
        with pytest.raises(InfercastError, match="--scheduler-recv-interval must be a whole number"):
            ServingOptions(scheduler_recv_interval=bad)


# ------------------------------------------------------------------------------ closed loop (--concurrency)


def test_a_lone_client_meets_an_idle_engine_in_the_simulation_and_the_model() -> None:
    """One client: each prompt is prefilled alone (no decode beside it) and each output token
    is a one-request decode step; the model's request (meeting the other clients: none) sees the
    same, though the step-cost table prices a fraction of a decoding request as a whole one."""
    cost = GridCost([1, 4, 16, 64], [512, 1500], lambda b, c: 1e-3 + 1e-5 * b + 2e-6 * c)
    lengths, engine = LengthDist.fixed(1500, 400), EnginePolicy(512, 64, "mixed")
    sim = simulate_engine(cost, engine, lengths, clients=1, requests=50, warmup=5)
    own = 2 * cost(0, 512) + cost(0, 1500 - 2 * 512)  # three chunks, nothing beside them
    assert cost(1, 512) > cost(0, 512)  # what a decode beside them would add
    assert sim.ttft_s == pytest.approx([own] * 45)
    assert sim.tpot_s == pytest.approx([cost(1, 0)] * 45)
    assert sim.rate == pytest.approx(1 / (own + 399 * cost(1, 0)), rel=0.01)
    model = closed_loop(cost, engine, lengths, 1, 0.9)
    assert model.ttft_mean_s == pytest.approx(own, rel=1e-3)
    assert model.tpot_s == pytest.approx(cost(1, 0), rel=1e-3)  # no other prompt steps between its tokens
    assert model.rate == pytest.approx(sim.rate, rel=0.01)
    # more clients: a request meets their decodes and their prompts
    assert closed_loop(cost, engine, lengths, 8, 0.9).ttft_mean_s > own


def test_clients_the_engine_cannot_hold_wait_for_a_slot() -> None:
    """Past the running-request limit the extra clients queue for a slot: Little's law on them
    adds (clients - held) / rate to TTFT, and rate x response time comes back to the clients."""
    cost = GridCost([1, 4, 16, 64], [512, 1500], lambda b, c: 1e-3 + 1e-5 * b + 2e-6 * c)
    lengths, engine = LengthDist.fixed(1000, 200), EnginePolicy(2048, 16, "mixed")
    inside, crowd = closed_loop(cost, engine, lengths, 8, 0.9), closed_loop(cost, engine, lengths, 200, 0.9)
    for point, clients in ((inside, 8), (crowd, 200)):
        response = point.ttft_mean_s + 199 * point.tpot_s
        assert point.rate * response == pytest.approx(clients, rel=0.02)
    assert crowd.ttft_mean_s > 10 * inside.ttft_mean_s  # most of its clients wait outside
    sim = simulate_engine(cost, engine, lengths, clients=200, requests=3000, warmup=1000, seed=1)
    assert crowd.rate == pytest.approx(sim.rate, rel=0.10)
    assert crowd.ttft_mean_s == pytest.approx(statistics.mean(sim.ttft_s), rel=0.25)


def test_a_short_prompt_at_one_client_pays_a_whole_prefill_launch(llama) -> None:
    """plan --concurrency 1 gives infercast simulate's TTFT, short prompts included: the step-cost
    table's column at one prompt token prices the eager launches any prefill pays."""
    from infercast.simulate import UserInput, simulate

    lengths = LengthDist(((64, 32, 1.0), (2048, 32, 1.0)), "short and long")
    request = PlanRequest(model=LLAMA, device="H100", num_devices=(1,), batches=(8,), speculative=(),
                          prefill_cuda_graph="off", serving=ServingOptions(concurrency=1, lengths=lengths))
    plan = Planner(request).run()
    config = next(c for c in plan.configs if (c.layout.tp, c.layout.dp) == (1, 1))
    alone = statistics.mean(simulate(UserInput(model=LLAMA, device="H100", num_devices=1, tp_size=1, num_queries=1,
                                               query_length=i, prefill_cuda_graph="off")).ttft_ms
                            for i, _, _ in lengths.rows)
    assert config.serving["ttft_mean_ms"] == pytest.approx(alone, rel=0.05)


def test_simulate_engine_takes_a_rate_or_clients() -> None:
    for kwargs, message in (({}, "a rate or a number of clients"), ({"rate": 1.0, "clients": 2}, "not both"),
                            ({"clients": 0}, "whole number of clients >= 1"), ({"clients": 2.5}, "got 2.5")):
        with pytest.raises(ValueError, match=message):
            simulate_engine(lambda b, c: 1e-3, EnginePolicy(512, 64, "mixed"), LengthDist.fixed(100, 10), **kwargs)


@pytest.mark.parametrize("clients", [1, 4, 16, 64])
def test_the_closed_loop_model_agrees_with_a_benchmark_run_of_the_clients(llama, clients) -> None:
    """A benchmark's run: the clients start together and send 3,000 requests (statistics after
    500), lengths varying (a histogram). Mean TTFT within 25%, mean TPOT and the request rate
    within 10%. Not held, docs/simulate.md: the steady state of a long run (its arrivals smoother
    than the model's, TTFT 18-62% lower at 4-64 clients), and one fixed length with separate
    prompt steps, where the clients stay in step and each wave is prefilled together."""
    _, pricer = llama
    lengths, chunk = HISTOGRAM, 2048
    cost = pricer.grid(TP1, None, 512, None, chunk_shape(lengths, chunk), chunk)
    engine = EnginePolicy(chunk, 512, "mixed")
    model = closed_loop(cost, engine, lengths, clients, 0.9)
    sim = simulate_engine(cost, engine, lengths, clients=clients, requests=3000, warmup=500, seed=3)
    assert model.ttft_mean_s == pytest.approx(statistics.mean(sim.ttft_s), rel=0.25)
    assert model.tpot_s == pytest.approx(statistics.mean(sim.tpot_s), rel=0.10)
    assert model.rate == pytest.approx(sim.rate, rel=0.10)


# ------------------------------------------------------------------------------ length histograms


def test_length_histograms_load_from_csv_and_json(tmp_path) -> None:
    csv = tmp_path / "lengths.csv"
    csv.write_text("input_length,output_length,weight\n1000,200,3\n4000,100,1\n")
    got = load_lengths(str(csv))
    assert got.rows == ((1000, 200, 3.0), (4000, 100, 1.0))
    assert got.mean_input == pytest.approx((3 * 1000 + 4000) / 4) and got.mean_output == pytest.approx(175)
    js = tmp_path / "lengths.json"
    js.write_text(json.dumps([{"input_length": 1000, "output_length": 200}, {"input_length": 10, "output_length": 5,
                                                                            "weight": 0}]))
    assert load_lengths(str(js)).probabilities == [1.0, 0.0]


@pytest.mark.parametrize("text, message", [
    ("input_length,output_length\n100,abc\n", "not a number"),
    ("in,out\n100,10\n", "needs input_length and output_length"),
    ("input_length,output_length,weight\n0,10,1\n", "lengths must be >= 1"),
    ("input_length,output_length,weight\n10,10,0\n", "no rows with a positive weight"),
])
def test_bad_length_histograms_name_the_flag(tmp_path, text, message) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InfercastError, match=f"--length-distribution .*{message}"):
        load_lengths(str(path))


# ------------------------------------------------------------------------------ the planner in agg mode

AGG = PlanRequest(model=LLAMA, device="H100", num_devices=(1,), batches=(16, 64, 256), input_length=1024,
                  output_length=256, tpot_slo_ms=30.0, ttft_slo_ms=1500.0)


@pytest.fixture(scope="module")
def agg_plan():
    return Planner(AGG).run()


def test_agg_configurations_report_the_rate_they_sustain_within_the_slos(agg_plan) -> None:
    alone = {c.batch: c for c in Planner(replace(AGG, mode="static")).run().configs}
    for c in agg_plan.configs:
        s = c.serving
        assert s["mode"] == "agg" and s["policy"] == "mixed" and s["chunked_prefill_size"] == 8192
        assert c.tokens_per_s_per_device == pytest.approx(s["request_rate"] * 256)
        if c.meets_slo:
            assert c.tpot_ms <= 30.0 and c.ttft_ms <= 1500.0 and s["running_share"] <= 0.7 + 1e-9
            assert c.ttft_ms > alone[c.batch].ttft_ms  # queueing and shared steps only add to a lone prefill
    assert agg_plan.best is not None
    cmd = sglang_command(AGG, agg_plan.best, 8, expert_dtype="bf16", cuda_arch=90)
    assert cmd[cmd.index("--chunked-prefill-size") + 1] == "8192" and "--enable-mixed-chunk" in cmd
    assert any("TTFT is the p90 of a queueing approximation" in n for n in agg_plan.notes)


def test_a_given_rate_is_priced_at_that_rate_and_a_higher_one_costs_tpot() -> None:
    low, high = (Planner(replace(AGG, batches=(256,), serving=ServingOptions(request_rate=r))).run().configs[0]
                 for r in (2.0, 8.0))
    assert low.serving["request_rate"] == 2.0 and high.serving["request_rate"] == 8.0
    assert high.tpot_ms > low.tpot_ms and high.tokens_per_s_per_device == pytest.approx(4 * low.tokens_per_s_per_device)


def test_cli_agg_json_has_the_serving_fields(capsys) -> None:
    code = main(["plan", LLAMA, "--device", "H100", "--num-devices", "1", "--batch-sizes", "64", "--tpot-slo-ms", "40",
                 "--chunked-prefill-size", "4096", "--ttft-percentile", "99", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "agg" and report["serving"]["chunked_prefill_size"] == 4096
    best = report["best"]["serving"]
    assert best["chunked_prefill_size"] == 4096 and best["ttft_p99_ms"] >= best["ttft_mean_ms"]


@pytest.mark.parametrize("argv, message", [
    (["--mode", "split"], "unknown --mode 'split'; valid: agg, disagg, both"),
    (["--request-rate", "-1"], "--request-rate must be a positive number"),
    (["--request-rate", "2", "--concurrency", "8"], "give --request-rate or --concurrency, not both"),
    (["--concurrency", "0"], "--concurrency must be a positive whole number"),
    (["--chunked-prefill-size", "0"], "--chunked-prefill-size must be a positive number of tokens"),
    (["--ttft-percentile", "100"], r"--ttft-percentile must be in \[50, 100\)"),
    (["--scheduler-recv-interval", "0"], "--scheduler-recv-interval must be a whole number of decode steps >= 1"),
    (["--engine", "vllm", "--scheduler-recv-interval", "10"],
     "--scheduler-recv-interval is sglang's; vllm polls for requests every step"),
    (["--length-distribution", "/no/such/file.csv"], "--length-distribution /no/such/file.csv: no such file"),
    (["--prefill-devices", "x"], "--prefill-devices takes a list"),
    (["--mode", "disagg", "--disaggregation-transfer-backend", "tcp"],
     "unknown --disaggregation-transfer-backend 'tcp'; valid: mooncake, nixl"),
])
def test_bad_serving_flags_exit_2_naming_the_flag(capsys, argv, message) -> None:
    import re

    code = main(["plan", LLAMA, "--device", "H100", "--num-devices", "1", *argv])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and re.search(message, err), err


def test_each_engine_takes_its_own_default_prompt_budget_per_step() -> None:
    """sglang's --chunked-prefill-size grows with GPU memory (16,384 on a B200); vLLM's
    --max-num-batched-tokens for `vllm serve` is 8,192 from 70 GiB except on A100s, 2,048 there;
    the planner prices and launches with the engine's own."""
    from infercast.plan import vllm_command
    from infercast.plugins import get_devices
    from infercast.serving import default_chunk

    devices = get_devices()
    b200, h100, a100 = devices.get("B200"), devices.get("H100"), devices.get("A100")
    assert default_chunk(b200.memory_bytes, "sglang", b200.name) == 16384
    assert default_chunk(b200.memory_bytes, "vllm", b200.name) == 8192
    assert default_chunk(h100.memory_bytes, "vllm", h100.name) == 8192
    assert default_chunk(a100.memory_bytes, "vllm", a100.name) == 2048 < default_chunk(a100.memory_bytes, "sglang")
    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="B200", num_devices=(1,), batches=(8,),
                          speculative=(), engine="vllm", serving=ServingOptions(concurrency=4))
    plan = Planner(request).run()
    assert plan.best.serving["chunked_prefill_size"] == 8192
    command = vllm_command(request, plan.best)
    assert command[command.index("--max-num-batched-tokens") + 1] == "8192"
    assert any("(vllm's default for B200)" in note for note in plan.notes)
    # each of vLLM's DP ranks is an engine with its own default budget
    from infercast.agg import chunk_of

    planner = Planner(replace(request, engine="sglang"))
    assert chunk_of(Planner(request), 4) == 4 * 8192 and chunk_of(planner, 4) == 16384
