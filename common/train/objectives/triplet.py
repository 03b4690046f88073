"""Training objectives: what a batch is and what its loss is. The loop in ``common/loop.py`` is shared.

An objective provides ``train_rows`` and ``val_rows`` (arrays the loop samples), ``collate(rows)`` → batch,
``losses(model, batch)`` → per-example losses, and ``validate(model, loader, accelerator)`` → metrics. If
``selection`` names a validation metric, the loop keeps the model with its best (highest) value as RUN/model;
otherwise RUN/model is the final model.
"""

import os

import numpy as np
import torch

from common.train import losses
from common.data.documents import Documents, read_triplets
from common.io import InputError
from common.models.tokens import TokenStore


class TripletObjective:
    """SPECTER: a query document closer to a linked document than to a negative, by an L2 margin."""

    selection = None

    def __init__(self, data_dir, tokenizer, max_length, margin=1.0, length_groups=3):
        docs = Documents(data_dir)
        train = read_triplets(os.path.join(data_dir, "triplets.train.jsonl"), docs.index)
        val_path = os.path.join(data_dir, "triplets.val.jsonl")
        val = read_triplets(val_path, docs.index) if os.path.exists(val_path) else np.zeros((0, 3), dtype=np.int64)
        if not len(train):
            raise InputError(f"{os.path.join(data_dir, 'triplets.train.jsonl')}: no triplets to train on")
        # tokenise each needed document once; rows refer to positions in the store
        needed = np.unique(np.concatenate([train.ravel(), val.ravel()]))
        position = np.full(len(docs.ids), -1, dtype=np.int64)
        position[needed] = np.arange(len(needed))
        self.store = TokenStore(tokenizer, docs.inputs(tokenizer.sep_token or "", needed.tolist()), max_length)
        self.train_rows, self.val_rows = position[train], position[val]
        self.margin = margin
        self.length_groups = length_groups

    def collate(self, rows):
        rows = np.asarray(rows).reshape(-1, 3)
        unique, inverse = np.unique(rows.T.ravel(), return_inverse=True)  # [queries, positives, negatives]
        groups, row = self.store.groups(unique, self.length_groups)
        return {"groups": groups, "index": row[torch.from_numpy(inverse)]}

    def losses(self, model, batch):
        emb = model(batch["groups"])[batch["index"]]
        query, positive, negative = emb.chunk(3)
        return losses.triplet_margin(query, positive, negative, self.margin)

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        values = [accelerator.gather_for_metrics(self.losses(model, batch)) for batch in loader]
        return {"val_loss": torch.cat(values).mean().item()} if values else {}
