from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from transformers import DeepseekV3Config, LlamaConfig

from infercast_adapters import ConfigError, hookimpl
from infercast_adapters import config as config_module
from infercast_adapters.config import load_config
from infercast_adapters.manager import AdapterManager

LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 512, "vocab_size": 1000}


def write(path: Path, values) -> Path:
    path.write_text(json.dumps(values))
    return path


def test_config_json_file_and_model_directory(tmp_path: Path) -> None:
    file = write(tmp_path / "config.json", LLAMA)
    for ref in (str(file), str(tmp_path)):
        config = load_config(ref)
        assert isinstance(config, LlamaConfig)
        assert (config.hidden_size, config.num_hidden_layers) == (256, 4)


def test_users_dict_and_file_are_not_changed(tmp_path: Path) -> None:
    file = write(tmp_path / "config.json", LLAMA)
    before = file.read_text()
    load_config(str(file), num_hidden_layers_override=2)
    assert file.read_text() == before


def test_remote_model_type_with_an_adapter_alias_loads_natively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kimi_k2`` is no name adapter-core knows: the alias comes from a plugin's
    infercast_register_config_aliases, and without it the type is refused by name."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from infercast_adapters import hookimpl
    from infercast_adapters.manager import AdapterManager

    monkeypatch.delitem(CONFIG_MAPPING._extra_content, "kimi_k2", raising=False)  # as sglang's glue may add it

    class Aliases:
        @hookimpl
        def infercast_register_config_aliases(self, register):
            register("kimi_k2", "deepseek_v3")

    file = write(tmp_path / "config.json", {"model_type": "kimi_k2", "n_routed_experts": 384, "hidden_size": 7168})
    with pytest.raises(ConfigError, match="model_type 'kimi_k2' is not implemented"):
        load_config(str(file))
    manager = AdapterManager()
    manager.register(Aliases(), "aliases")
    config = load_config(str(file), manager=manager)
    assert isinstance(config, DeepseekV3Config)
    assert config.n_routed_experts == 384


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_config(str(tmp_path / "nope" / "config.json"))
    with pytest.raises(ConfigError, match="without a config.json"):
        load_config(str(tmp_path))


def test_invalid_json_names_file_and_position(tmp_path: Path) -> None:
    file = tmp_path / "config.json"
    file.write_text('{\n  "model_type": "llama",\n  "hidden_size": ,\n}')
    with pytest.raises(ConfigError) as info:
        load_config(str(file))
    assert str(file) in str(info.value) and "line 3" in str(info.value)


def test_json_that_is_not_an_object_or_lacks_model_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(str(write(tmp_path / "a.json", [1, 2])))
    with pytest.raises(ConfigError, match="no 'model_type'"):
        load_config(str(write(tmp_path / "b.json", {"hidden_size": 3})))


def test_adapter_resolve_hook_is_asked_before_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    def hub(*args, **kwargs):
        raise AssertionError("the hub must not be asked")

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", hub)
    manager = AdapterManager()
    manager.register(types.SimpleNamespace(infercast_resolve_config=hookimpl(
        lambda model_ref: LlamaConfig(hidden_size=128) if model_ref == "org/bundled" else None)), "bundler")
    assert load_config("org/bundled", manager=manager).hidden_size == 128


def test_unknown_model_lists_known_types_and_how_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    manager = AdapterManager()
    manager.register(types.SimpleNamespace(infercast_register_profiles=hookimpl(lambda register: None)), "empty")
    with pytest.raises(ConfigError) as info:
        load_config("nobody/nothing-here", manager=manager, known_models=["deepseek-ai/DeepSeek-V3"])
    message = str(info.value)
    assert "'nobody/nothing-here'" in message
    assert "deepseek-ai/DeepSeek-V3" in message
    assert "infercast_resolve_config" in message


def test_hub_flow_retries_with_remote_code_then_reloads_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    class RemoteKimiK2Config:
        model_type = "kimi_k2"

        def to_dict(self):
            return {"model_type": "kimi_k2", "n_routed_experts": 384}

    def from_pretrained(ref, trust_remote_code=False):
        calls.append(trust_remote_code)
        if not trust_remote_code:
            raise ValueError("requires trust_remote_code=True")
        return RemoteKimiK2Config()

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", from_pretrained)
    monkeypatch.setattr(config_module, "hub_unreachable", lambda: None)
    monkeypatch.setattr(config_module, "_hub_tokenizer_config", lambda ref: {})
    config = config_module.load_hub_config("moonshotai/Kimi-K2-Instruct", {"kimi_k2": "deepseek_v3"})
    assert calls == [False, True]
    assert isinstance(config, DeepseekV3Config) and config.n_routed_experts == 384


def test_hub_flow_keeps_a_remote_config_with_no_native_equivalent(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = types.SimpleNamespace(model_type="brand_new_arch")

    def from_pretrained(ref, trust_remote_code=False):
        if not trust_remote_code:
            raise ValueError("unrecognized")
        return remote

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", from_pretrained)
    monkeypatch.setattr(config_module, "hub_unreachable", lambda: None)
    monkeypatch.setattr(config_module, "_hub_tokenizer_config", lambda ref: {})
    assert config_module.load_hub_config("org/new") is remote


def test_hub_flow_takes_the_tokenizer_class_from_the_repository(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A Kimi-K2 repository's config loads as DeepSeek-V3; its tokenizer_config.json says the
    checkpoint tokenizes with TikTokenTokenizer, which the config keeps as ``tokenizer_class``."""
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "TikTokenTokenizer"}')
    asked: list[tuple[str, str]] = []

    def hf_hub_download(repo, filename):
        asked.append((repo, filename))
        return str(tmp_path / filename)

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", lambda ref, **kwargs: DeepseekV3Config())
    monkeypatch.setattr("huggingface_hub.hf_hub_download", hf_hub_download)
    monkeypatch.setattr(config_module, "hub_unreachable", lambda: None)
    config = config_module.load_hub_config("moonshotai/Kimi-K2-Instruct")
    assert asked == [("moonshotai/Kimi-K2-Instruct", "hf_quant_config.json"),
                     ("moonshotai/Kimi-K2-Instruct", "tokenizer_config.json")]
    assert config.tokenizer_class == "TikTokenTokenizer"
    assert not getattr(config, "quantization_config", None)  # the repository has no hf_quant_config.json
    # a ModelOpt checkpoint states its quantization in hf_quant_config.json: vLLM and sglang read it
    (tmp_path / "hf_quant_config.json").write_text('{"producer": {"name": "modelopt"}, '
                                                   '"quantization": {"quant_algo": "NVFP4"}}')
    config = config_module.load_hub_config("nvidia/DeepSeek-R1-FP4")
    assert config.quantization_config == {"quant_method": "modelopt", "producer": {"name": "modelopt"},
                                          "quantization": {"quant_algo": "NVFP4"}}

    def missing(repo, filename):
        raise OSError("404: no tokenizer_config.json in this repository")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", missing)
    assert getattr(config_module.load_hub_config("org/plain"), "tokenizer_class", None) is None


def test_a_local_tokenizer_config_names_the_tokenizer_class_ahead_of_config_json(tmp_path) -> None:
    """As transformers' AutoTokenizer reads them: tokenizer_config.json's class first."""
    values = {"model_type": "deepseek_v3", "tokenizer_class": "LlamaTokenizerFast"}
    (tmp_path / "config.json").write_text(json.dumps(values))
    assert config_module.load_local_config(tmp_path).tokenizer_class == "LlamaTokenizerFast"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TikTokenTokenizer"}))
    assert config_module.load_local_config(tmp_path).tokenizer_class == "TikTokenTokenizer"
    assert config_module.load_local_config(tmp_path / "config.json").tokenizer_class == "TikTokenTokenizer"


def test_num_hidden_layers_override_reaches_text_config() -> None:
    from transformers import AutoConfig

    config = AutoConfig.for_model("kimi_k25")
    config_module.apply_num_hidden_layers_override(config, 3)
    assert config.text_config.num_hidden_layers == 3
    with pytest.raises(ConfigError, match="positive integer"):
        config_module.apply_num_hidden_layers_override(config, 0)


def test_an_unreachable_hub_fails_fast_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="HF_HUB_OFFLINE is set"):
        config_module.load_config("acme/unknown-model")
    assert time.perf_counter() - started < 1.0


def test_a_plain_config_holds_a_copy_of_the_values_as_attributes() -> None:
    values = {"model_type": "kimi_k25", "tie_word_embeddings": False,
              "text_config": dict(LLAMA, rope_scaling={"type": "yarn", "factor": 4.0}),
              "vision_config": {"hidden_size": 32}}
    config = config_module.PlainConfig(values)
    assert config.text_config.hidden_size == 256 and config.vision_config.hidden_size == 32
    assert getattr(config.text_config, "attention_bias", "absent") == "absent"  # missing reads as on transformers
    with pytest.raises(AttributeError):
        config.text_config.head_dim
    config.text_config.rope_scaling["factor"] = 8.0  # a patch changes the copy, never the caller's values
    config.text_config.num_hidden_layers = 2
    assert values["text_config"]["rope_scaling"]["factor"] == 4.0 and values["text_config"]["num_hidden_layers"] == 4
    assert config.to_dict() == dict(values, text_config=dict(values["text_config"], num_hidden_layers=2,
                                                             rope_scaling={"type": "yarn", "factor": 8.0}))


def test_to_transformers_reads_plain_values_with_the_native_class() -> None:
    native = config_module.to_transformers(config_module.PlainConfig(LLAMA))
    assert isinstance(native, LlamaConfig) and native.hidden_size == 256 and native.num_key_value_heads == 4
    assert config_module.to_transformers(native) is native
