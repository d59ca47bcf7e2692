"""STAND-IN (see package docstring): the remote KimiK25Config's field names."""

from transformers import PretrainedConfig
from transformers.models.deepseek_v3 import DeepseekV3Config


class KimiK25VisionConfig(PretrainedConfig):
    model_type = "kimi_k25_vision_standin"

    def __init__(self, patch_size=14, init_pos_emb_height=8, init_pos_emb_width=8, init_pos_emb_time=4,
                 pos_emb_type="divided_fixed", vt_num_attention_heads=4, vt_num_hidden_layers=2, vt_hidden_size=32,
                 vt_intermediate_size=48, merge_kernel_size=(2, 2), video_attn_type="spatial_temporal",
                 merge_type="sd2_tpool", mm_projector_type="patchmerger", mm_hidden_size=32, text_hidden_size=64,
                 projector_hidden_act="gelu", projector_ln_eps=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.patch_size, self.init_pos_emb_height, self.init_pos_emb_width = patch_size, init_pos_emb_height, init_pos_emb_width
        self.init_pos_emb_time, self.pos_emb_type = init_pos_emb_time, pos_emb_type
        self.vt_num_attention_heads, self.vt_num_hidden_layers = vt_num_attention_heads, vt_num_hidden_layers
        self.vt_hidden_size, self.vt_intermediate_size = vt_hidden_size, vt_intermediate_size
        self.merge_kernel_size, self.video_attn_type, self.merge_type = list(merge_kernel_size), video_attn_type, merge_type
        self.mm_projector_type, self.mm_hidden_size, self.text_hidden_size = mm_projector_type, mm_hidden_size, text_hidden_size
        self.projector_hidden_act, self.projector_ln_eps = projector_hidden_act, projector_ln_eps


class KimiK25Config(PretrainedConfig):
    model_type = "kimi_k25"

    def __init__(self, text_config=None, vision_config=None, media_placeholder_token_id=299, **kwargs):
        super().__init__(**kwargs)
        text = dict(text_config or {})
        text.pop("model_type", None)
        self.text_config = DeepseekV3Config(**text)
        self.vision_config = KimiK25VisionConfig(**(vision_config or {}))
        self.media_placeholder_token_id = media_placeholder_token_id
        self.auto_map = {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                         "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"}
