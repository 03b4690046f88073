"""Key-sentence extraction (CRISPR-Cas9 thesis): article-level splits and the pair objectives.

A fixed query is embedded by the model being trained, and every sentence of every training article is a pair
(query, sentence, key?) under a contrastive or cosine loss, so that the query lies close to the key sentences.
"""

import os

import numpy as np
import torch

from common.train import losses
from common.data.keysent_splits import read_sentences
from common.io import InputError
from common.models.tokens import TokenStore


def add_query_token(encoder, tokenizer, token, init, seed):
    """A new vocabulary token for the query, its input embedding set to zeros or drawn like BERT's (seeded)."""
    from transformers import AddedToken
    if token in tokenizer.get_vocab():
        raise InputError(f"--query-token {token!r} is already in the model's vocabulary")
    tokenizer.add_tokens([AddedToken(token, special=True, normalized=False)])
    encoder.transformer.resize_token_embeddings(len(tokenizer))
    weights = encoder.transformer.get_input_embeddings().weight
    with torch.no_grad():
        if init == "zero":
            weights[-1].zero_()
        else:
            std = getattr(encoder.transformer.config, "initializer_range", 0.02)
            weights[-1].copy_(torch.randn(weights.shape[1], generator=torch.Generator().manual_seed(seed)) * std)


class PairObjective:
    """(query, sentence, label) pairs; ``contrastive`` (margin on cosine distance) or ``cosine`` (MSE)."""

    selection = "val_ap_max"

    def __init__(self, data_dir, tokenizer, encoder, max_length, kind, margin, query, query_token, query_init,
                 length_groups=3, seed=42):
        self.kind, self.margin = kind, margin
        if query_token:
            add_query_token(encoder, tokenizer, query_token, query_init, seed)
            query = query_token
        self.info = {"query": query, "query_token": query_token, "query_init": query_init if query_token else None}
        parts = {}
        for part in ("train", "val"):
            path = os.path.join(data_dir, f"keysent.{part}.jsonl")
            if part == "train" or os.path.exists(path):
                parts[part] = read_sentences(path)
        if not any(a["sentences"] for a in parts["train"]):
            raise InputError(f"{os.path.join(data_dir, 'keysent.train.jsonl')}: no sentences to train on")
        texts, rows = [query], {}
        for part, articles in parts.items():
            start = len(texts)
            for a in articles:
                texts.extend(a["sentences"])
            labels = [x for a in articles for x in a["labels"]]
            rows[part] = np.stack([np.arange(start, len(texts)), np.array(labels, dtype=np.int64)], axis=1) \
                if labels else np.zeros((0, 2), dtype=np.int64)
        self.store = TokenStore(tokenizer, texts, max_length)  # position 0 is the query
        self.train_rows = rows["train"]
        self.val_rows = rows.get("val", np.zeros((0, 2), dtype=np.int64))
        self.length_groups = length_groups

    def collate(self, rows):
        rows = np.asarray(rows).reshape(-1, 2)
        groups, row = self.store.groups(np.concatenate([[0], rows[:, 0]]), self.length_groups)
        return {"groups": groups, "index": row, "labels": torch.from_numpy(rows[:, 1])}

    def _pairs(self, model, batch):
        emb = model(batch["groups"])[batch["index"]]
        sentences = emb[1:]
        # the query is embedded once per batch and paired with every sentence
        return emb[:1].expand_as(sentences), sentences

    def losses(self, model, batch):
        query, sentences = self._pairs(model, batch)
        if self.kind == "contrastive":
            return losses.contrastive_cosine(query, sentences, batch["labels"], self.margin)
        return losses.cosine_mse(query, sentences, batch["labels"])

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        """Average precision of the validation pairs under cosine, Manhattan, Euclidean and dot-product scores (as
        sentence-transformers' BinaryClassificationEvaluator); the best of the four selects the model."""
        from sklearn.metrics import average_precision_score
        scores, labels = [], []
        for batch in loader:
            q, s = self._pairs(model, batch)
            q, s = q.float(), s.float()
            scores.append(accelerator.gather_for_metrics(torch.stack([
                torch.cosine_similarity(q, s), -(q - s).abs().sum(1), -(q - s).norm(dim=1), (q * s).sum(1)], 1)))
            labels.append(accelerator.gather_for_metrics(batch["labels"]))
        if not scores:
            return {}
        scores, labels = torch.cat(scores).cpu().numpy(), torch.cat(labels).cpu().numpy()
        if labels.min() == labels.max():
            return {}
        metrics = {f"val_ap_{name}": float(average_precision_score(labels, scores[:, k]))
                   for k, name in enumerate(("cosine", "manhattan", "euclidean", "dot"))}
        metrics["val_ap_max"] = max(metrics.values())
        return metrics
