"""The class every objective extends: what an objective declares and does; 03_train.py's loop does the rest."""

import os

from common.io import InputError


class Objective:
    """What an objective declares and does; ``03_train.py``'s ``train`` does the rest.

    Declared on the class:
      ``name``, ``paper``   the ``--objective`` value and the paper its defaults come from (shown in ``--help``)
      ``defaults``          its values of the shared training flags (``lr``, ``batch_size``, ``epochs``, ``warmup``,
                            ``schedule``, ``pooling``, ``max_length``, ``drop_last``, ...), the parser's defaults
      ``presets``           named sets of its own flags' values (the thesis's final models), chosen by ``--preset``
                            (``preset``: the default one) and then the parser's defaults too
      ``add_arguments``     its own flags, each with its default and limit (``type=cli.number(...)``);
                            ``check_args`` refuses flags that cannot go together (``check_model``: no model to
                            start from); ``result_args`` names those that change the result (they enter the resume
                            identity and the card's settings), ``speed_args`` those that change only speed or
                            logging
      ``selection``         a validation metric (higher is better) whose best value picks RUN/model; None: the final
                            model is RUN/model
      ``similarity``        how its models' vectors are compared, as its loss compares them and 05 ranks by
                            (``config_sentence_transformers.json``'s ``similarity_fn_name``: ``cosine``, ``dot``,
                            ``euclidean``; None for a model not trained for similarity: sentence-transformers'
                            default, and 05's own per task)
      ``document_input``    how its models read a document (title, text, the tokenizer's sep_token) → one text, and
                            ``documents`` says so in words: SPECTER's ``title + sep_token + text`` unless the
                            objective reads documents otherwise (``05_evaluate.py mteb`` joins an MTEB corpus so)
      ``method``            what its models' cards say of it (a ``card.Method``: title, paragraph with its paper,
                            hub tags, citation keys); ``card_method`` the method of a run whose flags change it,
                            ``card_details`` the notes, tags, citations and teachers a run's flags add
    Called by the loop, in this order:
      ``build()``           load the encoder (``self.encoder``, ``self.tokenizer``, ``self.max_length``) and return
                            the ``nn.Module`` to train: the encoder, or a module holding it with heads and loss state
                            (buffers). Everything in it is optimised, checkpointed and resumed.
      ``load_data()``       tokenise and set ``train_rows`` / ``val_rows`` (run under ``main_process_first``: what
                            the first process writes in ``cache_dir()`` the others map)
      ``set_epoch(epoch)``  before each epoch (and on resume): per-example randomness is drawn from
                            (seed, epoch, example), never from a global stream
      ``collate(rows)``     a batch from a list of rows; ``losses(model, batch)`` → loss per example (or a scalar)
      ``row_tokens(rows)``  tokens of each row, for an objective whose examples' losses do not depend on one another
                            (``independent``): ``--chunk-tokens`` then cuts a batch into parts that the loop runs
                            forward and backward one at a time (same gradient; ``batches.BatchParts``)
      ``log_metrics(accelerator)`` → what the training log adds to the mean loss every ``--log-every`` steps (parts
                            of a loss, an accuracy), means over the processes since the last record
      ``validate(model, loader, accelerator)`` → metrics
      ``save(model, path, identity, log)`` RUN/model: the encoder in Hugging Face + sentence-transformers form,
                            heads beside it (``save_extra``), and its model card (``common/models/run_card.py``
                            assembles it from ``card_method``, ``card_details`` and the run's identity and log as
                            the run folder holds them)
    """

    name = None
    paper = None
    defaults = {}
    presets = {}
    preset = None
    selection = None
    similarity = "cosine"
    documents = "title + sep_token + text (SPECTER's input)"
    method = None
    independent = False  # each example's loss depends on that example alone (no in-batch negatives or statistics)
    in_parts = None  # a dependent loss's own way to run a batch in parts, named where --chunk-tokens is refused
    result_args = ()
    speed_args = ()

    @classmethod
    def add_arguments(cls, parser):
        pass

    @staticmethod
    def document_input(title, text, sep_token):
        from common.models.encoder import document_text
        return document_text(title, text, sep_token)

    @classmethod
    def defaults_for(cls, argv):
        """The parser's defaults: ``defaults`` and the values of the preset ``argv`` names (or ``preset``)."""
        if not cls.presets:
            return dict(cls.defaults)
        from common import cli
        first = cli.Parser(add_help=False)  # one line for a bad preset, as the full parser gives
        first.add_argument("--preset", choices=tuple(cls.presets), default=cls.preset)
        known, _ = first.parse_known_args(argv)
        return {**cls.defaults, **cls.presets[known.preset]}

    @classmethod
    def check_args(cls, args):
        """Refuse, as the command line is read, flags that cannot go together: no model to start from, or parts of
        a batch (``--chunk-tokens``) for a loss that is not a mean of independent per-example losses."""
        cls.check_model(args)
        if args.chunk_tokens and not cls.independent:
            raise InputError(f"--chunk-tokens {args.chunk_tokens}: the {cls.name} objective's loss is not a mean of "
                             "independent per-example losses, so a batch cannot be run in parts"
                             + (f" ({cls.in_parts})" if cls.in_parts else ""))

    @classmethod
    def check_model(cls, args):
        """Refuse a command line that names no model to start from (``--model``) where the objective needs one."""
        if args.model is None:
            raise InputError("--model is required")

    def __init__(self, args, accelerator):
        self.args, self.accelerator = args, accelerator
        # notes once per run (Accelerator.print prints once per node)
        self.say = print if accelerator is None else accelerator.on_main_process(print)
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

    def cache_dir(self):
        """Where what is made from the data is kept for later runs and mapped by every process of a node (the
        documents, their tokens): ``--cache-dir`` where the objective has it, else the run's own folder
        (``run_entries.CACHE`` in ``--out``), so that a run writes nothing outside the places it is given."""
        from common.train.run.run_entries import CACHE
        return getattr(self.args, "cache_dir", None) or os.path.join(self.args.out, CACHE)

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

    def losses(self, model, batch):
        raise NotImplementedError

    def log_metrics(self, accelerator):
        return {}

    def log_state(self):
        """What ``log_metrics`` has gathered since the last record, as a checkpoint keeps it (lists of numbers), so
        that a resumed run's first record is the uninterrupted run's; ``restore_log_state`` takes it back."""
        return []

    def restore_log_state(self, rows):
        pass

    def validate(self, model, loader, accelerator):
        return {}

    def card_method(self):
        """The ``card.Method`` its models' cards describe this run by (an objective without one: its name)."""
        return self.method or self.name

    def card_details(self):
        """What this run adds to its models' cards besides its method: ``notes`` (paragraphs under the model's
        details), ``tags``, ``citations`` (keys of ``card.CITATIONS``), ``teachers`` (the data's teachers)."""
        return {}

    def encoder_of(self, model):
        """The ``Encoder`` inside the module ``build`` returned."""
        return model if model is self.encoder or not hasattr(model, "encoder") else model.encoder

    def save_extra(self, model, directory):
        """Write what RUN/model holds besides the encoder (heads); ``directory`` becomes RUN/model."""

    def save(self, model, path, identity, log):
        """RUN/model (or RUN/epoch_K) at ``path``: the encoder, what ``save_extra`` adds, and the model card of the
        run whose settings are ``identity`` and whose log records up to this model are ``log``."""
        from common.models import run_card
        from common.models.saving import save_model
        save_model(self.encoder_of(model), self.tokenizer, path, self.max_length, self.info,
                   extra=lambda directory: self.save_extra(model, directory),
                   card=run_card.model_card(self, model, path, identity, log, self.card_facts()),
                   similarity=self.similarity, prompts=self.settings["st_config"])

    def card_facts(self):
        """What every card of the run shares, read once, after ``build`` and before the first step (the loop asks
        for it then), so that an input the card quotes is checked before the run trains
        (``run_card.run_facts``)."""
        if self._facts is None:
            from common.models import run_card
            from common.train.objectives import REGISTRY
            self._facts = run_card.run_facts(self, REGISTRY[self.name].script)
        return self._facts


def document_reader(model):
    """How the model at ``model`` read a document in training: ``(document_input, documents)`` of the objective its
    ``docembed.json`` names, or of ``Objective`` (SPECTER's input) for a model not trained here."""
    import os
    from common.models.saving import read_run_info
    from common.train.objectives import REGISTRY, get
    name = read_run_info(model).get("objective") if os.path.isdir(model) else None
    objective = get(name) if name in REGISTRY else Objective
    return objective.document_input, objective.documents
