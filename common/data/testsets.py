"""Small labelled corpora that gensim installs with its tests, written as data directories for 05_evaluate.py.

``lee``: the Lee et al. (2005) corpus, 50 news documents with averaged human similarity ratings of every pair
(scaled to [0, 1]) → ``similarity.ratings.jsonl`` (Spearman) and ``similarity.qrels`` (a pair rated at least the
threshold is a target, for MAP/MRR). ``newsgroups``: gensim's 200-document sample of 20 Newsgroups (alt.atheism,
sci.space), headers removed → a stratified train/test split ``classify.newsgroups.{train,test}.jsonl``.
"""

import io
import os
import pickle
import zlib

import numpy as np

from common.jsontext import dumps_line


def data_dir():
    import gensim
    return os.path.join(os.path.dirname(gensim.__file__), "test", "test_data")


def lee(out, threshold=0.5):
    """Writes docs.jsonl and the two similarity files to the ``folders.Outputs`` ``out``; returns counts."""
    with open(os.path.join(data_dir(), "lee.cor"), encoding="latin-1") as f:
        texts = [line.strip() for line in f if line.strip()]
    ratings = np.loadtxt(os.path.join(data_dir(), "similarities0-1.txt"))
    if ratings.shape != (len(texts), len(texts)):
        raise ValueError(f"lee: {len(texts)} documents but ratings of shape {ratings.shape}")
    ids = [f"lee{i}" for i in range(len(texts))]
    _write_docs(out, ids, texts)
    targets = 0
    with out.open("similarity.ratings.jsonl") as r, out.open("similarity.qrels") as q:
        for i in range(len(ids)):
            for j in range(len(ids)):
                if i < j:
                    r.write(dumps_line({"a": ids[i], "b": ids[j], "score": float(ratings[i, j])}))
                # the matrix's upper triangle holds the ratings
                score = ratings[min(i, j), max(i, j)]
                if i != j and score >= threshold:
                    q.write(f"{ids[i]} 0 {ids[j]} 1\n")
                    targets += 1
    return {"documents": len(ids), "rated_pairs": len(ids) * (len(ids) - 1) // 2, "similarity_targets": targets}


class _Unpickler(pickle.Unpickler):
    """Only what the sample's Python 2 pickle of an sklearn ``Bunch`` holds: a dict of lists and arrays."""
    ALLOWED = {("copy_reg", "_reconstructor"), ("copyreg", "_reconstructor"), ("__builtin__", "object"),
               ("builtins", "object"), ("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
               ("numpy", "dtype"), ("__builtin__", "dict"), ("builtins", "dict")}

    def find_class(self, module, name):
        if name == "Bunch":
            return dict
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"mini_newsgroup: unexpected {module}.{name}")
        return super().find_class(module, name)


def newsgroups(out, seed=42, test=0.5):
    from sklearn.model_selection import train_test_split
    with open(os.path.join(data_dir(), "mini_newsgroup"), "rb") as f:
        bunch = _Unpickler(io.BytesIO(zlib.decompress(f.read())), encoding="latin-1").load()
    texts = [t.decode("latin-1") if isinstance(t, bytes) else t for t in bunch["data"]]
    # the headers name the newsgroup, i.e. the label (sklearn's remove=("headers",) does the same)
    texts = [t.partition("\n\n")[2].strip() for t in texts]
    labels = [str(bunch["target_names"][k]) for k in bunch["target"]]
    ids = [f"ng{i}" for i in range(len(texts))]
    _write_docs(out, ids, texts)
    train, test_ids = train_test_split(list(range(len(ids))), test_size=test, random_state=seed, stratify=labels)
    for part, rows in (("train", train), ("test", test_ids)):
        with out.open(f"classify.newsgroups.{part}.jsonl") as f:
            f.writelines(dumps_line({"id": ids[i], "label": labels[i]}) for i in sorted(rows))
    return {"documents": len(ids), "train": len(train), "test": len(test_ids)}


def _write_docs(out, ids, texts):
    with out.open("docs.jsonl") as f:
        f.writelines(dumps_line({"id": i, "title": "", "text": t}) for i, t in zip(ids, texts))
