"""``infercast-eagle3``: measure a draft's acceptance against its target on your own prompts."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from infercast_adapters import InfercastError
from infercast_adapters.errors import ConfigError
from infercast_adapters.jsonsafe import strict_json
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from infercast_eagle3 import __version__
from infercast_eagle3.loop import Eagle3Drafter, SpecSettings, TargetDrafter
from infercast_eagle3.measure import Measurement, load_draft, load_target, measure

EXIT_USAGE = 2
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infercast-eagle3", description="EAGLE3 draft models in plain PyTorch.")
    parser.add_argument("--version", action="version", version=f"infercast-eagle3 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("measure", help="acceptance of a draft against its target on your prompts (greedy)",
                       description="Run prompts through target + draft with greedy EAGLE3 decoding and report the mean "
                                   "accept length, per-position acceptance rates and a histogram.")
    p.add_argument("--target", required=True, metavar="REF", help="target model: hub id or local directory")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--draft", metavar="DIR", help="draft directory (config.json + *.safetensors, sglang names)")
    who.add_argument("--self-check", action="store_true",
                     help="draft with the target itself: a chain must measure accept length num_steps + 1")
    p.add_argument("--wrong-from", type=_positive, metavar="J",
                   help="with --self-check: draft wrong tokens from position J on (accept length exactly J)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", metavar="FILE",
                     help='JSON lines ({"text": ...} or {"input_ids": [...]}) or a text file, one prompt per line')
    src.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable)")
    p.add_argument("--num-steps", type=_positive, default=3, help="draft steps per cycle (default 3)")
    p.add_argument("--topk", type=_positive, default=1, help="branching per step; 1 = chain (default)")
    p.add_argument("--num-draft-tokens", type=_positive, default=None,
                   help="tree tokens verified per cycle (default: num_steps + 1 for a chain, num_steps x topk + 1)")
    p.add_argument("--max-new-tokens", type=_positive, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="weights' dtype (default: float32 on cpu, where bfloat16 matmuls are slow and round "
                        "differently from the GPU kernels; bfloat16 elsewhere)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--check-lossless", action="store_true",
                   help="also decode each prompt without the draft and confirm the outputs are equal")
    p.add_argument("--json", action="store_true", help="print the measurement as JSON")
    p.set_defaults(handler=_cmd_measure)
    return parser


def read_prompts(args: argparse.Namespace, target_ref: str) -> list[list[int]]:
    """Token ids for every prompt; text goes through the target's tokenizer."""
    items: list[str | list[int]] = []
    if args.prompt:
        items = list(args.prompt)
    else:
        path = Path(args.prompts)
        if not path.is_file():
            raise ConfigError(f"--prompts {path}: no such file")
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        for number, line in enumerate(lines, 1):
            if path.suffix == ".jsonl":
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from None
                value = record.get("input_ids", record.get("text", record.get("prompt"))) if isinstance(
                    record, dict) else None
                if not (isinstance(value, str) or (isinstance(value, list) and value
                                                   and all(isinstance(t, int) for t in value))):
                    raise ConfigError(f'{path}:{number}: expected {{"text": "..."}} or {{"input_ids": [ints]}}')
                items.append(value)
            else:
                items.append(line)
    if not items:
        raise ConfigError("no prompts given")
    if all(isinstance(item, list) for item in items):
        return items  # type: ignore[return-value]
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(target_ref)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"text prompts need the target's tokenizer, which could not be loaded from {target_ref!r} "
                          f"({exc}); give input_ids in a .jsonl file instead") from None
    return [item if isinstance(item, list) else tokenizer(item)["input_ids"] for item in items]


def _cmd_measure(args: argparse.Namespace, console: Console) -> int:
    if args.wrong_from is not None and not args.self_check:
        raise ConfigError("--wrong-from applies to --self-check only")
    settings = SpecSettings(args.num_steps, args.topk, args.num_draft_tokens).validated()
    prompts = read_prompts(args, args.target)
    dtype = DTYPES[args.dtype or ("float32" if str(args.device).startswith("cpu") else "bfloat16")]
    model = load_target(args.target, dtype=dtype, device=args.device)
    vocab = model.config.get_text_config().vocab_size
    bad = sorted({t for prompt in prompts for t in prompt if not 0 <= t < vocab})
    if bad:
        raise ConfigError(f"prompt token ids {bad[:5]} are outside the target's vocabulary 0..{vocab - 1}")
    if args.self_check:
        drafter = TargetDrafter(model, args.wrong_from)
    else:
        drafter = Eagle3Drafter(load_draft(args.draft, model, dtype=dtype))
    eos = getattr(model.generation_config, "eos_token_id", None) if getattr(model, "generation_config", None) else None
    eos = eos[0] if isinstance(eos, list) else eos
    with Progress(console=Console(stderr=True), transient=True, disable=args.json) as progress:
        task = progress.add_task("measuring", total=len(prompts))
        result = measure(model, drafter, prompts, settings, args.max_new_tokens, eos_token_id=eos,
                         check_lossless=args.check_lossless, on_prompt=lambda _: progress.advance(task))
    if args.json:
        print(json.dumps(strict_json(result.to_dict()), indent=2, allow_nan=False))
    else:
        print_measurement(result, console)
    return 0 if result.lossless is not False else 1


def print_measurement(result: Measurement, console: Console) -> None:
    a, s = result.acceptance, result.settings
    console.print(f"[bold]EAGLE3 acceptance[/bold]  steps {s.num_steps}, topk {s.topk}, "
                  f"draft tokens {s.num_draft_tokens}; {result.prompts} prompts, {a.cycles} cycles, "
                  f"{result.generated_tokens} tokens in {result.wall_s:.2f} s "
                  f"({result.prompts_per_s:.2f} prompts/s, {result.tokens_per_s:.1f} tokens/s)")
    if result.capture:
        console.print(f"target hidden states read: {result.capture} (indices into transformers' hidden_states)")
    console.print(f"mean accept length [bold]{a.mean_accept_length:.3f}[/bold]   "
                  f"mean accept rate {a.mean_accept_rate:.3f}")
    if result.lossless is not None:
        console.print("lossless: " + ("yes, equal to the target's greedy output" if result.lossless
                                      else "[bold red]NO: outputs differ from the target's greedy decoding[/bold red]"))
    table = Table("draft position", "acceptance rate (given the previous ones accepted)")
    for j, rate in enumerate(a.position_rates, 1):
        table.add_row(str(j), "n/a" if math.isnan(rate) else f"{rate:.3f}")
    console.print(table)
    histogram = Table("accept length", "cycles", "share")
    for length, count in a.histogram.items():
        histogram.add_row(str(length), str(count), f"{count / a.cycles:.1%}")
    console.print(histogram)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args, Console())
    except InfercastError as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
