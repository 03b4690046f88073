"""Training objectives: the registry that maps ``--objective NAME`` to its class, and the class they all extend.

A new objective is one file in this folder (a subclass of :class:`Objective`) plus one line in ``REGISTRY``. The
scripts (``03_train.py``, ``04_distill.py train``) and the loop hold no per-objective code.

The registry names each objective's module lazily, with the files it needs in the data directory and the script
that trains it, so a script lists its objectives and checks ``--data`` before it imports torch or loads a model.
"""

import importlib
import os
from typing import NamedTuple

import numpy as np

from common.io import InputError


class Entry(NamedTuple):
    target: str  # "package.module.Class"
    data_files: tuple  # files the objective needs in --data (checked before anything heavy is imported)
    script: str = "03_train.py"  # the script that trains it


REGISTRY = {
    "triplet": Entry(f"{__name__}.triplet.TripletObjective", ("docs.jsonl", "triplets.train.jsonl")),
    "contrastive": Entry(f"{__name__}.keysent.ContrastiveObjective", ("keysent.train.jsonl",)),
    "cosine": Entry(f"{__name__}.keysent.CosineObjective", ("keysent.train.jsonl",)),
    "distill": Entry(f"{__name__}.distill.DistillObjective", ("docs.jsonl",), "04_distill.py"),
    "mlm": Entry(f"{__name__}.mlm.MLMObjective", ("docs.jsonl",)),
    "mnrl": Entry(f"{__name__}.mnrl.MNRLObjective", ("docs.jsonl", "pairs.train.jsonl")),
}


def names(script):
    """The objectives ``script`` trains, in registry order (the first is its default)."""
    return tuple(name for name, entry in REGISTRY.items() if entry.script == script)


def check_data(name, data_dir):
    """The data directory exists and holds the files ``name`` reads (a one-line error otherwise)."""
    if not os.path.isdir(data_dir):
        raise InputError(f"{data_dir}: no such data directory")
    for file in REGISTRY[name].data_files:
        path = os.path.join(data_dir, file)
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")


def get(name):
    module, cls = REGISTRY[name].target.rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)


# what a run's identity holds besides the flags its cards list: where the data is and what it holds, the model it
# started from (the card names it on its own) and the number of processes (the card's training line says it)
NOT_SETTINGS = ("objective", "data", "data_content", "model", "processes")


class Objective:
    """What an objective declares and does; the loop in ``common/train/loop.py`` does the rest.

    Declared on the class:
      ``name``, ``paper``   the ``--objective`` value and the paper its defaults come from (shown in ``--help``)
      ``defaults``          values of the shared training flags for this objective (``lr``, ``batch_size``,
                            ``epochs``, ``warmup``, ``schedule``, ``pooling``, ``max_length``, ``drop_last``, ...)
      ``add_arguments``     its own flags, each with its limit (``type=cli.number(...)``; ``complete_args`` fills
                            those that depend on others, as presets do, ``check_model`` refuses a missing
                            ``--model``); ``result_args`` names those that change the result (they enter the resume
                            identity and the card's settings), ``speed_args`` those that change only speed or logging
      ``selection``         a validation metric (higher is better) whose best value picks RUN/model; None: the final
                            model is RUN/model
      ``method``            what its models' cards say of the method (a ``card.Method``: title, paragraph, tags,
                            citations); None: a card of the objective's name
    Called by the script and the loop, in this order:
      ``build()``           load the encoder (``self.encoder``, ``self.tokenizer``, ``self.max_length``) and return
                            the ``nn.Module`` to train: the encoder, or a module holding it with heads and loss state
                            (buffers). Everything in it is optimised, checkpointed and resumed.
      ``load_data()``       tokenise and set ``train_rows`` / ``val_rows`` (run under ``main_process_first``)
      ``set_epoch(epoch)``  before each epoch (and on resume): per-example randomness is drawn from
                            (seed, epoch, example), never from a global stream
      ``collate(rows)``     a batch from a list of rows; ``losses(model, batch)`` → loss per example (or a scalar)
      ``row_tokens(rows)``  tokens of each row, for an objective whose examples' losses do not depend on one another
                            (``independent``): ``collate_train`` then cuts a batch over ``--chunk-tokens`` into
                            parts that the loop runs forward and backward one at a time (same gradient)
      ``log_metrics(accelerator)`` → what the training log adds to the mean loss every ``--log-every`` steps (parts
                            of a loss, an accuracy), means over the processes since the last record
      ``validate(model, loader, accelerator)`` → metrics
      ``save(model, path, identity, log)`` RUN/model: the encoder in Hugging Face + sentence-transformers form,
                            heads beside it (``save_extra``), and its model card (``card``, from the run's identity and
                            log as the run folder holds them; ``card_details`` adds an objective's own notes)
    """

    name = None
    paper = None
    defaults = {}
    selection = None
    method = None  # a card.Method: what a model card says of the method (None: a card of the objective's name)
    independent = False  # each example's loss depends on that example alone (no in-batch negatives or statistics)
    in_parts = None  # a dependent loss's own way to run a batch in parts, named where --chunk-tokens is refused
    result_args = ()
    speed_args = ()

    @classmethod
    def add_arguments(cls, parser):
        pass

    @classmethod
    def complete_args(cls, args):
        """Fill flags whose defaults depend on other flags (presets), after parsing."""

    @classmethod
    def check_model(cls, args):
        """Refuse a command line that names no model to start from (``--model``) where the objective needs one."""
        if args.model is None:
            raise InputError("--model is required")

    def __init__(self, args, accelerator):
        self.args, self.accelerator = args, accelerator
        self.say = print if accelerator is None else accelerator.print  # notes once, not once per process
        self.info = {"objective": self.name}
        self.train_rows = self.val_rows = None
        self._facts = None
        if accelerator is not None:  # checkpoints store a tied weight once, under its own name
            from common.models.saving import drop_tied_copies
            accelerator.register_save_state_pre_hook(drop_tied_copies)

    def build(self):
        from common.models.loading import load_encoder
        args = self.args
        self.encoder, self.tokenizer, self.settings = load_encoder(
            args.model, pooling=args.pooling, normalize=args.normalize, max_length=args.max_length, say=self.say)
        self.max_length = self.settings["max_length"]
        return self.encoder

    def load_data(self):
        raise NotImplementedError

    def set_epoch(self, epoch):
        pass

    def train_lengths(self):
        """Token length of each training row, for length-bucketed batches (None: the objective has none)."""
        return None

    def collate(self, rows):
        raise NotImplementedError

    def row_tokens(self, rows):
        """Tokens of each row (an ``independent`` objective says)."""
        raise NotImplementedError

    def collate_train(self, rows):
        """A training batch: ``collate(rows)``, or for an ``independent`` objective whose batch holds more than
        ``--chunk-tokens`` tokens, ``{"parts": [collate(part), ...], "sizes": [...]}``: the fewest parts of
        consecutive rows of near-equal count that keep each part near the budget (one row at least)."""
        budget = self.args.chunk_tokens if self.independent else 0
        if budget <= 0:
            return self.collate(rows)
        rows = np.asarray(rows)
        tokens = int(self.row_tokens(rows).sum())
        count = min(len(rows), -(-tokens // budget))
        if count <= 1:
            return self.collate(rows)
        parts = np.array_split(rows, count)
        return {"parts": [self.collate(p) for p in parts], "sizes": [len(p) for p in parts]}

    def losses(self, model, batch):
        raise NotImplementedError

    def log_metrics(self, accelerator):
        return {}

    def validate(self, model, loader, accelerator):
        return {}

    def encoder_of(self, model):
        """The ``Encoder`` inside the module ``build`` returned."""
        return model if model is self.encoder or not hasattr(model, "encoder") else model.encoder

    def save_extra(self, model, directory):
        """Write what RUN/model holds besides the encoder (heads); ``directory`` becomes RUN/model."""

    def save(self, model, path, identity, log):
        """RUN/model (or RUN/epoch_K) at ``path``: the encoder, what ``save_extra`` adds, and the model card
        (``card``) of the run whose settings are ``identity`` and whose log records up to this model are ``log``."""
        from common.models.saving import save_model
        save_model(self.encoder_of(model), self.tokenizer, path, self.max_length, self.info,
                   extra=lambda directory: self.save_extra(model, directory),
                   card=self.card(model, path, identity, log))

    def card_details(self):
        """What this run adds to its models' cards besides ``method``: ``notes`` (paragraphs under the model's
        details), ``tags``, ``citations`` (keys of ``card.CITATIONS``), ``teachers`` (the data's teachers)."""
        return {}

    def card_method(self):
        """The ``card.Method`` that describes this run (``method``, unless a flag makes the run another method)."""
        return self.method

    def card(self, model, path, identity, log):
        """The model card of ``path`` (RUN/model, RUN/epoch_K): the method, the run's settings (``identity``, as the
        run folder records it), the steps and validations of ``log`` (the run's records up to this model: the last
        is this model's step), and the data directory's manifest with the manifest of the corpus it was built
        from."""
        from common.models import card
        last = log[-1] if log else {"step": 0, "epoch": 0}
        validation = [r for r in log if "lr" not in r]
        chosen = next((r for r in validation if r["step"] == last["step"]), None)
        facts = self.card_facts()
        settings = [("objective", self.name)] + [(k, v) for k, v in identity.items() if k not in NOT_SETTINGS]
        training = {**facts["training"], "steps": last["step"], "epoch": last["epoch"]}
        return card.model_card(self.card_method() or self.name, path,
                               card.model_facts(self.encoder_of(model), self.max_length), settings, training,
                               validation, chosen, **facts["card"])

    def card_facts(self):
        """What every card of the run shares (versions, commit, the data's and the corpus's manifests, the base
        model), read once, after ``build`` and before the first step (``run.train`` calls it), so that an input the
        card quotes is checked before the run trains: only the log grows between saves. The start model's own card
        only adds to it: one that cannot be read is a note (``card.base_model``)."""
        if self._facts is None:
            self._facts = self._read_card_facts()
        return self._facts

    def _read_card_facts(self):
        from common import io, provenance
        from common.models import card
        args, details = self.args, self.card_details()
        script = REGISTRY[self.name].script
        run = provenance.manifest(script, args, None)
        accelerator = self.accelerator
        training = {"script": script, "processes": accelerator.num_processes if accelerator else 1,
                    "precision": accelerator.mixed_precision if accelerator else "no", "commit": run["git_commit"],
                    "versions": {k: v for k, v in run["versions"].items()
                                 if k in ("torch", "transformers", "sentence-transformers")}}
        manifest = io.read_manifest(args.data)
        first = next(iter(manifest.get("inputs") or {}), None)
        try:  # the corpus's own manifest only adds to the card: one moved or damaged since is left out
            source = io.read_manifest(os.path.dirname(os.path.abspath(first))) if first else {}
        except (InputError, OSError, ValueError):
            source = {}
        data = card.data_summary(args.data, manifest, source if source.get("script") else None)
        if details.get("teachers"):
            data["teachers"] = details["teachers"]
        return {
            "training": training,
            "card": {"data": data, "base": card.base_model(args.model, self.say), "start": args.model,
                     "language": card.hub_language(manifest.get("language") or source.get("language")),
                     "tags": details.get("tags", ()), "citations": details.get("citations", ()),
                     "notes": details.get("notes", ())}}
