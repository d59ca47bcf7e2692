"""Greedy speculative decoding against a transformers target: chain (topk 1) and tree modes.

Lossless by construction: every emitted token is the target's argmax at its position; the
draft only decides how many of them one target forward confirms. The target and draft are
recomputed over the whole sequence each cycle (no KV cache): this loop is for correctness and
acceptance measurement on CPU, not speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from infercast_adapters import ConfigError


@dataclass
class Cycle:
    accept_length: int
    """Tokens emitted by one verify: accepted drafts + the target's own next token (>= 1)."""
    num_draft_tokens: int

    @property
    def accept_rate(self) -> float:
        """(accept length - 1) / (num_draft_tokens - 1), the engines' definition."""
        return (self.accept_length - 1) / (self.num_draft_tokens - 1)


@dataclass
class SpecOutput:
    tokens: list[int]
    """Generated tokens (prompt excluded)."""
    cycles: list[Cycle] = field(default_factory=list)


@dataclass(frozen=True)
class SpecSettings:
    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int | None = None
    """Tree size including the root; chain (topk 1) requires num_steps + 1, the default."""

    def validated(self) -> SpecSettings:
        s, k = self.num_steps, self.topk
        if s < 1 or k < 1:
            raise ConfigError(f"num_steps and topk must be >= 1, got {s} and {k}")
        n = self.num_draft_tokens if self.num_draft_tokens is not None else (s + 1 if k == 1 else s * k + 1)
        if k == 1 and n != s + 1:
            raise ConfigError(f"a chain (topk 1) verifies num_steps + 1 = {s + 1} tokens; got num_draft_tokens {n}")
        if not 2 <= n <= s * k + 1:
            raise ConfigError(f"num_draft_tokens must be in 2..{s * k + 1} (num_steps x topk + 1), got {n}")
        return SpecSettings(s, k, n)


class Target:
    """A transformers causal LM that also returns the aux hidden states the draft reads."""

    def __init__(self, model, capture: list[int]) -> None:
        self.model = model.eval()
        self.capture = capture

    @torch.no_grad()
    def __call__(self, ids: list[int], mask: torch.Tensor | None = None, positions: list[int] | None = None):
        device = self.model.device
        input_ids = torch.tensor([ids], device=device)
        kwargs = {}
        if mask is not None:
            # additive float mask [1, 1, q, k]: 0 where attention is allowed, -inf elsewhere
            additive = torch.where(mask, 0.0, float("-inf"))[None, None]
            kwargs["attention_mask"] = additive.to(device=device, dtype=self.model.dtype)
            kwargs["position_ids"] = torch.tensor([positions], device=device)
        out = self.model(input_ids=input_ids, output_hidden_states=True, **kwargs)
        aux = torch.cat([out.hidden_states[i][0] for i in self.capture], -1)
        return out.logits[0].float().cpu(), aux


@torch.no_grad()
def greedy_reference(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy continuation (the ground truth of losslessness)."""
    ids = list(prompt)
    for _ in range(max_new_tokens):
        ids.append(int(model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1].argmax()))
    return ids[len(prompt):]


class Eagle3Drafter:
    """Proposes tokens with an :class:`~infercast_eagle3.model.Eagle3Draft`."""

    def __init__(self, draft) -> None:
        self.draft = draft.eval()

    @torch.no_grad()
    def begin(self, tokens: list[int], aux: torch.Tensor) -> None:
        """Target features for positions 0..len(tokens)-2 (the last token is not verified yet)."""
        self.tokens = tokens
        weight = self.draft.norm.weight  # fc is absent when the draft reads the target state directly
        self.feats = self.draft.project_aux(aux[: len(tokens) - 1].to(device=weight.device, dtype=weight.dtype))

    @torch.no_grad()
    def step(self, path_tokens: list[int], path_hiddens: list[torch.Tensor]):
        """Log-probabilities over the draft vocabulary after the path, the hidden state there,
        and the draft-to-target id map."""
        device = self.feats.device
        ids = torch.tensor(self.tokens[1:] + path_tokens, device=device)
        hidden = torch.cat([self.feats, *[h[None] for h in path_hiddens]], 0) if path_hiddens else self.feats
        seq = ids.shape[0]
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
        logits, h = self.draft(ids, hidden, torch.arange(seq, device=device), mask)
        return logits[-1].float().log_softmax(-1).cpu(), h[-1], lambda ids: self.draft.to_target_ids(ids.to(device)).cpu()


class TargetDrafter:
    """A drafter that proposes the target's own greedy tokens: every draft is accepted, so a
    chain with ``num_steps`` s measures an accept length of exactly s + 1. With ``wrong_from``
    = j, drafts from position j on are the target's least likely token instead, and the accept
    length is exactly j. A check of the measurement itself, on any target."""

    def __init__(self, model, wrong_from: int | None = None) -> None:
        if wrong_from is not None and wrong_from < 1:
            raise ConfigError(f"wrong_from counts draft positions from 1, got {wrong_from}")
        self.model, self.wrong_from = model.eval(), wrong_from

    def begin(self, tokens: list[int], aux: torch.Tensor) -> None:
        self.tokens = tokens

    @torch.no_grad()
    def step(self, path_tokens: list[int], path_hiddens: list[torch.Tensor]):
        ids = torch.tensor([self.tokens + path_tokens], device=self.model.device)
        logp = self.model(input_ids=ids).logits[0, -1].float().log_softmax(-1).cpu()
        if self.wrong_from is not None and len(path_tokens) + 1 >= self.wrong_from:
            logp = (-logp).log_softmax(-1)  # least likely first: never the target's argmax
        # the greedy path far ahead of any sibling, so trees keep it whatever their size
        logp = torch.where(logp == logp.max(), 0.0, logp - 1e4)
        return logp, torch.zeros(1), lambda ids: ids


@dataclass
class _Node:
    token: int
    parent: int  # index into the node list; -1 = the root
    depth: int
    score: float
    path: list[int]
    hiddens: list[torch.Tensor]


def _draft_tree(drafter, settings: SpecSettings) -> list[_Node]:
    root_logp, root_h, to_target = drafter.step([], [])
    frontier = [(-1, [], [root_h], root_logp, 0.0)]
    nodes: list[_Node] = []
    for depth in range(1, settings.num_steps + 1):
        candidates = []
        for parent, path, hiddens, logp, score in frontier:
            top = logp.topk(min(settings.topk, logp.shape[0]))
            for value, draft_id in zip(top.values.tolist(), top.indices.tolist()):
                token = int(to_target(torch.tensor(draft_id)))
                candidates.append((score + value, parent, token, path, hiddens))
        candidates.sort(key=lambda c: -c[0])
        frontier = []
        for score, parent, token, path, hiddens in candidates[: settings.topk]:
            nodes.append(_Node(token, parent, depth, score, path + [token], hiddens))
            if depth < settings.num_steps:
                logp, h, _ = drafter.step(path + [token], hiddens)
                frontier.append((len(nodes) - 1, path + [token], hiddens + [h], logp, score))
    chosen = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))[: settings.num_draft_tokens - 1]
    keep = sorted(chosen, key=lambda i: (nodes[i].depth, i))
    remap = {old: new for new, old in enumerate(keep)}
    tree = []
    for old in keep:
        node = nodes[old]
        parent = -1 if node.parent == -1 else remap.get(node.parent)
        if parent is None:  # ancestor not kept (a tie in scores): drop the orphan
            continue
        tree.append(_Node(node.token, parent, node.depth, node.score, node.path, node.hiddens))
    return tree


def _tree_mask(prefix: int, tree: list[_Node]) -> tuple[torch.Tensor, list[int]]:
    size = prefix + len(tree)
    mask = torch.zeros(size, size, dtype=torch.bool)
    mask[:prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool).tril()
    positions = list(range(prefix))
    for i, node in enumerate(tree):
        row = prefix + i
        mask[row, :prefix] = True
        j = i
        while j != -1:
            mask[row, prefix + j] = True
            j = tree[j].parent
        positions.append(prefix - 1 + node.depth)
    return mask, positions


def speculative_generate(target: Target, drafter, prompt: list[int], max_new_tokens: int,
                         settings: SpecSettings = SpecSettings(), eos_token_id: int | None = None) -> SpecOutput:
    """Generate ``max_new_tokens`` greedily with draft/verify cycles."""
    settings = settings.validated()
    if not prompt:
        raise ConfigError("the prompt must hold at least one token")
    logits, aux = target(list(prompt))
    tokens = list(prompt) + [int(logits[-1].argmax())]
    output = SpecOutput(tokens=[tokens[-1]])
    while len(output.tokens) < max_new_tokens and output.tokens[-1] != eos_token_id:
        drafter.begin(tokens, aux)
        tree = _draft_tree(drafter, settings)
        mask, positions = _tree_mask(len(tokens), tree)
        logits, aux_all = target(tokens + [n.token for n in tree], mask, positions)
        accepted, row, node_rows = [], len(tokens) - 1, []
        current = -1
        while True:
            best = int(logits[row].argmax())
            child = next((i for i, n in enumerate(tree) if n.parent == current and n.token == best), None)
            if child is None:
                bonus = best
                break
            accepted.append(best)
            node_rows.append(len(tokens) + child)
            current, row = child, len(tokens) + child
        output.cycles.append(Cycle(len(accepted) + 1, settings.num_draft_tokens))
        aux = torch.cat([aux_all[: len(tokens)], aux_all[node_rows]], 0) if node_rows else aux_all[: len(tokens)]
        new = accepted + [bonus]
        tokens += new
        output.tokens += new
    if eos_token_id is not None and eos_token_id in output.tokens:
        output.tokens = output.tokens[: output.tokens.index(eos_token_id) + 1]
    output.tokens = output.tokens[:max_new_tokens]
    return output


@dataclass
class Acceptance:
    mean_accept_length: float
    mean_accept_rate: float
    position_rates: list[float]
    """Chain position j: P(draft j accepted | drafts 1..j-1 accepted)."""
    histogram: dict[int, int]
    cycles: int


def summarize(cycles: list[Cycle], num_steps: int) -> Acceptance:
    if not cycles:
        raise ConfigError("no draft/verify cycles to summarise (generate more than one token)")
    lengths = [c.accept_length for c in cycles]
    rates = []
    for j in range(1, num_steps + 1):
        reached = sum(1 for n in lengths if n - 1 >= j - 1)
        rates.append(sum(1 for n in lengths if n - 1 >= j) / reached if reached else math.nan)
    histogram = {n: lengths.count(n) for n in range(1, num_steps + 2)}
    return Acceptance(sum(lengths) / len(lengths), sum(c.accept_rate for c in cycles) / len(cycles), rates, histogram,
                      len(cycles))
