"""Teacher–student distillation (Burian 2023, "Document embedding using Transformers", §3.1, §4.4–4.5): a student
that reads long documents learns from a structural teacher (Sentence-BERT vectors) and a contextual teacher
(Paragraph Vector), whose vectors ``04_distill.py teachers`` wrote beside the data.

| input    | what                                                                                   |
|----------|----------------------------------------------------------------------------------------|
| rows     | every document of ``docs.jsonl``                                                       |
| teachers | ``TEACH/sbert.npy`` (t), ``TEACH/pv.npy`` (t_C), ``TEACH/lengths.npy``, in that order  |
| loss     | per document ``λ_i·L_S(y_i, t_i) + (1 − λ_i)·L_C``, ``λ_i = λ·[length_i ≤ max]``        |

``L_S`` is one of ``common/distill/structural.py``'s losses over the documents the mask keeps; ``L_C`` is SoftCCA
(``common/distill/softcca.py``) between ``f_S(y)`` and ``f_C(t_C)``. ``--no-weighting`` is the thesis's public code
after its final runs: ``mask_i·L_S + L_C``. The projection heads and SoftCCA's running covariances belong to the
module trained, so they are optimised, checkpointed and resumed with the student; RUN/model is the student, the
heads in ``heads.safetensors`` beside it.
"""

import os

import numpy as np
import torch
from torch import nn

from common.data.docs_jsonl import read_documents
from common.data.shared_docs import SharedDocuments, shared_store, store_key, tokenising
from common.distill import teachers
from common import io
from common.io import InputError
from common.models.card import Method
from common.models.tokens import TokenStore
from common.train.objectives.base import Objective
from common import cli
from common.distill.softcca import SoftCCA, projection, projection_blocks
from common.distill.structural import STRUCTURAL_LOSSES, structural_loss

# The thesis's three final models (§5.1); their contextual teachers are 04_distill.py teachers' PV presets.
PRESETS = {
    "cosine-masked": {"structural_loss": "cos", "gamma": 1.0, "lam": 0.5, "max_structural_length": 384,
                      "student_projection": "768(relu)x4096(relu)x2048", "teacher_projection": ""},
    "mse-contextual": {"structural_loss": "mm-mse", "gamma": 1.0, "lam": 0.5, "max_structural_length": 0,
                       "student_projection": "768(relu)x1024(relu)x768", "teacher_projection": "768"},
    "only-mse": {"structural_loss": "mm-mse", "gamma": 1.0, "lam": 1.0, "max_structural_length": 0,
                 "student_projection": "", "teacher_projection": ""},
}


def combine(structural, contextual, mask, lam, no_weighting=False):
    """Per document ``λ_i·L_S + (1 − λ_i)·L_C`` with ``λ_i = λ·mask_i`` (the thesis, Eq. 3.1 and Listing 4.1), or
    ``mask_i·L_S + L_C`` (``no_weighting``); L_S alone where there is no contextual loss."""
    mask = mask.to(structural.dtype)
    if contextual is None:
        return structural
    if no_weighting:
        return mask * structural + contextual
    lam = lam * mask
    return lam * structural + (1 - lam) * contextual


class DistillModule(nn.Module):
    """The student encoder, both projection heads and SoftCCA's state; the heads compute in float32."""

    def __init__(self, encoder, student_projection, teacher_projection, softcca):
        super().__init__()
        self.encoder = encoder
        self.student_projection, self.teacher_projection, self.softcca = student_projection, teacher_projection, \
            softcca

    def forward(self, groups, index, contextual=None):
        """Student embeddings in batch order and, given contextual-teacher vectors, SoftCCA per document."""
        y = self.encoder(groups)[index]
        if contextual is None:
            return y, None
        with torch.autocast(device_type=y.device.type, enabled=False):
            z_s = self.student_projection(y.float())
            z_c = self.teacher_projection(contextual.float())
            return y, self.softcca(z_s, z_c)


class DistillObjective(Objective):
    name = "distill"
    paper = "Burian 2023 (master thesis), final runs"
    # weight decay 0.01: the final runs' configs (the thesis's tables say 0.1); warm-up 500 optimizer steps of
    # 6 × 10 documents; length buckets of 10 micro-batches, one effective batch
    defaults = {"lr": 3e-5, "batch_size": 6, "grad_accum": 10, "epochs": 1, "warmup": 500, "schedule": "cosine",
                "weight_decay": 0.01, "pooling": "mean", "max_length": 4096, "normalize": False, "drop_last": True,
                "length_buckets": 10}
    presets, preset = PRESETS, "mse-contextual"
    result_args = ("teachers", "preset", "structural_loss", "gamma", "lam", "max_structural_length",
                   "student_projection", "teacher_projection", "beta", "delta", "no_weighting")
    method = Method(
        "teacher–student distillation",
        "distilled after Burian (2023, master thesis \"Document embedding using Transformers\"): a student that "
        "reads long documents learns from a structural teacher (Sentence-BERT vectors of each document, the "
        "structural loss) and a contextual teacher (Paragraph Vector, through SoftCCA on projections of both).",
        ("distillation", "long-documents"), ("burian",))

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--teachers", required=True, type=cli.reads,
                            help="teacher vectors from 04_distill.py teachers")
        parser.add_argument("--preset", choices=tuple(PRESETS), default=cls.preset,
                            help="the thesis's final models (§5.1): their values are the defaults of the loss flags "
                                 "below (--preset NAME --help shows them)")
        parser.add_argument("--structural-loss", choices=STRUCTURAL_LOSSES,
                            help="L_S: cos, mse, or max-margin (mm-) with --gamma")
        parser.add_argument("--gamma", type=cli.number(float, cli.LOSS_CONSTANT),
                            help="max-margin weight of the negatives")
        parser.add_argument("--lambda", dest="lam", type=cli.number(float, cli.SHARE),
                            help="λ: weight of L_S on documents the mask keeps, 1 − λ of L_C")
        parser.add_argument("--max-structural-length", type=cli.number(int, cli.between(0, 1 << 17)),
                            help="L_S only for documents of at most this many structural-teacher tokens (the "
                                 "teacher's context); 0: every document")
        parser.add_argument("--student-projection",
                            help="f_S: Linear output sizes, x-separated, '(relu)' after an activated one, e.g. "
                                 "768(relu)x4096(relu)x2048; '' = identity")
        parser.add_argument("--teacher-projection", help="f_C, the same way")
        parser.add_argument("--beta", type=cli.number(float, cli.SHARE), default=0.95,
                            help="SoftCCA running-covariance decay (thesis)")
        parser.add_argument("--delta", type=cli.number(float, cli.LOSS_CONSTANT), default=0.03,
                            help="SoftCCA weight of the SDL terms (thesis)")
        parser.add_argument("--no-weighting", action="store_true",
                            help="mask·L_S + L_C (the thesis's public code after its final runs) instead of the "
                                 "thesis's λ-weighted sum")

    @classmethod
    def check_args(cls, args):
        projection_blocks(args.student_projection, "--student-projection")
        projection_blocks(args.teacher_projection, "--teacher-projection")
        super().check_args(args)

    def uses_contextual(self):
        args = self.args
        return args.lam < 1 or args.max_structural_length > 0 or args.no_weighting

    def build(self):
        encoder = super().build()
        args = self.args
        # the student's vectors are compared as its structural loss compares them with the teacher's
        self.similarity = "cosine" if args.structural_loss.endswith("cos") else "euclidean"
        # the teachers' rows checked against docs.jsonl's ids before anything is written (the documents are mapped
        # in load_data)
        ids = [doc for _, doc, _, _ in read_documents(os.path.join(args.data, "docs.jsonl"))]
        self.structural = teachers.read_vectors(args.teachers, teachers.STRUCTURAL, ids)
        hidden = encoder.transformer.config.hidden_size
        sbert_path = os.path.join(args.teachers, f"{teachers.STRUCTURAL}.npy")
        if self.structural.shape[1] != hidden:
            raise InputError(f"{sbert_path}: {self.structural.shape[1]} dimensions, the student has {hidden}")
        self.lengths = teachers.read_lengths(args.teachers, ids)
        self.contextual = None
        student_head, teacher_head, softcca = nn.Identity(), nn.Identity(), nn.Identity()
        if self.uses_contextual():
            self.contextual = teachers.read_vectors(args.teachers, teachers.CONTEXTUAL, ids)
            student_head, dim = projection(args.student_projection, hidden)
            teacher_head, teacher_dim = projection(args.teacher_projection, self.contextual.shape[1])
            if dim != teacher_dim:
                raise InputError(f"--student-projection ends at {dim} dimensions, --teacher-projection at "
                                 f"{teacher_dim} (the contextual teacher has {self.contextual.shape[1]}): "
                                 f"SoftCCA needs the same size")
            softcca = SoftCCA(dim, args.beta, args.delta)
        self.info.update({key: getattr(args, key) for key in self.result_args if key != "teachers"})
        return DistillModule(encoder, student_head, teacher_head, softcca)

    def card_details(self):
        """The Longformer paper for a Longformer student, the heads' file, and the teachers as their manifest names
        them (its numbers checked: the card quotes them)."""
        args = self.args
        model_type = self.encoder.transformer.config.model_type
        found = {"citations": ["longformer"] if model_type == "longformer" else []}
        if self.uses_contextual():
            found["notes"] = ["`heads.safetensors` beside the model holds the projection heads and SoftCCA's state "
                              "of training; the embedding does not use them."]
        teacher = io.read_manifest(args.teachers).get("args") or {}
        where = os.path.join(args.teachers, "manifest.json")
        for key, high in (("teacher_max_length", 1 << 17), ("pv_vector_size", 1 << 16)):  # cli.LENGTH, cli.WIDTH
            if teacher.get(key) is not None:
                io.number(teacher[key], f"{where}: args → {key}", int, 1, high)
        if teacher:
            found["teachers"] = {"structural": teacher.get("teacher"),
                                 "structural_max_length": teacher.get("teacher_max_length"),
                                 "contextual": f"Paragraph Vector {teacher.get('pv')}, "
                                               f"{teacher.get('pv_vector_size')}d"}
        return found

    def load_data(self):
        # docs.jsonl mapped, and every document tokenised, once a node by the first process; the others map both
        cache, sep = self.cache_dir(), self.tokenizer.sep_token or ""
        docs = SharedDocuments(self.args.data, cache, self.say)
        self.store = shared_store(cache, store_key(docs, self.tokenizer, self.max_length, sep), lambda: TokenStore(
            self.tokenizer, tokenising(docs.inputs(sep), len(docs)), self.max_length))
        self.train_rows = np.arange(len(docs))
        self.val_rows = np.zeros(0, dtype=np.int64)
        limit = self.args.max_structural_length
        self.mask = self.lengths <= limit if limit > 0 else np.ones(len(self.lengths), dtype=bool)
        if not self.uses_contextual() and not self.mask.any():
            raise InputError("no document is short enough for the structural loss and there is no contextual one")
        if limit > 0:
            self.say(f"structural loss on {int(self.mask.sum())} of {len(self.mask)} documents (at most {limit} "
                     f"structural-teacher tokens); the others learn from the contextual teacher alone")
        self.info["structural_documents"] = int(self.mask.sum())

    def train_lengths(self):
        return self.store.lengths()

    def collate(self, rows):
        rows = np.asarray(rows, dtype=np.int64)
        groups, index = self.store.groups(rows, self.args.length_groups, self.packed)
        batch = {"groups": groups, "index": index, "structural": torch.from_numpy(self.structural[rows]),
                 "mask": torch.from_numpy(self.mask[rows])}
        if self.contextual is not None:
            batch["contextual"] = torch.from_numpy(self.contextual[rows])
        return batch

    def losses(self, model, batch):
        args = self.args
        y, contextual = model(batch["groups"], batch["index"], batch.get("contextual"))
        structural = structural_loss(y, batch["structural"], batch["mask"], args.structural_loss, args.gamma)
        return combine(structural, contextual, batch["mask"], args.lam, args.no_weighting), {}

    def save_extra(self, model, directory):
        from safetensors.torch import save_file
        heads = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()
                 if not k.startswith("encoder.")}
        if heads:
            save_file(heads, os.path.join(directory, "heads.safetensors"))
