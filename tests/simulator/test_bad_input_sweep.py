"""Hundreds of bad or edge invocations: every one ends with exit 0, 1 or 2 and a message, never
a traceback and never a hang.

Hypothesis draws command lines from the request's own flag table (every flag, values of every
troublesome kind) and malformed config.json files (wrong types, zero and negative sizes,
inconsistent shapes, broken quantization configs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infercast import cli
from infercast.request import UserInput, flag_of

WEIRD = st.one_of(
    st.integers(-10**21, 10**21).map(str), st.sampled_from(["0", "-1", "1", "3", "7", "8", "1e20", "nan", "inf", "",
                                                            " ", "x" * 5000, "NaN", "1.5", "four", "-0", "2**64"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=20),
)
FLAGS = [f for f in dataclasses.fields(UserInput) if not f.metadata["positional"]]


@contextlib.contextmanager
def time_limit(seconds: int):
    def expire(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in-process: (exit status, stderr); any escaping exception fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), time_limit(60):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
    return code, err.getvalue()


@st.composite
def command_lines(draw) -> list[str]:
    argv = ["simulate", draw(st.sampled_from(["moonshotai/Kimi-K2.5", "deepseek-v3", "llama-3.1-8b", "qwen3-235b-a22b",
                                              "mixtral-8x7b", "acme/none", "x" * 5000, "/dev/zero", "/nonexistent"]))]
    argv += ["--num-hidden-layers-override", "2"]
    for field in draw(st.lists(st.sampled_from(FLAGS), max_size=5, unique_by=lambda f: f.name)):
        if field.name == "num_hidden_layers_override":
            continue
        if field.metadata["kind"] is bool:
            argv.append(flag_of(field.name))
        elif field.metadata["choices"] and draw(st.booleans()):
            argv += [flag_of(field.name), draw(st.sampled_from(field.metadata["choices"]))]
        else:
            argv += [flag_of(field.name), draw(WEIRD)]
    return argv


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(command_lines())
def test_no_command_line_ends_in_a_traceback(argv: list[str]) -> None:
    code, err = run(argv)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.strip(), argv  # a message, not silence


BASE = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 1024,
    "intermediate_size": 2816, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 4,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
}
MOE = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 32000, "hidden_size": 1024,
    "intermediate_size": 2816, "moe_intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_shared_experts": 1, "n_routed_experts": 64, "num_experts_per_tok": 6,
    "kv_lora_rank": 128, "q_lora_rank": 256, "qk_rope_head_dim": 32, "v_head_dim": 64, "qk_nope_head_dim": 64,
    "n_group": 8, "topk_group": 4, "first_k_dense_replace": 1, "max_position_embeddings": 4096,
}
BAD_VALUES = st.sampled_from([0, -1, "32", None, [1, 2], 1.5, 10**12, True, {"a": 1}, "", 7])


@st.composite
def broken_configs(draw) -> dict:
    config = dict(draw(st.sampled_from([BASE, MOE])))
    for key in draw(st.lists(st.sampled_from(sorted(config) + ["quantization_config", "head_dim"]), min_size=1,
                             max_size=3, unique=True)):
        if key == "quantization_config":
            config[key] = draw(st.sampled_from([
                "fp8", {"quant_method": "fp8", "weight_block_size": [0, 128]},
                {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "four"}}}},
                {"quant_method": "compressed-tensors", "config_groups": "x"}, {"quant_method": "gguf"}, [1]]))
        else:
            config[key] = draw(BAD_VALUES)
    return config


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(broken_configs())
def test_no_malformed_config_ends_in_a_traceback(tmp_path_factory, config: dict) -> None:
    path = tmp_path_factory.mktemp("config") / "config.json"
    path.write_text(json.dumps(config))
    code, err = run(["simulate", str(path), "--num-devices", "1", "--decode"])
    assert code in (0, 2), (config, code, err)
    assert "Traceback" not in err, (config, err)


@pytest.mark.parametrize(("mutation", "message"), [
    ({"num_attention_heads": "32"}, "'num_attention_heads' expected int"),  # transformers' own check, kept
    ({"num_hidden_layers": 0}, "num_hidden_layers must be between 1"),
    ({"vocab_size": 0}, "vocab_size must be between 1"),
    ({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
    ({"model_type": ["llama"]}, "model_type must be a string"),
])
def test_config_problems_name_the_field_and_the_file(tmp_path, mutation: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **mutation}))
    code, err = run(["simulate", str(path), "--num-devices", "1"])
    assert code == 2 and message in " ".join(err.split()) and str(path) in err.replace("\n", "")


@pytest.mark.parametrize(("mutation", "message"), [
    ({"num_experts_per_tok": 80}, "num_experts_per_tok 80 exceeds the 64 experts"),
    ({"n_group": 7}, "n_group 7 does not divide the 64 experts"),
])
def test_moe_shape_problems_are_named(tmp_path, mutation: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MOE, **mutation}))
    code, err = run(["simulate", str(path), "--num-devices", "1"])
    assert code == 2 and message in " ".join(err.split())


def test_non_utf8_and_special_files_are_named(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{\x00")
    code, err = run(["simulate", str(path)])
    assert code == 2 and "not UTF-8" in err
    code, err = run(["simulate", "/dev/zero"])
    assert code == 2 and "not a regular file" in err
