"""Conformance tests every adapter package runs by subclassing :class:`AdapterConformance`.

Example, in an adapter's test suite::

    from infercast_adapters.testing import AdapterConformance
    import infercast_kimi_k25.plugin

    class TestKimiConformance(AdapterConformance):
        plugin = infercast_kimi_k25.plugin
        plugin_name = "kimi_k25"
        model_type = "kimi_k25"
        offline_refs = ("moonshotai/Kimi-K2.5",)

The checks: the plugin's profiles validate; its hooks change nothing for other model types;
its class patches restore the exact originals; its references resolve with no hub.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from infercast_adapters.config import load_config
from infercast_adapters.manager import AdapterManager
from infercast_adapters.patching import _ABSENT, _own_value, patched

OTHER_MODEL_TYPES = ("llama", "qwen3", "qwen3_moe", "deepseek_v3", "mixtral")


class AdapterConformance:
    """Base class of the adapter conformance suite; set the class attributes below."""

    plugin: ClassVar[Any] = None
    """The plugin object (usually its module)."""
    plugin_name: ClassVar[str] = ""
    model_type: ClassVar[str] = ""
    """A model_type the plugin owns."""
    offline_refs: ClassVar[tuple[str, ...]] = ()
    """References that must resolve through the plugin with no hub."""
    other_model_types: ClassVar[tuple[str, ...]] = OTHER_MODEL_TYPES
    """Transformers-native model types the plugin must leave alone."""
    extra_hookspecs: ClassVar[tuple[Any, ...]] = ()
    """Hookspec modules of the consumer the plugin also serves (e.g. ``infercast.hookspecs``)."""

    @pytest.fixture
    def adapter_manager(self) -> AdapterManager:
        if self.plugin is None or not self.plugin_name or not self.model_type:
            pytest.fail(f"{type(self).__name__} must set plugin, plugin_name and model_type")
        manager = AdapterManager()
        for module in self.extra_hookspecs:
            manager.add_hookspecs(module)
        if not manager.register(self.plugin, self.plugin_name):
            errors = [f.error for f in manager.failures() if f.name == self.plugin_name]
            pytest.fail(f"plugin {self.plugin_name!r} did not register: {errors or 'blocked'}")
        return manager

    def make_config(self, adapter_manager: AdapterManager) -> Any:
        """A config of ``model_type`` to run the class patches on; override when there is no offline ref."""
        if not self.offline_refs:
            pytest.skip("no offline reference to build a config from; override make_config")
        config = load_config(self.offline_refs[0], manager=adapter_manager)
        adapter_manager.patch_config(config)
        return config

    def owned_model_types(self, adapter_manager: AdapterManager) -> set[str]:
        return {t for t, entry in adapter_manager.profiles().items() if entry.plugin == self.plugin_name}

    def test_profiles_validate(self, adapter_manager: AdapterManager) -> None:
        assert adapter_manager.failures() == []
        owned = self.owned_model_types(adapter_manager)
        assert self.model_type in owned, f"plugin {self.plugin_name!r} registers no profile for {self.model_type!r}"
        for model_type in owned:
            adapter_manager.profile_for(model_type).validate()

    def test_gate_holds_for_other_model_types(self, adapter_manager: AdapterManager) -> None:
        from transformers import AutoConfig

        owned = self.owned_model_types(adapter_manager)
        for model_type in self.other_model_types:
            if model_type in owned:
                continue
            config = AutoConfig.for_model(model_type)
            before = config.to_dict()
            adapter_manager.patch_config(config)
            assert config.to_dict() == before, f"phase-1 patches changed a {model_type} config"
            patches = adapter_manager.class_patches(config)
            assert all(p.model_type in owned for p in patches), "a patch is gated on a model_type the plugin does not own"
            with patched(patches, model_type) as applied:
                assert applied == [], f"class patches applied to a {model_type} model: {applied}"

    def test_class_patches_restore(self, adapter_manager: AdapterManager) -> None:
        config = self.make_config(adapter_manager)
        patches = adapter_manager.class_patches(config)
        originals = [_own_value(p.owner, p.attribute) for p in patches]
        with pytest.raises(RuntimeError, match="inside the patch context"):
            with patched(patches, config.model_type) as applied:
                assert len(applied) == len([p for p in patches if p.model_type == config.model_type])
                for p in applied:
                    assert _own_value(p.owner, p.attribute) is p.replacement
                raise RuntimeError("inside the patch context")
        for patch, original in zip(patches, originals):
            now = _own_value(patch.owner, patch.attribute)
            assert now is original or (original is _ABSENT and now is _ABSENT), f"{patch} was not restored"

    def test_configs_resolve_offline(self, adapter_manager: AdapterManager, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        if not self.offline_refs:
            pytest.skip("the plugin declares no offline references")
        owned = self.owned_model_types(adapter_manager)
        for ref in self.offline_refs:
            config = adapter_manager.resolve_config(ref)
            assert config is not None, f"{ref!r} does not resolve offline"
            assert config.model_type in owned or getattr(config, "text_config", config).model_type in owned
