"""Key-sentence corpora (``sentences.jsonl``-shaped files): reading with validation and article-level splits."""

import numpy as np

from common.data.splits import refuse_empty_splits
from common.io import InputError, read_jsonl
from common.jsontext import dumps_line

PARTS = ("train", "val", "test")


def read_sentences(path):
    """sentences.jsonl-shaped lines, validated: ``[{"id", "sentences", "labels"}]``."""
    articles, seen = [], set()
    for lineno, obj in read_jsonl(path, required=("id", "sentences", "labels")):
        sentences, labels = obj["sentences"], obj["labels"]
        if not isinstance(obj["id"], str):
            raise InputError(f"{path}:{lineno}: field 'id' must be a string")
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise InputError(f"{path}:{lineno}: field 'sentences' must be a list of strings")
        if not isinstance(labels, list) or len(labels) != len(sentences) or any(
                type(x) is not int or x not in (0, 1) for x in labels):  # JSON's true and 1.0 are no label
            raise InputError(f"{path}:{lineno}: field 'labels' must hold one 0 or 1 per sentence")
        if obj["id"] in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])
        articles.append(obj)
    return articles


def split_articles(articles, test, val, seed, source):
    """Test share of articles first, then the rest train/validation — by article, so no article's sentences
    are on both sides (a split of sentence pairs would put one article's sentences into both training and
    validation and make the validation score optimistic). A split that its share asks for but that rounds down to
    nothing is refused, naming ``source``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(articles))
    n_test = int(round(test * len(order)))
    rest = order[n_test:]
    n_val = int(round(val * len(rest)))
    chosen = {"test": order[:n_test], "val": rest[:n_val], "train": rest[n_val:]}
    refuse_empty_splits(source, len(articles), "articles", {part: len(chosen[part]) for part in PARTS},
                        {"test": test, "val": val, "train": 1})
    return {part: [articles[i] for i in sorted(idx.tolist())] for part, idx in chosen.items()}


def write_splits(splits, outputs, counts):
    for part in PARTS:
        with outputs.open(f"keysent.{part}.jsonl") as f:
            for article in splits[part]:
                f.write(dumps_line({"id": article["id"], "sentences": article["sentences"],
                                    "labels": article["labels"]}))
        counts[f"articles_{part}"] = len(splits[part])
        counts[f"sentences_{part}"] = sum(len(a["sentences"]) for a in splits[part])
        counts[f"key_sentences_{part}"] = sum(sum(a["labels"]) for a in splits[part])
    with outputs.open("splits.json") as f:
        f.write(dumps_line({part: [a["id"] for a in splits[part]] for part in PARTS}))
