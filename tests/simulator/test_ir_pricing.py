"""``infercast simulate --from-ir``: an exported graph's ATen nodes priced with the cost model,
and the FLOP relation between the model view (the graph) and the engine view (simulator layers)."""

from __future__ import annotations

import json

import pytest
import torch
import torch_ir

from infercast.cli import main
from infercast.cost import cost_of
from infercast.costmodel import CostModel
from infercast.export import ExportRequest, export_model
from infercast.export.pricing import engine_view, node_record, price_ir
from infercast.plugins import get_devices

LLAMA = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512, tie_word_embeddings=False)
BATCH, SEQ, SLOTS = 2, 16, 64


@pytest.fixture(scope="module")
def llama_graphs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    path = directory / "llama.json"
    path.write_text(json.dumps(LLAMA))
    result = export_model(ExportRequest(model=str(path), seq_len=SEQ, max_cache_len=SLOTS, batch=BATCH, out_dir=directory))
    return {p.phase: p.path for p in result.phases}


def _model(device: str = "H100") -> CostModel:
    return CostModel(get_devices().get(device))


def eager_attention_surplus(phase: str) -> float:
    """FLOPs the graph's eager attention computes beyond the causal pairs the engine's attention
    kernel computes: the graph scores every (query, key) pair of the S x S prefill square and
    masks half; in decode the engine is priced at a full cache, so both score C keys."""
    if phase == "decode":
        return 0.0
    heads, head_dim = LLAMA["num_attention_heads"], LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    masked_pairs = BATCH * (SEQ * SEQ - SEQ * (SEQ + 1) / 2)
    return LLAMA["num_hidden_layers"] * 2.0 * heads * masked_pairs * (head_dim + head_dim)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_matmul_flops_of_the_graph_equal_the_engine_views_plus_the_eager_attention_surplus(llama_graphs, phase) -> None:
    """The stated relation, for a dense model: every GEMM of one view is a GEMM of the other
    (the engine fuses q/k/v and gate/up, which adds no FLOPs), lm_head runs on the last position
    in both, and attention differs only by the masked pairs eager attention still computes."""
    pricing = price_ir(llama_graphs[phase], _model())
    engine = engine_view(pricing.meta, {"device": "H100"})["totals"]
    surplus = eager_attention_surplus(phase)
    assert pricing.totals.matmul_flops == pytest.approx(engine["matmul_flops"] + surplus, rel=1e-12)
    assert surplus == 0.0 or pricing.totals.matmul_flops > engine["matmul_flops"]
    # the unfused graph launches far more kernels than the engine for the same work
    assert pricing.totals.kernels > 3 * engine["kernels"]


def test_decode_graph_pricing_rows_and_sources(llama_graphs) -> None:
    pricing = price_ir(llama_graphs["decode"], _model())
    data = json.loads(llama_graphs["decode"].read_text())
    assert pricing.nodes == len(data["nodes"]) and 0 < pricing.free_nodes < pricing.nodes
    assert pricing.totals.kernels == pricing.nodes - pricing.free_nodes
    ops = {op.name: op for op in pricing.ops}
    hidden, layers = LLAMA["hidden_size"], LLAMA["num_hidden_layers"]
    # 7 projections per layer and lm_head; GEMMs priced from the measured bf16 tables
    assert ops["aten::linear"].count == 7 * layers + 1
    assert set(ops["aten::linear"].sources) <= {"measured", "interpolated", "extrapolated"}
    assert ops["aten::index_copy"].count == 2 * layers
    kv_row = BATCH * LLAMA["num_key_value_heads"] * (hidden // LLAMA["num_attention_heads"]) * 2  # bf16 bytes
    assert ops["aten::index_copy"].bytes == pytest.approx(2 * layers * (2 * kv_row + 8))  # in place: new rows + index
    assert ops["aten::matmul"].count == 2 * layers and set(ops["aten::matmul"].sources) == {"analytic"}


def test_aten_formulas_read_arguments_by_name() -> None:
    node = {"name": "linear", "op_type": "aten.linear.default",
            "inputs": [{"name": "x", "shape": [2, 3, 64], "dtype": "bfloat16"},
                       {"name": "w", "shape": [128, 64], "dtype": "bfloat16"}],
            "outputs": [{"name": "linear", "shape": [2, 3, 128], "dtype": "bfloat16"}], "attrs": {}}
    cost = cost_of(node_record(node))
    assert cost.flops == 2 * 6 * 128 * 64 and cost.gemm_mnk == (6, 128, 64) and cost.kind == "gemm"
    scores = {"name": "matmul", "op_type": "aten.matmul.default",
              "inputs": [{"name": "q", "shape": [2, 4, 1, 16], "dtype": "bfloat16"},
                         {"name": "k", "shape": [2, 4, 16, 64], "dtype": "bfloat16"}],
              "outputs": [{"name": "matmul", "shape": [2, 4, 1, 64], "dtype": "bfloat16"}], "attrs": {}}
    cost = cost_of(node_record(scores))
    assert cost.flops == 2 * 8 * 64 * 16 and cost.gemm_mnk == (1, 64, 16) and cost.gemm_count == 8
    view = dict(scores, op_type="aten.view.default", attrs={"size": [8, 64]})
    assert node_record(view) is None
    same_dtype = dict(scores, op_type="aten.to.dtype", attrs={"dtype": "bfloat16"}, inputs=scores["outputs"])
    assert node_record(same_dtype) is None


def test_any_pytorch_ir_graph_is_priced(tmp_path) -> None:
    """A graph saved by pytorch-ir itself (no infercast metadata): priced, no engine view."""
    with torch.device("meta"):
        mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).to(torch.bfloat16)
    ir = torch_ir.extract_ir(mlp, (torch.empty(8, 32, dtype=torch.bfloat16, device="meta"),))
    path = tmp_path / "mlp.json"
    ir.save(str(path))
    pricing = price_ir(path, _model())
    assert pricing.meta is None
    assert pricing.totals.matmul_flops == 2 * 8 * (32 * 64 + 64 * 16)


def test_cli_prices_an_exported_decode_graph(llama_graphs, capsys) -> None:
    assert main(["simulate", "--from-ir", str(llama_graphs["decode"]), "--device", "H200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "H200" and data["totals"]["ms"] > 0 and data["ir_meta"]["phase"] == "decode"
    engine = data["engine_view"]
    assert engine["simulated"]["workload"]["context_length"] == SLOTS - 1
    assert engine["totals"]["matmul_flops"] == pytest.approx(data["totals"]["matmul_flops"], rel=1e-12)
    assert main(["simulate", "--from-ir", str(llama_graphs["decode"]), "--device", "H200"]) == 0
    out = capsys.readouterr().out
    assert "IR graph vs engine view" in out and "aten::linear" in out


def test_a_file_that_is_not_an_ir_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "x.json"
    path.write_text("{\"nodes\": 3}")
    assert main(["simulate", "--from-ir", str(path)]) == 2
    assert "not a pytorch-ir graph" in " ".join(capsys.readouterr().err.split())  # rich wraps lines
    assert main(["simulate", "--from-ir", str(tmp_path / "missing.json")]) == 2


def test_flags_the_graph_fixes_are_refused_with_from_ir(tmp_path, capsys) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    # the layout and workload come from the graph: a flag for them would be dropped silently
    assert main(["simulate", "--from-ir", str(path), "--tp-size", "4", "--query-length", "64"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--tp-size, --query-length: no effect with --from-ir" in err and "--engine-version" in err
