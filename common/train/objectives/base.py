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
                            hub tags, citation keys, checked as it is made); ``card_method`` the method of
                            a run whose flags change it, ``card_details`` the notes, tags, citations and teachers a
                            run's flags add
      ``independent``       each example's loss depends on that example alone: ``--chunk-tokens`` may cut a batch
                            into parts (``row_tokens`` gives each row's tokens), which the loop runs forward and
                            backward one at a time (same gradient)
    Called by the loop, in this order:
      ``build()``           load the encoder (``self.encoder``, ``self.tokenizer``, ``self.max_length``) and return
                            the ``nn.Module`` to train: the encoder, or a module holding it with heads and loss state
                            (buffers). Everything in it is optimised, checkpointed and resumed.
      ``load_data()``       tokenise and set ``train_rows`` / ``val_rows`` (run under ``main_process_first``: what
                            the first process writes in ``cache_dir()`` the others map)
      ``set_epoch(epoch)``  before each epoch (and on resume): per-example randomness is drawn from
                            (seed, epoch, example), never from a global stream
      ``collate(rows)``     a batch from a list of rows: the encoder's texts as padded groups, or where the loop
                            sets ``packed`` (on a CPU) laid end to end (``TokenStore.groups`` makes either)
      ``losses(model, batch)`` → (loss per example, or a scalar; a dict of detached log values, which the loop
                            averages into its log records: parts of a loss, an accuracy). It never calls backward
                            and keeps nothing from one step to the next: the loop owns the training state.
      ``validate(model, loader, accelerator)`` → metrics
      ``save(model, path, identity, log)`` RUN/model: the encoder in Hugging Face + sentence-transformers form,
                            heads beside it (``save_extra``), and its model card (``common/models/run_card.py``
                            assembles it from ``card_method``, ``card_details`` and the run's identity and log as
                            the run folder holds them)
    A loss computed from the embeddings of the batch's rows together (in-batch negatives) can be run with GradCache
    (``--cache-chunk``, the loop's): its ``collate`` puts what ``embed(model, inputs)`` reads under ``"inputs"`` and
    one row per example in its other values, and ``losses`` is ``loss_from_embeddings(embed(model, inputs), batch)``.
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
    result_args = ()
    speed_args = ()
    packed = False  # collate lays a batch's texts end to end (tokens.Packed): the loop's choice on a CPU

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
        """Refuse, as the command line is read, flags that cannot go together: no model to start from, parts of a
        batch (``--chunk-tokens``) for a loss that is not a mean of independent per-example losses, or GradCache
        (``--cache-chunk``) for a loss not computed from the batch's embeddings together."""
        cls.check_model(args)
        if args.chunk_tokens and not cls.independent:
            raise InputError(f"--chunk-tokens {args.chunk_tokens}: the {cls.name} objective's loss is not a mean of "
                             "independent per-example losses, so a batch cannot be run in parts"
                             + (" (--cache-chunk runs it in GradCache chunks)" if cls.embeds() else ""))
        if args.cache_chunk and not cls.embeds():
            raise InputError(f"--cache-chunk {args.cache_chunk}: the {cls.name} objective's loss is not computed from "
                             "the batch's embeddings together, so GradCache does not apply"
                             + (" (--chunk-tokens runs a batch in parts)" if cls.independent else ""))

    @classmethod
    def embeds(cls):
        """Whether its loss is ``loss_from_embeddings`` of ``embed``'s embeddings (GradCache can run it)."""
        return cls.loss_from_embeddings is not Objective.loss_from_embeddings

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
        from common.train.rundir.run_entries import CACHE
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
        return self.loss_from_embeddings(self.embed(model, batch["inputs"]), batch)

    def embed(self, model, inputs):
        """The embeddings ``inputs`` (a batch's ``"inputs"``, or a GradCache chunk's) make: a tuple of tensors, one
        row per example each."""
        raise NotImplementedError

    def loss_from_embeddings(self, embeddings, batch):
        """``losses``'s result from the batch's ``embeddings`` (``embed``'s, each chunk's joined under GradCache)
        and the batch's per-example values."""
        raise NotImplementedError

    def validate(self, model, loader, accelerator):
        return {}

    def card_method(self):
        """The ``card.Method`` its models' cards describe this run by (an objective without one: its name)."""
        return self.method or self.name

    def card_details(self):
        """What this run adds to its models' cards besides its method: ``notes`` (paragraphs under the model's
        details), ``tags``, ``citations`` (keys of ``card.CITATIONS``, checked before the first step),
        ``teachers`` (the data's teachers)."""
        return {}

    def save_extra(self, model, directory):
        """Write what RUN/model holds besides the encoder (heads); ``directory`` becomes RUN/model."""

    def save(self, model, path, identity, log):
        """RUN/model (or RUN/epoch_K) at ``path``: the encoder, what ``save_extra`` adds, and the model card of the
        run whose settings are ``identity`` and whose log records up to this model are ``log``."""
        from common.models import run_card
        from common.models.saving import save_model
        save_model(self.encoder, self.tokenizer, path, self.max_length, self.info,
                   extra=lambda directory: self.save_extra(model, directory),
                   card=run_card.model_card(self, path, identity, log, self.card_facts()),
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
