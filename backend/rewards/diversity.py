"""Diversity source: how much each completion differs from the other completions of the same prompt.

Scored per completion, not per group: GRPO and RLOO compare the completions of one prompt with each other,
so a score every member of a group shares (the group's distinct-n ratio) would cancel out of every
advantage and teach nothing. Each completion's score is what it adds to its group's variety:

- distinct_n: the share of its word n-grams that no other completion of its group contains
  (identical completions score 0, completions with nothing in common 1);
- embedding: 1 − its mean cosine similarity to the others (all-MiniLM-L6-v2); the group's mean of this is
  exactly 1 − the group's mean pairwise cosine.

A group is the completions of one batch with the same prompt. A completion alone with its prompt (PPO with
one completion per prompt) has nothing to differ from and is not scored (None).
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict

from backend.rewards.base import RewardFunction, completion_text, prompt_text


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.casefold())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def groups_of(prompts: list) -> list[list[int]]:
    """Indices of the completions sharing a prompt, in order of first appearance."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, prompt in enumerate(prompts):
        groups[prompt_text(prompt)].append(i)
    return list(groups.values())


def distinct_share(texts: list[str], n: int) -> list[float]:
    """For each text, the share of its n-grams found in no other text of the list (0 without n-grams)."""
    grams = [word_ngrams(t, n) for t in texts]
    owners = Counter(g for own in grams for g in own)  # in how many texts each n-gram occurs
    return [sum(owners[g] == 1 for g in own) / len(own) if own else 0.0 for own in grams]


def embedding_spread(texts: list[str], batch_size: int = 32) -> list[float]:
    """For each text, 1 − its mean cosine similarity to the other texts of the list."""
    from backend.rewards.embedding import embed

    vectors = embed(texts, batch_size)
    sims = vectors @ vectors.T
    n = len(texts)
    others = (sims.sum(1) - sims.diagonal()) / (n - 1)
    return (1.0 - others).tolist()


class DiversityReward(RewardFunction):
    def __init__(self, *args):
        super().__init__(*args)
        if self.params.method == "embedding":
            from backend.rewards.embedding import load_encoder

            load_encoder()  # fail (package missing) before training starts

    def score(self, prompts, completions, **kwargs):
        texts = [completion_text(c) for c in completions]
        scores: list[float | None] = [None] * len(texts)
        for group in groups_of(prompts):
            if len(group) < 2:
                continue
            members = [texts[i] for i in group]
            if self.params.method == "embedding":
                values = embedding_spread(members, self.params.batch_size)
            else:
                values = distinct_share(members, self.params.n)
            for i, value in zip(group, values):
                scores[i] = value
        return scores
