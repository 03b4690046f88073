"""Multiple Negatives Ranking: a bi-encoder trained so that a query (a paper's title) retrieves its document (the
paper's abstract) among every other document of the batch (Henderson et al. 2017; sentence-transformers'
``MultipleNegativesRankingLoss``, whose defaults these are).

| input   | what                                                                                        |
|---------|---------------------------------------------------------------------------------------------|
| rows    | ``pairs.train.jsonl`` as (query, document) positions                                         |
| batch   | B queries and their B positive documents; on W processes the documents (and queries) of all |
|         | processes are gathered with gradient, so each query has B·W − 1 negatives                    |
| loss    | ``losses.multiple_negatives_ranking`` per query, scale 20 on cosine, in float32              |

A document in the batch that is the same paper, or has the same normalised abstract, or whose query has the same
normalised text as a row's is a false negative: its logit is masked (the keys travel with the embeddings).
The loss is ``loss_from_embeddings`` of the queries' and documents' embeddings (``embed``), so the loop's
``--cache-chunk N`` computes the same loss and gradient with GradCache (Gao et al. 2021; sentence-transformers'
``CachedMultipleNegativesRankingLoss``), N pairs embedded at a time.
The model with the best validation nDCG@10 (validation titles against the whole corpus) becomes RUN/model.
"""

import argparse
import os

import numpy as np
import torch

from common.extract.arxiv import text_key
from common.data.retrieval import read_qrels, read_queries
from common.data.shared_docs import SharedDocuments, shared_store, store_key, tokenising
from common import cli
from common.io import InputError, read_jsonl
from common.models.card import Method
from common.models.tokens import TokenStore
from common.train import losses
from common.distributed import all_gather, all_gather_with_grad, process_rank
from common.train.objectives.base import Objective


def group_keys(texts):
    """One integer per text, equal for texts with equal normalised, lower-cased content."""
    keys = np.fromiter((text_key(t) for t in texts), dtype=np.uint64, count=len(texts))
    return np.unique(keys, return_inverse=True)[1].astype(np.int64)


def false_negative_mask(row_keys, col_keys, offset):
    """[B, M]: True where column j shares any key with row i (same paper, abstract or query text), except each
    row's own label column ``offset + i``."""
    mask = (row_keys[:, None, :] == col_keys[None, :, :]).any(-1)
    rows = torch.arange(len(row_keys), device=mask.device)
    mask[rows, rows + offset] = False
    return mask


class MNRLObjective(Objective):
    name = "mnrl"
    paper = "sentence-transformers MultipleNegativesRankingLoss and its trainer/examples"
    defaults = {"lr": 5e-5, "batch_size": 128, "epochs": 1, "warmup": 0.1, "weight_decay": 0.01, "pooling": "mean",
                "max_length": 256, "normalize": None, "drop_last": True}
    selection = "val_ndcg@10"
    result_args = ("scale", "symmetric", "query_max_length", "gather", "mask_duplicates")
    speed_args = ("eval_batch_size",)
    documents = "title and text joined by a space, as 02_build_graph.py beir writes a corpus's docs.jsonl text"
    method = Method(
        "Multiple Negatives Ranking",
        "fine-tuned as a bi-encoder with the Multiple Negatives Ranking loss (Henderson et al. 2017; "
        "sentence-transformers' `MultipleNegativesRankingLoss`), stage 2 of the paper-search method: a query (a "
        "paper's title) must pick its document (the paper's abstract) among every document of the batch, by "
        "cross-entropy over scaled cosine similarities.",
        ("mnrl", "loss:MultipleNegativesRankingLoss"), ("henderson", "sbert"),
        inputs="a document's text alone (the abstract) and a query (a title or any free text), both as they are")

    @staticmethod
    def document_input(title, text, sep_token):
        """A paper-search document is its docs.jsonl text, read whole (05 embeds it so): for a corpus with titles,
        the title and text joined as ``common/data/beir.py`` joins them."""
        return f"{title} {text}".strip()

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--scale", type=cli.number(float, cli.LOSS_SCALE), default=20.0,
                            help="logit scale on cosine = 1 / temperature (sentence-transformers: 20, τ 0.05)")
        parser.add_argument("--symmetric", action="store_true",
                            help="add the document → query direction and average the two cross-entropies "
                                 "(sentence-transformers' per_direction partition)")
        parser.add_argument("--query-max-length", type=cli.number(int, cli.LENGTH), default=64,
                            help="tokens per query (titles are short)")
        parser.add_argument("--gather", action=argparse.BooleanOptionalAction, default=True,
                            help="on several processes, score each query against every process's documents "
                                 "(gathered with gradient)")
        parser.add_argument("--mask-duplicates", action=argparse.BooleanOptionalAction, default=True,
                            help="mask in-batch documents that are the same paper, have the same abstract or whose "
                                 "query has the same text (false negatives)")
        parser.add_argument("--eval-batch-size", type=cli.number(int, cli.COUNT), default=64,
                            help="texts per forward pass in validation")

    def card_details(self):
        if not self.args.cache_chunk:
            return {}
        return {"tags": ["loss:CachedMultipleNegativesRankingLoss"], "citations": ["gradcache"],
                "notes": [f"The loss was computed with GradCache (Gao et al. 2021) in chunks of "
                          f"{self.args.cache_chunk} pairs: every document of the batch is still a negative of every "
                          "query, as without it; dropout draws its masks per chunk, so the weights differ from an "
                          "uncached run's as another random seed's would."]}

    def load_data(self):
        args, data_dir = self.args, self.args.data
        cache = self.cache_dir()
        docs = SharedDocuments(data_dir, cache, self.say)
        queries, doc_ids, lines = [], [], []
        path = os.path.join(data_dir, "pairs.train.jsonl")
        for lineno, obj in read_jsonl(path, required=("query", "doc")):
            if type(obj["query"]) is not str or type(obj["doc"]) is not str:
                raise InputError(f"{path}:{lineno}: fields 'query' and 'doc' must be strings")
            queries.append(obj["query"])
            doc_ids.append(obj["doc"])
            lines.append(lineno)
        if not queries:
            raise InputError(f"{path}: no pairs to train on")
        doc_rows = docs.rows(doc_ids)
        missing = np.flatnonzero(doc_rows < 0)
        if len(missing):
            raise InputError(f"{path}:{lines[missing[0]]}: document {doc_ids[missing[0]]!r} is not in docs.jsonl")
        val_path = os.path.join(data_dir, "queries.val.jsonl")
        self.val_qids, val_texts = read_queries(val_path) if os.path.exists(val_path) else ([], [])
        self.val_qrels = read_qrels(os.path.join(data_dir, "retrieval.val.qrels")) if val_texts else {}
        self.doc_ids = docs.ids
        # the document is its abstract alone: with titles as queries, title + text would hold the query
        self.docs = shared_store(cache, store_key(docs, self.tokenizer, self.max_length, "texts"),
                                 lambda: TokenStore(self.tokenizer, tokenising(docs.texts, len(docs)), self.max_length))
        self.queries = TokenStore(self.tokenizer, queries, args.query_max_length)
        self.val_queries = TokenStore(self.tokenizer, val_texts, args.query_max_length)
        # keys per pair: the paper, its abstract's text, its query's text
        self.keys = torch.from_numpy(np.stack([doc_rows, group_keys(docs.texts)[doc_rows], group_keys(queries)], 1))
        self.train_rows = np.stack([np.arange(len(queries)), doc_rows], axis=1)
        self.val_rows = np.arange(len(val_texts))
        self.info.update({"similarity": "cosine", "scale": args.scale, "symmetric": args.symmetric,
                          "query_max_length": args.query_max_length})

    def train_lengths(self):
        return self.queries.lengths()[self.train_rows[:, 0]] + self.docs.lengths()[self.train_rows[:, 1]]

    def collate(self, rows):
        rows = np.asarray(rows)
        if rows.ndim == 1:  # validation rows: validate() embeds its own queries and the corpus
            return {}
        q_groups, q_row = self.queries.groups(rows[:, 0], self.args.length_groups, self.packed)
        d_groups, d_row = self.docs.groups(rows[:, 1], self.args.length_groups, self.packed)
        return {"inputs": {"groups": q_groups + d_groups, "q_index": q_row, "d_index": d_row + len(rows)},
                "keys": self.keys[rows[:, 0]]}

    def embed(self, model, inputs):
        emb = model(inputs["groups"])
        return emb[inputs["q_index"]], emb[inputs["d_index"]]

    def loss_from_embeddings(self, embeddings, batch):
        queries, docs = embeddings
        keys, offset = batch["keys"].to(queries.device), 0
        if self.args.gather:
            offset = process_rank() * len(queries)
            all_queries, docs = all_gather_with_grad(queries), all_gather_with_grad(docs)
            col_keys = all_gather(keys)
        else:
            all_queries, col_keys = queries, keys
        mask = false_negative_mask(keys, col_keys, offset) if self.args.mask_duplicates else None
        return losses.multiple_negatives_ranking(queries, docs, all_queries, offset, self.args.scale, mask,
                                                 self.args.symmetric), {}

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        """Validation titles against the whole corpus, exact cosine search; the corpus is embedded in one shard
        per process."""
        from common.eval.retrieval import dense_retrieval
        from common.models.inference import embed, embed_sharded
        if not len(self.val_queries):
            return {}
        docs = embed_sharded(self.encoder, self.docs, self.args.eval_batch_size)
        queries = embed(self.encoder, self.val_queries, self.args.eval_batch_size)
        metrics = dense_retrieval(queries, docs, self.val_qids, self.doc_ids, self.val_qrels)
        return {f"val_{name}": value for name, value in metrics.items()}
