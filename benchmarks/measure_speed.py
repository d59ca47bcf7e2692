"""Speed of ``infercast-eagle3 measure`` on the CPU: prompts/s and tokens/s of the measurement.

A small random Llama target (hidden 256, 8 layers, 8,192-token vocabulary, about 6 M
parameters) and a random Llama EAGLE3 draft are written to a temporary directory and measured
through the command line, so the same script times an older checkout too (put its package
``src`` folders first on ``PYTHONPATH``). A random draft is rarely accepted (accept length ~1:
every cycle drafts and verifies); ``--self-check`` drafts with the target itself (accept
length num_steps + 1). On a shared machine wall time varies with the neighbours; the command's
CPU time (``command_cpu_s``, all threads) varies less.

    python benchmarks/measure_speed.py --prompts 200 --prompt-length 256 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 256, 8, 8, 4, 688, 8192


def write_models(root: Path) -> None:
    torch.manual_seed(0)
    target = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=2048)
    AutoModelForCausalLM.from_config(target).save_pretrained(root / "target")
    draft = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=1,
                        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=2048,
                        architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=VOCAB, target_hidden_size=HIDDEN,
                        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True})
    draft.save_pretrained(root / "draft")
    head_dim = HIDDEN // HEADS
    shapes = {"fc.weight": (HIDDEN, 3 * HIDDEN), "norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN),
              "layers.0.input_layernorm.weight": (HIDDEN,), "layers.0.hidden_norm.weight": (HIDDEN,),
              "layers.0.post_attention_layernorm.weight": (HIDDEN,),
              "layers.0.self_attn.q_proj.weight": (HEADS * head_dim, 2 * HIDDEN),
              "layers.0.self_attn.k_proj.weight": (KV_HEADS * head_dim, 2 * HIDDEN),
              "layers.0.self_attn.v_proj.weight": (KV_HEADS * head_dim, 2 * HIDDEN),
              "layers.0.self_attn.o_proj.weight": (HIDDEN, HEADS * head_dim),
              "layers.0.mlp.gate_proj.weight": (INTER, HIDDEN), "layers.0.mlp.up_proj.weight": (INTER, HIDDEN),
              "layers.0.mlp.down_proj.weight": (HIDDEN, INTER)}
    tensors = {name: (torch.ones(shape) if len(shape) == 1 else torch.randn(shape) * 0.02) for name, shape in shapes.items()}
    save_file(tensors, str(root / "draft" / "model.safetensors"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=3)
    parser.add_argument("--topk", type=int, default=1)
    parser.add_argument("--num-draft-tokens", type=int, default=None)
    parser.add_argument("--self-check", action="store_true", help="draft with the target itself")
    args = parser.parse_args()

    from infercast_eagle3.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_models(root)
        g = torch.Generator().manual_seed(1)
        prompts = [torch.randint(0, VOCAB, (args.prompt_length,), generator=g).tolist() for _ in range(args.prompts)]
        (root / "prompts.jsonl").write_text("\n".join(json.dumps({"input_ids": p}) for p in prompts))
        argv = ["measure", "--target", str(root / "target"), "--prompts", str(root / "prompts.jsonl"),
                "--num-steps", str(args.num_steps), "--topk", str(args.topk), "--max-new-tokens",
                str(args.max_new_tokens), "--dtype", "float32", "--device", "cpu", "--json"]
        argv += ["--self-check"] if args.self_check else ["--draft", str(root / "draft")]
        if args.num_draft_tokens is not None:
            argv += ["--num-draft-tokens", str(args.num_draft_tokens)]
        out = io.StringIO()
        start, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out):
            code = cli(argv)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        if code != 0:
            print(out.getvalue(), file=sys.stderr)
            return code
    report = json.loads(out.getvalue())
    wall = report["wall_s"]
    print(json.dumps({
        "prompts": report["prompts"], "prompt_length": args.prompt_length, "generated_tokens": report["generated_tokens"],
        "settings": report["settings"], "mean_accept_length": report["acceptance"]["mean_accept_length"],
        "measure_wall_s": round(wall, 2), "prompts_per_s": round(report["prompts"] / wall, 3),
        "tokens_per_s": round(report["generated_tokens"] / wall, 1), "command_wall_s": round(total, 2),
        "command_cpu_s": round(cpu, 2), "torch_threads": torch.get_num_threads()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
