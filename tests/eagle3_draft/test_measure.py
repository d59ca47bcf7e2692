"""Acceptance measurement through the Python API and ``infercast-eagle3 measure``."""

from __future__ import annotations

import json
import re

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import save_weights
from infercast_eagle3.cli import main
from infercast_eagle3.config import ADD_ONE, from_transformers
from infercast_eagle3.loop import Eagle3Drafter, SpecSettings, TargetDrafter
from infercast_eagle3.measure import check_fits, load_draft, measure
from infercast_eagle3.model import build_draft
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from .test_loop import VOCAB, tiny_llama_draft, tiny_llama_draft_config, tiny_llama_target

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9]]


@pytest.fixture
def checkpoints(tmp_path):
    """A tiny target and its draft on disk, the draft without an embedding (shared)."""
    target = tiny_llama_target(0)
    target.save_pretrained(tmp_path / "target")
    draft = tiny_llama_draft(0)
    config = tiny_llama_draft_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 4]})
    config.save_pretrained(tmp_path / "draft")
    save_weights(draft, tmp_path / "draft", include_embedding=False)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in PROMPTS))
    return tmp_path, target


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_measure_reports_the_known_acceptance_of_a_self_drafting_target() -> None:
    model = tiny_llama_target(3)
    result = measure(model, TargetDrafter(model), PROMPTS, SpecSettings(3, 1), 1 + 4 * 6, check_lossless=True)
    a = result.acceptance
    assert result.lossless is True and result.generated_tokens == 3 * 25
    assert a.mean_accept_length == 4.0 and a.cycles == 18 and a.histogram == {1: 0, 2: 0, 3: 0, 4: 18}
    assert result.per_prompt_accept_length == [4.0, 4.0, 4.0]
    wrong = measure(model, TargetDrafter(model, wrong_from=3), PROMPTS, SpecSettings(3, 1), 13).acceptance
    assert wrong.mean_accept_length == 3.0 and wrong.position_rates == [1.0, 1.0, 0.0]


def test_measure_with_a_random_draft_is_lossless_and_bounded() -> None:
    model = tiny_llama_target(4)
    draft = tiny_llama_draft(4)
    result = measure(model, Eagle3Drafter(draft), PROMPTS, SpecSettings(2, 2, 4), 10, check_lossless=True)
    a = result.acceptance
    assert result.lossless is True
    assert 1.0 <= a.mean_accept_length <= 3.0 and sum(a.histogram.values()) == a.cycles
    assert a.mean_accept_length == pytest.approx(sum(n * c for n, c in a.histogram.items()) / a.cycles)


def test_measure_rejects_bad_arguments() -> None:
    model = tiny_llama_target(0)
    with pytest.raises(ConfigError, match="no prompts"):
        measure(model, TargetDrafter(model), [])
    with pytest.raises(ConfigError, match="max_new_tokens must be >= 2"):
        measure(model, TargetDrafter(model), PROMPTS, max_new_tokens=1)


def test_load_draft_shares_the_target_embedding_and_reads_the_aux_layers(checkpoints) -> None:
    path, target = checkpoints
    draft = load_draft(path / "draft", target, dtype=torch.float32)
    assert draft.embed_tokens is target.get_input_embeddings() and "embed_tokens.weight" not in draft.state_dict()
    assert draft.config.capture_indices(6, ADD_ONE) == [2, 3, 5]
    result = measure(target, Eagle3Drafter(draft), PROMPTS[:1], SpecSettings(2, 1), 5)
    assert result.capture == [2, 3, 5]  # a Llama target: the layer after each id


def test_a_checkpoint_embedding_gives_way_to_the_targets_as_in_sglang(checkpoints) -> None:
    path, target = checkpoints
    save_weights(tiny_llama_draft(0), path / "draft", include_embedding=True)
    with pytest.warns(UserWarning, match="not loaded .*embed_tokens.weight"):
        draft = load_draft(path / "draft", target, dtype=torch.float32)
    assert draft.embed_tokens is target.get_input_embeddings()


def test_without_draft_vocab_size_the_draft_uses_the_targets_lm_head(checkpoints) -> None:
    path, target = checkpoints
    config = tiny_llama_draft_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 4]})
    del config.draft_vocab_size
    config.save_pretrained(path / "draft")
    with pytest.warns(UserWarning, match="not loaded .*lm_head.weight"):
        draft = load_draft(path / "draft", target, dtype=torch.float32)
    assert draft.lm_head is target.get_output_embeddings() and draft.config.lm_head_from_target
    h = torch.randn(3, 32)
    assert torch.equal(draft.logits(h), target.lm_head(h))


def test_a_draft_vocab_size_without_lm_head_is_refused(checkpoints) -> None:
    path, target = checkpoints
    tensors = {k: v for k, v in load_file(str(path / "draft" / "model.safetensors")).items() if k != "lm_head.weight"}
    save_file(tensors, str(path / "draft" / "model.safetensors"))
    with pytest.raises(ConfigError, match="no lm_head.weight.*draft_vocab_size \\(97\\).*remove it"):
        load_draft(path / "draft", target, dtype=torch.float32)


def test_a_narrower_draft_keeps_its_own_embedding(tmp_path) -> None:
    """target_hidden_size != hidden_size: sglang cannot share the target's embedding."""
    target = tiny_llama_target(0)
    config = tiny_llama_draft_config(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1)
    config.save_pretrained(tmp_path)
    torch.manual_seed(7)
    draft = build_draft(from_transformers(config))
    save_weights(draft, tmp_path)
    loaded = load_draft(tmp_path, target, dtype=torch.float32)
    assert torch.equal(loaded.embed_tokens.weight, draft.embed_tokens.weight)
    save_weights(draft, tmp_path, include_embedding=False)
    with pytest.raises(ConfigError, match="no embed_tokens.weight.*hidden_size 16 differs from target_hidden_size 32"):
        load_draft(tmp_path, target, dtype=torch.float32)


def test_a_draft_that_does_not_fit_the_target_is_named() -> None:
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, draft_vocab_size=50,
                         architectures=["LlamaForCausalLMEagle3"])
    config.target_hidden_size = 48
    with pytest.raises(ConfigError, match="48 wide .* the target's hidden size is 32"):
        check_fits(from_transformers(config), 32, VOCAB, has_d2t=True)
    config.target_hidden_size = 32
    with pytest.raises(ConfigError, match="vocabulary has 97 tokens, the target's 120"):
        check_fits(from_transformers(config), 32, 120, has_d2t=True)
    with pytest.raises(ConfigError, match="50 of the target's 97 tokens .* no d2t"):
        check_fits(from_transformers(config), 32, VOCAB, has_d2t=False)


def test_cli_self_check_measures_num_steps_plus_one(checkpoints, capsys) -> None:
    path, _ = checkpoints
    code, out, _ = run(capsys, "measure", "--target", str(path / "target"), "--self-check", "--prompts",
                       str(path / "prompts.jsonl"), "--num-steps", "4", "--max-new-tokens", "11", "--dtype",
                       "float32", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["acceptance"]["mean_accept_length"] == 5.0 and report["acceptance"]["position_rates"] == [1.0] * 4
    assert report["settings"] == {"num_steps": 4, "topk": 1, "num_draft_tokens": 5} and report["prompts"] == 3
    assert report["tokens_per_s"] == pytest.approx(report["generated_tokens"] / report["wall_s"])
    assert report["prompts_per_s"] == pytest.approx(3 / report["wall_s"])


def test_json_output_is_strict_and_cpu_defaults_to_float32(checkpoints, capsys, monkeypatch) -> None:
    """No cycle measured (max-new-tokens 2 gives one cycle; a NaN rate would appear for any
    unmeasured position): the JSON still parses strictly, and the target ran in float32."""
    from infercast_eagle3 import cli as eagle_cli

    seen = {}
    real = eagle_cli.load_target
    monkeypatch.setattr(eagle_cli, "load_target", lambda *a, **kw: seen.setdefault("dtype", kw["dtype"]) and real(*a, **kw))
    path, _ = checkpoints
    code, out, _ = run(capsys, "measure", "--target", str(path / "target"), "--self-check", "--prompts",
                       str(path / "prompts.jsonl"), "--num-steps", "4", "--max-new-tokens", "2", "--device", "cpu",
                       "--json")
    assert code == 0 and seen["dtype"] is torch.float32
    json.loads(out, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert eagle_cli.strict_json({"a": [float("nan"), 1.5], "b": float("inf")}) == {"a": [None, 1.5], "b": None}


def test_cli_measures_a_draft_checkpoint_and_checks_losslessness(checkpoints, capsys) -> None:
    path, _ = checkpoints
    code, out, _ = run(capsys, "measure", "--target", str(path / "target"), "--draft", str(path / "draft"),
                       "--prompts", str(path / "prompts.jsonl"), "--topk", "2", "--num-draft-tokens", "5",
                       "--max-new-tokens", "8", "--dtype", "float32", "--check-lossless")
    assert code == 0
    assert "mean accept length" in out and "lossless: yes" in out and "draft tokens 5" in out
    assert re.search(r"\(\d+\.\d+ prompts/s, \d+\.\d tokens/s\)", " ".join(out.split()))
    assert "target hidden states read: [2, 3, 5]" in " ".join(out.split())


@pytest.mark.parametrize("argv, message", [
    (["--prompts", "missing.jsonl"], "no such file"),
    (["--prompts", "{bad}"], "not JSON"),
    (["--prompts", "{ids}", "--wrong-from", "2"], "--wrong-from applies to --self-check only"),
    (["--prompts", "{ids}", "--num-steps", "3", "--num-draft-tokens", "3"], "chain .* num_steps \\+ 1 = 4"),
    (["--prompts", "{big}"], "outside the target's vocabulary 0..96"),
    (["--prompts", "{text}"], "text prompts need the target's tokenizer"),
])
def test_cli_bad_input_exits_2_with_a_named_error(checkpoints, capsys, argv, message) -> None:
    path, _ = checkpoints
    files = {"{bad}": "bad.jsonl", "{ids}": "prompts.jsonl", "{big}": "big.jsonl", "{text}": "text.txt"}
    (path / "bad.jsonl").write_text('{"input_ids": [1, 2]\n')
    (path / "big.jsonl").write_text('{"input_ids": [1, 200]}\n')
    (path / "text.txt").write_text("hello there\n")
    argv = [str(path / files[a]) if a in files else a for a in argv]
    code, _, err = run(capsys, "measure", "--target", str(path / "target"), "--draft", str(path / "draft"), *argv)
    assert code == 2
    assert re.search(message, " ".join(err.split())), err
