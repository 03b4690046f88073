"""The theses' figures as PNG files (matplotlib, no display): topic t-SNE, confusion matrix, label distribution and
token lengths for WikiSpecter; cosine histograms, sentence t-SNE, validation AP and threshold curves for key
sentences; a training run's curves. Each function takes what it draws and a path, and writes one file."""

import numpy as np


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    _pyplot().close(fig)


# a t-SNE figure shows whether the labels form clusters, which a few hundred points show as well as every one (and
# a panel of thousands overplots): it draws at most this many, so that it costs the same at any corpus size
TSNE_POINTS = 500


def tsne_sample(labels, seed=42, limit=TSNE_POINTS):
    """Positions, ascending, of at most ``limit`` of the items whose labels are ``labels``: every one where there
    are no more, else a sample drawn from ``seed`` that keeps each label's share (its floor, the rarest labels
    topped up by one, as ``classify.shorten`` cuts a training split)."""
    labels = np.asarray(labels)
    if len(labels) <= limit:
        return np.arange(len(labels))
    values, counts = np.unique(labels, return_counts=True)
    quota = dict(zip(values.tolist(), (counts * limit // len(labels)).tolist()))
    for value in values[np.argsort(counts, kind="stable")][:limit - sum(quota.values())].tolist():
        quota[value] += 1
    keep = []
    for i in np.random.default_rng(seed).permutation(len(labels)).tolist():
        if quota[labels[i].item()] > 0:
            quota[labels[i].item()] -= 1
            keep.append(i)
    return np.sort(np.array(keep, dtype=np.int64))


def tsne(x, seed=42):
    """2-d t-SNE coordinates of the rows of ``x`` (scikit-learn's, PCA start, perplexity 30 or less for few rows),
    computed on one thread: the same coordinates on any machine, and 05 runs it beside the topic classifiers, which
    hold the other cores (OpenMP threads that wait for a busy core only spin)."""
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):
        return TSNE(n_components=2, init="pca", random_state=seed,
                    perplexity=min(30.0, max(2.0, (len(x) - 1) / 3))).fit_transform(x)


def topic_tsne(path, points, labels, level):
    """One panel per model: the t-SNE coordinates of the topic documents drawn (``tsne`` of the rows of
    ``tsne_sample``), coloured by label. ``points``: {model: xy [n, 2]}; ``labels``: the n documents' labels."""
    plt = _pyplot()
    names = sorted(set(labels))
    colour = np.array([names.index(label) for label in labels])
    fig, axes = plt.subplots(1, len(points), figsize=(5 * len(points), 5), squeeze=False)
    for ax, (name, xy) in zip(axes[0], points.items()):
        for k, label in enumerate(names):
            ax.scatter(xy[colour == k, 0], xy[colour == k, 1], s=8, label=label)
        ax.set_title(f"{name}: topics.{level}")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][-1].legend(fontsize=7, markerscale=2, loc="best")
    _save(fig, path)


def confusion(path, predictions, level):
    """One panel per model: the confusion matrix of the topic classifier on the test documents (counts; rows are
    the true labels). ``predictions``: {model: (true labels, predicted labels)}."""
    from sklearn.metrics import ConfusionMatrixDisplay
    plt = _pyplot()
    labels = sorted({y for truth, pred in predictions.values() for y in (*truth, *pred)})
    size = max(4.5, 0.45 * len(labels) + 2.5)
    fig, axes = plt.subplots(1, len(predictions), figsize=(size * len(predictions), size), squeeze=False)
    for ax, (name, (truth, pred)) in zip(axes[0], predictions.items()):
        ConfusionMatrixDisplay.from_predictions(truth, pred, labels=labels, ax=ax, colorbar=False, cmap="Blues",
                                                xticks_rotation="vertical")
        ax.set_title(f"{name}: topics.{level}")
    _save(fig, path)


def label_distribution(path, topic_rows):
    """Documents per label and level, training and test stacked (the thesis's Table 3.1 / Fig. 3.4 for the
    documents evaluated). ``topic_rows``: {level: {"train"/"test": [(id, label)]}}."""
    import collections
    plt = _pyplot()
    levels = sorted(topic_rows)
    heights = [max(2.5, 0.22 * len({label for part in topic_rows[lv].values() for _, label in part}) + 1)
               for lv in levels]
    fig, axes = plt.subplots(len(levels), 1, figsize=(7, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, level in zip(axes[:, 0], levels):
        train = collections.Counter(label for _, label in topic_rows[level]["train"])
        test = collections.Counter(label for _, label in topic_rows[level]["test"])
        labels = sorted(set(train) | set(test), key=lambda lb: (train[lb] + test[lb], lb))
        y = np.arange(len(labels))
        ax.barh(y, [train[lb] for lb in labels], label="train", color="C0")
        ax.barh(y, [test[lb] for lb in labels], left=[train[lb] for lb in labels], label="test", color="C1")
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_xlabel("documents")
        ax.set_title(f"topics.{level}: {len(labels)} labels, {sum(train.values()) + sum(test.values())} documents")
        ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def token_lengths(path, lengths, cut, model):
    """Histogram of the documents' token counts (special tokens included) with the model's cut marked."""
    plt = _pyplot()
    lengths = np.asarray(lengths)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    edges = np.histogram_bin_edges(lengths, bins="auto") if len(lengths) else np.arange(2)
    ax.hist(lengths, bins=edges if len(edges) <= 81 else 80, color="C0")
    share = float((lengths > cut).mean()) if len(lengths) else 0.0
    ax.axvline(cut, color="C3", linestyle="--", label=f"cut at {cut} tokens: {share:.1%} of documents truncated")
    ax.set_xlabel(f"tokens per document ({model}'s tokenizer, title + text)")
    ax.set_ylabel("documents")
    ax.legend(fontsize=8)
    _save(fig, path)


def cosine_histograms(path, scored):
    """One panel per model: cosine to the query of key and of other sentences, counts on a log scale.
    ``scored``: {model: [(scores, labels) per article]}."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(scored), figsize=(4.5 * len(scored), 3.8), squeeze=False, sharey=True)
    for ax, (name, articles) in zip(axes[0], scored.items()):
        scores = np.concatenate([s for s, _ in articles])
        labels = np.concatenate([y for _, y in articles]).astype(bool)
        bins = np.linspace(min(scores.min(), 0), 1, 41)
        ax.hist(scores[~labels], bins=bins, alpha=0.6, label="other sentences", color="C0")
        ax.hist(scores[labels], bins=bins, alpha=0.6, label="key sentences", color="C3")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("cosine similarity to the query")
        ax.set_title(name)
    axes[0][0].set_ylabel("sentences (log scale)")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def sentence_tsne(path, points, seed=42):
    """One panel per model (before and after fine-tuning): t-SNE of the test sentences, key and other (at most
    ``TSNE_POINTS``, the same for every model: ``tsne_sample``), with the query. ``points``: {model: (sentence
    vectors, labels, query vector)}."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(points), figsize=(4.5 * len(points), 4.5), squeeze=False)
    for ax, (name, (vectors, labels, query)) in zip(axes[0], points.items()):
        keep = tsne_sample(labels, seed)
        vectors, labels = vectors[keep], np.asarray(labels)[keep]
        x = np.vstack([vectors, query[None, :]])
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # the thesis scores by cosine
        xy = tsne(x, seed)
        labels = np.asarray(labels).astype(bool)
        ax.scatter(xy[:-1][~labels, 0], xy[:-1][~labels, 1], s=8, color="C0", label="other sentences")
        ax.scatter(xy[:-1][labels, 0], xy[:-1][labels, 1], s=14, color="C3", label="key sentences")
        ax.scatter(xy[-1:, 0], xy[-1:, 1], s=160, marker="*", color="black", label="query")
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][-1].legend(fontsize=7, loc="best")
    _save(fig, path)


def validation_ap(path, logs, similarities=("cosine", "manhattan", "euclidean", "dot")):
    """One panel per run: validation average precision under each similarity against the training step, from
    ``log.jsonl``. ``logs``: {model: [log records]}."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(logs), figsize=(4.8 * len(logs), 3.8), squeeze=False, sharey=True)
    for ax, (name, records) in zip(axes[0], logs.items()):
        rows = [r for r in records if "val_ap_max" in r]
        steps = [r["step"] for r in rows]
        for k, sim in enumerate(similarities):  # styles differ: the four curves often coincide
            ax.plot(steps, [r.get(f"val_ap_{sim}", np.nan) for r in rows], color=f"C{k}", label=sim,
                    linestyle=("-", "--", ":", "-.")[k % 4], marker="os^x"[k % 4], markersize=4, fillstyle="none")
        ax.set_xlabel("optimizer step")
        ax.set_title(name)
    axes[0][0].set_ylabel("validation average precision")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def threshold_curves(path, scored):
    """Recall (share of key sentences at or above the threshold) and precision (share of sentences at or above it
    that are key) against the cosine threshold, per model."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k, (name, articles) in enumerate(scored.items()):
        scores = np.concatenate([s for s, _ in articles])
        labels = np.concatenate([y for _, y in articles]).astype(bool)
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
    _save(fig, path)


def training_curves(path, records):
    """A training run's log (``log.jsonl`` records): the training loss, the learning rate and each validation
    metric against the optimizer step, one panel each."""
    plt = _pyplot()
    train = [r for r in records if "loss" in r]
    metrics = sorted({k for r in records for k in r if k.startswith("val_") and isinstance(r[k], (int, float))})
    panels = [("loss", "training loss"), ("lr", "learning rate")] + [(m, m) for m in metrics]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        points = [(r["step"], r[key]) for r in (train if key in ("loss", "lr") else records) if key in r]
        if points:
            ax.plot(*zip(*points), marker="." if len(points) < 50 else None)
        ax.set_title(title)
        ax.set_xlabel("step")
    _save(fig, path)
