"""Teacher vectors on disk (``TEACH/``) and the structural teacher that makes them.

``sbert.npy`` (structural teacher), ``pv.npy`` (contextual teacher) and ``lengths.npy`` (each document's
structural-teacher token count without special tokens) hold one row per document of ``docs.jsonl``, in its order,
each with an ``.ids.txt`` naming the rows. Readers check that the ids are ``docs.jsonl``'s, line by line, so
vectors can never be paired with the wrong documents.
"""

import os

import numpy as np

from common.vectors import open_rows, read_rows, write_ids
from common.io import InputError

STRUCTURAL, CONTEXTUAL, LENGTHS = "sbert", "pv", "lengths"


def write_rows(outputs, name, array, ids):
    with outputs.open(f"{name}.npy", "wb") as f:
        np.save(f, array)
    write_ids(outputs, name, ids)


def read_vectors(directory, name, ids, chunk=65_536):
    """Teacher vectors: a float ``[N, d]`` array as float32, every value finite (``read_rows``: one NaN or inf
    would make every weight of the student NaN within a step), as float32 too: a wider float past float32's range
    would become an infinity there."""
    array = np.asarray(read_rows(directory, name, ids))
    path = os.path.join(directory, name + '.npy')
    if array.ndim != 2 or array.shape[1] < 1 or not np.issubdtype(array.dtype, np.floating):
        raise InputError(f"{path}: expected float vectors [N, d], got {array.dtype} {list(array.shape)}")
    if np.finfo(array.dtype).max > np.finfo(np.float32).max:
        limit = np.finfo(np.float32).max
        for start in range(0, len(array), chunk):
            bad = np.flatnonzero((np.abs(array[start:start + chunk]) > limit).any(axis=1))
            if len(bad):
                row = start + int(bad[0])
                raise InputError(f"{path}: row {row} (document {ids[row]!r}) holds a value beyond float32's range "
                                 f"(±{limit:.4g}), which training would read as an infinity")
    return array.astype(np.float32, copy=False)  # read_rows refused any row that is not finite


def read_lengths(directory, ids):
    """Structural-teacher token counts: a non-negative integer ``[N]`` array."""
    array = np.asarray(read_rows(directory, LENGTHS, ids))
    path = os.path.join(directory, LENGTHS + '.npy')
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer) or (array < 0).any():
        raise InputError(f"{path}: expected one non-negative token count per document, got {array.dtype} "
                         f"{list(array.shape)}")
    if len(array) and array.max() > MAX_TOKENS:
        row = int(array.argmax())
        raise InputError(f"{path}: row {row} (document {ids[row]!r}) counts {array[row]:,} tokens, more than "
                         f"{MAX_TOKENS:,}")
    return array


MAX_TOKENS = (1 << 31) - 1  # a document's token count: more is damage


def pv_texts(docs):
    """The documents as Paragraph Vector reads them, one at a time: title and text, separated by a space (it reads
    words, so the separator token is a space)."""
    from common.models.encoder import document_text
    return (document_text(t, x, " ") for t, x in zip(docs.titles, docs.texts))


def structural_teacher(outputs, docs, model, max_length, batch_size=32, batch_tokens=None, progress=None,
                       name=STRUCTURAL, precision="float32"):
    """Writes ``name.npy`` (``sbert.npy``; row by row, memory-mapped) and its ids: the vectors of ``docs`` (``Documents``) read
    as ``title + sep + text``, the mean of the last hidden states over the attention mask, not normalised (the
    thesis's SBERT teacher), over the first ``max_length`` tokens (or the model's limit). Returns (vectors, the memory
    map; lengths; max_length; in a ``precision`` other than float32 (``common/models/precision.py``), the mean cosine
    of its vectors to float32's, ``precision.agreement``, else None); lengths count every token, special tokens
    excluded."""
    from common.models.inference import default_device, embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tokenizer, settings = load_encoder(model, pooling="mean", normalize=False, max_length=max_length)
    encoder.to(default_device())
    texts = docs.inputs(tokenizer.sep_token or "")
    lengths = np.array([len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]],
                       dtype=np.int64)
    store = TokenStore(tokenizer, texts, settings["max_length"])
    out = open_rows(outputs, name, docs.ids, encoder.dimension)
    from common.models.precision import agreement, encoder_for
    embed(encoder_for(encoder, precision), store, batch_size, batch_tokens, progress, out=out)
    cosine = float(agreement(encoder, out, store, batch_size, batch_tokens)) if precision != "float32" else None
    out.flush()
    return out, lengths, settings["max_length"], cosine


def principal_axes(vectors, dim, seed, fit_rows=100_000):
    """The top ``dim`` principal axes (``[dim, d]``, orthonormal rows) of ``vectors``, fitted on at most
    ``fit_rows`` of them drawn with ``seed`` (scikit-learn's PCA), and the share of the variance they keep."""
    from sklearn.decomposition import PCA
    rows = np.arange(len(vectors))
    if len(rows) > fit_rows:
        rows = np.sort(np.random.default_rng(seed).choice(rows, fit_rows, replace=False))
    pca = PCA(n_components=dim, random_state=seed).fit(np.asarray(vectors[rows], dtype=np.float64))
    return pca.components_.astype(np.float32), float(pca.explained_variance_ratio_.sum())


def project_rows(vectors, axes, out, chunk=65_536):
    """``out[i] = axes · vectors[i]``: the orthogonal projection onto the axes, origin kept (not centred), so that
    the teacher's cosines and norms change only by what the dropped axes held; a chunk of rows at a time."""
    for start in range(0, len(vectors), chunk):
        out[start:start + chunk] = np.asarray(vectors[start:start + chunk], dtype=np.float32) @ axes.T
    out.flush()
    return out


def projected_teacher(outputs, vectors, ids, dim, seed):
    """``sbert.npy``: the structural teacher's ``vectors`` projected onto their top ``dim`` principal axes
    (``principal_axes``, ``project_rows``), and the share of their variance those axes keep."""
    axes, kept = principal_axes(vectors, dim, seed)
    return project_rows(vectors, axes, open_rows(outputs, STRUCTURAL, ids, dim)), kept


def teacher_width(model):
    """The structural teacher's width (its hidden size: it is mean-pooled), read from its config alone."""
    from transformers import AutoConfig
    from common.models.loading import load_pretrained, model_file
    if model_file(model, "config.json") is None:
        raise InputError(f"{model}: no such model folder, nor a model of that name in the local Hugging Face cache")
    return load_pretrained(AutoConfig, model).hidden_size


def check_teacher_dim(model, dim, documents):
    """``--teacher-dim``, checked before any work: below the teacher's width (else nothing is dropped) and at most
    the number of ``documents`` (PCA finds no more axes than the rows it is fitted on)."""
    width = teacher_width(model)
    if dim >= width or dim > documents:
        raise InputError(f"--teacher-dim {dim}: must be below the teacher's {width} dimensions and at most the "
                         f"{documents} documents")


def contextual_teacher(outputs, docs, pv, progress=None, counts=None):
    """pv.npy: the trained Paragraph Vector ``pv``'s inferred vector of every document, written row by row, and the
    model itself as ``pv/`` (moved into place with the other files); its vocabulary sizes go into ``counts``."""
    contextual = open_rows(outputs, CONTEXTUAL, docs.ids, pv.dim)
    pv.embed(pv_texts(docs), progress, out=contextual)
    contextual.flush()
    pv.save(outputs.tmp_path("pv"))
    if counts is not None:
        counts["pv_vocabulary"] = {kind: len(m.wv) for kind, m in pv.models.items()}
    return contextual
