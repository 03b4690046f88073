"""How 05 embeds: each model loaded with its own pooling, normalisation and length, the corpus embedded in one
shard per process into a memory-mapped NPY, queries embedded alike. Values in, values out: the script owns the
output folder and prints; ``say`` receives the notes a user should read."""

import os
from dataclasses import dataclass, field

from tqdm import tqdm

from common.vectors import check_finite_rows, open_rows


@dataclass(frozen=True)
class Embedding:
    """The embedding settings of one evaluation: ``pooling`` and ``normalize`` per model name (absent: the model's
    sentence-transformers config), one ``max_length`` for every model (None: each model's own), the batching, and
    the ``precision`` on a CPU (``common/models/precision.py``: float32, bf16 autocast, int8 Linear layers)."""
    pooling: dict = field(default_factory=dict)
    normalize: dict = field(default_factory=dict)
    max_length: int = None
    batch_size: int = 64
    batch_tokens: int = None
    precision: str = "float32"


def process_state():
    """Accelerate's process state when started by ``accelerate launch`` on several processes, else None (the
    number of processes read as 03 reads it: a value that is no whole number from 1 is one line)."""
    from common.distributed import launched_processes
    if launched_processes() <= 1:
        return None
    import torch
    from accelerate import PartialState
    # without cpu=True, Accelerate joins the processes only where there is a GPU: on CPUs each would run alone
    cpu = not torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
    return PartialState(cpu=cpu)


def precision_run(precision, device_type):
    """The precision a model embeds in, asked for as ``precision`` (--bf16, --int8, else float32) on a device of
    ``device_type``: as asked, except that on a GPU float32 runs under bfloat16 autocast (``inference.embed``)."""
    return "bf16" if device_type == "cuda" and precision == "float32" else precision


def load_model(path, name, how, say=print):
    """``(encoder, tokenizer, settings)`` of the model at ``path`` under the name ``name``, on this process's device,
    for ``how.precision`` (int8: its int8 copy, a CPU only); ``settings["precision"]`` says which runs there
    (``precision_run``)."""
    from common.models.precision import encoder_for
    encoder, tokenizer, settings = _load_float32(path, name, how, say)
    encoder = encoder_for(encoder, how.precision)
    return encoder, tokenizer, {**settings, "precision": precision_run(how.precision, device_type(encoder))}


def device_type(encoder):
    """"cpu" or "cuda": where the encoder's weights are."""
    return next(encoder.parameters()).device.type


def _load_float32(path, name, how, say):
    from common.models.inference import default_device
    from common.models.loading import load_encoder
    normalize = how.normalize.get(name)
    encoder, tokenizer, settings = load_encoder(path, pooling=how.pooling.get(name), max_length=how.max_length,
                                                normalize=None if normalize is None else normalize == "yes", say=say)
    state = process_state()
    encoder.to(state.device if state is not None else default_device())
    return encoder, tokenizer, settings


def is_retrieval_data(data_dir):
    return os.path.exists(os.path.join(data_dir, "retrieval.test.qrels"))


def document_inputs(data_dir, docs, sep_token):
    """What a document is to the model: the abstract alone in paper-search data (titles are its queries), else
    the contract's title + sep + text. For paper-search data, a ``Documents`` without its texts streams them from
    docs.jsonl."""
    return docs.stream_texts() if is_retrieval_data(data_dir) else docs.inputs(sep_token)


def embed_corpus(path, name, data_dir, docs, how, outputs=None, collect=True, say=print, first=None, ready=None):
    """The model and its vectors of every document, the corpus cut into one shard per process; with ``outputs``,
    the vectors are written row by row into its memory-mapped NAME.npy (and NAME.ids.txt beside it) and checked
    finite; with ``collect=False`` (a helping process) no vectors are kept (None). In a precision other than
    float32, the mean cosine of the first documents' vectors to float32's is said and kept in the settings;
    ``settings["token_counts"]`` holds each document's tokens as embedded (special tokens included, at most the
    length). ``first`` and ``ready``: the documents at those positions embedded first, and ``ready(vectors)`` called
    once they are in (``embed_sharded``: on one process only)."""
    from common.models.inference import embed_sharded
    from common.models.precision import AGREEMENT_SAMPLE, agreement, encoder_for
    from common.models.tokens import TokenStore
    float32, tokenizer, settings = _load_float32(path, name, how, say)
    encoder = encoder_for(float32, how.precision)
    settings = {**settings, "precision": precision_run(how.precision, device_type(encoder))}
    store = TokenStore(tokenizer, document_inputs(data_dir, docs, tokenizer.sep_token or ""), settings["max_length"])
    settings["token_counts"] = store.lengths()
    out = None if outputs is None else open_rows(outputs, name, docs.ids, encoder.dimension)
    with tqdm(total=len(store), desc=f"embed {name}", unit=" docs", mininterval=1.0) as bar:
        vectors = embed_sharded(encoder, store, how.batch_size, how.batch_tokens, bar, out=out, collect=collect,
                                first=first, ready=ready)
    if vectors is not None:
        check_finite_rows(vectors, f"{path}: its vectors", docs.ids)
        if how.precision != "float32":
            cosine = float(agreement(float32, vectors, store, how.batch_size, how.batch_tokens))
            settings["mean_cosine_to_float32"] = round(cosine, 6)
            say(f"{name}: {how.precision} vectors, mean cosine {cosine:.4f} to float32's (first "
                f"{min(len(store), AGREEMENT_SAMPLE)} documents)")
    return encoder, tokenizer, settings, vectors


def embed_queries(encoder, tokenizer, settings, texts, how):
    from common.models.inference import embed
    from common.models.tokens import TokenStore
    return embed(encoder, TokenStore(tokenizer, texts, settings["max_length"]), how.batch_size, how.batch_tokens)


def embedding_settings(settings):
    """How a model embedded the documents, for the manifest and the report: pooling, normalisation, length, the
    similarity it is ranked by where its folder states one (``config_sentence_transformers.json``), and the
    precision that ran where it was not float32, with its mean cosine to float32 where that was measured: on a
    GPU, float32 itself runs under bfloat16 autocast, so there is nothing to measure against."""
    found = {"pooling": settings["pooling"], "normalize": bool(settings["normalize"]),
             "max_length": int(settings["max_length"])}
    if settings.get("similarity"):
        found["similarity"] = settings["similarity"]
    if settings.get("precision", "float32") != "float32":
        found.update({"precision": settings["precision"],
                      "mean_cosine_to_float32": settings.get("mean_cosine_to_float32")})
    return found


def follow(models, data_dir, how, docs=None):
    """A process other than the main one under ``accelerate launch``: embed its shard of the corpus (``docs``, the
    main process's ``Documents``; every document where None) for each model, in the main process's order, and
    write nothing (a Paragraph Vector, inferred by the main process alone, is skipped)."""
    from common.data.docs_jsonl import Documents
    from common.distill.paragraph_vector import is_paragraph_vector
    docs = Documents(data_dir, texts=not is_retrieval_data(data_dir)) if docs is None else docs
    for name, path in models.items():
        if not is_paragraph_vector(path):
            embed_corpus(path, name, data_dir, docs, how, collect=False, say=lambda _: None)
