"""The key-sentence thesis's pair objectives: a fixed query embedded by the model being trained is paired with
every sentence of every training article, (query, sentence, key?), so that the query lies close to key sentences.

| objective     | loss                                                                         |
|---------------|------------------------------------------------------------------------------|
| `contrastive` | ``losses.contrastive_cosine``: margin on cosine distance (ContrastiveLoss)   |
| `cosine`      | ``losses.cosine_mse``: MSE between cos(query, sentence) and the label         |

Defaults are the key-sentence thesis's (sentence-transformers' own defaults for these losses).
"""

import os

import numpy as np
import torch

from common.data.keysent_splits import read_sentences
from common import cli
from common.io import InputError
from common.markdown import escape
from common.models.card import Method
from common.models.tokens import TokenStore
from common.train import losses
from common.train.objectives.base import Objective

KEYSENT_QUERY = "knock mutat silence disrupt crispr lack cell gene remove edit"


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


class PairObjective(Objective):
    """(query, sentence, label) pairs; the model with the best validation average precision is kept."""

    paper = "key-sentence extraction thesis (CRISPR-Cas9 knockouts)"
    defaults = {"lr": 2e-5, "batch_size": 32, "epochs": 1, "warmup": 100, "pooling": "mean", "max_length": None,
                "normalize": None}
    selection = "val_ap_max"
    independent = True
    result_args = ("query", "query_token", "query_init")

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--query", default=KEYSENT_QUERY, help="the query text (the thesis's best query)")
        parser.add_argument("--query-token", default=None,
                            help="use a new vocabulary token (e.g. '[QUERY]') as the query instead")
        parser.add_argument("--query-init", choices=("zero", "random"), default="zero",
                            help="initial embedding of --query-token")

    def build(self):
        encoder = super().build()
        args = self.args
        query = args.query
        if args.query_token:
            add_query_token(encoder, self.tokenizer, args.query_token, args.query_init, args.seed)
            query = args.query_token
        self.query = query
        self.info.update({"query": query, "query_token": args.query_token,
                          "query_init": args.query_init if args.query_token else None})
        return encoder

    def card_details(self):
        query = f"the new vocabulary token {escape(self.query)}" if self.args.query_token else escape(self.query)
        return {"notes": [f"The query it was trained with: {query}. An article's sentences are ranked by their "
                          "cosine similarity to the query's embedding."]}

    def load_data(self):
        data_dir = self.args.data
        parts = {}
        for part in ("train", "val"):
            path = os.path.join(data_dir, f"keysent.{part}.jsonl")
            if part == "train" or os.path.exists(path):
                parts[part] = read_sentences(path)
        if not any(a["sentences"] for a in parts["train"]):
            raise InputError(f"{os.path.join(data_dir, 'keysent.train.jsonl')}: no sentences to train on")
        texts, rows = [self.query], {}
        for part, articles in parts.items():
            start = len(texts)
            for a in articles:
                texts.extend(a["sentences"])
            labels = [x for a in articles for x in a["labels"]]
            rows[part] = np.stack([np.arange(start, len(texts)), np.array(labels, dtype=np.int64)], axis=1) \
                if labels else np.zeros((0, 2), dtype=np.int64)
        self.store = TokenStore(self.tokenizer, texts, self.max_length)  # position 0 is the query
        self.train_rows = rows["train"]
        self.val_rows = rows.get("val", np.zeros((0, 2), dtype=np.int64))

    def row_tokens(self, rows):
        return self.store.lengths()[np.asarray(rows).reshape(-1, 2)[:, 0]]

    def train_lengths(self):
        return self.row_tokens(self.train_rows)

    def collate(self, rows):
        rows = np.asarray(rows).reshape(-1, 2)
        groups, row = self.store.groups(np.concatenate([[0], rows[:, 0]]), self.args.length_groups, self.packed)
        return {"groups": groups, "index": row, "labels": torch.from_numpy(rows[:, 1])}

    def _pairs(self, model, batch):
        emb = model(batch["groups"])[batch["index"]]
        sentences = emb[1:]
        # the query is embedded once per batch and paired with every sentence
        return emb[:1].expand_as(sentences), sentences

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


class ContrastiveObjective(PairObjective):
    name = "contrastive"
    result_args = PairObjective.result_args + ("margin",)
    method = Method(
        "key-sentence contrastive objective",
        "fine-tuned after the key-sentence extraction thesis (CRISPR-Cas9 knockout articles): a fixed query, "
        "embedded by the model itself, is paired with every sentence of every training article, and a contrastive "
        "loss on cosine distance with a margin (sentence-transformers' `ContrastiveLoss`, after Hadsell et al. "
        "2006) draws key sentences close to the query and pushes the others beyond the margin.",
        ("contrastive", "key-sentence", "loss:ContrastiveLoss"), ("sbert", "hadsell"),
        inputs="single sentences, and the query as one more text")

    @classmethod
    def add_arguments(cls, parser):
        super().add_arguments(parser)
        parser.add_argument("--margin", type=cli.number(float, cli.LOSS_CONSTANT), default=0.5,
                            help="margin on cosine distance (the thesis; sentence-transformers' ContrastiveLoss)")

    def losses(self, model, batch):
        query, sentences = self._pairs(model, batch)
        return losses.contrastive_cosine(query, sentences, batch["labels"], self.args.margin), {}


class CosineObjective(PairObjective):
    name = "cosine"
    method = Method(
        "key-sentence cosine objective",
        "fine-tuned after the key-sentence extraction thesis (CRISPR-Cas9 knockout articles): a fixed query, "
        "embedded by the model itself, is paired with every sentence of every training article, and the mean "
        "squared error between their cosine similarity and the 0/1 key-sentence label is minimised "
        "(sentence-transformers' `CosineSimilarityLoss`).",
        ("cosine", "key-sentence", "loss:CosineSimilarityLoss"), ("sbert",),
        inputs="single sentences, and the query as one more text")

    def losses(self, model, batch):
        query, sentences = self._pairs(model, batch)
        return losses.cosine_mse(query, sentences, batch["labels"]), {}
