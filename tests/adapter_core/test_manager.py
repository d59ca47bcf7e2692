from __future__ import annotations

import types

import pytest
from transformers import LlamaConfig

from infercast_adapters import ModelProfile, Patch, PluginError, hookimpl
from infercast_adapters.manager import AdapterManager


def plugin(**hooks) -> types.SimpleNamespace:
    """A plugin object whose attributes are hook implementations."""
    return types.SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


def profile(model_type: str, **changes) -> ModelProfile:
    return ModelProfile(model_type=model_type, decoder_layer_class="Layer", attention_class="Attn", **changes)


def test_profiles_are_collected_with_their_plugin() -> None:
    manager = AdapterManager()
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("alpha"))), "a")
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("beta"))), "b")
    profiles = manager.profiles()
    assert {t: e.plugin for t, e in profiles.items()} == {"alpha": "a", "beta": "b"}
    assert manager.profile_for("alpha").model_type == "alpha"
    assert manager.profile_for("gamma") is None


def test_invalid_profile_fails_only_its_plugin_and_names_plugin_and_field() -> None:
    manager = AdapterManager()
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("good"))), "good_plugin")
    manager.register(
        plugin(infercast_register_profiles=lambda register: register(profile("bad", attention_kind="no pe"))),
        "bad_plugin",
    )
    assert set(manager.profiles()) == {"good"}
    (failure,) = manager.failures()
    assert failure.name == "bad_plugin"
    assert "bad_plugin" in failure.error and "attention_kind" in failure.error
    assert [p.name for p in manager.plugins() if p.error is None] == ["good_plugin"]


def test_two_plugins_claiming_one_model_type_names_both() -> None:
    manager = AdapterManager()
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("same"))), "first")
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("same"))), "second")
    manager.profiles()
    (failure,) = manager.failures()
    assert "first" in failure.error and "second" in failure.error and "'same'" in failure.error


def test_register_with_unknown_hook_name_is_a_failure_not_a_crash() -> None:
    manager = AdapterManager()
    assert not manager.register(plugin(infercast_no_such_hook=lambda: None), "typo")
    (failure,) = manager.failures()
    assert failure.name == "typo" and "infercast_no_such_hook" in failure.error


def test_blocked_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERCAST_DISABLE_PLUGINS", "x, y")
    manager = AdapterManager()
    assert not manager.register(plugin(infercast_register_profiles=lambda register: register(profile("t"))), "y")
    assert manager.register(plugin(infercast_register_profiles=lambda register: register(profile("t"))), "z")
    assert [p.name for p in manager.plugins()] == ["z"]


def test_resolve_config_first_non_none_wins_and_last_registered_is_asked_first() -> None:
    calls: list[str] = []

    def answer(name, result):
        def resolve(model_ref):
            calls.append(name)
            return result
        return resolve

    manager = AdapterManager()
    manager.register(plugin(infercast_resolve_config=answer("early", LlamaConfig(hidden_size=64))), "early")
    manager.register(plugin(infercast_resolve_config=answer("none", None)), "none")
    config = manager.resolve_config("anything")
    assert config.hidden_size == 64
    assert calls == ["none", "early"]


def test_patch_config_and_class_patches_collect_from_every_plugin() -> None:
    class Owner:
        x = 1

    def patch_config(config):
        if config.model_type == "llama":
            config.demo_field = "set"

    manager = AdapterManager()
    manager.register(
        plugin(
            infercast_patch_config=patch_config,
            infercast_class_patches=lambda config: [Patch(Owner, "x", 2, "llama")],
        ),
        "p1",
    )
    manager.register(plugin(infercast_class_patches=lambda config: None), "p2")
    config = LlamaConfig()
    manager.patch_config(config)
    assert config.demo_field == "set"
    assert [p.attribute for p in manager.class_patches(config)] == ["x"]


def test_class_patches_must_be_patch_objects() -> None:
    manager = AdapterManager()
    manager.register(plugin(infercast_class_patches=lambda config: ["not a patch"]), "sloppy")
    with pytest.raises(PluginError, match="sloppy"):
        manager.class_patches(LlamaConfig())


def test_a_crashing_hook_names_the_plugin_and_hook() -> None:
    def boom(config):
        raise KeyError("missing")

    manager = AdapterManager()
    manager.register(plugin(infercast_patch_config=boom), "crashy")
    with pytest.raises(PluginError, match="'crashy' failed in hook infercast_patch_config"):
        manager.patch_config(LlamaConfig())


def test_draft_layers_registered_and_duplicates_fail() -> None:
    class LayerA:
        pass

    class LayerB:
        pass

    manager = AdapterManager()
    arch = "Eagle3DeepseekV2ForCausalLM"
    manager.register(plugin(infercast_register_draft_layers=lambda register: register(arch, LayerA)), "a")
    assert manager.draft_layers() == {arch: LayerA}
    manager.register(plugin(infercast_register_draft_layers=lambda register: register(arch, LayerB)), "b")
    assert manager.draft_layers() == {arch: LayerA}
    (failure,) = manager.failures()
    assert failure.name == "b" and "'a'" in failure.error and "architecture 'Eagle3DeepseekV2ForCausalLM'" in failure.error


def test_eagle3_capture_rule_is_the_first_answer_and_must_be_a_known_rule() -> None:
    manager = AdapterManager()
    assert manager.eagle3_capture_rule("kimi_k2") is None
    manager.register(plugin(infercast_eagle3_capture_rule=lambda target_model_type: (
        "add_one_if_first_is_one" if target_model_type == "kimi_k2" else None)), "kimi")
    assert manager.eagle3_capture_rule("kimi_k2") == "add_one_if_first_is_one"
    assert manager.eagle3_capture_rule("llama") is None
    manager.register(plugin(infercast_eagle3_capture_rule=lambda target_model_type: "plus_two"), "odd")
    with pytest.raises(PluginError, match="'odd'.*returned 'plus_two'; valid: add_one, add_one_if_first_is_one"):
        manager.eagle3_capture_rule("llama")


def test_plugin_info_lists_implemented_hooks() -> None:
    manager = AdapterManager()
    manager.register(
        plugin(infercast_register_profiles=lambda register: None, infercast_resolve_config=lambda model_ref: None),
        "two_hooks",
        distribution="dist",
        version="9",
    )
    (info,) = manager.plugins()
    assert info.hooks == ("infercast_register_profiles", "infercast_resolve_config")
    assert (info.distribution, info.version, info.error) == ("dist", "9", None)


def test_models_and_speculative_options_are_named_by_the_plugins_that_own_them() -> None:
    from infercast_adapters import ModelRef, SpecOption

    manager = AdapterManager()
    manager.register(plugin(
        infercast_register_profiles=lambda register: register(profile("alpha")),
        infercast_register_models=lambda register: [register(ModelRef("acme/alpha", "alpha", ("a",), default=2)),
                                                     register(ModelRef("acme/alpha-small", "alpha"))],
        infercast_register_speculative=lambda register: register(SpecOption(
            "alpha", "MTP", "alpha-mtp", "a test", steps=1, draft_tokens=2, accept_length=1.8, measured_steps=1)),
    ), "owner")
    manager.register(plugin(
        infercast_register_profiles=lambda register: register(profile("beta")),
        infercast_register_models=lambda register: register(ModelRef("acme/beta", "beta", default=5)),
    ), "other")
    assert manager.default_model() == "acme/beta"  # the highest offer
    assert [ref.ref for ref, _ in manager.models()] == ["acme/alpha", "acme/alpha-small", "acme/beta"]
    assert [o.name for o in manager.speculative_options("alpha")] == ["alpha-mtp"]
    assert manager.speculative_options("beta") == []


@pytest.mark.parametrize("hook", ["infercast_register_models", "infercast_register_speculative",
                                  "infercast_register_sim_layers"])
def test_naming_a_model_type_the_plugin_does_not_own_fails_it(hook: str) -> None:
    from infercast_adapters import ModelRef, SpecOption

    entries = {
        "infercast_register_models": lambda register: register(ModelRef("acme/alpha", "alpha")),
        "infercast_register_speculative": lambda register: register(SpecOption(
            "alpha", "EAGLE3", "x", "a test", draft="acme/draft", accept_length=2.0)),
        "infercast_register_sim_layers": lambda register: register("plan", "alpha", lambda **kw: []),
    }
    manager = AdapterManager()
    manager.register(plugin(infercast_register_profiles=lambda register: register(profile("alpha"))), "owner")
    manager.register(plugin(**{hook: entries[hook]}), "intruder")
    manager.profiles()
    (failure,) = manager.failures()
    assert failure.name == "intruder" and "does not own" in failure.error and "'alpha'" in failure.error


def test_hooks_go_through_pluggy_so_wrappers_run() -> None:
    """A new-style wrapper sees and changes the result of the implementations it wraps; an
    old-style hookwrapper runs too."""
    from infercast_adapters import hookimpl

    seen: list[str] = []

    class Resolver:
        @hookimpl
        def infercast_resolve_config(self, model_ref):
            return {"ref": model_ref}

    class Wrapper:
        @hookimpl(wrapper=True)
        def infercast_resolve_config(self, model_ref):
            result = yield
            seen.append(model_ref)
            return {**result, "wrapped": True} if result else result

    class OldWrapper:
        @hookimpl(hookwrapper=True)
        def infercast_patch_config(self, config):
            seen.append("before")
            yield
            seen.append("after")

    manager = AdapterManager()
    manager.register(Resolver(), "resolver")
    manager.register(Wrapper(), "wrapper")
    manager.register(OldWrapper(), "old")
    assert manager.resolve_config("x") == {"ref": "x", "wrapped": True}
    manager.patch_config(object())
    assert seen == ["x", "before", "after"]


def test_a_wrapper_that_raises_is_blamed_by_name() -> None:
    from infercast_adapters import hookimpl

    class Resolver:
        @hookimpl
        def infercast_resolve_config(self, model_ref):
            return {"ref": model_ref}

    class BadWrapper:
        @hookimpl(wrapper=True)
        def infercast_resolve_config(self, model_ref):
            yield
            raise ValueError("oops")

    manager = AdapterManager()
    manager.register(Resolver(), "resolver")
    manager.register(BadWrapper(), "bad")
    with pytest.raises(PluginError, match="plugin 'bad' failed in hook infercast_resolve_config: ValueError: oops"):
        manager.resolve_config("x")


def test_a_register_hook_that_raises_fails_only_its_plugin() -> None:
    from infercast_adapters import hookimpl

    class Good:
        @hookimpl
        def infercast_register_profiles(self, register):
            register(ModelProfile(model_type="good", decoder_layer_class="L", attention_class="A"))

    class Bad:
        @hookimpl
        def infercast_register_profiles(self, register):
            raise SystemExit(4)

    manager = AdapterManager()
    manager.register(Good(), "good")
    manager.register(Bad(), "bad")
    assert list(manager.profiles()) == ["good"]
    (failure,) = manager.failures()
    assert failure.name == "bad" and "SystemExit: 4" in failure.error
