"""SPECTER's objective: a query document closer to a document it links to than to a negative, by an L2 margin.

| input   | what                                                       |
|---------|------------------------------------------------------------|
| rows    | ``triplets.train.jsonl`` as (query, positive, negative) ids |
| loss    | ``losses.triplet_margin`` on the three embeddings           |

Defaults are SPECTER's (Cohan et al. 2020) as the WikiSpecter thesis kept them.
"""

import os

import numpy as np
import torch

from common import cli
from common.data.docs_jsonl import read_triplets
from common.data.shared_docs import SharedDocuments, shared_store, store_key, tokenising
from common.io import InputError
from common.models.card import Method
from common.models.tokens import TokenStore
from common.train import losses
from common.train.objectives.base import Objective


class TripletObjective(Objective):
    name = "triplet"
    paper = "SPECTER (Cohan et al. 2020), as the WikiSpecter thesis used it"
    defaults = {"lr": 3e-5, "batch_size": 16, "epochs": 2, "warmup": 0.1, "pooling": "cls", "max_length": 128,
                "normalize": False}
    result_args = ("margin",)
    similarity = "euclidean"  # the margin is on L2 distance, and 05 ranks cross-references by it
    independent = True
    method = Method(
        "SPECTER triplet objective",
        "fine-tuned with SPECTER's objective (Cohan et al. 2020), as the WikiSpecter thesis used it: a triplet margin "
        "loss on the L2 distance between a query document, a document it links to and a negative (a document two "
        "links away, or a random one), so that linked documents lie close.",
        ("specter", "triplet", "loss:TripletLoss"), ("specter", "sbert"))

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--margin", type=cli.number(float, cli.LOSS_CONSTANT), default=1.0,
                            help="triplet margin on L2 distance (SPECTER)")

    def build(self):
        encoder = super().build()
        if self.settings["st_config"].get("normalize") and not encoder.normalize:
            self.say(
                "note: this model ends in a Normalize module; SPECTER's L2 margin of 1 is meant for unnormalised "
                "vectors (unit vectors are at most 2 apart), so training drops it (--normalize keeps it)")
        return encoder

    def load_data(self):
        data_dir, cache = self.args.data, self.cache_dir()
        docs = SharedDocuments(data_dir, cache, self.say)
        train = read_triplets(os.path.join(data_dir, "triplets.train.jsonl"), docs)
        val_path = os.path.join(data_dir, "triplets.val.jsonl")
        val = read_triplets(val_path, docs) if os.path.exists(val_path) else np.zeros((0, 3), dtype=np.int64)
        if not len(train):
            raise InputError(f"{os.path.join(data_dir, 'triplets.train.jsonl')}: no triplets to train on")
        # tokenise each needed document once, in the first process; rows refer to positions in the store
        needed = np.unique(np.concatenate([train.ravel(), val.ravel()]))
        position = np.full(len(docs), -1, dtype=np.int64)
        position[needed] = np.arange(len(needed))
        sep = self.tokenizer.sep_token or ""
        key = store_key(docs, self.tokenizer, self.max_length, sep, needed)
        self.store = shared_store(cache, key, lambda: TokenStore(
            self.tokenizer, tokenising(docs.inputs(sep, needed.tolist()), len(needed)), self.max_length))
        self.train_rows, self.val_rows = position[train], position[val]

    def row_tokens(self, rows):
        return self.store.lengths()[np.asarray(rows).reshape(-1, 3)].sum(axis=1)

    def train_lengths(self):
        return self.row_tokens(self.train_rows)

    def collate(self, rows):
        rows = np.asarray(rows).reshape(-1, 3)
        unique, inverse = np.unique(rows.T.ravel(), return_inverse=True)  # [queries, positives, negatives]
        groups, row = self.store.groups(unique, self.args.length_groups, self.packed)
        return {"groups": groups, "index": row[torch.from_numpy(inverse)]}

    def losses(self, model, batch):
        emb = model(batch["groups"])[batch["index"]]
        query, positive, negative = emb.chunk(3)
        return losses.triplet_margin(query, positive, negative, self.args.margin), {}

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        values = [accelerator.gather_for_metrics(self.losses(model, batch)[0]) for batch in loader]
        return {"val_loss": torch.cat(values).mean().item()} if values else {}
