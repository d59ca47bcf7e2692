"""Stand-in for ``sglang.srt.models.kimi_k25_eagle3`` (sglang 0.5.23): the parameter layout of
``Eagle3DeepseekV2ForCausalLM`` and what its ``load_weights`` does with each name (renames,
gate/up stacking, q_a/kv_a fusion, skipping names with no parameter), on the meta device."""

import re

import torch
from torch import nn


class Eagle3DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config, quant_scales: bool = False) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        n_aux = len((getattr(config, "eagle_config", None) or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
        shapes = {
            "model.embed_tokens.weight": (config.vocab_size, h),
            "model.fc.weight": (h, n_aux * h),
            "model.midlayer.input_layernorm.weight": (h,),
            "model.midlayer.hidden_norm.weight": (h,),
            "model.midlayer.post_attention_layernorm.weight": (h,),
            "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight": (
                config.q_lora_rank + config.kv_lora_rank + config.qk_rope_head_dim, 2 * h),
            "model.midlayer.self_attn.q_a_layernorm.weight": (config.q_lora_rank,),
            "model.midlayer.self_attn.q_b_proj.weight": (
                config.num_attention_heads * (config.qk_nope_head_dim + config.qk_rope_head_dim), config.q_lora_rank),
            "model.midlayer.self_attn.kv_a_layernorm.weight": (config.kv_lora_rank,),
            "model.midlayer.self_attn.kv_b_proj.weight": (
                config.num_attention_heads * (config.qk_nope_head_dim + config.v_head_dim), config.kv_lora_rank),
            "model.midlayer.self_attn.o_proj.weight": (h, config.num_attention_heads * config.v_head_dim),
            "model.midlayer.mlp.gate_up_proj.weight": (2 * config.intermediate_size, h),
            "model.midlayer.mlp.down_proj.weight": (h, config.intermediate_size),
            "model.norm.weight": (h,),
            "lm_head.weight": (config.draft_vocab_size or config.vocab_size, h),
        }
        if quant_scales:  # an FP8 block-quantised draft keeps a scale next to each projection
            shapes["model.midlayer.self_attn.o_proj.weight_scale_inv"] = (1, 1)
            shapes["model.midlayer.mlp.gate_up_proj.weight_scale_inv"] = (2, 1)
        self._params = nn.ParameterDict({name.replace(".", "/"): nn.Parameter(torch.empty(shape, device="meta"))
                                         for name, shape in shapes.items()})
        self.loaded: list[str] = []
        self.skipped: list[str] = []

    def named_parameters(self, *args, **kwargs):
        for name, param in self._params.items():
            yield name.replace("/", "."), param

    def load_weights(self, weights) -> None:
        params = dict(self.named_parameters())
        cached = {}
        for name, tensor in weights:
            if name == "d2t" or name.endswith(".d2t") or name == "t2d" or name.endswith(".t2d"):
                continue
            mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
            if not mapped.startswith("lm_head."):
                mapped = f"model.{mapped}"
            handled = False
            for shard in (".gate_proj", ".up_proj"):
                if shard in mapped and mapped.replace(shard, ".gate_up_proj") in params:
                    self.loaded.append(mapped.replace(shard, ".gate_up_proj"))
                    handled = True
                    break
            if handled:
                continue
            if "q_a_proj" in mapped or "kv_a_proj_with_mqa" in mapped:
                cached[mapped] = tensor
                q = mapped if "q_a_proj" in mapped else mapped.replace("kv_a_proj_with_mqa", "q_a_proj")
                kv = q.replace("q_a_proj", "kv_a_proj_with_mqa")
                if q in cached and kv in cached:
                    fused = q.replace("q_a_proj", "fused_qkv_a_proj_with_mqa")
                    if fused in params:
                        self.loaded.append(fused)
                    cached.pop(q), cached.pop(kv)
                continue
            if mapped not in params:
                self.skipped.append(name)
                continue
            self.loaded.append(mapped)


EntryClass = [Eagle3DeepseekV2ForCausalLM]
