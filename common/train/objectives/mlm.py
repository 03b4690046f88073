"""Masked-language-model domain adaptation (stage 1 of paper search): BERT's pre-training objective continued on
the corpus's abstracts (Devlin et al. 2019), with the defaults of transformers' ``run_mlm_no_trainer.py``.

| input   | what                                                                                              |
|---------|---------------------------------------------------------------------------------------------------|
| texts   | ``docs.jsonl`` abstracts (``text`` only: titles are stage 2's queries), all papers or the training |
|         | split's (``--mlm-docs``); 5 % of them validate                                                     |
| rows    | blocks of ``max_length`` tokens cut from the concatenated, tokenised texts (``--line-by-line``:    |
|         | one truncated text each)                                                                           |
| masking | 15 % of non-special tokens (or whole words) chosen; of those 80 % ``[MASK]``, 10 % a random id,    |
|         | 10 % kept, as ``DataCollatorForLanguageModeling``; drawn from (seed, epoch, example)               |
| loss    | ``losses.masked_lm`` per masked token (its mean is Hugging Face's ``outputs.loss``)                |

Masks are re-drawn every epoch, as the reference collator does, but from a generator seeded by (seed, epoch,
example), so a resumed run and any number of processes see the same masks. Validation masks are fixed (seed,
"val", example), so validation losses of different steps compare the same task; perplexity is exp of the
token-weighted mean loss.

The texts are read from docs.jsonl as every process of a node maps it (``shared_docs.SharedDocuments``); the first
process tokenises them into a training and a validation part kept in the run's cache as .npy files, which every
process then maps read-only (``shared_docs.shared_arrays``), so that a node holds one copy of the tokens.

The model is ``common/models/masked_lm.py``'s ``MaskedLM`` (on a CPU at its ``masked_positions``: the vocabulary
projection and, in a BERT, most of the last layer on the masked positions only); the blocks and the
masking are ``common/train/masking.py``'s. RUN/model is the masked-LM model (encoder and head, ``save_pretrained``) with
sentence-transformers files for mean pooling: ``AutoModel`` and ``SentenceTransformer`` load the encoder from it and
drop the head, so 05 scores the adapted encoder and stage 2 starts from it.

With ``--nsp``, BERT's pre-training as a whole (Devlin et al. 2019, §3.1): the masked LM on pairs of segments A and
B cut from one document at sentence boundaries (``common/train/nsp.py``, after BERT's ``create_pretraining_data.py``)
instead of blocks, plus next-sentence prediction (is B A's continuation or a span of another document) by a two-way
classifier on BERT's pooler over ``[CLS]``. The loss is ``BertForPreTraining``'s: the mean masked-LM loss over the
masked tokens plus the mean next-sentence cross-entropy. The pairs are cut once, from (seed, document); their masks
are drawn as the blocks' are. RUN/model is then the ``BertForPreTraining`` (pooler and both heads).

A new model (no ``--model``): as ``run_mlm_no_trainer.py`` trains one from scratch, from ``--config-name`` (a model
whose configuration is copied, not its weights) or ``--model-type`` (transformers' default configuration of that
architecture), changed by ``--config-overrides`` (``run_mlm.py``'s ``"n_layer=4,hidden_size=256"`` form), with
randomly initialised weights (seeded by ``--seed``). Its tokenizer is ``--tokenizer-name``'s, or a WordPiece
vocabulary of ``--vocab-size`` learnt from the training texts (``common/train/new_model.py``).
"""

import argparse
import contextlib
import itertools
import os

import numpy as np
import torch

from common import cli
from common.data.retrieval import read_split_ids
from common.data.shared_docs import SharedDocuments, shared_arrays, store_key, tokenising
from common.io import InputError
from common.markdown import escape
from common.models.card import Method
from common.models.loading import load_pretrained, load_weights, st_config
from common.train import losses, nsp
from common.models.masked_lm import MaskedLM, check_nsp
from common.models.token_cache import cache_folder
from common.train.masking import IGNORE, mask_batch, part_arrays, parts_of, tokenize
from common.train.new_model import configuration, new_model
from common.train.objectives.base import Objective

MLM_METHOD = Method(
    "masked-language-model training",
    "trained on the corpus's texts with BERT's masked-language-model objective (Devlin et al. 2019) and the "
    "defaults of transformers' `run_mlm_no_trainer.py`: from a pretrained model, the domain adaptation of the "
    "paper-search method's stage 1; from a new one, pretraining. It was not trained for similarity: its pooled "
    "vectors are the encoder's, a start for fine-tuning (`--objective mnrl`, `--objective triplet`).",
    ("mlm", "fill-mask"), ("bert",), similarity=False, inputs="texts as they are")
NSP_METHOD = Method(
    "masked-language-model and next-sentence-prediction training",
    "trained on the corpus's texts with both of BERT's pre-training objectives (Devlin et al. 2019, §3.1): the "
    "masked language model, and next-sentence prediction, a two-way classifier on BERT's pooler over `[CLS]` "
    "that tells whether segment B of a pair followed segment A in one document or was cut from another "
    "(pairs cut as BERT's `create_pretraining_data.py` cuts them, with token types 0 and 1). Its `[CLS]` vector "
    "has thus been trained before any fine-tuning, as BERT's was; it was not trained for similarity: its "
    "pooled vectors are the encoder's, a start for fine-tuning (`--objective mnrl`, `--objective triplet`).",
    ("mlm", "nsp", "fill-mask"), ("bert",), similarity=False, inputs="texts as they are")
VAL = int.from_bytes(b"val", "little")  # the "epoch" of validation masks: fixed for the whole run
NSP_MIN_LENGTH = 5  # [CLS] A [SEP] B [SEP], a token in each segment


class MLMObjective(Objective):
    name = "mlm"
    paper = "transformers' run_mlm_no_trainer.py (BERT's masked-LM pre-training)"
    defaults = {"lr": 5e-5, "batch_size": 8, "epochs": 3, "warmup": 0, "weight_decay": 0.0, "schedule": "linear",
                "pooling": "mean", "max_length": None, "normalize": False, "drop_last": False}
    similarity = None  # not trained for similarity
    result_args = ("mlm_probability", "mask_replace_prob", "random_replace_prob", "whole_word_mask", "line_by_line",
                   "mlm_docs", "validation_split", "model_type", "config_name", "config_overrides", "tokenizer_name",
                   "vocab_size", "lowercase", "nsp", "short_seq_prob")
    speed_args = ("cache_dir",)
    method = MLM_METHOD

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--mlm-probability", type=cli.number(float, cli.SHARE), default=0.15,
                            help="share of tokens (or words) chosen for prediction (BERT; run_mlm_no_trainer)")
        parser.add_argument("--mask-replace-prob", type=cli.number(float, cli.SHARE), default=0.8,
                            help="of the chosen tokens, the share replaced by [MASK] (BERT)")
        parser.add_argument("--random-replace-prob", type=cli.number(float, cli.SHARE), default=0.1,
                            help="of the chosen tokens, the share replaced by a random token (BERT); the rest stay")
        parser.add_argument("--whole-word-mask", action="store_true",
                            help="choose whole words (the fast tokenizer's word ids), every token of a chosen word "
                                 "replaced by [MASK] (transformers' whole_word_mask)")
        parser.add_argument("--line-by-line", action="store_true",
                            help="one truncated abstract per example instead of blocks cut from the concatenated "
                                 "abstracts (run_mlm_no_trainer's --line_by_line)")
        parser.add_argument("--mlm-docs", choices=("all", "train"), default="all",
                            help="abstracts to train on: every paper of the corpus (the index a search engine "
                                 "holds; no title is ever seen) or only the training split's papers")
        parser.add_argument("--validation-split", type=cli.number(float, cli.SHARE), default=0.05,
                            help="share of those papers held out for validation loss and perplexity "
                                 "(run_mlm_no_trainer's validation_split_percentage 5)")
        parser.add_argument("--nsp", action="store_true",
                            help="BERT's pre-training: next-sentence prediction besides the masked LM, on pairs of "
                                 "segments cut from one document at sentence boundaries (B the continuation half of "
                                 "the time, else from another document), BERT's pooler and a two-way classifier on "
                                 "[CLS]; the model is a BertForPreTraining (Devlin et al. 2019, §3.1)")
        parser.add_argument("--short-seq-prob", type=cli.number(float, cli.SHARE), default=0.1,
                            help="--nsp: share of documents whose pairs aim at a shorter length, drawn from 2 to the "
                                 "model's (BERT's create_pretraining_data.py short_seq_prob)")
        parser.add_argument("--cache-dir", default=None, type=cli.writes,
                            help="where tokenised texts and a learnt vocabulary are cached (default: RUN/cache, "
                                 "inside --out; another place is checked as --out is: apart from the inputs)")
        # a new model instead of --model (run_mlm_no_trainer.py's from-scratch path)
        parser.add_argument("--model-type", "--model_type", dest="model_type", default=None,
                            help="architecture of a new, randomly initialised model with transformers' default "
                                 "configuration for it (e.g. bert)")
        parser.add_argument("--config-name", "--config_name", dest="config_name", default=None, type=cli.reads,
                            help="a model or folder whose configuration (not weights) the new model takes")
        parser.add_argument("--config-overrides", "--config_overrides", dest="config_overrides", default=None,
                            help='configuration values to change, e.g. "num_hidden_layers=4,hidden_size=256,'
                                 'num_attention_heads=4,intermediate_size=1024" (run_mlm.py)')
        parser.add_argument("--tokenizer-name", "--tokenizer_name", dest="tokenizer_name", default=None,
                            type=cli.reads,
                            help="a model or folder whose tokenizer the new model uses (default: a new WordPiece "
                                 "vocabulary learnt from the training texts)")
        parser.add_argument("--vocab-size", type=cli.number(int, cli.between(100, 1_000_000)), default=30522,
                            help="size of the learnt WordPiece vocabulary (BERT's 30,522)")
        parser.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=True,
                            help="the learnt vocabulary lower-cases and strips accents (BERT uncased)")

    @classmethod
    def defaults_for(cls, argv):
        """The parser's defaults; with ``--whole-word-mask`` every token of a chosen word becomes ``[MASK]``, and
        the shares say so (1 and 0), so that ``--help`` and the card show what runs."""
        found = super().defaults_for(argv)
        first = cli.Parser(add_help=False)
        first.add_argument("--whole-word-mask", action="store_true")
        if first.parse_known_args(argv)[0].whole_word_mask:
            found.update(mask_replace_prob=1.0, random_replace_prob=0.0)
        return found

    @classmethod
    def check_model(cls, args):
        if args.model is None and not (args.model_type or args.config_name):
            raise InputError("--model is required (or --model-type / --config-name to train a new model)")

    @classmethod
    def check_args(cls, args):
        if args.model and (args.model_type or args.config_name):
            raise InputError("--model starts from a trained model, --model-type / --config-name from a new one: "
                             "give one of them")
        if args.model and (args.config_overrides or args.tokenizer_name):
            raise InputError("--config-overrides and --tokenizer-name apply to a new model "
                             "(--model-type / --config-name), not to --model")
        if args.nsp and args.line_by_line:
            raise InputError("--nsp cuts pairs of segments at sentence boundaries; --line-by-line trains on single "
                             "texts: give one of them")
        if args.whole_word_mask and (args.mask_replace_prob, args.random_replace_prob) != (1.0, 0.0):
            raise InputError("--whole-word-mask replaces every token of a chosen word by [MASK]: --mask-replace-prob "
                             "is 1 and --random-replace-prob 0 with it")
        if args.mask_replace_prob + args.random_replace_prob > 1 + 1e-9:
            raise InputError(f"--mask-replace-prob {args.mask_replace_prob} and --random-replace-prob "
                             f"{args.random_replace_prob}: shares of the same chosen tokens, they add up to at most 1 "
                             "(the rest stay as they are)")
        if args.nsp and args.max_length is not None and args.max_length < NSP_MIN_LENGTH:
            raise InputError(f"--max-length {args.max_length}: --nsp needs at least {NSP_MIN_LENGTH} tokens "
                             "([CLS] A [SEP] B [SEP], a token in each segment)")
        super().check_args(args)

    def build(self):
        from transformers import AutoTokenizer
        args = self.args
        if args.model is None:
            mlm = self._new_model()
        else:
            self.tokenizer = load_pretrained(AutoTokenizer, args.model)
            if self.tokenizer.mask_token_id is None:
                raise InputError(f"{args.model}: its tokenizer has no mask token")
            mlm, new = load_weights(self._auto_class(), args.model, self.say)
            check_nsp(mlm, args.nsp, args.model)
            prefix = mlm.base_model_prefix + "."
            nsp_part = [k for k in new if k.startswith(("cls.seq_relationship.", prefix + "pooler."))]
            head = [k for k in new if k not in nsp_part]
            if head:
                self.say(f"note: {args.model} has no masked-LM head weights ({len(head)} tensors newly "
                         "initialised); they start untrained")
            if nsp_part:
                self.say(f"note: {args.model} has no next-sentence head or pooler weights ({len(nsp_part)} tensors "
                         "newly initialised); they start untrained")
        model_limit = self.tokenizer.model_max_length if self.tokenizer.model_max_length < 100_000 else \
            mlm.config.max_position_embeddings
        limit = min(model_limit, 1024)  # run_mlm_no_trainer's cap
        self.max_length = min(args.max_length or limit, model_limit)
        if args.nsp and self.max_length < NSP_MIN_LENGTH:
            raise InputError(f"{args.model or 'the new model'}: takes at most {self.max_length} tokens; --nsp needs at "
                             f"least {NSP_MIN_LENGTH} ([CLS] A [SEP] B [SEP], a token in each segment)")
        self.settings = {"pooling": args.pooling, "normalize": bool(args.normalize), "max_length": self.max_length,
                         "st_config": st_config(args.model) if args.model else {}}
        model = MaskedLM(mlm, args.pooling, bool(args.normalize), nsp=args.nsp)
        self.masked_lm = type(mlm).__name__
        self.encoder = model.encoder
        self.info.update({"mlm_probability": args.mlm_probability, "whole_word_mask": args.whole_word_mask,
                          "line_by_line": args.line_by_line, "mlm_docs": args.mlm_docs, "nsp": args.nsp})
        return model

    def card_method(self):
        return NSP_METHOD if self.args.nsp else MLM_METHOD

    def card_details(self):
        """Which classes load which parts of the saved folder, and for a new model where its configuration and
        tokenizer came from."""
        args = self.args
        if args.nsp:
            notes = [f"The folder holds BERT's pre-training heads too (`{self.masked_lm}`: the masked-LM head, "
                     "the pooler and the next-sentence classifier): `AutoModelForPreTraining` loads them with the "
                     "encoder, `AutoModel` loads the encoder with its trained pooler, `SentenceTransformer` the "
                     "encoder alone."]
        else:
            notes = [f"The folder holds the masked-LM head too: `AutoModelForMaskedLM` loads it with the encoder "
                     f"(`{self.masked_lm}`), `AutoModel` and `SentenceTransformer` load the encoder alone."]
        if args.model is None:
            notes.append("The model was new: its configuration "
                         + (f"{escape(args.config_name)}'s" if args.config_name else
                            f"transformers' default for {escape(args.model_type)}")
                         + (f" changed by {escape(args.config_overrides)}" if args.config_overrides else "")
                         + ", its weights randomly initialised, its tokenizer "
                         + (f"{escape(args.tokenizer_name)}'s." if args.tokenizer_name else
                            f"a WordPiece vocabulary of {len(self.tokenizer):,} entries learnt from the "
                            "training texts."))
        return {"notes": notes}

    def _auto_class(self):
        from transformers import AutoModelForMaskedLM, AutoModelForPreTraining
        return AutoModelForPreTraining if self.args.nsp else AutoModelForMaskedLM

    def _new_model(self):
        """A randomly initialised masked-LM model (``--nsp``: pre-training model) from a configuration, with its
        tokenizer (``self.tokenizer``)."""
        args = self.args
        config = configuration(args.model_type, args.config_name, args.config_overrides)
        mlm, self.tokenizer = new_model(self._auto_class(), config, args.tokenizer_name, self._learn_vocabulary,
                                        args.nsp, self.say)
        self.info.update({"new_model": config.model_type, "config_overrides": args.config_overrides,
                          "vocab_size": len(self.tokenizer)})
        return mlm

    def _learn_vocabulary(self, length):
        """A WordPiece vocabulary of ``--vocab-size`` learnt from the training split's texts."""
        from common.models.vocabulary import train_wordpiece
        args = self.args
        with self.accelerator.main_process_first() if self.accelerator else contextlib.nullcontext():
            docs, which = self._documents()
            train = which[np.sort(self._split(len(which))[0])]
            tokenizer = train_wordpiece(list(_selected(docs.texts, train)), args.vocab_size, args.lowercase,
                                        model_max_length=length, cache_dir=self.cache_dir())
        self.say(f"new WordPiece vocabulary of {len(tokenizer)} entries learnt from {len(train)} texts")
        return tokenizer

    def _split(self, n):
        """(training, validation) text positions: a seeded permutation, the first ``--validation-split`` held out."""
        order = np.random.default_rng(self.args.seed).permutation(n)
        n_val = int(round(self.args.validation_split * n))
        return order[n_val:], order[:n_val]

    def _documents(self):
        """docs.jsonl mapped from the cache (``SharedDocuments``) and the ascending positions of the documents
        ``--mlm-docs`` trains on."""
        args = self.args
        docs = SharedDocuments(args.data, cache_folder(self.cache_dir()), self.say)
        if args.mlm_docs == "all":
            return docs, np.arange(len(docs))
        path = os.path.join(args.data, "splits.json")
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file (--mlm-docs train needs 02_build_graph.py retrieval's split)")
        found = docs.rows(read_split_ids(path, "train"))
        return docs, np.unique(found[found >= 0])

    def load_data(self):
        args = self.args
        docs, which = self._documents()
        if not len(which):
            raise InputError(f"{os.path.join(args.data, 'docs.jsonl')}: no abstracts to train on")
        if args.nsp:
            parts = self._pairs(list(_selected(docs.texts, which)))
        else:
            parts = self._parts(docs, which)
            if not args.line_by_line:
                parts = [p.blocks(self.max_length) for p in parts]
        self.parts = parts
        self.special_ids = np.array(self.tokenizer.all_special_ids)
        self.train_rows = np.stack([np.arange(len(parts[0])), np.zeros(len(parts[0]), np.int64)], 1)
        self.val_rows = np.stack([np.arange(len(parts[1])), np.ones(len(parts[1]), np.int64)], 1)
        self.epoch = 0
        if not len(self.train_rows):
            raise InputError(f"{os.path.join(args.data, 'docs.jsonl')}: " + (
                "no sentences to pair" if args.nsp else f"too few tokens for one block of {self.max_length}"))

    def _parts(self, docs, which):
        """The training and validation parts of the texts at ``which``, tokenised by the first process into the
        cache, under a key of all they are made from, and mapped read-only by every process (``shared_arrays``)."""
        args = self.args
        val = self._split(len(which))[1]
        key = store_key(docs, self.tokenizer, "mlm", which, self.max_length, args.line_by_line, args.seed,
                        args.validation_split)

        def build():
            part_of = np.zeros(len(which), dtype=np.int8)
            part_of[val] = 1
            texts = tokenising(_selected(docs.texts, which), len(which))
            return part_arrays(tokenize(texts, part_of, self.tokenizer, self.max_length, args.line_by_line))
        return shared_arrays(self.cache_dir(), f"mlm-parts-{key}", build, parts_of, self.say)

    def _pairs(self, texts):
        """``--nsp``: the training and validation parts as next-sentence pairs of their own documents."""
        args = self.args
        ids, word_start, sentences, per_text = nsp.tokenize_sentences(texts, self.tokenizer, self.cache_dir())
        parts = [nsp.Pairs(ids, word_start, nsp.pairs(sentences, per_text, np.sort(p), self.max_length - 3,
                                                     args.short_seq_prob, args.seed),
                           self.tokenizer.cls_token_id, self.tokenizer.sep_token_id)
                 for p in self._split(len(texts))]
        shown = [f"{len(p):,} for {name} ({p.table[:, 4].mean():.1%} random, {p.lengths().mean():.1f} tokens on "
                 "average)" if len(p) else f"none for {name}" for p, name in zip(parts, ("training", "validation"))]
        self.say(f"next-sentence pairs of at most {self.max_length} tokens: {shown[0]}, {shown[1]}")
        return parts

    def set_epoch(self, epoch):
        self.epoch = epoch

    def train_lengths(self):
        part = self.parts[0]
        return part.lengths() if self.args.nsp else np.diff(part.offsets)

    def collate(self, rows):
        """The batch of ``rows`` ((example, part) pairs), masked input ids and labels; with ``--nsp`` also token type
        ids and next-sentence labels. Each example is masked from its own generator, seeded by (seed, epoch or VAL,
        example), so that a resumed run sees the masks the uninterrupted one saw; the draws of the whole batch
        are compared and replaced at once (``mask_batch``)."""
        args = self.args
        rows = np.asarray(rows).reshape(-1, 2).tolist()
        examples = [self.parts[p].get(e) for e, p in rows]
        lengths = [len(example[0]) for example in examples]
        ids = np.concatenate([example[0] for example in examples])
        word_start = np.concatenate([example[1] for example in examples])
        rngs = [np.random.default_rng([args.seed, VAL if p else self.epoch, int(e)]) for e, p in rows]
        masked, flat_labels = mask_batch(ids, np.isin(ids, self.special_ids), word_start, lengths, rngs,
                                         args.mlm_probability, args.mask_replace_prob, args.random_replace_prob,
                                         args.whole_word_mask, self.tokenizer.mask_token_id, len(self.tokenizer))
        width = max(lengths)
        place = np.arange(width) < np.asarray(lengths)[:, None]  # each row's tokens, in order
        input_ids = np.full((len(rows), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        labels = np.full((len(rows), width), IGNORE, dtype=np.int64)
        input_ids[place], labels[place] = masked, flat_labels
        batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(place.astype(np.int64)),
                 "labels": torch.from_numpy(labels)}
        if args.nsp:
            types = np.zeros((len(rows), width), dtype=np.int64)
            types[place] = np.concatenate([example[2] for example in examples])
            batch["token_type_ids"] = torch.from_numpy(types)
            batch["next_sentence_label"] = torch.tensor([example[3] for example in examples], dtype=torch.int64)
        return batch

    def losses(self, model, batch):
        """The mean masked-LM loss over the batch's masked tokens (a scalar); with ``--nsp`` plus the mean
        next-sentence cross-entropy over its pairs, ``BertForPreTraining``'s loss, its two parts and the
        next-sentence accuracy the log values."""
        out = model(batch["input_ids"], batch["attention_mask"], batch["labels"], batch.get("token_type_ids"))
        # a sum over the predicted positions divided by their count: no host synchronisation, and 0 with a
        # gradient through every parameter where nothing is masked
        masked_lm = losses.masked_lm(out.logits, out.labels).sum() / (out.labels != IGNORE).sum().clamp(min=1)
        if not self.args.nsp:
            return masked_lm, {}
        labels = batch["next_sentence_label"]
        next_sentence = losses.next_sentence(out.relationship, labels).mean()
        return masked_lm + next_sentence, {
            "mlm_loss": masked_lm.detach(), "nsp_loss": next_sentence.detach(),
            "nsp_accuracy": (out.relationship.detach().argmax(-1) == labels).float().mean()}

    @torch.no_grad()
    def validate(self, model, loader, accelerator):
        """Token-weighted validation loss over the fixed validation masks, its exp (perplexity), and the share of
        masked tokens whose most likely prediction is the original (accuracy); with ``--nsp`` also the mean
        next-sentence loss and the share of the fixed validation pairs whose label is predicted."""
        totals = []
        for batch in loader:
            out = model(batch["input_ids"], batch["attention_mask"], batch["labels"], batch.get("token_type_ids"))
            if self.args.nsp:
                pair = batch["next_sentence_label"]
                pairs = torch.stack([losses.next_sentence(out.relationship, pair),
                                     (out.relationship.argmax(-1) == pair).float()], 1)
            else:
                pairs = torch.zeros(len(batch["labels"]), 0)
            hit = (out.logits.argmax(-1) == out.labels).float()  # never at an IGNORE label
            sums = torch.zeros(len(batch["labels"]), 2, device=hit.device).index_add_(
                0, out.rows, torch.stack([losses.masked_lm(out.logits, out.labels), hit], 1))
            masked = (batch["labels"] != IGNORE).sum(1, keepdim=True).float()
            totals.append(accelerator.gather_for_metrics(torch.cat([sums, masked, pairs.to(sums.device)], 1)))
        if not totals:
            return {}
        sums = torch.cat(totals)
        loss_sum, correct, count = sums[:, :3].sum(0).tolist()
        found = {}
        if count:
            found = {"val_loss": loss_sum / count, "perplexity": float(np.exp(loss_sum / count)),
                     "val_accuracy": correct / count}
        if self.args.nsp:
            nsp_loss, nsp_correct = sums[:, 3:].mean(0).tolist()
            found.update({"val_nsp_loss": nsp_loss, "val_nsp_accuracy": nsp_correct})
        return found

    def save_extra(self, model, directory):
        # the masked-LM weights (encoder and head) replace the bare encoder's: AutoModel and sentence-transformers
        # load the encoder from them and leave the head
        model.mlm.save_pretrained(directory)


def _selected(column, which):
    """The values of ``column`` (``SharedDocuments``' mapped column) at the ascending positions ``which``, read a
    record batch at a time."""
    keep = np.zeros(len(column), dtype=bool)
    keep[which] = True
    return itertools.compress(column, keep)
