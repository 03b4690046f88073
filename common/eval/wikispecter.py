"""The WikiSpecter evaluation tasks over document embeddings: cross-reference ranking, topic classification
(the SciDocs protocol) and the thesis's lexical baseline."""

import collections
import os
import re

import numpy as np

from common.io import InputError, read_jsonl, read_trec_qrels, safe_name
from common.eval import uncertainty
from common.eval.metrics import ranking_metrics
from common.pool import Background

SNOWBALL = {"fi": "finnish", "en": "english", "sv": "swedish", "de": "german", "fr": "french", "es": "spanish",
            "it": "italian", "nl": "dutch", "da": "danish", "no": "norwegian", "nb": "norwegian", "pt": "portuguese",
            "ru": "russian", "hu": "hungarian", "ro": "romanian"}


def read_qrels(path, index):
    """TREC qrels ``qid 0 docid rel`` → {qid: {docid: rel}}; every id must be a document of ``index``."""
    qrels = read_trec_qrels(path)
    for qid, judged in qrels.items():
        for doc in (qid, *judged):
            if doc not in index:
                raise InputError(f"{path}: id {doc!r} is not in docs.jsonl")
    return qrels


def scored(qrels, run):
    """MAP and nDCG of ``run`` as trec_eval computes them, and their per-query values as a ``uncertainty.Sample``."""
    found, per_query = ranking_metrics(qrels, run)
    return found, uncertainty.means([[q["map"], q["ndcg"]] for q in per_query.values()], ("map", "ndcg"),
                                ("query", "queries"))


def pair_scores(query, candidates, similarity="euclidean"):
    """Each candidate vector's score against the query vector under a similarity of sentence-transformers'
    (``similarity_fn_name``), higher closer: cosine, dot product, or the negative euclidean or manhattan
    distance."""
    if similarity == "cosine":
        unit = candidates / np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
        return unit @ (query / max(np.linalg.norm(query), 1e-12))
    if similarity == "dot":
        return candidates @ query
    return -np.linalg.norm(candidates - query, axis=1, ord=1 if similarity == "manhattan" else 2)


def crossref_run(emb, index, qrels, similarity=None):
    """{qid: {candidate: score}}: each query's candidates scored against it by the model's ``similarity``
    (``pair_scores``; None, a model that states none: SPECTER's negative L2 distance), closest first."""
    run = {}
    for qid, judged in qrels.items():
        docs = list(judged)
        found = pair_scores(emb[index[qid]], emb[[index[d] for d in docs]], similarity or "euclidean")
        run[qid] = {d: float(x) for d, x in zip(docs, found)}
    return run


def crossref(emb, index, qrels, similarity=None):
    """Candidates ranked by the model's similarity to the query (L2 distance where it states none), closest first;
    MAP and nDCG as trec_eval computes them, and their per-query values (``scored``)."""
    return scored(qrels, crossref_run(emb, index, qrels, similarity))


class Stemmer:
    """Snowball stems of letter-only words, cached (NLTK's Snowball needs no downloaded data)."""

    def __init__(self, language):
        from nltk.stem.snowball import SnowballStemmer
        self.stem = SnowballStemmer(language).stem
        self.cache = {}

    def words(self, text):
        out = set()
        for word in re.findall(r"[^\W\d_]+", text.lower()):
            stem = self.cache.get(word)
            if stem is None:
                stem = self.cache[word] = self.stem(word)
            out.add(stem)
        return out


def lexical_run(titles, texts, index, qrels, language):
    """The thesis's rule-based baseline: a candidate scores the share of the query's distinct word stems (title and
    text) that occur in the candidate's title; {qid: {candidate: score}}."""
    stemmer = Stemmer(language)
    run = {}
    for qid, judged in qrels.items():
        i = index[qid]
        query = stemmer.words(f"{titles[i]} {texts[i]}")
        run[qid] = {d: len(query & stemmer.words(titles[index[d]])) / max(len(query), 1) for d in judged}
    return run


def read_topics(data_dir, level, index):
    """``{"train": [(id, label)], "test": [...]}`` of one topic level; every id must be a document of ``index``, and
    the training documents must carry at least two labels (a classifier needs two classes)."""
    rows = {}
    for part in ("train", "test"):
        path = os.path.join(data_dir, f"topics.{level}.{part}.jsonl")
        rows[part] = []
        for lineno, obj in read_jsonl(path, required=("id", "label")):
            if not isinstance(obj["id"], str) or obj["id"] not in index:
                raise InputError(f"{path}:{lineno}: id {obj['id']!r} is not in docs.jsonl")
            if not isinstance(obj["label"], str):
                raise InputError(f"{path}:{lineno}: field 'label' must be a string")
            rows[part].append((obj["id"], obj["label"]))
        labels = {label for _, label in rows[part]}
        if part == "train" and len(labels) < 2:
            raise InputError(f"{path}: {len(labels)} label{'s' * (len(labels) != 1)} "
                             f"({', '.join(map(repr, sorted(labels)))}); a topic task needs at least two")
        if part == "test" and not rows[part]:
            raise InputError(f"{path}: no documents")
    return rows


def topic_levels(data_dir):
    levels = set()
    for name in os.listdir(data_dir):
        m = re.fullmatch(r"topics\.(.+)\.train\.jsonl", name)
        if m and os.path.exists(os.path.join(data_dir, f"topics.{m.group(1)}.test.jsonl")):
            levels.add(safe_name(m.group(1), f"{os.path.join(data_dir, name)}: topic level"))  # names tsne_<level>.png
    return sorted(levels)


# SciDocs' grid of the LinearSVC's C, searched with 3-fold cross-validation
GRID_C = np.logspace(-4, 2, 7)
CV_FOLDS = 3


def check_classifiable(data_dir, level, rows):
    """Refuse, naming its file, a topic level (``read_topics``' rows) whose training documents cannot be searched
    for the classifier's C: before any model is embedded, where the classifier will run (a reader of the splits
    that does not classify, as the ablation's table, takes them as they are)."""
    if not cross_validated(rows["train"]):
        raise InputError(f"{os.path.join(data_dir, f'topics.{level}.train.jsonl')}: no label has {CV_FOLDS} "
                         f"documents; the {CV_FOLDS}-fold grid search of the classifier's C needs a label with one "
                         "in each fold")


def cross_validated(train):
    """Whether training rows ``(id, label)`` can be split into ``CV_FOLDS`` stratified folds: scikit-learn's
    ``StratifiedKFold`` refuses where every label has fewer documents than folds."""
    return bool(train) and max(collections.Counter(label for _, label in train).values()) >= CV_FOLDS


def topics(emb, index, rows, seed=42):
    """SciDocs' classification protocol: LinearSVC (squared hinge) with C chosen by 3-fold grid search over
    logspace(-4, 2, 7) on the training documents; macro F1 and accuracy on the test documents. Returns the metrics
    and the test documents' ``(true labels, predicted labels)``.

    Beside the metrics: the C chosen, whether it sits at an end of the grid (the best C may lie outside it), whether
    liblinear converged on the final fit within its iteration limit, and ``cv_margin``: how far the chosen C's mean
    cross-validated accuracy lies above the next best C's. Each can make the F1 fragile: a change of the vectors too
    small to move any cosine can then move it by points. ``C_tied``: the margin is at most one training document's
    share of the accuracy, so that such a change can pick another C."""
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import LinearSVC
    x_train = emb[[index[i] for i, _ in rows["train"]]]
    y_train = [label for _, label in rows["train"]]
    x_test = emb[[index[i] for i, _ in rows["test"]]]
    y_test = [label for _, label in rows["test"]]
    if not cross_validated(rows["train"]):  # a re-split can leave the largest label fewer than the read split
        raise InputError(f"a re-split of the topic documents leaves no label {CV_FOLDS} training documents for "
                         f"the {CV_FOLDS}-fold grid search of C; give --resplits 0")
    search = GridSearchCV(LinearSVC(loss="squared_hinge", random_state=seed), {"C": GRID_C}, cv=CV_FOLDS)
    with warnings.catch_warnings():  # reported once, as "converged", instead of once per fold and C
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(x_train, y_train)
    pred = search.predict(x_test)
    final = search.best_estimator_
    c = float(search.best_params_["C"])
    best, runner_up = np.sort(search.cv_results_["mean_test_score"])[-1:-3:-1]
    return {"f1": float(f1_score(y_test, pred, average="macro")), "accuracy": float(accuracy_score(y_test, pred)),
            "C": c, "C_at_edge": bool(c in (GRID_C[0], GRID_C[-1])), "converged": bool(final.n_iter_ < final.max_iter),
            "cv_margin": float(best - runner_up), "C_tied": bool(best - runner_up <= 1 / len(y_train) + 1e-9)}, (
        y_test, pred.tolist())


def stratifiable(rows):
    """Whether a topic level's documents (``read_topics``' rows) can be re-split keeping every label on both sides
    at the protocol's test share: each label has two documents or more, and each side as many as labels."""
    labels = [label for _, label in rows["train"] + rows["test"]]
    counts = np.unique(labels, return_counts=True)[1]
    return bool(counts.min() >= 2 and min(len(rows["test"]), len(rows["train"])) >= len(counts))


def splits_of(rows, n, seed=42):
    """The protocol's split (``rows``, ``read_topics``') and ``n`` stratified re-splits of the same labelled
    documents (training and test together, the protocol's test share kept: scikit-learn's
    ``StratifiedShuffleSplit`` seeded with ``seed``; the rows must be ``stratifiable`` where ``n`` > 0), each as
    rows: every model meets the same splits."""
    from sklearn.model_selection import StratifiedShuffleSplit
    if not n:
        return [rows]
    pairs = rows["train"] + rows["test"]
    labels = [label for _, label in pairs]
    return [rows] + [{"train": [pairs[i] for i in train], "test": [pairs[i] for i in test]}
                     for train, test in StratifiedShuffleSplit(n, test_size=len(rows["test"]),
                                                               random_state=seed).split(labels, labels)]


def resplits(emb, index, rows, n, seed=42):
    """The topic figures (``topics``' macro F1 and accuracy) on the ``n`` re-splits of ``splits_of``, with the same
    classifier and choice of C: ``[n, 2]``."""
    found = [topics(emb, index, split, seed)[0] for split in splits_of(rows, n, seed)[1:]]
    return np.array([(m["f1"], m["accuracy"]) for m in found], dtype=np.float64).reshape(n, 2)


def _classify_each(emb, index, splits, seed):
    return [topics(emb, index, split, seed) for split in splits]


def start_topics(emb, index, splits, seed=42, processes=None):
    """``topics`` on every split of ``splits``, started in ``processes`` forked processes (as many as this process
    has cores where None), each a share of the splits, so that they run while the caller goes on (each split is
    one LinearSVC grid search, single-threaded in liblinear). Returns a function that waits for them and returns
    ``topics``' result of each split, in order; each split is classified as it would be alone, so the figures do
    not depend on the processes."""
    import sklearn.model_selection  # noqa: F401  imported once here, not again in each forked process
    import sklearn.svm  # noqa: F401
    processes = min(processes or len(os.sched_getaffinity(0)), len(splits))
    shares = [Background(_classify_each, emb, index, splits[k::processes], seed,
                         what=f"the topic classifiers ({k + 1} of {processes})") for k in range(processes)]

    def results():
        found = [share.result() for share in shares]
        return [found[i % processes][i // processes] for i in range(len(splits))]
    return results


def token_lengths(tokenizer, texts, batch=4096, cut=None, known=None):
    """Each text's token count under ``tokenizer``, special tokens included and nothing truncated. ``known``, the
    counts of the same texts cut at ``cut`` tokens (as the embedding tokenised them), are kept where they fall
    below the cut: only the texts that reach it are tokenised again."""
    lengths = np.array(known, dtype=np.int64) if known is not None else np.full(len(texts), cut or 0, np.int64)
    again = np.flatnonzero(lengths >= (cut or 0)) if known is not None else np.arange(len(texts))
    for start in range(0, len(again), batch):
        part = again[start:start + batch]
        lengths[part] = list(map(len, tokenizer([texts[i] for i in part], add_special_tokens=True)["input_ids"]))
    return lengths
