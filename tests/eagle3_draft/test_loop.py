"""The draft/verify loop: lossless with KV caches, trees chosen as sglang chooses them, and
acceptance measured with the engines' definitions."""

from __future__ import annotations

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.config import ADD_ONE, from_transformers
from infercast_eagle3.loop import (
    DraftStep,
    Eagle3Drafter,
    SpecSettings,
    Target,
    TargetDrafter,
    draft_tree,
    greedy_reference,
    speculative_generate,
    summarize,
)
from infercast_eagle3.model import build_draft
from transformers import AutoModelForCausalLM, LlamaConfig

from ..grids import grid

VOCAB = 97
SETTINGS = {"chain-s3": SpecSettings(3, 1), "tree-s3k2n5": SpecSettings(3, 2, 5), "tree-s2k3n6": SpecSettings(2, 3, 6),
            "tree-s3k2n7": SpecSettings(3, 2, 7)}


def tiny_llama_target(seed: int):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    config._attn_implementation = "eager"
    return AutoModelForCausalLM.from_config(config).eval()


def tiny_llama_draft_config(target_hidden: int = 32, **overrides) -> LlamaConfig:
    fields = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=VOCAB,
                  target_hidden_size=target_hidden)
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_llama_draft(seed: int, target_hidden: int = 32, **overrides):
    torch.manual_seed(seed + 1000)
    return build_draft(from_transformers(tiny_llama_draft_config(target_hidden, **overrides)), "llama")


def random_prompt(seed: int, length: int) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize(("seed", "prompt_length", "name"), grid([0, 1, 2], [1, 5, 13], list(SETTINGS),
                                                                  name=lambda s, p, n: f"{n}-{p}-{s}"))
def test_llama_target_with_llama_draft_is_lossless(seed, prompt_length, name) -> None:
    settings = SETTINGS[name]
    model = tiny_llama_target(seed)
    draft = tiny_llama_draft(seed)
    prompt = random_prompt(seed, prompt_length)
    target = Target(model, draft.config.capture_indices(model.config.num_hidden_layers, ADD_ONE))
    out = speculative_generate(target, Eagle3Drafter(draft), prompt, 12, settings)
    assert out.tokens == greedy_reference(model, prompt, 12)
    assert all(1 <= c.accept_length <= settings.num_steps + 1 for c in out.cycles)


def test_greedy_reference_with_a_cache_equals_recomputing_the_sequence() -> None:
    model, prompt = tiny_llama_target(3), random_prompt(3, 4)
    ids = list(prompt)
    for _ in range(10):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert greedy_reference(model, prompt, 10) == ids[len(prompt):]


def test_a_tree_verify_over_the_cache_equals_the_whole_sequence_with_a_tree_mask() -> None:
    """Rows of a cached verify, and the cache kept after it, against recomputing everything."""
    model = tiny_llama_target(4)
    prefix, tree = random_prompt(4, 6), [11, 12, 13, 14]  # 11 <- root; 12, 13 <- 11; 14 <- 12
    parents = [-1, 0, 0, 1]
    target = Target(model, [2, 4])
    target.run(prefix[:-1])
    mask = torch.zeros(5, 5 + 5, dtype=torch.bool)
    mask[:, :6] = True
    for i, parent in enumerate(parents, 1):
        mask[i, 5 + i] = True
        while parent != -1:
            mask[i, 5 + 1 + parent] = True
            parent = parents[parent]
    positions = [5, 6, 7, 7, 8]
    logits, aux = target.run([prefix[-1]] + tree, positions, mask)
    full = torch.ones(10, 10, dtype=torch.bool).tril()
    full[5:, :] = mask
    out = model(input_ids=torch.tensor([prefix[:-1] + [prefix[-1]] + tree]),
                position_ids=torch.tensor([list(range(5)) + positions]),
                attention_mask=torch.where(full, 0.0, float("-inf"))[None, None], output_hidden_states=True)
    assert torch.allclose(logits, out.logits[0, 5:], atol=1e-5)
    assert torch.allclose(aux, torch.cat([out.hidden_states[2][0, 5:], out.hidden_states[4][0, 5:]], -1), atol=1e-5)
    target.keep(5, [0, 1, 3])  # the accepted path: the last committed token (row 0), 11, then 13
    assert len(target) == 8
    after, _ = target.run([21], [8])
    reference = model(input_ids=torch.tensor([prefix + [11, 13, 21]])).logits[0, -1]
    assert torch.allclose(after[-1], reference, atol=1e-5)


def test_the_draft_cache_gives_the_logits_of_the_whole_sequence() -> None:
    """begin (draft extend) and expand (tree steps) over the cache against one uncached pass."""
    draft = tiny_llama_draft(5)
    drafter = Eagle3Drafter(draft)
    tokens = random_prompt(5, 7)
    aux = torch.randn(6, 96)
    root = drafter.begin(tokens, aux)
    feats = draft.project_aux(aux)
    seq = torch.tensor(tokens[1:])
    logits, h = draft(seq, feats, torch.arange(6), torch.ones(6, 6, dtype=torch.bool).tril())
    assert torch.allclose(root.logp, logits[-1].log_softmax(-1), atol=1e-5)
    (step,) = drafter.expand([_input(30, root.hidden, 1, [])])
    logits2, h2 = draft(torch.cat([seq, torch.tensor([30])]), torch.cat([feats, root.hidden[None]]), torch.arange(7),
                        torch.ones(7, 7, dtype=torch.bool).tril())
    assert torch.allclose(step.logp, logits2[-1].log_softmax(-1), atol=1e-5) and step.row == 0
    assert torch.allclose(step.hidden, h2[-1], atol=1e-5)
    # the next cycle drops the tree: two more committed positions, as if the tree never was
    root2 = drafter.begin(tokens + [40, 41], torch.randn(2, 96))
    assert len(drafter.cache) == 8 and root2.logp.shape == (VOCAB,)


def _input(token, hidden, depth, ancestors):
    from infercast_eagle3.loop import DraftInput

    return DraftInput(token, hidden, depth, ancestors, [token])


def test_a_draft_that_reproduces_the_target_is_always_fully_accepted() -> None:
    model = tiny_llama_target(0)
    target = Target(model, [2, 3, 3])
    out = speculative_generate(target, TargetDrafter(model), [3, 1, 4], 1 + 4 * 5, SpecSettings(3, 1))
    assert out.tokens == greedy_reference(model, [3, 1, 4], 21)
    stats = summarize(out.cycles, 3)
    assert stats.mean_accept_length == 4.0 and stats.mean_accept_rate == 1.0  # s + 1 tokens every cycle
    assert stats.position_rates == [1.0, 1.0, 1.0] and stats.histogram == {1: 0, 2: 0, 3: 0, 4: 5}


def test_a_draft_wrong_from_its_second_token_gives_accept_length_two() -> None:
    model = tiny_llama_target(1)
    out = speculative_generate(Target(model, [2, 3, 3]), TargetDrafter(model, wrong_from=2), [7], 13, SpecSettings(3, 1))
    stats = summarize(out.cycles, 3)
    assert out.tokens == greedy_reference(model, [7], 13)
    assert stats.mean_accept_length == 2.0 and stats.mean_accept_rate == pytest.approx(1 / 3)
    assert stats.position_rates[:2] == [1.0, 0.0]


@pytest.mark.parametrize(("settings", "message"), [
    (SpecSettings(3, 1, 5), "num_steps \\+ 1 = 4"),
    (SpecSettings(2, 2, 9), "2..7 \\(the root and the topk \\+ \\(num_steps - 1\\) x topk\\^2"),
    (SpecSettings(0, 1), ">= 1"),
])
def test_bad_settings_are_errors(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        settings.validated()


def test_a_tree_may_hold_every_candidate_of_sglangs_pool() -> None:
    assert SpecSettings(3, 2, 11).validated().num_draft_tokens == 11  # 2 + 2 x 4 candidates + the root
    with pytest.raises(ConfigError, match="2..11"):
        SpecSettings(3, 2, 12).validated()


@pytest.mark.parametrize("settings", [SpecSettings(3, 2, 5), SpecSettings(3, 2, 7)], ids=["n5", "n7"])
def test_a_tree_keeps_the_target_path_and_accepts_it_whole(settings) -> None:
    model = tiny_llama_target(2)
    out = speculative_generate(Target(model, []), TargetDrafter(model), [5, 9], 17, settings)
    assert out.tokens == greedy_reference(model, [5, 9], 17)
    stats = summarize(out.cycles, 3)
    assert stats.mean_accept_length == 4.0
    assert stats.mean_accept_rate == pytest.approx(3 / (settings.num_draft_tokens - 1))


def test_wrong_from_counts_positions_from_one() -> None:
    with pytest.raises(ConfigError, match="from 1"):
        TargetDrafter(tiny_llama_target(0), wrong_from=0)


# ------------------------------------------------------------------------------ the tree sglang builds

V = 12
ROOT = torch.tensor([.02, .50, .32, .06] + [0.0] * 8)
"""Root distribution: top-2 are token 1 (0.50) and token 2 (0.32)."""
CHILDREN = {  # path -> the next-token distribution after it
    (1,): {3: .6, 4: .3, 5: .1},
    (2,): {6: .9, 7: .08, 8: .02},
    (1, 3): {9: .55, 10: .35, 11: .1},
    (2, 6): {10: .45, 11: .4, 9: .15},
}


def _distribution(path: tuple) -> torch.Tensor:
    probs = torch.zeros(V)
    for token, p in CHILDREN[path].items():
        probs[token] = p
    return probs


class ScriptedDrafter:
    """A drafter whose distributions are fixed per path; records what it was fed."""

    def __init__(self) -> None:
        self.fed: list[list[tuple]] = []

    def to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids

    def expand(self, nodes) -> list[DraftStep]:
        self.fed.append([tuple(n.path) for n in nodes])
        return [DraftStep(_distribution(tuple(n.path)).log(), torch.zeros(1), i) for i, n in enumerate(nodes)]


def sglang_tree(settings: SpecSettings) -> list[tuple[tuple, tuple | None]]:
    """sglang 0.5.23's choice, written from ``eagle_worker_v2.py`` (draft loop),
    ``spec_utils.select_top_k_tokens`` and ``eagle_utils.organize_draft_results`` for one request:
    the score, token and parent lists, the top n - 1 pool indices sorted, and each selected
    index's parent ``parent_list[index // topk]`` (the tree kernel's rule). Returns
    (path, parent path) per selected node, in sglang's order."""
    s, k, n = settings.num_steps, settings.topk, settings.num_draft_tokens
    topk_p, topk_index = ROOT.topk(k)
    score_list, token_list = [topk_p[None, None, :]], [topk_index[None]]
    parents_list = [torch.arange(-1, k)[None]]
    scores, paths = topk_p[None], [(int(t),) for t in topk_index]
    pool_paths = list(paths)
    for i in range(1, s):
        probs = torch.stack([_distribution(p) for p in paths])
        topk_p, topk_index = probs.topk(k, -1)
        expand = scores.unsqueeze(2) * topk_p.view(-1, k, k)
        cs_p, cs_index = expand.flatten(1).topk(k, -1)
        flat = topk_index.view(-1, k * k)
        score_list.append(expand)
        token_list.append(flat)
        parents_list.append(cs_index + (k * k * (i - 1) + k))
        children = [paths[j // k] + (int(flat[0, j]),) for j in range(k * k)]
        pool_paths += children
        paths, scores = [children[int(j)] for j in cs_index[0]], cs_p
    pool_scores = torch.cat([x.flatten(1) for x in score_list], 1)
    top = torch.sort(torch.topk(pool_scores, n - 1, dim=-1).indices).values[0].tolist()
    parent_list = torch.cat(parents_list[:-1], 1)[0].tolist()
    out = []
    for index in top:
        parent = -1 if index // k == 0 else parent_list[index // k]
        out.append((pool_paths[index], None if parent == -1 else pool_paths[parent]))
    return out


def test_the_tree_for_s3_k2_n7_is_the_one_sglang_builds() -> None:
    settings = SpecSettings(3, 2, 7).validated()
    drafter = ScriptedDrafter()
    tree = draft_tree(drafter, DraftStep(ROOT.log(), torch.zeros(1)), settings)
    paths = []
    for node in tree:
        path = (node.token,) if node.parent == -1 else paths[node.parent] + (node.token,)
        paths.append(path)
    ours = [(p, paths[node.parent] if node.parent != -1 else None) for p, node in zip(paths, tree)]
    assert ours == sglang_tree(settings)
    # by hand: pool scores 1 .5, 2 .32 | 1-3 .30, 1-4 .15, 2-6 .288, 2-7 .0256 | frontier 1-3, 2-6:
    # 1-3-9 .165, 1-3-10 .105, 2-6-10 .1296, 2-6-11 .1152. The best six include 1-4, a step-2
    # expansion outside the frontier, which a tree built from the frontiers alone would miss.
    assert paths == [(1,), (2,), (1, 3), (1, 4), (2, 6), (1, 3, 9)]
    assert [node.parent for node in tree] == [-1, -1, 0, 0, 1, 2]
    assert drafter.fed == [[(1,), (2,)], [(1, 3), (2, 6)]]  # every frontier, in sglang's order
