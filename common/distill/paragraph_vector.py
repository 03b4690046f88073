"""The contextual teacher: gensim Doc2Vec (Paragraph Vector, Le & Mikolov 2014) as Burian 2023 (§4.5.1) trained
and used it — DM, DBOW or both concatenated (DM first), every vector inferred with ``infer_vector``.

Two things gensim does silently are undone here. It keeps only the first 10,000 words of a document (its
``MAX_DOCUMENT_LEN``), so long documents are trained as ≤ 10,000-word chunks under one tag and inferred per chunk,
the chunk vectors averaged weighted by their word counts. And ``infer_vector`` draws from the model's shared random
state and seeds its start vector from Python's salted ``hash``, so a vector would depend on call order and on the
process: both are reseeded from the document's own words here. Multi-worker training is not reproducible in
gensim; one worker is.

The corpus is never held in memory: the documents' preprocessed words are written once to a file (one document a
line, its tag the line number), and gensim reads that file once for the vocabulary and once per epoch.
"""

import contextlib
import functools
import json
import os
import tempfile
import zlib
from unittest import mock

import numpy as np

from common.io import InputError

MAX_WORDS = 10_000  # gensim's MAX_DOCUMENT_LEN
PREPROCESS = ("none", "lowercase", "stem")
MODES = ("dm", "dbow", "dm+dbow")
PRESETS = {  # the thesis's chosen Paragraph-Vector configurations (Tab. 4.5, §5.1.2)
    "dm-100d": {"pv": "dm", "pv_vector_size": 100, "pv_preprocess": "lowercase"},
    "dbow-1024d": {"pv": "dbow", "pv_vector_size": 1024, "pv_preprocess": "none"},
    "pv-2048d": {"pv": "dm+dbow", "pv_vector_size": 1024, "pv_preprocess": "stem,none"},
}
CONFIG = "pv.json"


def parse_preprocess(value, mode):
    """``--pv-preprocess`` (comma-separated, one for all models of ``mode`` or one each) as a tuple."""
    preprocess = tuple(value.split(","))
    if any(p not in PREPROCESS for p in preprocess) or len(preprocess) not in (1, len(mode.split("+"))):
        raise InputError(f"--pv-preprocess {value!r}: one of {', '.join(PREPROCESS)} for each model of --pv {mode}")
    return preprocess


def words(text, preprocess):
    """Whitespace tokens (the thesis: ``str.split``, no punctuation handling), lower-cased or Porter-stemmed."""
    tokens = text.split()
    if preprocess == "lowercase":
        return [t.lower() for t in tokens]
    if preprocess == "stem":
        from nltk.stem import PorterStemmer
        stem = PorterStemmer().stem  # lower-cases too
        return [stem(t) for t in tokens]
    return tokens


def chunks(tokens, size=MAX_WORDS):
    return [tokens[i:i + size] for i in range(0, len(tokens), size)] or [[]]


class TaggedLines:
    """gensim's corpus, read a pass at a time from a file of words: line k is document k, tagged k, cut into chunks
    of at most ``MAX_WORDS`` words under that one tag. Words come from ``str.split``, so they hold no whitespace and
    ``line.split()`` gives them back exactly."""

    def __init__(self, path):
        self.path = path

    def __iter__(self):
        from gensim.models.doc2vec import TaggedDocument
        with open(self.path, encoding="utf-8", newline="\n") as f:
            for tag, line in enumerate(f):
                for part in chunks(line.split()):
                    yield TaggedDocument(part, [tag])


def write_words(texts, preprocess, directory):
    """One pass over ``texts``: for each preprocessing in ``preprocess``, a file of the documents' words, a line
    each. Returns {preprocessing: path} and the number of documents over ``MAX_WORDS`` words."""
    paths = {prep: os.path.join(directory, f"words.{prep}.txt") for prep in dict.fromkeys(preprocess)}
    chunked = 0
    with contextlib.ExitStack() as stack:
        files = {prep: stack.enter_context(open(path, "w", encoding="utf-8", newline="\n"))
                 for prep, path in paths.items()}
        for text in texts:
            for n, (prep, f) in enumerate(files.items()):
                tokens = words(text, prep)
                if n == 0:
                    chunked += len(tokens) > MAX_WORDS
                f.write(" ".join(tokens))
                f.write("\n")
    return paths, chunked


@contextlib.contextmanager
def _watched_workers():
    """gensim trains in worker threads and waits for each to report; a worker that dies of an exception never
    reports, and the wait is endless. Here a dying worker records its exception and reports as finished, so
    training returns and the caller raises it."""
    from gensim.models.word2vec import Word2Vec
    failures = []
    loop = Word2Vec._worker_loop

    def watched(model, job_queue, progress_queue):
        try:
            loop(model, job_queue, progress_queue)
        except Exception as e:  # noqa: BLE001 (any failure of a worker ends training with it)
            failures.append(f"{type(e).__name__}: {e}")
            progress_queue.put(None)

    with mock.patch.object(Word2Vec, "_worker_loop", watched):
        yield failures


def _stable_hash(text):
    return zlib.crc32(text.encode("utf-8"))


class ParagraphVector:
    """One or two gensim Doc2Vec models (``dm``, ``dbow``), each with its preprocessing, and the settings to infer
    with."""

    def __init__(self, models, preprocess, infer_epochs, seed):
        self.models, self.preprocess, self.infer_epochs, self.seed = models, preprocess, infer_epochs, seed

    @property
    def dim(self):
        return sum(m.vector_size for m in self.models.values())

    @classmethod
    def train(cls, texts, mode="dm", vector_size=100, window=5, negative=5, min_count=2, epochs=10,
              preprocess=("none",), workers=1, seed=42, max_vocab_size=None, counts=None, work_dir=None):
        """Train the models of ``mode`` (``dm``, ``dbow`` or ``dm+dbow``) on ``texts`` (any iterable, read once);
        ``preprocess`` gives one mode per model, in that order (the thesis's PV;2048d stems for DM and not for
        DBOW). The words files live in a temporary folder under ``work_dir`` (default: the system's)."""
        kinds = mode.split("+")
        if len(preprocess) == 1:
            preprocess = tuple(preprocess) * len(kinds)
        models = {}
        with tempfile.TemporaryDirectory(prefix="docembed-pv-", dir=work_dir) as scratch:
            paths, chunked = write_words(texts, preprocess, scratch)
            if counts is not None:
                counts["pv_documents_chunked"] = chunked
            for kind, prep in zip(kinds, preprocess):
                models[kind] = cls._train_one(TaggedLines(paths[prep]), kind, prep, vector_size, window, negative,
                                              min_count, epochs, workers, seed, max_vocab_size)
        return cls(models, dict(zip(kinds, preprocess)), epochs, seed)

    @staticmethod
    def _train_one(corpus, kind, prep, vector_size, window, negative, min_count, epochs, workers, seed,
                   max_vocab_size):
        from gensim.models.doc2vec import Doc2Vec
        # sample=0 explicitly: gensim's default is 1e-3, the thesis's grid used none
        with _watched_workers() as failures:
            try:
                model = Doc2Vec(corpus, dm=int(kind == "dm"), vector_size=vector_size, window=window,
                                negative=negative, hs=0, sample=0, dbow_words=1, min_count=min_count, epochs=epochs,
                                workers=workers, seed=seed, max_vocab_size=max_vocab_size)
            except RuntimeError as e:
                if "vocabulary" not in str(e):
                    raise
                raise InputError(f"--pv-min-count {min_count}: no word occurs that often in the documents "
                                 f"({prep} preprocessing); Paragraph Vector has no vocabulary") from None
        if failures:
            raise InputError(f"Paragraph Vector ({kind}) training failed in a gensim worker: {failures[0]}")
        return model

    def infer(self, text):
        """The document's vector: chunk vectors inferred from a per-chunk seed, mean weighted by chunk length;
        the models' vectors concatenated (DM first)."""
        out = []
        for kind, model in self.models.items():
            parts = chunks(words(text, self.preprocess[kind]))
            vectors = []
            for k, part in enumerate(parts):
                model.random = np.random.RandomState([self.seed, _stable_hash(" ".join(part)), k])
                vectors.append(model.infer_vector(part, epochs=self.infer_epochs))
            weights = [max(len(p), 1) for p in parts]
            out.append(np.average(np.stack(vectors), axis=0, weights=weights))
        return np.concatenate(out).astype(np.float32)

    def embed(self, texts, progress=None, out=None):
        """The vectors of ``texts``, each row written into ``out`` (a memory-mapped NPY, say) as it is inferred;
        without ``out``, a new array (``texts`` then needs a length)."""
        import gensim.models.doc2vec as doc2vec
        stable = functools.partial(doc2vec.pseudorandom_weak_vector, hashfxn=_stable_hash)
        if out is None:
            out = np.empty((len(texts), self.dim), dtype=np.float32)
        with mock.patch.object(doc2vec, "pseudorandom_weak_vector", stable):
            for i, text in enumerate(texts):
                out[i] = self.infer(text)
                if progress is not None:
                    progress.update(1)
        return out

    def save(self, directory):
        os.makedirs(directory, exist_ok=True)
        for kind, model in self.models.items():
            model.save(os.path.join(directory, f"{kind}.model"))
        with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
            json.dump({"models": list(self.models), "preprocess": self.preprocess, "infer_epochs": self.infer_epochs,
                       "seed": self.seed, "dim": self.dim}, f, indent=1)

    @classmethod
    def load(cls, directory):
        """The Paragraph Vector ``save`` wrote into ``directory``; a damaged or missing file is one line naming
        it."""
        from gensim.models.doc2vec import Doc2Vec
        from common.io import read_json_or_empty
        path = os.path.join(directory, CONFIG)
        cfg = read_json_or_empty(path)
        kinds = cfg.get("models") if isinstance(cfg, dict) else None
        preprocess = cfg.get("preprocess") if isinstance(cfg, dict) else None
        if not (isinstance(kinds, list) and kinds and all(k in ("dm", "dbow") for k in kinds)
                and isinstance(preprocess, dict) and all(preprocess.get(k) in PREPROCESS for k in kinds)
                and all(isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)
                        for k in ("infer_epochs", "seed"))):
            raise InputError(f"{path}: not a Paragraph Vector's settings (models dm/dbow, preprocess, infer_epochs, "
                             "seed); run 04_distill.py teachers again")
        models = {}
        for kind in kinds:
            model_path = os.path.join(directory, f"{kind}.model")
            try:
                models[kind] = Doc2Vec.load(model_path)
            except Exception as e:  # noqa: BLE001 (unpickling a damaged file can raise any exception)
                raise InputError(f"{model_path}: cannot be loaded as a gensim Doc2Vec model ({type(e).__name__}); "
                                 "run 04_distill.py teachers again") from None
            if not isinstance(models[kind], Doc2Vec):
                raise InputError(f"{model_path}: holds a {type(models[kind]).__name__}, not a Doc2Vec model; run "
                                 "04_distill.py teachers again")
        return cls(models, preprocess, cfg["infer_epochs"], cfg["seed"])


def is_paragraph_vector(path):
    return os.path.isfile(os.path.join(path, CONFIG))
