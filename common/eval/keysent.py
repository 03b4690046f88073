"""Key-sentence evaluation (Average R-precision, MSE, Pearson) and extraction from new articles."""

import os
import time

import numpy as np

from common import io
from common.data.keysent_splits import read_sentences
from common.extract.sentences import clean, split, splitter
from common.eval import uncertainty
from common.eval.metrics import average_r_precision, r_precision
from common.io import InputError
from common.jsontext import dumps_line
from common.models.inference import default_device, embed
from common.models.loading import load_encoder
from common.models.saving import read_run_info
from common.models.tokens import TokenStore

TRAINED = ("contrastive", "cosine")


class KeySentenceModel:
    """An encoder and its query vector: the trained query for a model fine-tuned here, else (the thesis's
    Table 4.6 protocol) the mean embedding of the training articles' key sentences."""

    def __init__(self, path, pooling=None, max_length=None, batch_size=64, train_articles=None, query=None,
                 batch_tokens=None):
        self.encoder, self.tokenizer, self.settings = load_encoder(path, pooling=pooling, max_length=max_length,
                                                                   default_pooling="mean")
        self.encoder.to(default_device())
        self.batch_size, self.batch_tokens = batch_size, batch_tokens
        info = read_run_info(path)
        if query is not None:
            self.query, self.query_from = self.vectors([query])[0], "the given query"
        elif info.get("objective") in TRAINED:
            text = info.get("query_token") or info["query"]
            self.query, self.query_from = self.vectors([text])[0], f"its trained query {text!r}"
        elif train_articles is not None:
            keys = [s for a in train_articles for s, y in zip(a["sentences"], a["labels"]) if y]
            if not keys:
                raise InputError("the training articles have no key sentences to average into a query")
            self.query = self.vectors(keys).mean(0)
            self.query_from = f"the mean of {len(keys)} training key sentences"
        else:
            raise InputError(f"{path} was not fine-tuned for key sentences; give --query TEXT")

    def vectors(self, texts):
        store = TokenStore(self.tokenizer, texts, self.settings["max_length"])
        return embed(self.encoder, store, self.batch_size, self.batch_tokens)

    def cosines(self, vectors):
        """Cosine similarity of each sentence vector to the query."""
        q = self.query / max(np.linalg.norm(self.query), 1e-12)
        return (vectors @ q) / np.maximum(np.linalg.norm(vectors, axis=1), 1e-12)

    def scores(self, sentences):
        """Cosine similarity of each sentence to the query."""
        if not sentences:
            return np.zeros(0, dtype=np.float32)
        return self.cosines(self.vectors(sentences))


def by_article(scores, articles):
    """Flat sentence scores → ``[(scores, labels)]`` per article."""
    out, start = [], 0
    for a in articles:
        end = start + len(a["sentences"])
        out.append((scores[start:end], np.array(a["labels"])))
        start = end
    return out


def score_articles(model, articles):
    return by_article(model.scores([s for a in articles for s in a["sentences"]]), articles)


def keysent_metrics(scored):
    """ARP over articles; MSE and Pearson correlation between cosine and label over all sentences."""
    scores = np.concatenate([s for s, _ in scored])
    labels = np.concatenate([y for _, y in scored]).astype(np.float64)
    pearson = float(np.corrcoef(scores, labels)[0, 1]) if scores.std() > 0 and labels.std() > 0 else float("nan")
    return {"arp": average_r_precision(scored), "mse": float(np.mean((scores - labels) ** 2)), "pearson": pearson}


class ArticleSums(uncertainty.Sums):
    """The statistic of test articles, each a row of sums over its sentences (``article_sums``): ARP over the
    articles with key sentences, MSE and Pearson's r over all their sentences, as ``keysent_metrics``."""
    names = ("arp", "mse", "pearson")

    def figures(self, totals, n):
        rp, has_key, sse, m, sx, sy, sxx, syy, sxy = np.moveaxis(totals, -1, 0)
        with np.errstate(invalid="ignore", divide="ignore"):  # no key sentence, or no spread: NaN, as the figure
            return {"arp": rp / has_key, "mse": sse / m,
                    "pearson": (m * sxy - sx * sy) / np.sqrt((m * sxx - sx * sx) * (m * syy - sy * sy))}


def article_sums(scored):
    """The test articles as a ``uncertainty.Sample`` for ``ArticleSums`` (its interval is a bootstrap over the
    articles)."""
    rows = []
    for scores, labels in scored:
        x, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
        rp = r_precision(x, labels)
        rows.append([rp or 0.0, rp is not None, ((x - y) ** 2).sum(), len(x), x.sum(), y.sum(), (x * x).sum(),
                     (y * y).sum(), (x * y).sum()])
    return uncertainty.Sample(np.array(rows, dtype=np.float64).reshape(-1, 9), ArticleSums(),
                              unit=("test article", "test articles"))


def mean_2sd(values):
    """The thesis's interval: mean ± 2σ, σ the population standard deviation over runs (its formula divides by
    the number of runs)."""
    out = {}
    for key in values[0]:
        xs = np.array([v[key] for v in values], dtype=np.float64)
        out[key] = float(xs.mean())
        out[f"{key}_2sd"] = float(2 * xs.std(ddof=0))
    return out


OUTCOMES = ("key", "other", "key_in_top_r", "key_missed", "other_in_top_r", "other_below")


def outcome_cosines(scored):
    """Mean cosine to the query per outcome (the thesis's Table 4.2): key and other sentences, and each split by
    whether the article's top R by cosine (R its number of key sentences, the ranking ARP scores) took it."""
    groups = {name: [] for name in OUTCOMES}
    for scores, labels in scored:
        labels = np.asarray(labels).astype(bool)
        top = np.zeros(len(labels), dtype=bool)
        top[np.argsort(-np.asarray(scores), kind="stable")[:int(labels.sum())]] = True
        for name, mask in (("key", labels), ("other", ~labels), ("key_in_top_r", labels & top),
                           ("key_missed", labels & ~top), ("other_in_top_r", ~labels & top),
                           ("other_below", ~labels & ~top)):
            groups[name].append(np.asarray(scores)[mask])
    return {name: float(np.concatenate(parts).mean()) if sum(map(len, parts)) else float("nan")
            for name, parts in groups.items()}


def _run_log(model_path):
    """The log.jsonl of the run a model folder was saved by (RUN/model → RUN/log.jsonl), or None; in each of its
    validations (the records the figure draws) the step a whole number and every ``val_ap_*`` an average precision
    in [0, 1] (or null, not measured: a gap in the curve), or the line is named."""
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), "log.jsonl")
    if not os.path.isfile(path):
        return None
    records = []
    for lineno, obj in io.read_jsonl(path):
        if "val_ap_max" in obj:
            io.number_field(obj.get("step"), f"{path}:{lineno}", "step", 0, integer=True)
            for key in [key for key in obj if key.startswith("val_ap_") and obj[key] is not None]:
                io.number_field(obj[key], f"{path}:{lineno}", key, 0, 1)
        records.append(obj)
    return records if any("val_ap_max" in r for r in records) else None


def _model_path(run):
    return os.path.join(run, "model") if os.path.isdir(os.path.join(run, "model")) else run


def evaluate_keysent(models, runs, data_dir, how, outputs, seed, say=print):
    """Score every model (``models``: name → path) and the run folders ``runs`` (several seeds of one setting,
    reported as mean ± 2σ) on the test articles and draw the thesis's figures into ``outputs``; ``how`` is the
    evaluation's ``embedding.Embedding``. Returns the metrics, the counts, the figures written, as
    ``(caption, file name)``, and each model's test articles, {model: {"keysent": [uncertainty.Sample]}}."""
    from common.eval import figures
    from common.eval.embedding import device_type, embedding_settings, precision_run
    metrics, counts, samples = {}, {}, {}
    train = read_sentences(os.path.join(data_dir, "keysent.train.jsonl"))
    test = read_sentences(os.path.join(data_dir, "keysent.test.jsonl"))
    if not test:
        raise InputError(f"{os.path.join(data_dir, 'keysent.test.jsonl')}: no articles (an empty test split); "
                         "rebuild it with 02_build_graph.py sentences from more articles")
    counts.update({"test_articles": len(test), "test_sentences": sum(len(a["sentences"]) for a in test),
                   "test_key_sentences": sum(sum(a["labels"]) for a in test)})
    curves, points = {}, {}
    logs = {name: log for name, log in ((name, _run_log(path)) for name, path in models.items()) if log is not None}
    for run in runs or []:
        log = _run_log(_model_path(run))
        if log is not None:
            logs.setdefault(os.path.basename(os.path.normpath(run)), log)
    sentences = [s for a in test for s in a["sentences"]]
    for name, path in models.items():
        started = time.perf_counter()
        model = KeySentenceModel(path, how.pooling.get(name), how.max_length, how.batch_size, train,
                                 batch_tokens=how.batch_tokens)
        counts.setdefault("embedding", {})[name] = embedding_settings(
            {**model.settings, "precision": precision_run("float32", device_type(model.encoder))})
        vectors = model.vectors(sentences)
        counts.setdefault("embedding_seconds", {})[name] = time.perf_counter() - started
        scored = by_article(model.cosines(vectors), test)
        metrics.setdefault(name, {})["keysent"] = keysent_metrics(scored)
        metrics[name]["keysent.cosine"] = outcome_cosines(scored)
        samples[name] = {"keysent": [article_sums(scored)]}
        curves[name] = scored
        points[name] = (vectors, np.concatenate([y for _, y in scored]), model.query)
        say(f"{name}: query = {model.query_from}")
    if runs:
        per_run = []
        for run in runs:
            model = KeySentenceModel(_model_path(run), None, how.max_length, how.batch_size, train,
                                     batch_tokens=how.batch_tokens)
            scored = score_articles(model, test)
            per_run.append(keysent_metrics(scored))
            curves.setdefault(f"runs[{len(per_run) - 1}]", scored)
        metrics[f"runs (n={len(per_run)})"] = {"keysent": mean_2sd(per_run)}
        counts["runs"] = len(per_run)
    shown = dict(list(curves.items())[:6])
    written = []
    figures.threshold_curves(outputs.tmp_path("keysent_threshold.png"), shown)
    written.append(("Key sentences found, and the share of sentences that are key, against the cosine threshold",
                    "keysent_threshold.png"))
    figures.cosine_histograms(outputs.tmp_path("keysent_cosine.png"), shown)
    written.append(("Cosine to the query of key and other test sentences (log scale)", "keysent_cosine.png"))
    if points:
        figures.sentence_tsne(outputs.tmp_path("keysent_tsne.png"), points, seed)
        written.append(("t-SNE of the test sentences and the query, per model", "keysent_tsne.png"))
    if logs:
        figures.validation_ap(outputs.tmp_path("keysent_validation.png"), dict(list(logs.items())[:6]))
        written.append(("Validation average precision of each similarity over training (log.jsonl)",
                        "keysent_validation.png"))
    return metrics, counts, written, samples


def read_articles(path, splitter_name):
    """``[(id, cleaned text, sentences)]`` of a JSONL of ``{id, text}`` (HTML and LaTeX cleaned), each sentence
    ``(text, start, end)``; a bad line names ``path:line``."""
    tokenizer = splitter(splitter_name)
    articles = []
    for lineno, obj in io.read_jsonl(path, required=("id", "text")):
        if not isinstance(obj["id"], str) or not isinstance(obj["text"], str):
            raise InputError(f"{path}:{lineno}: fields 'id' and 'text' must be strings")
        text = clean(obj["text"])
        articles.append((obj["id"], text, split(text, tokenizer, f"{path}:{lineno}")))
    return articles


def key_sentences(model, articles, top, threshold=None):
    """The records ``{id, key_sentences: [{text, score, start, end}]}`` of each article: its ``top`` sentences by
    cosine to the model's query, best first, those scoring at least ``threshold`` where one is given."""
    scores = model.scores([s for _, _, sents in articles for s, _, _ in sents])
    start = 0
    for article_id, _, sents in articles:
        s = scores[start:start + len(sents)]
        start += len(sents)
        best = [i for i in np.argsort(-s, kind="stable")[:top] if threshold is None or s[i] >= threshold]
        yield {"id": article_id, "key_sentences": [
            {"text": sents[i][0], "score": float(s[i]), "start": sents[i][1], "end": sents[i][2]} for i in best]}


def write_key_sentences(f, model, articles, top, threshold=None):
    """``key_sentences``' records of ``articles`` written to ``f``, one JSON line each; returns the counts of
    articles, their sentences and the key sentences selected."""
    counts = {"articles": len(articles), "sentences": sum(len(sents) for _, _, sents in articles), "selected": 0}
    for record in key_sentences(model, articles, top, threshold):
        counts["selected"] += len(record["key_sentences"])
        f.write(dumps_line(record))
    return counts
