"""What the model card of a trained model says of its run: each objective's method (``METHODS``: title, paragraph,
tags, citations), the notes a run's flags add (``details``), and the card's assembly from the run's identity, log
and manifests (``model_card``). ``card.py`` renders it.
"""

import os

from common.io import InputError
from common.models import card
from common.models.card import Method

METHODS = {
    "triplet": Method(
        "SPECTER triplet objective",
        "fine-tuned with SPECTER's objective (Cohan et al. 2020), as the WikiSpecter thesis used it: a triplet margin "
        "loss on the L2 distance between a query document, a document it links to and a negative (a document two "
        "links away, or a random one), so that linked documents lie close.",
        ("specter", "triplet", "loss:TripletLoss"), ("specter", "sbert")),
    "contrastive": Method(
        "key-sentence contrastive objective",
        "fine-tuned after the key-sentence extraction thesis (CRISPR-Cas9 knockout articles): a fixed query, "
        "embedded by the model itself, is paired with every sentence of every training article, and a contrastive "
        "loss on cosine distance with a margin (sentence-transformers' `ContrastiveLoss`, after Hadsell et al. "
        "2006) draws key sentences close to the query and pushes the others beyond the margin.",
        ("contrastive", "key-sentence", "loss:ContrastiveLoss"), ("sbert", "hadsell"),
        inputs="single sentences, and the query as one more text"),
    "cosine": Method(
        "key-sentence cosine objective",
        "fine-tuned after the key-sentence extraction thesis (CRISPR-Cas9 knockout articles): a fixed query, "
        "embedded by the model itself, is paired with every sentence of every training article, and the mean "
        "squared error between their cosine similarity and the 0/1 key-sentence label is minimised "
        "(sentence-transformers' `CosineSimilarityLoss`).",
        ("cosine", "key-sentence", "loss:CosineSimilarityLoss"), ("sbert",),
        inputs="single sentences, and the query as one more text"),
    "mlm": Method(
        "masked-language-model training",
        "trained on the corpus's texts with BERT's masked-language-model objective (Devlin et al. 2019) and the "
        "defaults of transformers' `run_mlm_no_trainer.py`: from a pretrained model, the domain adaptation of the "
        "paper-search method's stage 1; from a new one, pretraining. It was not trained for similarity: its pooled "
        "vectors are the encoder's, a start for fine-tuning (`--objective mnrl`, `--objective triplet`).",
        ("mlm", "fill-mask"), ("bert",), similarity=False, inputs="texts as they are"),
    "mlm --nsp": Method(
        "masked-language-model and next-sentence-prediction training",
        "trained on the corpus's texts with both of BERT's pre-training objectives (Devlin et al. 2019, §3.1): the "
        "masked language model, and next-sentence prediction, a two-way classifier on BERT's pooler over `[CLS]` "
        "that tells whether segment B of a pair followed segment A in one document or was cut from another "
        "(pairs cut as BERT's `create_pretraining_data.py` cuts them, with token types 0 and 1). Its `[CLS]` vector "
        "has thus been trained before any fine-tuning, as BERT's was; it was not trained for similarity: its "
        "pooled vectors are the encoder's, a start for fine-tuning (`--objective mnrl`, `--objective triplet`).",
        ("mlm", "nsp", "fill-mask"), ("bert",), similarity=False, inputs="texts as they are"),
    "mnrl": Method(
        "Multiple Negatives Ranking",
        "fine-tuned as a bi-encoder with the Multiple Negatives Ranking loss (Henderson et al. 2017; "
        "sentence-transformers' `MultipleNegativesRankingLoss`), stage 2 of the paper-search method: a query (a "
        "paper's title) must pick its document (the paper's abstract) among every document of the batch, by "
        "cross-entropy over scaled cosine similarities.",
        ("mnrl", "loss:MultipleNegativesRankingLoss"), ("henderson", "sbert"),
        inputs="a document's text alone (the abstract) and a query (a title or any free text), both as they are"),
    "distill": Method(
        "teacher–student distillation",
        "distilled after Burian (2023, master thesis \"Document embedding using Transformers\"): a student that "
        "reads long documents learns from a structural teacher (Sentence-BERT vectors of each document, the "
        "structural loss) and a contextual teacher (Paragraph Vector, through SoftCCA on projections of both).",
        ("distillation", "long-documents"), ("burian",)),
}

# what a run's identity holds besides the flags its cards list: where the data is and what it holds, the model it
# started from (the card names it on its own) and the number of processes (the card's training line says it)
NOT_SETTINGS = ("objective", "data", "data_content", "model", "processes")


def method_of(objective):
    """The ``Method`` that describes a run of ``objective`` (``--nsp`` makes masked-LM training BERT's whole
    pre-training); an objective without one (a test's) gets a card of its name."""
    if objective.name == "mlm" and objective.args.nsp:
        return METHODS["mlm --nsp"]
    return METHODS.get(objective.name, objective.name)


def details(objective):
    """What a run adds to its models' cards besides its method: ``notes`` (paragraphs under the model's details),
    ``tags``, ``citations`` (keys of ``card.CITATIONS``), ``teachers`` (the data's teachers)."""
    from common import io
    from common.markdown import escape
    name, args = objective.name, objective.args
    if name in ("contrastive", "cosine"):
        query = f"the new vocabulary token {escape(objective.query)}" if args.query_token else escape(objective.query)
        return {"notes": [f"The query it was trained with: {query}. An article's sentences are ranked by their "
                          "cosine similarity to the query's embedding."]}
    if name == "mnrl" and args.cache_chunk:
        return {"tags": ["loss:CachedMultipleNegativesRankingLoss"], "citations": ["gradcache"],
                "notes": [f"The loss was computed with GradCache (Gao et al. 2021) in chunks of {args.cache_chunk} "
                          "pairs: every document of the batch is still a negative of every query, as without it; "
                          "dropout draws its masks per chunk, so the weights differ from an uncached run's as "
                          "another random seed's would."]}
    if name == "mlm":
        if args.nsp:
            notes = [f"The folder holds BERT's pre-training heads too (`{objective.masked_lm}`: the masked-LM head, "
                     "the pooler and the next-sentence classifier): `AutoModelForPreTraining` loads them with the "
                     "encoder, `AutoModel` loads the encoder with its trained pooler, `SentenceTransformer` the "
                     "encoder alone."]
        else:
            notes = [f"The folder holds the masked-LM head too: `AutoModelForMaskedLM` loads it with the encoder "
                     f"(`{objective.masked_lm}`), `AutoModel` and `SentenceTransformer` load the encoder alone."]
        if args.model is None:
            notes.append("The model was new: its configuration "
                         + (f"{escape(args.config_name)}'s" if args.config_name else
                            f"transformers' default for {escape(args.model_type)}")
                         + (f" changed by {escape(args.config_overrides)}" if args.config_overrides else "")
                         + ", its weights randomly initialised, its tokenizer "
                         + (f"{escape(args.tokenizer_name)}'s." if args.tokenizer_name else
                            f"a WordPiece vocabulary of {len(objective.tokenizer):,} entries learnt from the "
                            "training texts."))
        return {"notes": notes}
    if name == "distill":
        model_type = objective.encoder.transformer.config.model_type
        found = {"citations": ["longformer"] if model_type == "longformer" else []}
        if objective.uses_contextual():
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
    return {}


def run_facts(objective, script):
    """What every card of a run shares (versions, commit, the data's and the corpus's manifests, the base model):
    only the log grows between saves. The start model's own card only adds to it: one that cannot be read is a
    note (``card.base_model``)."""
    from common import io, provenance
    args, notes = objective.args, details(objective)
    run = provenance.manifest(script, args, None)
    accelerator = objective.accelerator
    training = {"script": script, "processes": accelerator.num_processes if accelerator else 1,
                "precision": accelerator.mixed_precision if accelerator else "no", "commit": run["git_commit"],
                "versions": {k: v for k, v in run["versions"].items()
                             if k in ("torch", "transformers", "sentence-transformers")}}
    manifest = io.read_manifest(args.data)
    for key, value in (manifest.get("counts") or {}).items():  # the card lists them
        io.number(value, f"{os.path.join(args.data, 'manifest.json')}: counts → {key}", float, 0)
    first = next(iter(manifest.get("inputs") or {}), None)
    try:  # the corpus's own manifest only adds to the card: one moved or damaged since is left out
        source = io.read_manifest(os.path.dirname(os.path.abspath(first))) if first else {}
    except (InputError, OSError, ValueError):
        source = {}
    data = card.data_summary(args.data, manifest, source if source.get("script") else None)
    if notes.get("teachers"):
        data["teachers"] = notes["teachers"]
    return {
        "training": training,
        "card": {"data": data, "base": card.base_model(args.model, objective.say), "start": args.model,
                 "language": card.hub_language(manifest.get("language") or source.get("language")),
                 "tags": notes.get("tags", ()), "citations": notes.get("citations", ()),
                 "notes": notes.get("notes", ())}}


def model_card(objective, model, path, identity, log, facts):
    """The model card of ``path`` (RUN/model, RUN/epoch_K): the method, the run's settings (``identity``, as the
    run folder records it), the steps and validations of ``log`` (the run's records up to this model: the last is
    this model's step), and ``facts`` (``run_facts``). A model of a run that replaces a finished one is named where
    it will be (``folders.final_path``), not in ``RUN/.next-run`` where it is written."""
    from common import folders
    path = folders.final_path(path)
    last = log[-1] if log else {"step": 0, "epoch": 0}
    validation = [r for r in log if "lr" not in r]
    chosen = next((r for r in validation if r["step"] == last["step"]), None)
    settings = [("objective", objective.name)] + [(k, v) for k, v in identity.items() if k not in NOT_SETTINGS]
    training = {**facts["training"], "steps": last["step"], "epoch": last["epoch"]}
    return card.model_card(method_of(objective), path,
                           card.model_facts(objective.encoder_of(model), objective.max_length), settings, training,
                           validation, chosen, **facts["card"])
