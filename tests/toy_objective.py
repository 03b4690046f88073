"""A toy objective registered by the tests: a classification head and a running-mean buffer on top of the encoder,
with per-example token dropping drawn from (seed, epoch, example). It is a new objective as docs/pipeline.md
("Adding an objective") describes one: this file (its recipe, defaults, flags with what each changes, and what its
models' cards say) and one registry line (``tests/conftest.py``'s ``register_toy``). Nothing in the loop, in 03, in
the run folder or in the card's assembly knows about it.

| input   | what                                                         |
|---------|--------------------------------------------------------------|
| rows    | (document position in ``docs.jsonl``, its position mod 3)    |
| loss    | cross-entropy of the head's logits against that label        |
| logs    | the batch's accuracy, averaged by the loop into each record  |
"""

import os

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from common import cli
from common.data.docs_jsonl import Documents
from common.models.card import Method
from common.models.tokens import TokenStore
from common.models.precision import in_fp32
from common.train.objectives.base import Objective


class ToyModule(nn.Module):
    def __init__(self, encoder, classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.transformer.config.hidden_size, classes)
        self.register_buffer("running_mean", torch.zeros(encoder.transformer.config.hidden_size))

    def forward(self, groups):
        emb = self.encoder(groups)
        if self.training:
            with torch.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * emb.detach().float().mean(0))
        return self.head(emb - self.running_mean)


@in_fp32
def cross_entropy(logits, labels, smoothing):
    return nn.functional.cross_entropy(logits, labels, reduction="none", label_smoothing=smoothing)


class ToyObjective(Objective):
    name = "toy"
    paper = "none (a test)"
    defaults = {"lr": 1e-3, "batch_size": 4, "epochs": 2, "warmup": 0.1, "pooling": "mean", "max_length": 32,
                "normalize": False, "drop_last": True}
    result_args = ("label_smoothing",)  # it changes the weights: the resume identity and the card's settings hold it
    method = Method(
        "toy classification objective",
        "fine-tuned with a test's toy objective: a linear head on the mean-pooled, running-mean-centred embedding "
        "learns three classes by cross-entropy.",
        ("toy", "loss:CrossEntropyLoss"), ("sbert",))  # keys of common/models/card.py's CITATIONS

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--label-smoothing", type=cli.number(float, cli.SHARE), default=0.0,
                            help="share of each target spread over all classes (torch's cross_entropy)")

    def build(self):
        return ToyModule(super().build(), 3)

    def card_details(self):
        return {"notes": [f"Targets were smoothed by {self.args.label_smoothing:g}; "
                          "`heads.safetensors` beside the model holds the head and the running mean."]}

    def load_data(self):
        docs = Documents(self.args.data)
        self.store = TokenStore(self.tokenizer, docs.inputs(self.tokenizer.sep_token), self.max_length)
        rows = np.stack([np.arange(len(docs.ids)), np.arange(len(docs.ids)) % 3], axis=1)
        self.train_rows, self.val_rows = rows[:40], rows[40:]
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def train_lengths(self):
        return self.store.lengths()[self.train_rows[:, 0]]

    def collate(self, rows):
        rows = np.asarray(rows).reshape(-1, 2)
        ids, mask = self.store.pad(rows[:, 0])
        for r, example in enumerate(rows[:, 0]):  # drop one token, drawn from (seed, epoch, example)
            rng = np.random.default_rng([self.args.seed, self.epoch, int(example)])
            mask[r, rng.integers(1, max(2, int(mask[r].sum())))] = 0
        return {"groups": [(ids, mask)], "labels": torch.from_numpy(rows[:, 1])}

    def losses(self, model, batch):
        logits = model(batch["groups"])
        accuracy = (logits.detach().argmax(-1) == batch["labels"]).float().mean()
        return cross_entropy(logits, batch["labels"], self.args.label_smoothing), {"accuracy": accuracy}

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        values = [accelerator.gather_for_metrics(self.losses(model, batch)[0]) for batch in loader]
        return {"val_loss": torch.cat(values).mean().item()}

    def save_extra(self, model, directory):
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()
                   if not k.startswith("encoder.")}, os.path.join(directory, "heads.safetensors"))
