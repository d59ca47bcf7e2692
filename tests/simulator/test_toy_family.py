"""A new family priced end to end from a plugin defined here: no simulator source changes.

The toy family has a linear-attention layer (a fixed-size state per request instead of a KV
cache) that the simulator does not know. The plugin registers its profile, a config
resolver, the model reference, an attention builder for its new attention kind, and the
cost formula of its own operator.
"""

from __future__ import annotations

import types

import pytest
import torch
from infercast_adapters import ModelProfile, ModelRef, hookimpl
from transformers import PretrainedConfig

from infercast.cost import OpCost, register_cost
from infercast.layers import SimContext, SimLinear, SimModule
from infercast.plugins import new_manager
from infercast.simulate import UserInput, simulate

STATE = 64  # the toy layer's per-head state width


@torch.library.custom_op("toytest::linear_attention", mutates_args=())
def linear_attention(q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError


@linear_attention.register_fake
def _(q, state):
    return torch.empty_like(q)


@register_cost("toytest::linear_attention")
def _linear_attention_cost(record) -> OpCost:
    q, state = record["q"], record["state"]
    return OpCost(flops=4.0 * q.numel * STATE, bytes=q.nbytes * 2 + 2 * state.nbytes, kind="memory")


class ToyConfig(PretrainedConfig):
    model_type = "toy_linear"

    def __init__(self, hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048,
                 vocab_size=32000, **kwargs):
        self.hidden_size, self.num_hidden_layers = hidden_size, num_hidden_layers
        self.num_attention_heads, self.intermediate_size, self.vocab_size = num_attention_heads, intermediate_size, vocab_size
        super().__init__(**kwargs)


class ToyLinearAttention(SimModule):
    """q/k/v projections, a state update of STATE x head_dim per head, the output projection."""

    def __init__(self, ctx: SimContext, config, index: int, profile) -> None:
        super().__init__()
        self.ctx, self.heads = ctx, config.num_attention_heads
        self.head_dim = config.hidden_size // self.heads
        self.qkv = SimLinear(config.hidden_size, 3 * config.hidden_size, ctx.quant.dense)
        self.out = SimLinear(config.hidden_size, config.hidden_size, ctx.quant.dense)

    def kv_bytes_per_token(self) -> int:
        return 0  # a fixed state per request, no cache that grows with the context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.qkv(x)[:, : x.shape[1]].reshape(x.shape[0], self.heads, self.head_dim)
        state = q.new_empty(self.ctx.requests, self.heads, STATE, self.head_dim)
        return self.out(linear_attention(q, state).reshape(x.shape))


def toy_plugin() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        infercast_register_profiles=hookimpl(lambda register: register(ModelProfile(
            model_type="toy_linear", decoder_layer_class="ToyLayer", attention_class="ToyAttention",
            attention_kind="linear"))),
        infercast_register_sim_layers=hookimpl(lambda register: register("attention", "linear", ToyLinearAttention)),
        infercast_register_models=hookimpl(lambda register: register(ModelRef("acme/toy-linear", "toy_linear"))),
        infercast_resolve_config=hookimpl(lambda model_ref: ToyConfig() if model_ref == "acme/toy-linear" else None),
    )


@pytest.fixture
def manager():
    manager = new_manager()
    assert manager.register(toy_plugin(), "toy_family"), manager.failures()
    yield manager
    manager.unregister("toy_family")


def test_a_family_from_a_plugin_is_priced_without_touching_the_simulator(manager) -> None:
    result = simulate(UserInput(model="acme/toy-linear", device="H100", num_devices=1, decode=True, num_queries=4),
                      manager=manager)
    rows = {row.name.split(" ")[0]: row for row in result.ops}
    assert rows["linear_attention"].count == 4 and rows["linear_attention"].source == "analytic"
    assert rows["gemm"].count > 0 and "silu_and_mul" in rows  # the built-in dense MLP in every layer
    assert result.memory_gib["kv_cache"] == 0  # the builder's own cache model
    assert result.model_type == "toy_linear" and result.tpot_ms > 0
    # parameters: the plugin's projections plus the built-in MLP, embedding, norms and head
    hidden, layers, inter, vocab = 1024, 4, 2048, 32000
    expected = layers * (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden) + 2 * vocab * hidden + hidden
    assert result.parameters_billion * 1e9 == expected


def test_a_plugin_cannot_register_layers_for_a_family_it_does_not_own() -> None:
    manager = new_manager()
    intruder = types.SimpleNamespace(
        infercast_register_sim_layers=hookimpl(lambda register: register("vision", "kimi_k25", lambda **kw: None)))
    manager.register(intruder, "intruder")
    failures = {f.name: f.error for f in manager.failures()}
    assert "intruder" in failures and "does not own" in failures["intruder"] and "kimi_k25" in failures["intruder"]
