"""Measured kernel tables: interpolation, the aiconfigurator-core reader, calibration files and
the order in which sources price an operator."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch
from infercast_adapters import InfercastError

from infercast.analytic import kernel_time
from infercast.cost import cost_of
from infercast.costmodel import CostModel, Phase
from infercast.devices import BUILTIN_DEVICES
from infercast.kernels import aiconfigurator as aic
from infercast.kernels.calibration import load_calibration, write_calibration
from infercast.kernels.grid import EXACT, EXTRAPOLATED, INTERPOLATED, Grid
from infercast.kernels.tables import KernelTable
from infercast.trace import OpRecord, TensorSpec

DEVICES = {d.name: d for d in BUILTIN_DEVICES}
DECODE = Phase(graph=True, decode=True, scale_up_domain=8)
LINEAR = lambda c: c[0]  # noqa: E731  (an analytic shape proportional to the first axis)


def grid_2d() -> Grid:
    points = {(m, n): float(m * n) ** 0.5 + 1.0 for m in (1, 4, 16, 64) for n in (32, 128)}
    return Grid(("m", "n"), points)


def test_interpolation_is_exact_on_grid_points() -> None:
    grid = grid_2d()
    for (m, n), value in grid.points():
        answer = grid.query((m, n), LINEAR)
        assert answer.value == value and answer.quality == EXACT


def test_interpolation_is_geometric_in_log_space_and_monotone_between_points() -> None:
    grid = grid_2d()
    lo, hi = grid.query((4, 32), LINEAR).value, grid.query((16, 32), LINEAR).value
    mid = grid.query((8, 32), LINEAR)  # halfway between 4 and 16 in log(m)
    assert mid.quality == INTERPOLATED and mid.value == pytest.approx(math.sqrt(lo * hi))
    values = [grid.query((m, 32), LINEAR).value for m in (4, 5, 6, 8, 10, 12, 14, 16)]
    assert values == sorted(values) and lo <= min(values) and max(values) <= hi


def test_outside_the_grid_holds_the_edge_utilisation() -> None:
    grid = grid_2d()
    edge = grid.query((64, 128), LINEAR).value
    beyond = grid.query((256, 128), LINEAR)
    assert beyond.quality == EXTRAPOLATED
    assert beyond.value == pytest.approx(edge * 256 / 64)  # scaled by the analytic shape, not clamped flat


def test_ragged_grids_extend_the_short_row_and_say_so() -> None:
    grid = Grid(("m", "n"), {(1, 32): 2.0, (4, 32): 4.0, (4, 128): 8.0})
    answer = grid.query((2, 128), LINEAR)  # m = 1 has no n = 128 point: its n = 32 value is held (shape ratio 1)
    assert answer.quality == EXTRAPOLATED and answer.value == pytest.approx(math.sqrt(2.0 * 8.0))


def test_earlier_sources_win_and_repeats_are_combined_by_the_median() -> None:
    table = KernelTable("gemm")
    table.add_rows([("bf16", 1, 32, 32, 5.0), ("bf16", 1, 32, 32, 7.0), ("bf16", 1, 32, 32, 100.0)], "new")
    table.add_rows([("bf16", 1, 32, 32, 1.0), ("bf16", 2, 32, 32, 3.0)], "old")
    grid = table.grid(("bf16",))
    assert dict(grid.points()) == {(1, 32, 32): 7.0, (2, 32, 32): 3.0}  # median of three; the old point fills in
    assert table.origin(("bf16",)) == "new (+old)"
    same = KernelTable("gemm")
    same.add_rows([("bf16", 4, 32, 32, 9.0)], "new")
    same.add_rows([("bf16", 4, 32, 32, 8.0)], "old")  # adds no point, so the origin does not name it
    assert same.origin(("bf16",)) == "new" and dict(same.grid(("bf16",)).points()) == {(4, 32, 32): 9.0}


def test_the_installed_package_provides_the_tables() -> None:
    """No network: the data comes with aiconfigurator-core, a declared dependency."""
    assert aic.data_root() is not None
    assert aic.default_version("h200_sxm", "sglang") in aic.engine_versions("h200_sxm", "sglang")
    gemm = aic.load("gemm", "h200_sxm", "sglang", aic.default_version("h200_sxm", "sglang"))
    answer = gemm.query(("bf16",), (1, 7168, 2048), LINEAR)
    assert answer.quality == EXACT and 3 < answer.value < 30  # microseconds for one small bf16 GEMM


def test_a_version_takes_its_own_points_then_older_then_the_newest() -> None:
    """sglang 0.5.9 on an H200 has all-reduce tables only: its older 0.5.6.post2 fills the
    all-reduce points it lacks, and its GEMM and MoE points come from the newest version
    (0.5.14), not from the nearer 0.5.10."""
    versions = aic.engine_versions("h200_sxm", "sglang")
    assert {"0.5.6.post2", "0.5.9", "0.5.10", "0.5.14"} <= set(versions)
    origins = [origin for _, origin, *_ in aic._plan("all_reduce", "h200_sxm", "sglang", "0.5.9")]
    assert origins == ["sglang 0.5.9", "sglang 0.5.6.post2", "sglang 0.5.14", "sglang 0.5.10"]
    moe_perf = [origin for path, origin, *_ in aic._plan("moe", "h200_sxm", "sglang", "0.5.9")
                if path.name == "moe_perf.parquet"]
    assert moe_perf == ["sglang 0.5.14", "sglang 0.5.10"]
    model = CostModel(DEVICES["H200"], "sglang", "0.5.9")
    priced = model.price(gemm(1, 7168, 2048), DECODE)
    assert priced.source == EXACT and priced.origin == "gemm sglang 0.5.14"
    newest = CostModel(DEVICES["H200"], "sglang").price(gemm(1, 7168, 2048), DECODE)
    assert priced.seconds == newest.seconds


def test_an_unreadable_table_is_an_error_naming_the_file(tmp_path) -> None:
    bad = tmp_path / "gemm_perf.parquet"
    bad.write_bytes(b"not a parquet file")
    with pytest.raises(InfercastError, match="gemm_perf.parquet could not be read"):
        aic._read(bad, ("m",))


def gemm(m: int, n: int, k: int) -> OpRecord:
    import torch

    x, w, out = (TensorSpec((m, k), torch.bfloat16), TensorSpec((n, k), torch.bfloat16, "weight"),
                 TensorSpec((m, n), torch.bfloat16))
    return OpRecord("infercast::gemm", (x, w, "bf16"), (out,), "layers.0.mlp.down_proj", 0,
                    named={"x": x, "weight": w, "dtype": "bf16"})


def test_source_precedence_calibration_then_measured_then_analytic(tmp_path) -> None:
    path = write_calibration(tmp_path / "cal.json", {"gemm": [("bf16", 1, 7168, 2048, 123.0)]}, device="H200",
                             source="a test")
    calibrated = CostModel(DEVICES["H200"], "sglang", calibration=load_calibration(path, DEVICES["H200"]))
    measured = CostModel(DEVICES["H200"], "sglang")
    analytic = CostModel(DEVICES["H200"], "sglang", measured=False)
    on_file = calibrated.price(gemm(1, 7168, 2048), DECODE)
    assert on_file.seconds == pytest.approx(123e-6) and on_file.source == EXACT and "calibration" in on_file.origin
    shipped = measured.price(gemm(1, 7168, 2048), DECODE)
    assert shipped.source == EXACT and "sglang" in shipped.origin and shipped.seconds != on_file.seconds
    roofline = analytic.price(gemm(1, 7168, 2048), DECODE)
    assert roofline.source == "analytic"
    # a device without tables is priced analytically, and the model says so
    h20 = CostModel(DEVICES["H20"], "sglang")
    assert h20.price(gemm(1, 7168, 2048), DECODE).source == "analytic"
    assert any("no measured kernel tables" in note for note in h20.notes)
    # a version there still sets the engine's defaults; a name that is no version is refused
    versioned = CostModel(DEVICES["H20"], "sglang", engine_version="0.5.2")
    assert versioned.engine_version == "0.5.2" and versioned.price(gemm(1, 7168, 2048), DECODE).source == "analytic"
    assert any("sglang 0.5.2 sets the version's defaults" in note for note in versioned.notes)
    with pytest.raises(InfercastError, match="'latest' is not a version number"):
        CostModel(DEVICES["H20"], "sglang", engine_version="latest")
    # so does a version under --cost-model analytic
    roofline_056 = CostModel(DEVICES["H200"], "sglang", engine_version="0.5.6", measured=False)
    assert roofline_056.engine_version == "0.5.6" and roofline_056.tables is None
    assert any("sglang 0.5.6 sets the version's defaults" in note for note in roofline_056.notes)
    with pytest.raises(InfercastError, match="'latest' is not a version number"):
        CostModel(DEVICES["H200"], "sglang", engine_version="latest", measured=False)


def test_calibration_files_are_checked(tmp_path) -> None:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"format": "infercast-calibration", "version": 1,
                                "tables": {"gemm": {"columns": ["dtype", "m", "n", "latency_us"], "rows": []}}}))
    with pytest.raises(InfercastError, match="missing column.*k"):
        load_calibration(path)
    path.write_text(json.dumps({"format": "infercast-calibration", "version": 1, "device": "H100",
                                "tables": {"gemm": {"columns": ["dtype", "m", "n", "k", "latency_us"],
                                                    "rows": [["bf16", 1, 2, 3, -1]]}}}))
    with pytest.raises(InfercastError, match="row 0: latency_us must be a positive number"):
        load_calibration(path)
    with pytest.raises(InfercastError, match="measured on H100, not H200"):
        load_calibration(path, DEVICES["H200"])
    path.write_text("{")
    with pytest.raises(InfercastError, match="not a JSON file"):
        load_calibration(path)
    with pytest.raises(InfercastError, match="no such file"):
        load_calibration(tmp_path / "missing.json")


def test_an_engine_version_without_tables_borrows_them_and_a_bad_one_lists_the_ones_with_data() -> None:
    """A version the package has no tables for (sglang 0.5.7) is priced from its neighbours' points
    and says so; a string that is no version number is refused with the versions that have data."""
    with pytest.raises(InfercastError, match="--engine-version 'latest' is not a version number.*0.5.14"):
        CostModel(DEVICES["H200"], "sglang", "latest")
    model = CostModel(DEVICES["H200"], "sglang", "0.5.7")
    assert any(note.startswith("sglang 0.5.7 has no kernel tables of its own for h200_sxm: its points come from "
                               "0.5.6.post2 and older, then the newest") for note in model.notes)
    priced = model.price(gemm(1, 7168, 2048), DECODE)
    assert priced.source == EXACT and priced.origin == "gemm sglang 0.5.14"
    assert not any("no kernel tables of its own" in note for note in CostModel(DEVICES["H200"], "sglang", "0.5.9").notes)
    with pytest.raises(InfercastError, match="unknown --engine 'tgi'; valid: sglang, vllm, trtllm"):
        CostModel(DEVICES["H200"], "tgi")


def test_the_engines_host_time_is_one_row_per_step() -> None:
    from infercast.engines import engine_named
    from infercast.simulate import UserInput, simulate

    for engine, batch in (("sglang", 1), ("vllm", 8)):
        result = simulate(UserInput(model="llama-3.1-8b", device="H100", num_devices=1, decode=True, num_queries=batch,
                                    engine=engine))
        host = [op for op in result.ops if op.source == "engine"]
        assert len(host) == 1 and host[0].count == 1
        assert host[0].total_ms == pytest.approx(engine_named(engine).host_step(None).at(batch) * 1e3)
        kernels = sum(op.total_ms for op in result.ops if op.source != "engine")
        assert result.step_latency_ms == pytest.approx(kernels + host[0].total_ms)
    prefill = simulate(UserInput(model="llama-3.1-8b", device="H100", num_devices=1, query_length=1000))
    request = [op for op in prefill.ops if op.name.startswith("request:")]
    assert len(request) == 1 and prefill.ttft_ms == pytest.approx(prefill.step_latency_ms + request[0].total_ms)
    assert request[0].total_ms == pytest.approx(engine_named("sglang").request.at(1000) * 1e3)
    # a prefix-cache hit computes 10 tokens but tokenizes the whole 1,000-token prompt
    hit = simulate(UserInput(model="llama-3.1-8b", device="H100", num_devices=1, query_length=10,
                             context_length=990))
    assert hit.ttft_ms - hit.step_latency_ms == pytest.approx(request[0].total_ms)
    assert hit.step_latency_ms < prefill.step_latency_ms / 2


def test_vllm_schedules_ahead_of_the_gpu_from_0_14_and_overlap_scheduling_overrides_the_version() -> None:
    """vLLM 0.14.0 made async scheduling its default: the step then exposes what sglang's overlap
    scheduler does (0.31 ms), before it the whole engine loop (0.54 ms + 12.7 us a request).
    sglang never overlaps a speculative cycle; ``off`` exposes its Python output processing."""
    from infercast.engines import engine_named
    from infercast.simulate import UserInput, simulate

    vllm, sglang = engine_named("vllm"), engine_named("sglang")
    assert vllm.host_step("0.13.0").at(8) == pytest.approx(0.54e-3 + 8 * 12.7e-6)
    assert vllm.host_step("0.14.0").at(8) == vllm.host_step(None).at(64) == pytest.approx(0.31e-3)
    assert vllm.host_step("0.13.0", "on").at(8) == pytest.approx(0.31e-3)
    assert vllm.host_step("0.24.0", "off").at(8) == pytest.approx(0.54e-3 + 8 * 12.7e-6)
    assert sglang.host_step("0.5.9", speculative=True).at(1) == sglang.host_step("0.5.9", "off").at(1)
    assert sglang.host_step("0.5.9", "off").at(1) == pytest.approx(0.097e-3 + 0.103e-3)
    with pytest.raises(InfercastError, match="overlap-scheduling 'maybe'"):
        vllm.host_step(None, "maybe")

    def host_ms(**fields) -> float:
        result = simulate(UserInput(model="llama-3.1-8b", device="H100", num_devices=1, decode=True, num_queries=8,
                                    engine="vllm", **fields))
        (row,) = [op for op in result.ops if op.source == "engine"]
        return row.total_ms

    assert host_ms() == pytest.approx(0.31)  # the newest tables' version, 0.24.0
    assert host_ms(engine_version="0.14.0") == pytest.approx(0.31)
    assert host_ms(overlap_scheduling="off") == pytest.approx(0.54 + 8 * 0.0127)
    from infercast.request import FieldError, check

    with pytest.raises(FieldError) as bad:
        check(UserInput(overlap_scheduling="maybe"))
    assert "--overlap-scheduling" in bad.value.render(lambda name: "--" + name.replace("_", "-"))


def int4_gemm(m: int, n: int, k: int) -> OpRecord:
    """A W4A16 GEMM as infercast traces it: int4 weights packed in int32, bf16 scales per 128 inputs."""
    import torch

    x, out = TensorSpec((m, k), torch.bfloat16), TensorSpec((m, n), torch.bfloat16)
    w, scale = TensorSpec((n, k // 8), torch.int32, "weight"), TensorSpec((n, k // 128), torch.bfloat16, "weight")
    return OpRecord("infercast::quant_gemm", (x, w, scale, n, "w4a16"), (out,), "layers.0.mlp.down_proj", 0,
                    named={"x": x, "weight_packed": w, "scale": scale, "out_features": n, "dtype": "w4a16"})


def test_a_dense_int4_gemm_streams_at_marlins_figure_where_the_engine_runs_marlin() -> None:
    h200 = DEVICES["H200"]
    record = int4_gemm(1, 8192, 8192)
    read = 8192 * 8192 / 2 + 8192 * 64 * 2 + 2 * 8192 * 2  # int4 weights, group scales, activations
    marlin = h200.efficiency.streams["marlin"]
    sglang = CostModel(h200, "sglang").price(record, DECODE)
    assert sglang.source == "analytic" and sglang.origin.endswith("; marlin stream")
    assert sglang.seconds == pytest.approx(marlin.fixed_s + read / (4.8e12 * marlin.memory))
    assert sglang.seconds == pytest.approx(20.3e-6, rel=0.1)  # the H200 timing the figure was fitted to
    # TensorRT-LLM runs its own weight-only kernels: the device's generic roofline, faster
    trtllm = CostModel(h200, "trtllm").price(record, DECODE)
    assert "marlin" not in trtllm.origin
    assert trtllm.seconds == pytest.approx(kernel_time(cost_of(record), h200).seconds)
    assert trtllm.seconds < sglang.seconds
    # no figure off sm_90 (A100 is Marlin's own architecture; MI300X runs no Marlin), none for bf16
    for device in ("A100", "MI300X"):
        assert "marlin" not in CostModel(DEVICES[device], "sglang").price(record, DECODE).origin
    assert "marlin" not in CostModel(h200, "sglang", measured=False).price(gemm(1, 8192, 8192), DECODE).origin
    # every sm_90 device and only those (devices derived from H100's figures reset it)
    streaming = {d.name: d.efficiency.streams["marlin"] for d in BUILTIN_DEVICES if "marlin" in d.efficiency.streams}
    assert set(streaming) == {d.name for d in BUILTIN_DEVICES if d.cuda_arch == 90}
    assert all((s.memory, s.fixed_s, s.dtypes) == (marlin.memory, marlin.fixed_s, marlin.dtypes)
               for s in streaming.values())  # one stream; the H20's fused MoE computes at its own share


def test_an_int4_moe_no_table_covers_streams_at_marlins_figure_near_the_measured_marlin_moe() -> None:
    """Priced analytically, Kimi-K2.5's INT4 experts on H200 stream at Marlin's rate (the
    engine's MoE kernel) and land within 20% of the tables' measured Marlin MoE; the generic
    stream was 31-45% too fast."""
    from infercast.simulate import UserInput, simulate

    def moe(cost_model: str, requests: int):
        result = simulate(UserInput(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8, tp_size=8,
                                    num_queries=requests, decode=True, context_length=1000, cost_model=cost_model))
        return next(op for op in result.ops if op.name.startswith("fused_moe"))

    for requests in (1, 32):
        analytic, measured = moe("analytic", requests), moe("measured", requests)
        assert analytic.source == "analytic" and analytic.origin.endswith("; marlin stream")
        assert measured.source == ("measured" if requests == 1 else "interpolated")  # 32 requests: random routing
        assert analytic.total_ms == pytest.approx(measured.total_ms, rel=0.2)


def test_an_analytic_marlin_prefill_moe_comes_near_its_table_as_moe_tp_narrows_the_experts() -> None:
    """Kimi-K2.5's prefill MoE on 8 x H200 TP8 (experts 256 wide a rank): the analytic price, at
    Marlin's grouped share for that width, within 25% of sglang's measured table (64% too fast
    at the bf16 GEMM figure; 42% at the share of wide experts)."""
    from infercast.simulate import UserInput, simulate

    def moe(cost_model: str) -> float:
        result = simulate(UserInput(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8, tp_size=8,
                                    num_queries=1, query_length=4194, cost_model=cost_model))
        return next(op for op in result.ops if op.name.startswith("fused_moe")).total_ms

    assert moe("analytic") == pytest.approx(moe("measured"), rel=0.25)


def fused_int4_moe(tokens: int, experts: int, hidden: int, inter: int, top_k: int, moe_tp: int = 1) -> OpRecord:
    """A fused W4A16 MoE over every expert on one GPU (``inter``: each expert's width on it, a
    1/``moe_tp`` slice), balanced routing, groups of 128."""
    from infercast import routing

    bf = torch.bfloat16
    x = TensorSpec((tokens, hidden), bf)
    named = dict(x=x, w13=TensorSpec((experts, 2 * inter, hidden // 8), torch.int32, "weight"),
                 w13_scale=TensorSpec((experts, 2 * inter, hidden // 128), bf, "weight"),
                 w2=TensorSpec((experts, hidden, inter // 8), torch.int32, "weight"),
                 w2_scale=TensorSpec((experts, hidden, inter // 128), bf, "weight"), tokens=tokens, top_k=top_k,
                 num_experts=experts, local_experts=experts, routed_rows=float(tokens * top_k),
                 active_experts=float(routing.expected_active_experts(experts, top_k, tokens, experts)),
                 straggler=1.0, moe_tp=moe_tp, dtype="w4a16", distribution="balanced", dispatch="tp")
    return OpRecord("infercast::fused_moe", tuple(named.values()), (x,), "mlp", 0, named=named)


def fused_moe_record(tokens: int, experts: int, hidden: int, inter: int, top_k: int, moe_tp: int, dtype: str) -> OpRecord:
    """A fused bf16 or FP8-block MoE over every expert on one GPU (``inter``: each expert's width
    on it, a 1/``moe_tp`` slice), balanced routing."""
    from infercast import routing

    weight = torch.float8_e4m3fn if dtype == "fp8_block" else torch.bfloat16
    x = TensorSpec((tokens, hidden), torch.bfloat16)
    named = dict(x=x, w13=TensorSpec((experts, 2 * inter, hidden), weight, "weight"),
                 w13_scale=TensorSpec((experts, 2 * inter // 128, hidden // 128), torch.float32, "weight"),
                 w2=TensorSpec((experts, hidden, inter), weight, "weight"),
                 w2_scale=TensorSpec((experts, hidden // 128, inter // 128), torch.float32, "weight"), tokens=tokens,
                 top_k=top_k, num_experts=experts, local_experts=experts, routed_rows=float(tokens * top_k),
                 active_experts=float(routing.expected_active_experts(experts, top_k, tokens, experts)),
                 straggler=1.0, moe_tp=moe_tp, dtype=dtype, distribution="balanced", dispatch="tp")
    return OpRecord("infercast::fused_moe", tuple(named.values()), (x,), "mlp", 0, named=named)


def test_a_triton_moe_no_table_covers_streams_at_the_familys_figure_near_its_tables() -> None:
    """Decode MoEs the tables time with sglang's Triton kernel (DeepSeek-V3's FP8-block experts at
    MoE TP8 on H100 and H200, Mixtral-8x7B's bf16 ones at TP8 on H100), priced analytically: at the
    Triton family's own figure (a line through the tables at 1-16 tokens: 27-29 us + the weights
    at 0.85-0.86 of HBM) within 25% of the table, where the generic figure (five small kernels'
    fixed time) was 15-43% fast."""
    from infercast.analytic import kernel_time

    cases = [("H100", fused_moe_record(1, 256, 7168, 256, 8, 8, "fp8_block")),
             ("H200", fused_moe_record(1, 256, 7168, 256, 8, 8, "fp8_block")),
             ("H100", fused_moe_record(1, 8, 4096, 1792, 2, 8, "bf16"))]
    errors = []
    for device, record in cases:
        model = CostModel(DEVICES[device], "sglang")
        measured = model.price(record, DECODE)
        kernel = model.stream_kernel(record, cost_of(record))  # sglang's own Triton figure (the same streaming)
        assert measured.source in ("measured", "interpolated") and kernel == "triton:sglang"
        family = kernel_time(cost_of(record), DEVICES[device], kernel).seconds
        generic = kernel_time(cost_of(record), DEVICES[device]).seconds
        errors.append(family / measured.seconds - 1)
        assert abs(family / measured.seconds - 1) < 0.25 and generic < 0.86 * measured.seconds
    assert sorted(map(abs, errors))[1] < 0.2
    # behind DeepEP sglang runs DeepGEMM's grouped GEMMs, not the Triton kernel: no Triton figure
    behind = fused_moe_record(1, 256, 7168, 256, 8, 8, "fp8_block")
    behind.named["dispatch"] = "all_to_all"
    assert CostModel(DEVICES["H200"], "sglang").stream_kernel(behind, cost_of(behind)) is None


def test_a_triton_moe_no_table_covers_at_many_tokens_runs_at_the_familys_compute_share() -> None:
    """Prompt-sized MoEs the tables time with sglang's Triton kernel, priced analytically: at the
    family's compute-bound share of the bf16 peak (sglang's own on Hopper, each dtype its own
    curve), fitted to every shape's points from 4,096 tokens. Shapes sglang 0.5.14 ships no tuned
    tile configuration for come within 30% (most within 10%), where the dense GEMMs' efficiency was
    1.7-3.4 times fast; shapes it tunes run faster than priced (Qwen3-235B's bf16 experts at MoE
    TP8 on Hopper, E=128 N=192, 1.8 times; Mixtral's at TP8 on H100, E=8 N=1792, 2.4 times), which
    the share does not know."""
    from infercast.analytic import kernel_time

    untuned = [("H100", (16384, 128, 4096, 192, 8, 8, "fp8_block")),
               ("H200", (8192, 256, 7168, 256, 8, 8, "fp8_block")),
               ("H200", (16384, 256, 3072, 384, 8, 4, "fp8_block")), ("B200", (8192, 256, 4096, 128, 8, 16, "bf16")),
               ("B200", (8192, 256, 3072, 384, 8, 4, "fp8_block")), ("H100", (16384, 160, 6144, 320, 8, 8, "bf16")),
               ("H200", (16384, 160, 6144, 320, 8, 8, "bf16")), ("H100", (16384, 256, 7168, 256, 8, 8, "bf16"))]
    tuned = [("H100", (16384, 128, 4096, 192, 8, 8, "bf16")), ("H200", (16384, 128, 4096, 192, 8, 8, "bf16")),
             ("H100", (16384, 8, 4096, 1792, 2, 8, "bf16"))]
    for device, shape in untuned + tuned:
        record = fused_moe_record(*shape)
        model = CostModel(DEVICES[device], "sglang", moe_kernel="triton")
        measured = model.price(record, PREFILL)
        assert measured.source == "measured"
        kernel = model.stream_kernel(record, cost_of(record))  # sglang's own figure where the device has one
        assert kernel == ("triton:sglang" if device in ("H100", "H200") else "triton")
        family = kernel_time(cost_of(record), DEVICES[device], kernel)
        stream = DEVICES[device].efficiency.streams[kernel]
        assert family.bound == "compute" and family.seconds == pytest.approx(
            cost_of(record).flops / (DEVICES[device].peak("bf16") * stream.grouped_share(shape[3], shape[6]))
            + stream.grouped_fixed_s)
        if (device, shape) in untuned:
            assert family.seconds == pytest.approx(measured.seconds, rel=0.3)
            assert kernel_time(cost_of(record), DEVICES[device]).seconds < 0.7 * measured.seconds  # the generic one
        else:
            assert 1.5 < family.seconds / measured.seconds < 2.6


@pytest.mark.parametrize("device", ["H100", "H200"])
def test_each_engine_prices_its_own_triton_tiles_where_both_have_tables(device) -> None:
    """sglang's and vLLM's Triton MoE tile configurations differ: on Hopper sglang's bf16 experts
    reach about half of its FP8-block share once compute-bound, vLLM's about all of it. Each engine
    takes its own figure (``triton:<engine>``), and a bf16 MoE no table covers costs sglang more."""
    from infercast.analytic import kernel_time

    record = fused_moe_record(16384, 160, 5120, 192, 8, 8, "bf16")  # GLM-4.6's experts at MoE TP8: no table
    prices = {}
    for engine in ("sglang", "vllm"):
        model = CostModel(DEVICES[device], engine)
        assert model.stream_kernel(record, cost_of(record)) == f"triton:{engine}"
        priced = model.price(record, PREFILL)
        assert priced.source == "analytic"
        own = kernel_time(cost_of(record), DEVICES[device], f"triton:{engine}")
        assert priced.seconds == pytest.approx(own.seconds)
        prices[engine] = priced.seconds
    assert prices["sglang"] > 1.3 * prices["vllm"]
    trtllm = CostModel(DEVICES[device], "trtllm")  # no Triton MoE: not this figure
    assert not (trtllm.stream_kernel(record, cost_of(record)) or "").startswith("triton")


def test_a_moe_tp_the_tables_lack_is_read_from_the_nearest_one_scaled_by_the_same_kernels_measured_ratio() -> None:
    """vLLM's H200 table times MiniMax-M2.5's FP8-block experts (256 of 1,536, top-8, 3,072 hidden)
    on Triton at MoE TP 1, 2 and 4. At MoE TP8 the fused MoE is that shape's TP4 row times the
    ratio sglang's tables measure for its Triton kernel (vLLM's, shared) between TP8 and TP4 at
    the same tokens, both rows from one sglang version; labelled extrapolated, naming that
    version. The analytic ratio it replaced made TP8 0.58-0.61 of TP4 at 8-1,024 tokens where
    sglang measures 0.69-0.76 (``benchmarks/moe_tp_transfer.py``)."""
    from infercast.kernels import sibling_tables

    model = CostModel(DEVICES["H200"], "vllm")
    key = ("fp8_block", "triton", "balanced", 8, 256, 3072, 1536)
    assert model.tables.table("moe").grid(key + (8,)) is None
    version, sglang = next((v, t) for v, t in sibling_tables("moe", "h200_sxm", "sglang")
                           if t.origin(key + (8,)) == t.origin(key + (4,)) == f"sglang {v}")
    for tokens in (8, 1024):
        at8 = model.price(fused_moe_record(tokens, 256, 3072, 192, 8, 8, "fp8_block"), PREFILL)
        at4 = model.price(fused_moe_record(tokens, 256, 3072, 384, 8, 4, "fp8_block"), PREFILL)
        assert at4.source in ("measured", "interpolated") and "MoE TP" not in at4.origin
        measured = {tp: dict((c[1], us) for c, us in sglang.grid(key + (tp,)).points() if c[0] == 1) for tp in (4, 8)}
        ratio = measured[8][tokens] / measured[4][tokens]
        assert 0.65 < ratio < 0.8
        assert at8.source == EXTRAPOLATED
        assert f"its MoE TP 4 row x{ratio:.2f} for MoE TP 8, the ratio sglang {version} measures" in at8.origin
        assert at8.seconds == pytest.approx(at4.seconds * ratio)


def test_vllms_fused_experts_rows_are_read_as_its_triton_kernel() -> None:
    """aiconfigurator's vLLM collector labels vLLM's Triton ``fused_experts`` rows ``vllm_fused_moe``
    (its 0.19.0 and 0.22.0 tables): they are the engine's ``triton`` rows, which a launch that
    names its kernel reads (B200's Qwen3-235B bf16 experts at MoE TP8 are there alone)."""
    model = CostModel(DEVICES["B200"], "vllm", moe_kernel="triton")
    rest = ("balanced", 8, 128, 4096, 1536, 8)
    assert model.engine_kernel("bf16", rest, ("triton",), only=True) == "triton"
    priced = model.price(fused_moe_record(4096, 128, 4096, 192, 8, 8, "bf16"), PREFILL)
    assert priced.source == "measured" and priced.origin.startswith("moe vllm 0.2")


def test_vllm_runs_block_fp8_experts_on_flashinfers_trtllm_kernel_on_blackwell_and_triton_on_hopper() -> None:
    """vLLM's FP8 MoE backend order (oracle/fp8.py) puts FlashInfer's TRT-LLM kernels first on
    sm_100 and Triton first for block FP8 under TP on Hopper. B200's vLLM tables time MiniMax-M2.5's
    FP8-block experts with both (Triton in 0.19.0's rows, TRT-LLM in 0.24.0's): B200 reads the
    TRT-LLM rows, H200 the Triton ones."""
    rest = ("balanced", 8, 256, 3072, 1536, 4)
    b200, h200 = CostModel(DEVICES["B200"], "vllm"), CostModel(DEVICES["H200"], "vllm")
    assert b200.tables.table("moe").grid(("fp8_block", "triton", *rest)) is not None
    assert b200.engine_kernel("fp8_block", rest) == "trtllm"
    assert h200.engine_kernel("fp8_block", rest) == "triton"
    assert b200.engine.moe_kernels["bf16"] == h200.engine.moe_kernels["bf16"] == ("triton",)


def test_a_shared_kernel_the_other_engine_does_not_time_at_both_moe_tps_keeps_the_analytic_ratio(monkeypatch) -> None:
    """Where the other engine's tables lack the pair of rows, or hold them from two versions (each
    tunes its tiles apart), the analytic ratio carries the row, and the origin names no other
    engine; from one version of its own, that version's ratio."""
    from infercast import costmodel
    from infercast.kernels import KernelTable

    key = ("fp8_block", "triton", "balanced", 8, 256, 3072, 1536)
    tokens = (1.0, 64.0, 1024.0)

    def table(origins: dict[int, str]) -> KernelTable:
        built = KernelTable("moe")
        for tp, origin in origins.items():
            built.add_rows([(*key, tp, 1, t, 100.0 * t ** 0.5 / (1 if tp == 4 else 2)) for t in tokens], origin)
        return built

    def priced(versions: list[tuple[str, KernelTable]]):
        monkeypatch.setattr("infercast.kernels.sibling_tables", lambda kind, system, engine: iter(versions))
        costmodel._sibling_rows.cache_clear()
        return CostModel(DEVICES["H200"], "vllm").price(fused_moe_record(64, 256, 3072, 192, 8, 8, "fp8_block"),
                                                        PREFILL)

    try:
        analytic = priced([])
        assert "its MoE TP 4 row x" in analytic.origin and "measures" not in analytic.origin
        mixed = table({4: "sglang 9.9", 8: "sglang 9.8"})  # TP8 filled from another version
        assert priced([("9.9", mixed)]).seconds == pytest.approx(analytic.seconds)
        own = priced([("9.9", table({4: "sglang 9.9", 8: "sglang 9.9"}))])
        assert "x0.50 for MoE TP 8, the ratio sglang 9.9 measures" in own.origin
    finally:
        costmodel._sibling_rows.cache_clear()


def test_mxfp4_experts_take_no_other_engines_ratio() -> None:
    """Both engines label their MXFP4 MoE ``triton``, but vLLM's rows time OpenAI's triton_kernels
    and sglang's its own fused MoE: no ratio is shared for that dtype."""
    from infercast.costmodel import SHARED_MOE_KERNELS

    assert ("triton", "fp8_block") in SHARED_MOE_KERNELS and ("marlin", "w4a16") in SHARED_MOE_KERNELS
    assert not any(dtype.startswith("mxfp4") for _, dtype in SHARED_MOE_KERNELS)


def test_an_analytic_moe_takes_the_figure_of_the_first_kernel_in_the_engines_list_that_has_one() -> None:
    """vLLM on B200 lists FlashInfer's TRT-LLM kernel first for FP8 experts, for which B200 has no
    streaming figure: an analytically priced FP8-block MoE takes the Triton figure further down the
    list (the generic figure, five small kernels, was about 30% fast against the TRT-LLM rows)."""
    from infercast.analytic import kernel_time

    record = fused_moe_record(16, 160, 5120, 192, 8, 8, "fp8_block")  # GLM-4.6's experts: no table row
    model = CostModel(DEVICES["B200"], "vllm", measured=False)
    assert model.engine.moe_kernels["fp8_block"][0] == "trtllm"
    kernel = model.stream_kernel(record, cost_of(record))
    assert kernel is not None and kernel.startswith("triton")
    assert model.price(record, PREFILL).seconds == pytest.approx(
        kernel_time(cost_of(record), DEVICES["B200"], kernel).seconds)
    assert model.price(record, PREFILL).seconds > 1.2 * kernel_time(cost_of(record), DEVICES["B200"]).seconds


def test_a_moe_kernel_no_other_engine_shares_is_carried_to_another_moe_tp_by_the_analytic_ratio() -> None:
    """TensorRT-LLM's H200 table times MiniMax-M2.5's FP8-block experts on its CUTLASS kernel at
    MoE TP 1, 2 and 4; no other engine's tables time that kernel, so TP8 is the TP4 row times the
    analytic model's ratio (:func:`infercast.costmodel.moe_shape`)."""
    from infercast.costmodel import moe_shape

    model = CostModel(DEVICES["H200"], "trtllm")
    at8 = model.price(fused_moe_record(1024, 256, 3072, 192, 8, 8, "fp8_block"), PREFILL)
    at4 = model.price(fused_moe_record(1024, 256, 3072, 384, 8, 4, "fp8_block"), PREFILL)
    scale = moe_shape(DEVICES["H200"], "fp8_block", 8, 256, 3072, 1536, 8)((1, 1024)) / moe_shape(
        DEVICES["H200"], "fp8_block", 8, 256, 3072, 1536, 4)((1, 1024))
    assert at8.source == EXTRAPOLATED and at8.origin.endswith(f"its MoE TP 4 row x{scale:.2f} for MoE TP 8")
    assert at8.seconds == pytest.approx(at4.seconds * scale)


def test_the_nearest_moe_tp_is_one_power_of_two_away_at_ep_1_and_a_calibration_files_first(tmp_path) -> None:
    """Which row a MoE TP the tables lack reads. Only a MoE TP twice or half as large: further off
    the scaled row is worse than the analytic price at a few tokens, so TP16 (rows at 1-4) stays
    analytic. Only rows measured at EP 1: FlashInfer's CUTLASS rows of the shape time TP1 at EP
    2-256 alone, so TP2 launched with that kernel is analytic, not their EP rows read at EP 1. Two
    as near (TP4 in the tables, TP16 in a calibration file, for TP8): the calibration file's."""
    h200 = DEVICES["H200"]
    tables = CostModel(h200, "vllm")
    assert tables.price(fused_moe_record(4096, 256, 3072, 96, 8, 16, "fp8_block"), PREFILL).source == "analytic"
    cutlass = CostModel(h200, "vllm", moe_kernel="flashinfer_cutlass")
    assert cutlass.tables.table("moe").grid(("fp8_block", "flashinfer_cutlass", "balanced", 8, 256, 3072, 1536, 1))
    assert cutlass.price(fused_moe_record(4096, 256, 3072, 768, 8, 2, "fp8_block"), PREFILL).source == "analytic"
    rows = [("fp8_block", "triton", "balanced", 8, 256, 3072, 1536, 16, 1, tokens, 100.0 * tokens ** 0.5)
            for tokens in (1, 64, 4096)]
    path = write_calibration(tmp_path / "cal.json", {"moe": rows}, device="H200", source="a test")
    calibrated = CostModel(h200, "vllm", calibration=load_calibration(path, h200))
    record = fused_moe_record(4096, 256, 3072, 192, 8, 8, "fp8_block")
    from_file, from_tables = calibrated.price(record, PREFILL), tables.price(record, PREFILL)
    assert "calibration" in from_file.origin and "its MoE TP 16 row" in from_file.origin
    assert "moe vllm" in from_tables.origin and "its MoE TP 4 row" in from_tables.origin
    assert from_file.source == from_tables.source == EXTRAPOLATED


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_moe_tp_held_out_of_the_tables_is_predicted_from_the_nearest_within_ten_percent(engine: str) -> None:
    """Leave one out over the H200 tables: every balanced-routing expert shape timed at two or more
    MoE TPs (EP 1), each TP predicted from the nearest other one by the analytic ratio
    (:func:`infercast.costmodel.moe_shape`). At 1,024 tokens and more the median |error| is under
    10%, and under what scaling the time by the TPs' ratio alone gives."""
    import collections
    import statistics

    from infercast.costmodel import moe_shape

    device = DEVICES["H200"]
    moe = aic.load("moe", device.kernel_tables, engine, aic.default_version(device.kernel_tables, engine))
    shapes: dict[tuple, dict[int, dict[float, float]]] = collections.defaultdict(dict)
    for key in moe.keys():
        if key[2] == "balanced":
            points = {tokens: us for (ep, tokens), us in moe.grid(key).points() if ep == 1 and tokens >= 1024}
            if points:
                shapes[key[:-1]][key[-1]] = points
    scaled, proportional = [], []
    for (dtype, _, _, top_k, experts, hidden, inter), by_tp in shapes.items():
        for tp, points in by_tp.items():
            others = [other for other in by_tp if other != tp]
            if not others:
                continue
            near = min(others, key=lambda other: (abs(math.log2(other / tp)), other))
            for tokens, us in points.items():
                if tokens in by_tp[near]:
                    ratio = (moe_shape(device, dtype, top_k, experts, hidden, inter, tp)((1, tokens))
                             / moe_shape(device, dtype, top_k, experts, hidden, inter, near)((1, tokens)))
                    scaled.append(abs(by_tp[near][tokens] * ratio / us - 1))
                    proportional.append(abs(by_tp[near][tokens] * near / tp / us - 1))
    assert len(scaled) > 1000
    assert statistics.median(scaled) < 0.10 and statistics.median(scaled) < statistics.median(proportional)


def fused_mxfp4_moe(tokens: int, experts: int, hidden: int, inter: int, top_k: int, moe_tp: int = 1) -> OpRecord:
    """A fused MXFP4 MoE (gpt-oss's checkpoint format: FP4 weights two to a byte, one 8-bit scale
    per 32) over every expert on one GPU, ``inter`` wide on it, balanced routing."""
    from infercast import routing

    x, u8 = TensorSpec((tokens, hidden), torch.bfloat16), torch.uint8
    named = dict(x=x, w13=TensorSpec((experts, 2 * inter, hidden // 2), u8, "weight"),
                 w13_scale=TensorSpec((experts, 2 * inter, hidden // 32), u8, "weight"),
                 w2=TensorSpec((experts, hidden, inter // 2), u8, "weight"),
                 w2_scale=TensorSpec((experts, hidden, inter // 32), u8, "weight"), tokens=tokens, top_k=top_k,
                 num_experts=experts, local_experts=experts, routed_rows=float(tokens * top_k),
                 active_experts=float(routing.expected_active_experts(experts, top_k, tokens, experts)),
                 straggler=1.0, moe_tp=moe_tp, dtype="mxfp4", distribution="balanced", dispatch="tp")
    return OpRecord("infercast::fused_moe", tuple(named.values()), (x,), "mlp", 0, named=named)


PREFILL = Phase(graph=False, decode=False, scale_up_domain=8)


def test_a_launched_moe_kernel_is_priced_from_its_own_rows_or_its_familys_figure() -> None:
    """``--moe-kernel``: vLLM runs gpt-oss's MXFP4 experts on Hopper with OpenAI's Triton kernels
    unless launched with VLLM_MXFP4_USE_MARLIN=1 (``get_mxfp4_backend``), and its H200 table
    times only Triton for gpt-oss-120b's experts. Launched with Marlin, the MoE is priced at
    Marlin's own figure (its fused MoE reaches 0.278 x w / (w + 123) of the bf16 peak once
    compute-bound, 0.75 of that for MXFP4 experts), never from the Triton rows; at 8,192 tokens
    that is about 2.8 times the Triton kernel's time (0.20 of the peak against the table's 0.57)."""
    record = fused_mxfp4_moe(8192, 128, 2880, 2880, 4)
    default = CostModel(DEVICES["H200"], "vllm").price(record, PREFILL)
    marlin = CostModel(DEVICES["H200"], "vllm", moe_kernel="marlin").price(record, PREFILL)
    assert default.source == "measured" and default.origin.startswith("moe vllm")
    assert marlin.source == "analytic" and "marlin (--moe-kernel)" in marlin.origin and "triton" in marlin.origin
    assert marlin.seconds == kernel_time(cost_of(record), DEVICES["H200"], "marlin").seconds
    assert 2.5 < marlin.seconds / default.seconds < 3.2
    # the engine's own kernel, named: the same rows as by default
    named = CostModel(DEVICES["H200"], "vllm", moe_kernel="triton").price(record, PREFILL)
    assert (named.seconds, named.source) == (default.seconds, default.source)
    # a kernel the tables time for the shape is read from its rows: Kimi-K2.5's INT4 experts on Marlin
    kimi = fused_int4_moe(8192, 384, 7168, 2048, 8)
    assert CostModel(DEVICES["H200"], "vllm", moe_kernel="marlin").price(kimi, PREFILL).source in ("measured",
                                                                                                   "interpolated")
    # and a kernel they do not time for it is not priced from another kernel's rows
    other = CostModel(DEVICES["H200"], "vllm", moe_kernel="triton").price(kimi, PREFILL)
    assert other.source == "analytic" and "measured with marlin" in other.origin
    assert "(fused MoE: triton only)" in CostModel(DEVICES["H200"], "vllm", moe_kernel="triton").describe()


def test_a_launched_moe_kernel_behind_deepep_is_priced_as_that_kernel() -> None:
    """Behind DeepEP the tables time sglang's DeepEP MoE (DeepGEMM's grouped GEMMs): auto and
    --moe-kernel deepgemm read those rows, another named kernel does not."""
    record = fused_moe_record(64, 256, 7168, 2048, 8, 1, "fp8_block")
    record.named.update(local_experts=32, dispatch="all_to_all", routed_rows=64 * 8 * 8 / 8.0)
    prices = {kernel: CostModel(DEVICES["H200"], "sglang", moe_kernel=kernel).price(record, DECODE)
              for kernel in ("auto", "deepgemm", "triton")}
    assert prices["auto"].origin.startswith("moe sglang") and prices["deepgemm"] == prices["auto"]
    assert prices["triton"].source == "analytic" and "triton (--moe-kernel)" in prices["triton"].origin


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("device", ["H100", "H200"])
def test_marlins_moe_figures_price_the_marlin_mxfp4_rows_once_compute_bound(engine: str, device: str) -> None:
    """vLLM 0.24.0's and sglang 0.5.14's tables time their Marlin MXFP4 MoE for one expert shape
    (3,584 hidden, 3,072 intermediate, 896 experts, top-16) at MoE TP 1-16 and 1-16,384 tokens.
    Marlin's figures, fitted to sglang's INT4 Marlin tables and scaled by 0.75 for MXFP4 once
    compute-bound (the ratio of the two dtypes' fitted shares), price the rows of 4,096 tokens and
    more at their measured time (median within 10%; at 1.33 times the INT4 share they were 0.75
    of it); the FP4 bytes and groups of 32 are counted, and no row is off by more than the
    figures' known spread (fewer tokens stream at INT4's figures, up to about 0.7 of their time)."""
    import statistics

    model = CostModel(DEVICES[device], engine)
    key = ("mxfp4_w4a16", "marlin", "balanced", 16, 896, 3584, 3072)
    compute_bound, every = [], []
    for moe_tp in (1, 2, 4, 8, 16):
        for (ep, tokens), us in model.tables.table("moe").grid(key + (moe_tp,)).points():
            if ep == 1:
                record = fused_mxfp4_moe(int(tokens), 896, 3584, 3072 // moe_tp, 16, moe_tp)
                ratio = kernel_time(cost_of(record), DEVICES[device], "marlin").seconds * 1e6 / us
                every.append(ratio)
                if tokens >= 4096:
                    compute_bound.append(ratio)
    assert len(compute_bound) >= 20 and len(every) >= 100
    assert statistics.median(compute_bound) == pytest.approx(1.0, abs=0.1)
    assert 0.1 < min(every) and max(every) < 1.25


def test_a_launched_moe_kernel_without_a_figure_for_the_experts_is_noted() -> None:
    """Marlin has no table row and no figure of its own for DeepSeek-V3's FP8-block experts: the
    fused MoE falls back to the generic figures and the result says so; for gpt-oss's MXFP4
    experts Marlin's figures apply and nothing is noted."""
    from infercast.simulate import UserInput, simulate

    fp8 = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, decode=True,
                             moe_kernel="marlin"))
    assert any(note.startswith("--moe-kernel marlin: no table and no figure of its own for fp8_block experts")
               for note in fp8.notes)
    mxfp4 = simulate(UserInput(model="openai/gpt-oss-20b", device="H100", num_devices=1, decode=True, engine="vllm",
                               moe_kernel="marlin"))
    moe = next(op for op in mxfp4.ops if op.name.startswith("fused_moe"))
    assert moe.origin.endswith("marlin stream") and not any("no figure of its own" in n for n in mxfp4.notes)


def test_an_unknown_moe_kernel_is_refused_with_the_valid_ones() -> None:
    from infercast.request import MOE_KERNELS, UserInput, check

    with pytest.raises(InfercastError, match="unknown --moe-kernel 'cutlas'; valid: auto, marlin, triton"):
        CostModel(DEVICES["H200"], "vllm", moe_kernel="cutlas")
    with pytest.raises(InfercastError, match="moe_kernel is 'machete'; valid: auto, marlin"):
        check(UserInput(moe_kernel="machete"))
    assert set(MOE_KERNELS) - {"auto"} == set(aic.MOE_KERNELS)


@pytest.mark.parametrize("tokens, measured_us", [(16, 1395.0), (64, 2973.0)])
def test_the_h20s_marlin_moe_streams_at_its_sms_limit_from_the_h100_and_h200_tables(tokens, measured_us) -> None:
    """vLLM's fused Marlin MoE on an H20 (flagos-ai/FlagGems PR 3609), DeepSeek-V3's expert shape
    at 2 and 4 rows an expert: stream-bound at 78 SMs x 22.71 GB/s, a rate fitted to the H100 and
    H200 tables only; within 10% (18% and 17% too fast at a share of the H20's HBM)."""
    priced = CostModel(DEVICES["H20"], "vllm").price(fused_int4_moe(tokens, 256, 7168, 2048, 8), DECODE)
    assert priced.source == "analytic" and priced.bound == "memory"
    assert priced.seconds * 1e6 == pytest.approx(measured_us, rel=0.10)


@pytest.mark.parametrize("groups, rows, n, k, measured_us", [(16, 32, 4096, 7168, 257.0), (16, 32, 7168, 2048, 127.0),
                                                          (32, 64, 4096, 7168, 485.0)])
def test_the_h20s_fp8_grouped_gemm_pads_each_experts_rows_to_a_wgmma(groups, rows, n, k, measured_us) -> None:
    """DeepGEMM's FP8 grouped GEMM on an H20 (deepseek-ai/DeepGEMM PR 192, before swapAB, and issue
    114): compute-bound at the H20's capped FP8 peak with every expert's rows padded to 64, so 32
    rows cost what 64 do; within 10% (the efficiency was not fitted to them)."""
    from infercast.cost import OpCost

    cost = OpCost(flops=2.0 * groups * rows * n * k, compute_dtype="fp8", bytes=groups * (n * k + rows * (k + 2 * n)),
                  kind="gemm", kernel_dtype="fp8_block", gemm_mnk=(rows, n, k), gemm_count=groups, grouped=True)
    timed = kernel_time(cost, DEVICES["H20"])
    assert timed.bound == "compute"
    assert timed.seconds * 1e6 == pytest.approx(measured_us, rel=0.10)


def test_an_int4_moe_under_expert_parallelism_is_priced_from_the_marlin_tables_by_ep_size() -> None:
    """sglang runs INT4 experts through its standard dispatcher, fused_marlin_moe over the local
    experts, which the Marlin tables measure by expert-parallel size; vLLM runs the same kernel
    behind DeepEP, for which no INT4 DeepEP kernel is measured."""
    from infercast.simulate import UserInput, simulate

    layout = dict(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8, tp_size=1, dp_size=8, ep_size=8,
                  num_queries=64 * 8, decode=True, context_length=2000)
    for engine in ("sglang", "vllm"):
        result = simulate(UserInput(engine=engine, **layout))
        moe = next(op for op in result.ops if op.name.startswith("fused_moe"))
        assert moe.source in ("measured", "interpolated") and moe.origin.startswith(f"moe {engine}")
        assert any(op.name.startswith("all_to_all") for op in result.ops) is (engine == "vllm")
    # only a kernel the engine keeps over its local experts, and only at a measured EP size
    h200 = CostModel(DEVICES["H200"], "sglang")
    marlin = ("w4a16", "marlin", "balanced", 8, 384, 7168, 2048, 1)
    assert h200.measured_at("moe", marlin, 0, 8) and not h200.measured_at("moe", marlin, 0, 512)
    fp8 = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, tp_size=1, dp_size=8,
                             ep_size=8, num_queries=64 * 8, decode=True, context_length=2000, engine="vllm"))
    assert next(op for op in fp8.ops if op.name.startswith("fused_moe")).source == "analytic"  # vLLM's triton: EP 1 only


def test_expert_parallel_decode_at_one_request_waits_for_its_busiest_rank() -> None:
    """NVIDIA/TensorRT-LLM issue 5929: DeepSeek-R1 FP8 on 8 x H200, trtllm-serve 0.21.0rc2 under
    LLMPerf at one request (1,600-token prompts, 600 out), inter-token latency p50 13.78 ms with
    the experts over TP8, 10.81 ms at EP4 and 11.00 ms at EP8. LLMPerf divides each request's time
    by a Llama tokenizer's count of its output, which scales all three alike, so the ratios are
    compared. The tables time one rank's even share (one expert at EP8); one token's eight picks
    land on four of DeepSeek's eight expert groups, one group a rank, and the step waits for the
    rank holding the most. Read as even, the ratios came out 0.72 and 0.68 (8% and 15% low)."""
    from infercast.simulate import UserInput, simulate

    def itl(ep: int) -> float:
        return simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device="H200", num_devices=8, ep_size=ep,
                                  engine="trtllm", decode=True, context_length=1900)).tpot_ms

    tp8 = itl(1)
    assert itl(4) / tp8 == pytest.approx(10.81 / 13.78, rel=0.04)
    assert itl(8) / tp8 == pytest.approx(11.00 / 13.78, rel=0.04)
    # the MoE row says what it is priced at
    ep8 = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device="H200", num_devices=8, ep_size=8, engine="trtllm",
                             decode=True, context_length=1900))
    moe = next(op for op in ep8.ops if op.name.startswith("fused_moe"))
    assert moe.origin.endswith("; the busiest EP rank: x3.16 the mean rank's rows")


def test_converted_tables_are_cached_and_a_bad_cache_file_is_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INFERCAST_CACHE_DIR", str(tmp_path))
    version = aic.default_version("h100_sxm", "sglang")
    first = aic.load("mla_bmm", "h100_sxm", "sglang", version)
    (cached,) = (tmp_path / "kernel-tables").glob("h100_sxm-sglang-*-mla_bmm-*.pickle")
    again = aic.load("mla_bmm", "h100_sxm", "sglang", version)
    key = first.keys()[0]
    assert dict(again.grid(key).points()) == dict(first.grid(key).points()) and again.origin(key) == first.origin(key)
    cached.write_bytes(b"not a pickle")
    rebuilt = aic.load("mla_bmm", "h100_sxm", "sglang", version)
    assert dict(rebuilt.grid(key).points()) == dict(first.grid(key).points())
    monkeypatch.setenv("INFERCAST_NO_CACHE", "1")
    assert aic._cache_path("mla_bmm", "h100_sxm", "sglang", version, {}, [(cached, "", None, (), False)]) is None


def test_an_all_reduce_table_without_launch_modes_serves_eager_and_graph_steps() -> None:
    """TensorRT-LLM's table times the kernel alone (no graph/eager split): an eager prefill's
    all-reduce is looked up in it, not priced analytically."""
    split = aic._custom_all_reduce({"kernel_source": ["x_graph", "x_eager"], "num_gpus": [8, 8],
                                    "message_size": [1024, 1024], "latency": [0.004, 0.030]}, {})
    assert split == [("graph", 8, 2048, 4.0), ("eager", 8, 2048, 30.0)]
    single = aic._custom_all_reduce({"kernel_source": ["TRTLLM"], "num_gpus": [8], "message_size": [1024],
                                     "latency": [0.01]}, {})
    assert single == [("graph", 8, 2048, 10.0), ("eager", 8, 2048, 10.0)]
    from infercast.simulate import UserInput, simulate

    result = simulate(UserInput(model="meta-llama/Llama-3.1-70B-Instruct", device="H100", num_devices=8,
                                query_length=2048, quantize_linear_action="FP8", engine="trtllm"))
    rows = [r for r in result.ops if r.name.startswith("all_reduce (layers")]
    assert rows and all(r.source == "measured" and "trtllm" in r.origin for r in rows)


def spread_moe_table(experts: int, top_k: int, fixed_us: float, per_expert_us: float,
                     per_row_us: float = 0.0) -> KernelTable:
    """A ``moe`` table shaped as aiconfigurator's collector measures it: T tokens spread over
    min(E, T x k) experts, each read once, and T x k rows computed, at every token count up to 512."""
    table = KernelTable("moe")
    rows = [("w4a16", "marlin", distribution, top_k, experts, 7168, 2048, 1, ep, tokens,
             fixed_us + per_expert_us * min(experts, tokens * top_k) + per_row_us * tokens * top_k)
            for distribution in ("balanced", "power_law_1.2") for ep in (1, 8) for tokens in range(1, 513)]
    table.add_rows(rows, "test")
    return table


@pytest.mark.parametrize("tokens", [2, 16, 35, 48, 64, 200])
def test_a_table_measured_with_spread_routing_is_read_for_tokens_routed_at_random(tokens) -> None:
    """The collector's balanced routing touches every expert it can; tokens picking top-k at
    random touch E(1 - (1 - k/E)^T) of them. A table that pays per touched expert then answers
    for that many, below and above the E/k = 48 tokens where the collector's spread saturates."""
    from infercast import routing

    experts, top_k, key = 384, 8, ("w4a16", "marlin", "balanced", 8, 384, 7168, 2048, 1)
    table = spread_moe_table(experts, top_k, 20.0, 0.8, per_row_us=0.05)
    found = table.query(key, (1, tokens), LINEAR)
    read = aic.random_routing(found, table, key, (1, tokens), LINEAR)
    touched = routing.expected_active_experts(experts, top_k, tokens, experts)
    assert touched < min(experts, tokens * top_k)
    # the experts random routing reads, and every one of the T x k rows: the rows are not routing's to change
    assert read.value == pytest.approx(20.0 + 0.8 * touched + 0.05 * tokens * top_k, rel=2e-3)
    assert read.value < found.value and read.quality == INTERPOLATED


def test_spread_routing_is_kept_where_it_matches_or_where_the_tables_rank_share_is_unknown() -> None:
    """One token touches its top-k experts under any routing; the power-law tables were not
    spread; under EP the collector's spread gives each rank an uneven share, so those answers
    stay as measured."""
    table = spread_moe_table(384, 8, 20.0, 0.8)
    balanced = ("w4a16", "marlin", "balanced", 8, 384, 7168, 2048, 1)
    skewed = ("w4a16", "marlin", "power_law_1.2", 8, 384, 7168, 2048, 1)
    for key, coords in ((balanced, (1, 1)), (skewed, (1, 64)), (balanced, (8, 64))):
        found = table.query(key, coords, LINEAR)
        assert aic.random_routing(found, table, key, coords, LINEAR) == found


def test_a_noisy_table_is_never_read_above_its_own_answer_and_calibration_files_are_read_as_written(tmp_path) -> None:
    """A slow outlier at the token count random routing maps to must not raise the answer; a
    user's calibration rows carry their own routing and are not corrected."""
    key = ("w4a16", "marlin", "balanced", 8, 384, 7168, 2048, 1)
    table = KernelTable("moe")
    table.add_rows([(*key, 1, t, 900.0 if t == 16 else 20.0 + 0.8 * min(384, 8 * t)) for t in (1, 8, 16, 32, 48, 64)],
                   "test")
    found = table.query(key, (1, 20), LINEAR)
    assert aic.random_routing(found, table, key, (1, 20), LINEAR).value == found.value
    path = write_calibration(tmp_path / "cal.json", {"moe": [(*key[:-1], 8, 1, t, 20.0 + 0.8 * min(384, 8 * t))
                                                             for t in (1, 16, 32, 48, 64, 128)]}, device="H200")
    calibrated = CostModel(DEVICES["H200"], "sglang", calibration=load_calibration(path, DEVICES["H200"]))
    priced = calibrated.price(fused_int4_moe(64, 384, 7168, 2048 // 8, 8, moe_tp=8), DECODE)
    assert "calibration" in priced.origin and priced.seconds == pytest.approx(20e-6 + 0.8e-6 * 384)


def test_kimis_decode_moe_reads_the_experts_random_routing_touches() -> None:
    """Kimi-K2.5 on 8 x H200 at 64 decode tokens: sglang's Marlin table stops growing at 48
    tokens (every one of the 384 experts read); random routing touches 74% of them, and the
    priced MoE falls by the table's own cost of the experts left out."""
    model = CostModel(DEVICES["H200"], "sglang")
    priced = model.price(fused_int4_moe(64, 384, 7168, 2048 // 8, 8, moe_tp=8), DECODE)
    table = model.tables.table("moe")
    key = ("w4a16", "marlin", "balanced", 8, 384, 7168, 2048, 8)
    at = lambda t: table.query(key, (1, t), LINEAR).value  # noqa: E731
    assert at(64) == pytest.approx(at(48), rel=0.03)  # saturated at E/k tokens
    same = 48 * (1 - (1 - 8 / 384) ** 64)
    assert same == pytest.approx(35.5, abs=0.1)
    rows = max(0.0, (at(96) - at(48)) / 48)  # the table's cost of more rows once every expert is read
    assert priced.seconds * 1e6 == pytest.approx(at(64) - at(48) + at(same) + rows * (48 - same), rel=1e-6)
    assert 0.70 < priced.seconds * 1e6 / at(64) < 0.85


def test_the_fp8_pool_cast_prices_issue_35291s_kernel_from_the_tables_rate() -> None:
    """sglang issue 35291 timed the cast of a 131,072-slot FP8 MLA pool at 225.79 us a layer on an
    H200; the rate comes from aiconfigurator's tables (FP8 minus bf16 MLA decode), not from it."""
    cast = OpRecord("infercast::kv_pool_cast", (), (), "layers.0.self_attn", 0,
                    named={"pool_tokens": 131072, "width": 576})
    h200 = CostModel(DEVICES["H200"], "sglang").price(cast, DECODE)
    assert h200.seconds == pytest.approx(225.79e-6, rel=0.06)
    # not HBM-bound: the H100 casts at about the H200's rate, the H20's fewer SMs cast slower
    h100 = CostModel(DEVICES["H100"], "sglang").price(cast, DECODE)
    assert h100.seconds == pytest.approx(h200.seconds, rel=0.05)
    h20 = CostModel(DEVICES["H20"], "sglang").price(cast, DECODE)
    assert h20.seconds > 1.5 * h100.seconds


def test_sglang_on_hopper_casts_the_whole_fp8_mla_pool_in_every_layer() -> None:
    from infercast.simulate import UserInput, simulate

    def run(**fields):
        user = dict(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, decode=True, num_queries=32,
                    context_length=4096)
        return simulate(UserInput(**{**user, **fields}))

    def rows(result, name):
        return [op for op in result.ops if op.name.startswith(name)]

    bf16, fp8 = run(), run(kv_cache_dtype="fp8")
    cast = rows(fp8, "kv_pool_cast")
    assert len(cast) == 1 and cast[0].count == 61 and not rows(bf16, "kv_pool_cast")
    # the pool is what the weights leave, at 576 bytes a token a layer
    memory = fp8.memory_gib
    pool = math.floor((memory["capacity"] - memory["weights"]) * 2**30 / (61 * 576))
    assert f"{pool:,} slots" in cast[0].origin
    assert cast[0].total_ms / 61 == pytest.approx(pool * DEVICES["H200"].efficiency.fp8_cast_s_per_element * 576e3,
                                                  rel=0.01)
    # after the cast the attention reads bf16: the bf16 table rows, not the FP8 rows (which hold a cast of their own)
    assert rows(fp8, "mla_attention")[0].total_ms == pytest.approx(rows(bf16, "mla_attention")[0].total_ms)
    assert any("FP8 KV pool cast" in note for note in fp8.notes)
    # four layers stand for the model's 61: the pool is what the whole model's weights leave
    short = run(kv_cache_dtype="fp8", num_hidden_layers_override=4)
    assert f"{pool:,} slots" in rows(short, "kv_pool_cast")[0].origin
    # the issue's own server: a pool capped at 131,072 slots casts at its measured 225.79 us a layer
    capped = run(kv_cache_dtype="fp8", max_total_tokens=131072)
    (row,) = rows(capped, "kv_pool_cast")
    assert "131,072 slots" in row.origin and row.total_ms / 61 == pytest.approx(0.22579, rel=0.06)
    assert any("131,072 slots a rank, --max-total-tokens" in note for note in capped.notes)
    # a smaller share of the device leaves a smaller pool to cast
    tight = run(kv_cache_dtype="fp8", mem_fraction_static=0.8)
    smaller = math.floor((0.8 * DEVICES["H200"].memory_bytes - memory["weights"] * 2**30) / (61 * 576))
    assert f"{smaller:,} slots" in rows(tight, "kv_pool_cast")[0].origin
    # Blackwell's trtllm_mla and vLLM read FP8 as it is
    for other in (run(kv_cache_dtype="fp8", device="B200"), run(kv_cache_dtype="fp8", engine="vllm")):
        assert not rows(other, "kv_pool_cast") and not any("pool cast" in note for note in other.notes)


def test_context_mla_rows_timing_the_absorbed_form_do_not_price_the_expanded_prefill() -> None:
    """sglang's sm_90 context MLA table times FA3's absorbed branch (576/512 wide, one KV head),
    3.4 times the FLOPs of the expanded 192/128 form sglang prefills new prompts in; its rows are
    left out, Blackwell's trtllm_mla and TensorRT-LLM's (expanded) kept."""
    columns = {"kernel_source": ["flash_attention", "trtllm_mla", "default"], "mla_dtype": ["bfloat16"] * 3,
               "kv_cache_dtype": ["bfloat16"] * 3, "num_heads": [16] * 3, "isl": [8192] * 3, "batch_size": [1] * 3,
               "latency": [1.99, 0.315, 0.633]}
    assert [row[-1] for row in aic._context_mla(absorbed=False)(columns, {})] == [pytest.approx(315.0), pytest.approx(633.0)]
    assert [row[-1] for row in aic._context_mla(absorbed=True)(columns, {})] == [pytest.approx(1990.0)]
    from infercast.simulate import UserInput, simulate

    def attention_per_layer(device: str) -> tuple[float, str]:
        result = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device=device, num_devices=8, tp_size=8,
                                    query_length=8192))
        row = next(r for r in result.ops if r.name.startswith("mla_prefill_attention"))
        return row.total_ms / row.count, row.source

    # 16 heads a rank, causal over 8,192 tokens, (192 + 128) x 2 FLOP a (query, key) pair and head
    flops = 16 * 8192 ** 2 / 2 * 320 * 2
    hopper_ms, source = attention_per_layer("H200")
    assert source == "analytic"
    assert flops / 989e12 * 1e3 < hopper_ms < 1.0  # above the bf16 peak's time, below the absorbed table's 1.99 ms
    blackwell_ms, source = attention_per_layer("B200")
    assert source in ("measured", "interpolated") and blackwell_ms == pytest.approx(0.315, rel=0.05)


@pytest.mark.parametrize(("device", "engine", "cached", "absorbed"), [
    ("H200", "sglang", 0, False), ("H200", "sglang", 2048, True), ("H200", "sglang", 8192, False),
    ("H200", "vllm", 2048, False), ("B200", "sglang", 2048, False)])
def test_sglang_on_hopper_prefills_over_a_short_cached_prefix_in_the_absorbed_form(device, engine, cached,
                                                                                   absorbed) -> None:
    """sglang's fa3 backend (Hopper) extends a batch with 1-8,191 cached tokens in the absorbed
    form: attention over the latent cache, priced from the absorbed context rows, and no
    kv_b_proj expanding the cache. No prefix, 8,192 or more cached tokens, vLLM and Blackwell's
    trtllm_mla expand the cache."""
    from infercast.simulate import UserInput, simulate

    result = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device=device, num_devices=8, tp_size=8,
                                engine=engine, query_length=2048, context_length=cached, prefill_cuda_graph="off"))
    names = {r.name.split(" ")[0]: r for r in result.ops}
    assert ("mla_attention" in names) == absorbed and ("mla_prefill_attention" in names) == (not absorbed)
    assert any(r.name.startswith("gemm (layers.*.self_attn.kv_b_proj)") for r in result.ops) == (not absorbed)
    assert any("MLA prefill in the absorbed form" in note for note in result.notes) == absorbed
    if absorbed:
        row = names["mla_attention"]
        assert row.origin.startswith("context_mla_absorbed") and row.source == "extrapolated"
        # scaled from the table's 4,096-token prefill by the pairs a 2,048-token prefix leaves: 3/4
        table = aic.load("context_mla_absorbed", "h200_sxm", "sglang", "0.5.14")
        full = table.query(("bf16", "bf16"), (16, 4096, 1), LINEAR).value
        assert row.total_ms / row.count * 1e3 == pytest.approx(0.75 * full, rel=1e-6)


def test_sglang_prefills_in_the_absorbed_form_inside_piecewise_graphs_and_the_planner_traces_each_form() -> None:
    """sglang's MLA dispatch returns the absorbed form first thing inside piecewise CUDA graphs
    (both Hopper's handler and Blackwell's trtllm_mla one). The planner prices a speculative
    deployment's prefill without graphs, so it traces the prefill once for each form."""
    from infercast.agg import StepPricer
    from infercast.parallel import Workload
    from infercast.plan import Layout, Planner, PlanRequest
    from infercast.simulate import UserInput, simulate

    def form(graphs: str, device: str = "H200") -> set[str]:
        result = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device=device, num_devices=8, tp_size=8,
                                    query_length=1024, prefill_cuda_graph=graphs))
        return {r.name.split(" ")[0] for r in result.ops} & {"mla_attention", "mla_prefill_attention"}

    assert form("on") == {"mla_attention"} and form("off") == {"mla_prefill_attention"}
    assert form("on", "B200") == {"mla_attention"}
    planner = Planner(PlanRequest(model="deepseek-ai/DeepSeek-R1", device="H200", num_devices=(8,)))
    pricer = StepPricer(planner)
    prefill = Workload(num_queries=1, query_length=1024, context_length=0, decode=False)
    with_graphs = pricer.step(Layout(8, 8, 1, 1), None, prefill)
    without = pricer.step(Layout(8, 8, 1, 1), None, prefill, speculative=True)
    forms = {graphs: {r.name for r in records} & {"infercast::mla_attention", "infercast::mla_prefill_attention"}
             for (*_, graphs), records in pricer._records.items()}
    assert forms == {True: {"infercast::mla_attention"}, False: {"infercast::mla_prefill_attention"}}
    assert without > with_graphs  # eager launches, whichever form


def test_a_table_priced_gemm_carries_its_activation_quantization_an_analytic_one_does_not() -> None:
    """aiconfigurator's GEMM collectors time the activation quantization with the GEMM (sglang:
    per-token-group quant + DeepGEMM), so the quantize kernel before a table-priced quant_gemm
    costs nothing apart; before an analytic GEMM (the H20 has no tables) it keeps its price."""
    from infercast.simulate import UserInput, simulate

    def quantize_rows(device: str) -> list:
        result = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device=device, num_devices=8, tp_size=8,
                                    decode=True, num_queries=4, context_length=1024))
        return [r for r in result.ops if r.name.startswith("quantize_activation")]

    tabled = quantize_rows("H200")
    assert tabled and all(r.total_ms == 0.0 and "inside gemm sglang" in r.origin for r in tabled)
    assert all(r.total_ms > 0.0 and r.source == "analytic" for r in quantize_rows("H20"))


def test_vllms_eagerly_timed_fp8_block_gemm_rows_are_left_out() -> None:
    """vLLM's collector timed fp8_block GEMMs without a CUDA graph (57-62 us at a few rows, host
    launches included, where graph-timed FP8 GEMMs take 10-12 us): those rows are not read, the
    decode GEMM is priced analytically and says why; vLLM's graph-timed bf16 rows stay."""
    from infercast.simulate import UserInput, simulate

    rows = {r.name: r for r in simulate(UserInput(model="deepseek-ai/DeepSeek-R1", engine="vllm", device="H200",
                                                  decode=True, num_queries=4)).ops}
    qkv_a = rows["quant_gemm (layers.*.self_attn.fused_qkv_a_proj)"]
    assert qkv_a.source == "analytic" and "timed eagerly" in qkv_a.origin
    assert qkv_a.total_ms / qkv_a.count < 0.020
    assert rows["gemm (layers.*.mlp.gate)"].source != "analytic"  # bf16, graph-timed
    table = aic.load("gemm", "h200_sxm", "vllm", "0.24.0")
    assert ("bf16",) in table.keys() and ("fp8_block",) not in table.keys()


def test_sglang_prefills_an_fp8_cache_with_fp8_queries_and_vllm_with_bf16_ones() -> None:
    """sglang's FA3 casts queries to the cache dtype (head dim <= 256), so an FP8-cache prefill
    reads the tables' fp8/fp8 rows (faster than bf16's); vLLM's tables have bf16/fp8 rows."""
    from infercast.simulate import UserInput, simulate

    def attention(engine: str, kv: str):
        result = simulate(UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H200", num_devices=1,
                                    engine=engine, query_length=16384, kv_cache_dtype=kv))
        return next(r for r in result.ops if r.name.startswith("attention "))

    fp8, bf16 = attention("sglang", "fp8"), attention("sglang", "bf16")
    assert fp8.source != "analytic" and bf16.source != "analytic" and fp8.total_ms < bf16.total_ms
    assert attention("vllm", "fp8").source != "analytic"


@pytest.mark.parametrize("device", ["H20", "H200"])
def test_an_analytic_prefill_over_an_fp8_cache_runs_at_the_fp8_attention_figure_where_sglang_casts(device) -> None:
    """MLA's expanded prefill is analytic on Hopper. Over an FP8 cache sglang's FA3 casts the
    queries and the fresh keys and values to FP8, so the attention's compute runs at the
    device's FP8 attention figure (from the tables' FP8 rows; on the H20 scaled from the H100's);
    vLLM keeps bf16, and a device without the figure (A100) keeps its bf16 one."""
    from infercast.simulate import UserInput, simulate

    def attention(kv: str, engine: str = "sglang", on: str = device):
        result = simulate(UserInput(model="deepseek-ai/DeepSeek-R1", device=on, num_devices=8, tp_size=8,
                                    engine=engine, query_length=8192, kv_cache_dtype=kv))
        return next(r for r in result.ops if r.name.startswith("mla_prefill_attention"))

    fp8, bf16 = attention("fp8"), attention("bf16")
    assert fp8.source == bf16.source == "analytic" and fp8.origin.endswith("FP8 queries over the FP8 cache")
    eff = DEVICES[device].efficiency
    assert bf16.total_ms / fp8.total_ms == pytest.approx(eff.attention_fp8 / eff.attention, rel=0.02)
    assert attention("fp8", "vllm").total_ms == pytest.approx(attention("bf16", "vllm").total_ms, rel=0.01)
    a100 = attention("fp8", on="A100")
    assert a100.total_ms == pytest.approx(attention("bf16", on="A100").total_ms, rel=0.01)
    assert "FP8 queries" not in a100.origin


@pytest.mark.parametrize(("engine", "write", "folded"), [("sglang", "kv_cache_write", True),
                                                          ("trtllm", "rope_kv_cache_write", True),
                                                          ("vllm", "kv_cache_write", False)])
def test_the_cache_write_is_inside_the_attention_rows_where_the_engines_attention_call_stores(engine, write,
                                                                                              folded) -> None:
    """sglang's RadixAttention stores k/v inside the call the tables time, TensorRT-LLM's
    attention op applies RoPE and appends to the cache: their cache-write rows cost nothing
    apart; vLLM (from 0.16) updates the cache outside the attention kernel it times."""
    from infercast.simulate import UserInput, simulate

    rows = simulate(UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, engine=engine,
                              decode=True, num_queries=1)).ops
    row = next(r for r in rows if r.name.startswith(write + " "))
    assert (row.total_ms == 0.0) is folded
    assert ("inside generation_attention" in row.origin) is folded


def test_an_operator_no_table_can_answer_says_why() -> None:
    """A cross-node all-reduce (TP16 over two 8-GPU nodes) has a table kind but no table: the
    row says the tables cover one node, not that the operator has no table kind."""
    from infercast.costmodel import NO_TABLE_KIND, UNCOVERED
    from infercast.simulate import UserInput, simulate

    result = simulate(UserInput(model="deepseek-v3", device="H200", num_devices=16, tp_size=16, decode=True,
                                num_queries=1))
    all_reduce = next(op for op in result.ops if op.name.startswith("all_reduce (layers"))
    assert all_reduce.source == "analytic" and all_reduce.origin.startswith(UNCOVERED["infercast::all_reduce"])
    add = next(op for op in result.ops if op.name.startswith("add "))
    assert add.origin == NO_TABLE_KIND


def test_a_moe_shape_measured_only_with_skewed_routing_says_so_and_names_the_flag_that_reads_it() -> None:
    """vLLM's A100 MoE table times Mixtral-8x7B's experts with power-law routing only: a balanced
    run prices them analytically and its row says why and which --expert-imbalance reads the
    table; with that flag the row is the table's."""
    from infercast.simulate import UserInput, simulate

    def moe(imbalance: str):
        result = simulate(UserInput(model="mistralai/Mixtral-8x7B-Instruct-v0.1", device="A100", num_devices=2,
                                    tp_size=2, num_queries=8, decode=True, context_length=96, engine="vllm",
                                    expert_imbalance=imbalance))
        return next(op for op in result.ops if op.name.startswith("fused_moe"))

    balanced, skewed = moe("balanced"), moe("power-law-1.01")
    assert balanced.source == "analytic"
    assert "power_law_1.01 and power_law_1.2 routing only, not balanced" in balanced.origin
    assert "--expert-imbalance power-law-1.01 reads them" in balanced.origin
    assert skewed.source in ("measured", "interpolated") and skewed.origin.startswith("moe vllm")


def test_an_expert_parallel_moe_the_tables_miss_does_not_blame_the_routing() -> None:
    """DeepSeek-V3 on 8 x H100 at EP8 through vLLM: its table has balanced rows for the shape, so
    an analytic MoE row there must not send the user to another --expert-imbalance."""
    from infercast.simulate import UserInput, simulate

    result = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H100", num_devices=8, tp_size=8, ep_size=8,
                                num_queries=8, decode=True, context_length=512, engine="vllm"))
    rows = [op for op in result.ops if op.name.startswith("fused_moe")]
    assert rows and all("routing only" not in op.origin for op in rows)


def test_a_gemm_row_count_far_above_both_neighbours_is_left_out_and_nothing_else() -> None:
    """4 rows at 32.4 us between 12.9 and 12.8 (vLLM 0.24.0's B200 FP8 rows of (2,560, 8,192)) is
    a spike; the slow first two row counts (27.2 and 32.5 us: side by side, the first with no
    neighbour below) and an ordinary step up at a tile threshold are kept."""
    shape = [("fp8", m, 2560, 8192, us) for m, us in ((1, 27.2), (2, 32.5), (3, 12.9), (4, 32.4), (5, 12.8),
                                                      (8, 13.0), (16, 13.1), (17, 19.9), (32, 20.3))]
    pair = [("fp8", m, 768, 51200, us) for m, us in ((5, 40.6), (6, 217.3), (7, 218.7), (8, 40.7))]
    kept = aic.without_spikes(shape + pair)
    assert sorted(kept) == sorted(r for r in shape + pair if r[1:3] != (4, 2560))
    assert aic.without_spikes([("fp8", 4, 1, 1, 10.0)]) == [("fp8", 4, 1, 1, 10.0)]


def test_a_left_out_spike_is_priced_between_its_neighbours() -> None:
    """Llama-3.1-70B FP8 on 4 x B200 with vLLM: a decode step of 4 requests lies between those of
    3 and 5 (it took half as long again before the spike at 4 rows was left out)."""
    from infercast.simulate import UserInput, simulate

    def step(requests: int) -> float:
        return simulate(UserInput(model="meta-llama/Llama-3.1-70B-Instruct", device="B200", num_devices=4,
                                  engine="vllm", quantize_linear_action="FP8", kv_cache_dtype="fp8",
                                  num_queries=requests, decode=True, context_length=1500)).step_latency_ms

    three, four, five = step(3), step(4), step(5)
    assert min(three, five) * 0.97 <= four <= max(three, five) * 1.03
