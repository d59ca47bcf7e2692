"""STAND-IN (see package docstring): the remote KimiK25ForConditionalGeneration interface."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import is_torch_fx_available  # noqa: F401  (the 4.x import transformers 5 removed)

from .modeling_deepseek import DeepseekV3ForCausalLM

VL_VISION_ATTENTION_FUNCTIONS = {}  # the published code maps only flash_attention_2 and eager here


def apply_rope(xq, xk, freqs_cis):
    fc = freqs_cis.unsqueeze(-2)
    q = torch.view_as_complex(xq.float().view(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().view(*xk.shape[:-1], -1, 2))
    return torch.view_as_real(q * fc).flatten(-2).type_as(xq), torch.view_as_real(k * fc).flatten(-2).type_as(xk)


class Rope2DPosEmbRepeated(nn.Module):
    def __init__(self, dim, max_height, max_width, theta_base=10000):
        super().__init__()
        self.dim, self.max_height, self.max_width, self.theta_base = dim, max_height, max_width, theta_base

    def get_freqs_cis(self, grid_thws_list, device):
        parts = []
        for t, h, w in grid_thws_list:
            pos = torch.arange(h * w, device=device).float()
            x, y = pos % w, pos // w
            freqs = 1.0 / (self.theta_base ** (torch.arange(0, self.dim, 4, device=device)[: self.dim // 4].float() / self.dim))
            xc = torch.polar(torch.ones_like(torch.outer(x, freqs)), torch.outer(x, freqs))
            yc = torch.polar(torch.ones_like(torch.outer(y, freqs)), torch.outer(y, freqs))
            parts.append(torch.stack([xc, yc], -1).reshape(h * w, -1).repeat(t, 1))
        return torch.cat(parts)


class MoonVision3dPatchEmbed(nn.Module):
    def __init__(self, out_dim, in_dim=3, patch_size=14, pos_emb_height=8, pos_emb_width=8):
        super().__init__()
        self.proj = nn.Conv2d(in_dim, out_dim, kernel_size=patch_size, stride=patch_size)
        self.pos = nn.Parameter(torch.zeros(pos_emb_height * pos_emb_width, out_dim))

    def forward(self, x, grid_thws_list):
        x = self.proj(x).view(x.size(0), -1)  # expects [N, 3, 14, 14]
        return x + self.pos.mean(0)


class MLP2(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.fc0, self.fc1 = nn.Linear(dims[0], dims[1]), nn.Linear(dims[1], dims[2])

    def forward(self, x):
        return self.fc1(F.gelu(self.fc0(x), approximate="tanh"))


class MoonViTEncoderLayer(nn.Module):
    def __init__(self, num_heads, hidden_dim, mlp_dim, attn_implementation="flash_attention_2"):
        super().__init__()
        # the published __init__ never sets self.use_deterministic_attn, which attention_qkvpacked reads
        self.num_heads, self.hidden_dim = num_heads, hidden_dim
        self.hidden_size_per_attention_head = hidden_dim // num_heads
        self.attn_implementation = attn_implementation
        self.norm0, self.norm1 = nn.LayerNorm(hidden_dim), nn.LayerNorm(hidden_dim)
        self.mlp = MLP2([hidden_dim, mlp_dim, hidden_dim])
        self.wqkv = nn.Linear(hidden_dim, hidden_dim * 3)
        self.wo = nn.Linear(hidden_dim, hidden_dim)

    def attention_qkvpacked(self, x, cu_seqlens, max_seqlen, rope_freqs_cis=None):
        xqkv = self.wqkv(x).view(*x.shape[:-1], 3, self.num_heads, self.hidden_size_per_attention_head)
        xq, xk, xv = torch.unbind(xqkv, dim=-3)
        xq, xk = apply_rope(xq, xk, rope_freqs_cis)
        attn = VL_VISION_ATTENTION_FUNCTIONS[self.attn_implementation]  # KeyError without flash-attn
        return self.wo(attn(xq, xk, xv, cu_seqlens, deterministic=self.use_deterministic_attn))

    def forward(self, hidden_states, cu_seqlens, max_seqlen, rope_freqs_cis=None):
        hidden_states = hidden_states + self.attention_qkvpacked(self.norm0(hidden_states), cu_seqlens, max_seqlen, rope_freqs_cis)
        return hidden_states + self.mlp(self.norm1(hidden_states))


class MoonViT3dEncoder(nn.Module):
    def __init__(self, hidden_dim, num_layers, block_cfg):
        super().__init__()
        self.rope_2d = Rope2DPosEmbRepeated(block_cfg["hidden_dim"] // block_cfg["num_heads"], 512, 512)
        self.blocks = nn.ModuleList([MoonViTEncoderLayer(**block_cfg) for _ in range(num_layers)])
        self.final_layernorm = nn.LayerNorm(hidden_dim)

    def forward(self, hidden_states, grid_thws, grid_thws_list):
        freqs = self.rope_2d.get_freqs_cis(grid_thws_list, device=hidden_states.device)
        lengths = torch.cat((torch.zeros(1, dtype=grid_thws.dtype), grid_thws.prod(-1)))
        cu_seqlens = lengths.to(hidden_states.device).cumsum(0, dtype=torch.int32)  # meta in a simulation
        for block in self.blocks:
            hidden_states = block(hidden_states, cu_seqlens, lengths.max(), rope_freqs_cis=freqs)
        return self.final_layernorm(hidden_states)


class MoonViT3dPretrainedModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.merge_kernel_size = config.merge_kernel_size
        self.patch_embed = MoonVision3dPatchEmbed(config.vt_hidden_size, patch_size=config.patch_size,
                                                  pos_emb_height=config.init_pos_emb_height,
                                                  pos_emb_width=config.init_pos_emb_width)
        self.encoder = MoonViT3dEncoder(config.vt_hidden_size, config.vt_num_hidden_layers, {
            "num_heads": config.vt_num_attention_heads, "hidden_dim": config.vt_hidden_size,
            "mlp_dim": config.vt_intermediate_size, "attn_implementation": config._attn_implementation})

    def forward(self, pixel_values, grid_thws):
        grid_list = grid_thws.tolist()
        h = self.encoder(self.patch_embed(pixel_values, grid_list), grid_thws, grid_list)
        kh, kw = self.merge_kernel_size
        out, start = [], 0
        for t, gh, gw in grid_list:
            seq = h[start:start + t * gh * gw].view(t, gh // kh, kh, gw // kw, kw, -1)
            out.append(seq.permute(0, 1, 3, 2, 4, 5).mean(0).reshape((gh // kh) * (gw // kw), kh * kw, -1))
            start += t * gh * gw
        return out


class PatchMergerMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.mm_hidden_size * config.merge_kernel_size[0] * config.merge_kernel_size[1]
        self.pre_norm = nn.LayerNorm(config.mm_hidden_size, eps=config.projector_ln_eps)
        self.proj = nn.Sequential(nn.Linear(self.hidden_size, self.hidden_size), nn.GELU(),
                                  nn.Linear(self.hidden_size, config.text_hidden_size))

    def forward(self, x):
        return [self.proj(self.pre_norm(item).view(item.shape[0], -1)) for item in x]


class KimiK25ForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.vision_tower = MoonViT3dPretrainedModel(config.vision_config)
        self.mm_projector = PatchMergerMLP(config.vision_config)
        self.language_model = DeepseekV3ForCausalLM(config.text_config)

    def _merge_input_ids_with_image_features(self, image_features, inputs_embeds, input_ids, attention_mask, labels=None):
        n_image_tokens = (input_ids == self.config.media_placeholder_token_id).sum().item()  # fails on meta
        features = torch.cat(image_features)
        assert n_image_tokens == features.shape[0]
        merged = inputs_embeds.clone()
        merged[input_ids == self.config.media_placeholder_token_id] = features
        return merged, attention_mask, labels, None

    def forward(self, input_ids=None, pixel_values=None, grid_thws=None, attention_mask=None):
        embeds = self.language_model.get_input_embeddings()(input_ids)
        if pixel_values is not None:
            features = self.mm_projector(self.vision_tower(pixel_values, grid_thws))
            embeds, attention_mask, _, position_ids = self._merge_input_ids_with_image_features(
                features, embeds, input_ids, attention_mask)
        return self.language_model(inputs_embeds=embeds, attention_mask=attention_mask)
