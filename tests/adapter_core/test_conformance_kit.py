"""The conformance kit run against a well-behaved demo adapter, and shown to catch a bad one."""

from __future__ import annotations

import types

import pytest
from transformers import AutoConfig

from infercast_adapters import ModelProfile, Patch, hookimpl
from infercast_adapters.manager import AdapterManager
from infercast_adapters.testing import AdapterConformance


class DemoModel:
    def forward(self) -> str:
        return "original"


def _resolve(model_ref):
    if model_ref == "demo/llama-like":
        return AutoConfig.for_model("llama", hidden_size=64, num_hidden_layers=2)
    return None


def _patch_config(config):
    if config.model_type == "llama":
        config.demo_patched = True


demo_plugin = types.SimpleNamespace(
    infercast_register_profiles=hookimpl(lambda register: register(
        ModelProfile(model_type="llama", decoder_layer_class="LlamaDecoderLayer", attention_class="LlamaAttention"))),
    infercast_resolve_config=hookimpl(_resolve),
    infercast_patch_config=hookimpl(_patch_config),
    infercast_class_patches=hookimpl(lambda config: [Patch(DemoModel, "forward", lambda self: "patched", "llama")]),
)


class TestDemoAdapterConforms(AdapterConformance):
    plugin = demo_plugin
    plugin_name = "demo"
    model_type = "llama"
    offline_refs = ("demo/llama-like",)
    other_model_types = ("qwen3", "mixtral")


def test_kit_catches_an_ungated_config_patch() -> None:
    def meddle(config):
        config.meddled = True  # no model_type check

    bad = types.SimpleNamespace(
        infercast_register_profiles=demo_plugin.infercast_register_profiles,
        infercast_patch_config=hookimpl(meddle),
    )
    suite = TestDemoAdapterConforms()
    manager = AdapterManager()
    manager.register(bad, "demo")
    with pytest.raises(AssertionError, match="phase-1 patches changed a qwen3 config"):
        suite.test_gate_holds_for_other_model_types(manager)


def test_kit_catches_a_reference_that_needs_the_hub() -> None:
    class NeedsHub(TestDemoAdapterConforms):
        offline_refs = ("demo/not-bundled",)

    manager = AdapterManager()
    manager.register(demo_plugin, "demo")
    with pytest.MonkeyPatch.context() as mp, pytest.raises(AssertionError, match="does not resolve offline"):
        NeedsHub().test_configs_resolve_offline(manager, mp)
