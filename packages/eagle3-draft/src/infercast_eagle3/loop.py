"""Greedy speculative decoding against a transformers target: chain (topk 1) and tree modes.

Lossless by construction: every emitted token is the target's argmax at its position; the
draft only decides how many of them one target forward confirms.

Both models keep a KV cache. The target's holds every committed position; a verify runs the
last committed token and the draft tree on top of it and keeps the rows of the accepted path.
The draft's holds the positions whose features came from the target (sglang's draft extend);
the tree it drafts on top is dropped at the next cycle.

The tree is built as sglang 0.5.23 builds it (``python/sglang/srt/speculative/spec_utils.py``
``select_top_k_tokens``, ``eagle_utils.py`` ``organize_draft_results``, the draft loop of
``eagle_worker_v2.py``): step 0 takes the top-k of the root; each later step feeds the k
frontier nodes, every one of their k x k children enters the pool with score = parent score x
probability, and the best k become the next frontier; the verified tree is the best
num_draft_tokens - 1 nodes of the whole pool, in pool order. So an accept length measured here
means what sglang's means at the same (num_steps, topk, num_draft_tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from infercast_adapters import ConfigError

from infercast_eagle3.layers import KVCache


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

    @property
    def pool_size(self) -> int:
        """Candidates a tree is chosen from: topk after the first step, topk x topk after each later one."""
        return self.topk + (self.num_steps - 1) * self.topk ** 2

    def validated(self) -> SpecSettings:
        s, k = self.num_steps, self.topk
        if s < 1 or k < 1:
            raise ConfigError(f"num_steps and topk must be >= 1, got {s} and {k}")
        n = self.num_draft_tokens if self.num_draft_tokens is not None else (s + 1 if k == 1 else s * k + 1)
        if k == 1 and n != s + 1:
            raise ConfigError(f"a chain (topk 1) verifies num_steps + 1 = {s + 1} tokens; got num_draft_tokens {n}")
        top = self.pool_size + 1
        if not 2 <= n <= top:
            raise ConfigError(f"num_draft_tokens must be in 2..{top} (the root and the topk + (num_steps - 1) x "
                              f"topk^2 drafted candidates), got {n}")
        return SpecSettings(s, k, n)


def _additive(mask: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """A boolean ``[q, k]`` mask (True = may attend) as transformers' additive 4D mask."""
    return torch.where(mask, 0.0, float("-inf"))[None, None].to(device=device, dtype=dtype)


class Target:
    """A transformers causal LM run over a KV cache, returning the aux hidden states the draft reads."""

    def __init__(self, model, capture: list[int]) -> None:
        self.model = model.eval()
        self.capture = capture
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    @torch.no_grad()
    def run(self, ids: list[int], positions: list[int] | None = None, mask: torch.Tensor | None = None):
        """Run ``ids`` after the cached positions: at ``positions`` (default: next in line) and
        with a boolean ``mask [len(ids), cached + len(ids)]`` (default: causal). Returns
        (logits ``[len(ids), vocab]`` float32 on the CPU, aux hidden states ``[len(ids), width]``)."""
        device, cached = self.model.device, len(self)
        if positions is None:
            positions = list(range(cached, cached + len(ids)))
        if mask is None:
            mask = torch.ones(len(ids), cached + len(ids), dtype=torch.bool).tril(cached)
        out = self.model(input_ids=torch.tensor([ids], device=device), position_ids=torch.tensor([positions], device=device),
                         attention_mask=_additive(mask, self.model.dtype, device), past_key_values=self.cache,
                         use_cache=True, output_hidden_states=bool(self.capture))
        aux = torch.cat([out.hidden_states[i][0] for i in self.capture], -1) if self.capture else None
        return out.logits[0].float().cpu(), aux

    def keep(self, start: int, rows: list[int]) -> None:
        """Keep the cached positions before ``start`` and, of those after it, the given rows."""
        from transformers.cache_utils import DynamicLayer

        index = torch.tensor(list(range(start)) + [start + r for r in rows])
        for layer in self.cache.layers:
            if type(layer) is not DynamicLayer:  # subclasses (sliding window) keep other positions
                raise ConfigError(f"the target's KV cache has {type(layer).__name__} layers (sliding window or "
                                  "compressed); the measurement handles full-attention caches only")
            if layer.keys is not None and layer.keys.numel():
                i = index.to(layer.keys.device)
                layer.keys, layer.values = layer.keys.index_select(-2, i), layer.values.index_select(-2, i)


@torch.no_grad()
def greedy_reference(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy continuation (the ground truth of losslessness), one token per step."""
    target = Target(model, [])
    logits, _ = target.run(list(prompt))
    out = [int(logits[-1].argmax())]
    while len(out) < max_new_tokens:
        logits, _ = target.run(out[-1:])
        out.append(int(logits[-1].argmax()))
    return out


@dataclass
class DraftInput:
    """One tree node fed to the drafter."""

    token: int
    """Target token id."""
    hidden: torch.Tensor
    """The hidden state the drafter returned where this node was proposed."""
    depth: int
    """1 = proposed by the root."""
    ancestors: list[int]
    """Rows (see :class:`DraftStep`) of the fed nodes on the path to this one, root side first."""
    path: list[int]
    """Target token ids from depth 1 to this node."""


@dataclass
class DraftStep:
    """What a drafter says after one position."""

    logp: torch.Tensor
    """Log-probabilities over the draft vocabulary (float32, CPU)."""
    hidden: torch.Tensor
    """The hidden state that feeds the tokens proposed here."""
    row: int = -1
    """This position's row among the nodes fed in this cycle (-1: the root)."""


def node_mask(nodes: list[DraftInput], committed: int, cached: int) -> torch.Tensor:
    """Rows for tree nodes fed after ``cached`` positions, the first ``committed`` of them the
    sequence's: each node attends to those, to its fed ancestors and to itself."""
    mask = torch.zeros(len(nodes), cached + len(nodes), dtype=torch.bool)
    mask[:, :committed] = True
    for i, node in enumerate(nodes):
        mask[i, [committed + r for r in node.ancestors] + [cached + i]] = True
    return mask


class Eagle3Drafter:
    """Proposes tokens with an :class:`~infercast_eagle3.model.Eagle3Draft` over its own KV cache."""

    def __init__(self, draft) -> None:
        self.draft = draft.eval()
        self.reset()

    def reset(self) -> None:
        """Start a new sequence."""
        self.cache = KVCache()
        self.committed = 0

    def _device(self) -> torch.device:
        return self.draft.norm.weight.device

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.draft.to_target_ids(draft_ids.to(self._device())).cpu()

    @torch.no_grad()
    def begin(self, tokens: list[int], aux: torch.Tensor) -> DraftStep:
        """Extend the draft over the positions the target has just committed: ``aux`` holds the
        target's features of positions ``committed .. len(tokens) - 2`` (position p reads token
        p + 1). Returns the root: the step after the last committed token."""
        device, new = self._device(), len(tokens) - 1 - self.committed
        if aux.shape[0] != new or new < 1:
            raise ValueError(f"expected target features for {new} new position(s), got {aux.shape[0]}")
        self.cache.truncate(self.committed)  # drop last cycle's tree
        ids = torch.tensor(tokens[self.committed + 1:], device=device)
        feats = self.draft.project_aux(aux.to(device=device, dtype=self.draft.dtype))
        positions = torch.arange(self.committed, len(tokens) - 1, device=device)
        mask = torch.ones(new, self.committed + new, dtype=torch.bool, device=device).tril(self.committed)
        logits, h = self.draft(ids, feats, positions, mask, self.cache)
        self.committed = len(tokens) - 1
        return DraftStep(logits[-1].float().log_softmax(-1).cpu(), h[-1])

    @torch.no_grad()
    def expand(self, nodes: list[DraftInput]) -> list[DraftStep]:
        """Feed tree nodes in one forward; each attends to the committed positions, its fed
        ancestors and itself."""
        device, cached = self._device(), len(self.cache)
        rows = cached - self.committed
        ids = torch.tensor([n.token for n in nodes], device=device)
        hidden = torch.stack([n.hidden for n in nodes]).to(device)
        positions = torch.tensor([self.committed - 1 + n.depth for n in nodes], device=device)
        logits, h = self.draft(ids, hidden, positions, node_mask(nodes, self.committed, cached).to(device), self.cache)
        logp = logits.float().log_softmax(-1).cpu()
        return [DraftStep(logp[i], h[i], rows + i) for i in range(len(nodes))]


class TargetDrafter:
    """A drafter that proposes the target's own greedy tokens: every draft is accepted, so a
    chain with ``num_steps`` s measures an accept length of exactly s + 1. With ``wrong_from``
    = j, drafts from position j on are the target's least likely token instead, and the accept
    length is exactly j. A check of the measurement itself, on any target."""

    def __init__(self, model, wrong_from: int | None = None) -> None:
        if wrong_from is not None and wrong_from < 1:
            raise ConfigError(f"wrong_from counts draft positions from 1, got {wrong_from}")
        self.model, self.wrong_from = model.eval(), wrong_from
        self.target = Target(model, [])
        self.committed = 0

    def reset(self) -> None:
        self.target.reset()
        self.committed = 0

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def _step(self, logits: torch.Tensor, depth: int, row: int) -> DraftStep:
        logp = logits.float().log_softmax(-1)
        if self.wrong_from is not None and depth + 1 >= self.wrong_from:
            logp = (-logp).log_softmax(-1)  # least likely first: never the target's argmax
        # the greedy path far ahead of any sibling, so trees keep it whatever their size
        logp = torch.where(logp == logp.max(), 0.0, logp - 1e4)
        return DraftStep(logp, torch.zeros(1), row)

    def begin(self, tokens: list[int], aux: torch.Tensor | None) -> DraftStep:
        self.target.keep(self.committed, [])  # drop last cycle's tree
        logits, _ = self.target.run(tokens[self.committed:])
        self.committed = len(tokens)
        return self._step(logits[-1], 0, -1)

    def expand(self, nodes: list[DraftInput]) -> list[DraftStep]:
        cached = len(self.target)
        rows = cached - self.committed
        logits, _ = self.target.run([n.token for n in nodes], [self.committed - 1 + n.depth for n in nodes],
                                    node_mask(nodes, self.committed, cached))
        return [self._step(logits[i], node.depth, rows + i) for i, node in enumerate(nodes)]


@dataclass
class _Node:
    token: int
    parent: int
    """Index of the parent in the node list; -1 = the root."""
    depth: int
    score: float
    """Product of the draft's probabilities along the path (sglang's score)."""


def _top(step: DraftStep, k: int, to_target) -> tuple[list[float], list[int]]:
    top = step.logp.exp().topk(min(k, step.logp.shape[0]))
    return top.values.tolist(), to_target(top.indices).tolist()


def draft_tree(drafter, root: DraftStep, settings: SpecSettings) -> list[_Node]:
    """The verified tree: the best ``num_draft_tokens - 1`` nodes of sglang's candidate pool,
    in pool order (parents before children); see the module docstring."""
    k = settings.topk
    probs, tokens = _top(root, k, drafter.to_target)
    pool = [_Node(t, -1, 1, p) for p, t in zip(probs, tokens)]
    # frontier: (pool index, hidden that feeds it, fed-ancestor rows, path)
    frontier = [(i, root.hidden, [], [pool[i].token]) for i in range(len(pool))]
    for depth in range(2, settings.num_steps + 1):
        steps = drafter.expand([DraftInput(pool[i].token, h, depth - 1, rows, path) for i, h, rows, path in frontier])
        children = []
        for (parent, _, rows, path), step in zip(frontier, steps):
            for p, t in zip(*_top(step, k, drafter.to_target)):
                pool.append(_Node(t, parent, depth, pool[parent].score * p))
                children.append((len(pool) - 1, step.hidden, rows + [step.row], path + [t]))
        scores = torch.tensor([pool[c[0]].score for c in children])
        best = scores.topk(min(k, len(children))).indices.tolist()
        frontier = [children[i] for i in best]
    scores = torch.tensor([n.score for n in pool])
    chosen = sorted(scores.topk(min(settings.num_draft_tokens - 1, len(pool))).indices.tolist())
    place: dict[int, int] = {}  # pool index -> tree index
    tree: list[_Node] = []
    for old in chosen:
        node = pool[old]
        parent = -1 if node.parent == -1 else place.get(node.parent)
        if parent is None:  # its parent lost a tie in score: sglang could not verify it either
            continue
        place[old] = len(tree)
        tree.append(_Node(node.token, parent, node.depth, node.score))
    return tree


def _verify_mask(prefix: int, tree: list[_Node]) -> tuple[torch.Tensor, list[int]]:
    """Mask rows ``[1 + len(tree), prefix + 1 + len(tree)]`` and positions for the last
    committed token (row 0, at position ``prefix``) followed by the tree."""
    size = 1 + len(tree)
    mask = torch.zeros(size, prefix + size, dtype=torch.bool)
    mask[:, : prefix + 1] = True
    positions = [prefix]
    for i, node in enumerate(tree):
        j = i
        while j != -1:
            mask[i + 1, prefix + 1 + j] = True
            j = tree[j].parent
        positions.append(prefix + node.depth)
    return mask, positions


def speculative_generate(target: Target, drafter, prompt: list[int], max_new_tokens: int,
                         settings: SpecSettings = SpecSettings(), eos_token_id: int | None = None) -> SpecOutput:
    """Generate ``max_new_tokens`` greedily with draft/verify cycles."""
    settings = settings.validated()
    if not prompt:
        raise ConfigError("the prompt must hold at least one token")
    target.reset()
    drafter.reset()
    logits, aux = target.run(list(prompt))
    tokens = list(prompt) + [int(logits[-1].argmax())]
    output = SpecOutput(tokens=[tokens[-1]])
    while len(output.tokens) < max_new_tokens and output.tokens[-1] != eos_token_id:
        tree = draft_tree(drafter, drafter.begin(tokens, aux), settings)
        mask, positions = _verify_mask(len(tokens) - 1, tree)
        logits, aux_rows = target.run([tokens[-1]] + [n.token for n in tree], positions, mask)
        accepted, rows, current = [], [0], -1
        while True:
            best = int(logits[rows[-1]].argmax())
            child = next((i for i, n in enumerate(tree) if n.parent == current and n.token == best), None)
            if child is None:
                break
            accepted.append(best)
            rows.append(child + 1)
            current = child
        output.cycles.append(Cycle(len(accepted) + 1, settings.num_draft_tokens))
        target.keep(len(tokens) - 1, rows)
        aux = aux_rows[rows] if aux_rows is not None else None
        new = accepted + [best]
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
