"""Key-sentence evaluation (Average R-precision, MSE, Pearson) and extraction from new articles."""

import os

import numpy as np

from common import io
from common.io import InputError
from common.data.keysent_splits import read_sentences
from common.eval.metrics import average_r_precision
from common.models.encoder import default_device, embed, load_encoder
from common.models.saving import read_run_info
from common.models.tokens import TokenStore
from common.data.sentences import clean, split, splitter

TRAINED = ("contrastive", "cosine")


class KeySentenceModel:
    """An encoder and its query vector: the trained query for a model fine-tuned here, else (the thesis's
    Table 4.6 protocol) the mean embedding of the training articles' key sentences."""

    def __init__(self, path, pooling=None, max_length=None, batch_size=64, train_articles=None, query=None):
        self.encoder, self.tokenizer, self.settings = load_encoder(path, pooling=pooling, max_length=max_length,
                                                                   default_pooling="mean")
        self.encoder.to(default_device())
        self.batch_size = batch_size
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
        return embed(self.encoder, store, self.batch_size)

    def scores(self, sentences):
        """Cosine similarity of each sentence to the query."""
        if not sentences:
            return np.zeros(0, dtype=np.float32)
        v = self.vectors(sentences)
        q = self.query / max(np.linalg.norm(self.query), 1e-12)
        return (v @ q) / np.maximum(np.linalg.norm(v, axis=1), 1e-12)


def score_articles(model, articles):
    flat = [s for a in articles for s in a["sentences"]]
    scores = model.scores(flat)
    out, start = [], 0
    for a in articles:
        end = start + len(a["sentences"])
        out.append((scores[start:end], np.array(a["labels"])))
        start = end
    return out


def keysent_metrics(scored):
    """ARP over articles; MSE and Pearson correlation between cosine and label over all sentences."""
    scores = np.concatenate([s for s, _ in scored])
    labels = np.concatenate([y for _, y in scored]).astype(np.float64)
    pearson = float(np.corrcoef(scores, labels)[0, 1]) if scores.std() > 0 and labels.std() > 0 else float("nan")
    return {"arp": average_r_precision(scored), "mse": float(np.mean((scores - labels) ** 2)), "pearson": pearson}


def mean_2sd(values):
    """The thesis's interval: mean ± 2σ (σ the sample standard deviation over runs)."""
    out = {}
    for key in values[0]:
        xs = np.array([v[key] for v in values], dtype=np.float64)
        out[key] = float(xs.mean())
        out[f"{key}_2sd"] = float(2 * xs.std(ddof=1)) if len(xs) > 1 else 0.0
    return out


def threshold_plot(path, curves):
    """Recall (share of key sentences at or above the threshold) and precision (share of sentences at or above it
    that are key) against the cosine threshold, per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k, (name, scored) in enumerate(curves.items()):
        scores = np.concatenate([s for s, _ in scored])
        labels = np.concatenate([y for _, y in scored]).astype(bool)
        grid = np.linspace(scores.min(), scores.max(), 200)
        above = scores[None, :] >= grid[:, None]
        recall = (above & labels).sum(1) / max(labels.sum(), 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = (above & labels).sum(1) / above.sum(1)
        colour = f"C{k}"
        ax.plot(grid, recall, color=colour, label=f"{name}: key sentences found")
        ax.plot(grid, precision, color=colour, linestyle="--", label=f"{name}: share that are key")
    ax.set_xlabel("cosine threshold")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def _model_path(run):
    return os.path.join(run, "model") if os.path.isdir(os.path.join(run, "model")) else run


def evaluate_keysent(args, outputs, metrics, counts):
    train = read_sentences(os.path.join(args.data, "keysent.train.jsonl"))
    test = read_sentences(os.path.join(args.data, "keysent.test.jsonl"))
    counts.update({"test_articles": len(test), "test_sentences": sum(len(a["sentences"]) for a in test),
                   "test_key_sentences": sum(sum(a["labels"]) for a in test)})
    curves = {}
    for name, path in args.model.items():
        model = KeySentenceModel(path, args.pooling.get(name), args.max_length, args.batch_size, train)
        scored = score_articles(model, test)
        metrics.setdefault(name, {})["keysent"] = keysent_metrics(scored)
        curves[name] = scored
        print(f"{name}: query = {model.query_from}")
    if args.runs:
        per_run = []
        for run in args.runs:
            model = KeySentenceModel(_model_path(run), None, args.max_length, args.batch_size, train)
            scored = score_articles(model, test)
            per_run.append(keysent_metrics(scored))
            curves.setdefault(f"runs[{len(per_run) - 1}]", scored)
        metrics[f"runs (n={len(per_run)})"] = {"keysent": mean_2sd(per_run)}
        counts["runs"] = len(per_run)
    threshold_plot(outputs.tmp_path("keysent_threshold.png"), {k: v for k, v in list(curves.items())[:6]})


def extract(args):
    started = io.now()
    model = KeySentenceModel(args.model, batch_size=args.batch_size, query=args.query)
    tokenizer = splitter(args.splitter)
    articles = []
    for lineno, obj in io.read_jsonl(args.input, required=("id", "text")):
        if not isinstance(obj["id"], str) or not isinstance(obj["text"], str):
            raise InputError(f"{args.input}:{lineno}: fields 'id' and 'text' must be strings")
        text = clean(obj["text"])
        articles.append((obj["id"], text, split(text, tokenizer)))
    scores = model.scores([s for _, _, sents in articles for s, _, _ in sents])
    directory, name = os.path.split(os.path.abspath(args.out))
    counts = {"articles": len(articles), "sentences": len(scores), "selected": 0}
    with io.Outputs(directory) as outputs:
        with outputs.open(name) as f:
            start = 0
            for article_id, _, sents in articles:
                s = scores[start:start + len(sents)]
                start += len(sents)
                best = [i for i in np.argsort(-s, kind="stable")[:args.top]
                        if args.threshold is None or s[i] >= args.threshold]
                counts["selected"] += len(best)
                f.write(io.dumps_line({"id": article_id, "key_sentences": [
                    {"text": sents[i][0], "score": float(s[i]), "start": sents[i][1], "end": sents[i][2]}
                    for i in best]}))
        with outputs.open(os.path.splitext(name)[0] + ".manifest.json") as f:
            f.write(io.dumps_line(io.manifest("05_evaluate.py", args, started, inputs=[args.input], counts=counts)))
    print(f"{counts['selected']} key sentences from {counts['articles']} articles (query: {model.query_from}) "
          f"→ {args.out}")
