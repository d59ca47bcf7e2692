"""Small configurations of real architectures, for tests that derive expected values by hand."""

LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256, intermediate_size=512,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
             max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
DEEPSEEK_V3 = dict(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], hidden_size=256,
                   intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=3, first_k_dense_replace=1,
                   num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64,
                   qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8, n_shared_experts=1,
                   num_experts_per_tok=2, n_group=4, topk_group=2, vocab_size=1000, max_position_embeddings=4096,
                   tie_word_embeddings=False, torch_dtype="bfloat16",
                   quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [128, 128]})
QWEN3_MOE = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_size=256,
                 intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                 vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="bfloat16")
