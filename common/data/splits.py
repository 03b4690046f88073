"""Evaluation splits shared by 02's commands: topic classification splits drawn from a corpus's labels (SciDocs's
protocol) and written, their flags, and the refusal of a split that rounds down to nothing."""

import re

import numpy as np

from common import io, jsontext


def parse_caps(text):
    """``--topic-cap`` ``level=N,...`` → {level: N}."""
    caps = {}
    for part in filter(None, text.split(",")):
        level, _, value = part.partition("=")
        level, value = level.strip(), value.strip()
        if not level or not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
            raise io.InputError(f"{text!r}: expected LEVEL=NUMBER,..., e.g. top=300,second=200")
        caps[level] = int(value)
    return caps


def topic_splits(corpus, level, min_count, cap, test_size, rng, seed):
    """Labels with fewer than ``min_count`` documents dropped, at most ``cap`` documents per label, stratified
    train/test split. Returns None when fewer than two labels remain."""
    from sklearn.model_selection import train_test_split
    codes = corpus.labels[level]
    kept = []
    for code in range(len(corpus.label_names[level])):
        members = np.flatnonzero(codes == code)
        if len(members) < min_count:
            continue
        if len(members) > cap:
            members = np.sort(rng.choice(members, cap, replace=False))
        kept.append(members)
    if len(kept) < 2:
        return None
    docs = np.concatenate(kept)
    train, test = train_test_split(docs, test_size=test_size, stratify=codes[docs], random_state=seed)
    return np.sort(train), np.sort(test)


def write_topics(corpus, outputs, rng_topics, counts, topic_min, topic_cap, topic_test, seed, say=print):
    """topics.<level>.{train,test}.jsonl for every label level with at least two labels of ``topic_min``
    documents (SciDocs's protocol: at most ``topic_cap`` — ``level=N,...`` — per label, a ``topic_test`` share
    held out); returns {level: (train, test)} document numbers."""
    topic_parts = {}
    caps = parse_caps(topic_cap)
    for level in sorted(corpus.labels):
        result = topic_splits(corpus, level, topic_min, caps.get(level, caps.get("second", 200)), topic_test,
                                    rng_topics, seed)
        if result is None:
            counts[f"topics_{level}_skipped"] = 1
            say(f"note: topic level {level!r} has fewer than two labels with >= {topic_min} documents; no topic "
                "task for it")
            continue
        topic_parts[level] = result
        names = corpus.label_names[level]
        for part, members in zip(("train", "test"), result):
            counts[f"topics_{level}_{part}"] = int(len(members))
            with outputs.open(f"topics.{level}.{part}.jsonl") as f:
                f.writelines(jsontext.dumps_line({"id": corpus.ids[i], "label": names[corpus.labels[level][i]]})
                             for i in members.tolist())
    return topic_parts


def refuse_empty_splits(source, total, what, sizes, shares):
    """A split that a non-zero share asks for but that rounds down to nothing (a corpus too small for it) is
    refused, naming it: 05 could not evaluate on it."""
    empty = [part for part, n in sizes.items() if n == 0 and shares[part] > 0]
    if empty:
        found = ", ".join(f"{part} {n}" for part, n in sizes.items())
        raise io.InputError(f"{source}: {total} {what} leave the {' and '.join(empty)} split(s) empty ({found}); "
                            f"give more {what} or other shares")
