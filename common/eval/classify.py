"""Classification on frozen embeddings as Burian 2023 evaluates (§4.2, Tab. 5.7): a small MLP head — Linear(d→50),
ReLU, dropout 0.5, Linear(50→C) — trained with label-smoothed cross-entropy on 1k, 10k and all training documents,
accuracy of the final head on the whole test split. Document pairs are classified from their concatenated
embeddings.

The thesis's 10 epochs at a learning rate of 1e-4 suit its tasks of tens of thousands of documents; on a task of a
few hundred or thousand the head takes a few hundred steps and may stop before it has learnt (on 600 arXiv
abstracts of 9 archives, 10 epochs leave all-MiniLM-L6-v2's head at the majority class; docs/distill.md). A head
whose training loss still fell over the second half of its cosine schedule by more than ``UNSETTLED`` of its fall
over the first half (the two halves give it the same learning rate in all) is reported as not converged
(``unsettled``), so that 05 can say so, and what would train it further (``--head-epochs``).

Splits are the data directory's ``topics.<level>.{train,test}.jsonl`` and ``classify.<name>.{train,test}.jsonl``;
a row is ``{"id", "label"}`` or, for a pair, ``{"ids": [a, b], "label"}``.
"""

import math
import os
import re

import numpy as np
import torch
from torch import nn

from common.eval import uncertainty
from common.io import InputError, read_jsonl, shown

SIZES = (("1k", 1000), ("10k", 10_000), ("all", None))
UNSETTLED = 0.25


def splits(data_dir):
    """{task name: (train path, test path)} of every split pair in ``data_dir``."""
    found = {}
    for name in sorted(os.listdir(data_dir)):
        m = re.fullmatch(r"(topics|classify)\.(.+)\.train\.jsonl", name)
        test = os.path.join(data_dir, f"{m.group(1)}.{m.group(2)}.test.jsonl") if m else None
        if m and os.path.exists(test):
            task = f"classify.topics.{m.group(2)}" if m.group(1) == "topics" else f"classify.{m.group(2)}"
            found[task] = (os.path.join(data_dir, name), test)
    return found


def own_splits(data_dir):
    """Whether ``data_dir`` has classification splits of its own (``classify.*``), not only topic splits."""
    return any(not task.startswith("classify.topics.") for task in splits(data_dir))


def read_task(train_path, test_path, index):
    """(train, test) of one task, each ``read_split``'s; a training split with fewer than two labels is refused
    (every prediction would be right)."""
    train = read_split(train_path, index)
    labels = sorted(set(train[1]))
    if len(labels) < 2:
        raise InputError(f"{train_path}: {len(labels)} label{'s' * (len(labels) != 1)} "
                         f"({', '.join(map(repr, labels))}); a classification task needs at least two")
    return train, read_split(test_path, index)


def read_split(path, index):
    """(rows of document positions [n, 1 or 2], labels) of a split file: ``id``, or ``ids`` a pair, of docs.jsonl,
    and ``label`` a string or a whole number (a class's number, read as its digits; not a bool); anything else
    names the line."""
    rows, labels = [], []
    for lineno, obj in read_jsonl(path, required=("label",)):
        ids = obj["ids"] if "ids" in obj else [obj.get("id")]
        if not isinstance(ids, list) or len(ids) not in (1, 2) or (len(ids) == 1 and "ids" in obj):
            raise InputError(f"{path}:{lineno}: field 'ids' must be a pair of ids, not {shown(ids)}")
        missing = [i for i in ids if not isinstance(i, str) or i not in index]
        if missing:
            raise InputError(f"{path}:{lineno}: id {missing[0]!r} is not in docs.jsonl")
        label = obj["label"]
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            raise InputError(f"{path}:{lineno}: field 'label' must be a string or a whole number, not {shown(label)}")
        rows.append([index[i] for i in ids])
        labels.append(str(label))
    if not rows:
        raise InputError(f"{path}: no rows (an empty split); rebuild the data with more documents")
    if len({len(r) for r in rows}) > 1:
        raise InputError(f"{path}: mixes single documents and pairs")
    return np.array(rows, dtype=np.int64).reshape(len(rows), -1), labels


def shorten(labels, limit):
    """Positions of the first documents of each label, ``limit`` in all, each label's share as in the split (the
    thesis's ``_shorten_split``: floor of the share, the rarest labels topped up)."""
    if limit is None or len(labels) <= limit:
        return np.arange(len(labels))
    values, counts = np.unique(labels, return_counts=True)
    quota = {v: math.floor(c / len(labels) * limit) for v, c in zip(values, counts)}
    while sum(quota.values()) < limit:
        quota[min(quota, key=quota.get)] += 1
    taken = {v: 0 for v in values}
    keep = []
    for i, label in enumerate(labels):
        if taken[label] < quota[label]:
            taken[label] += 1
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def head(dim, classes):
    return nn.Sequential(nn.Linear(dim, 50), nn.ReLU(), nn.Dropout(0.5), nn.Linear(50, classes))


def train_head(x, y, classes, seed, epochs=10, batch_size=32, lr=1e-4, weight_decay=0.1):
    """The thesis's head, trained with AdamW (no decay on biases), cosine decay without warm-up, clipping at 1;
    returns it and each epoch's mean training loss and training accuracy (dropout on, as it trained)."""
    from transformers import get_cosine_schedule_with_warmup
    torch.manual_seed(seed)
    model = head(x.shape[1], classes)
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    rest = [p for n, p in model.named_parameters() if n.endswith("bias")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=lr)
    steps = epochs * math.ceil(len(x) / batch_size)
    scheduler = get_cosine_schedule_with_warmup(optimizer, 0, steps)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    parameters = list(model.parameters())
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    rng = np.random.default_rng(seed)
    model.train()
    history = []
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        loss_sum, right = 0.0, 0
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            logits = model(x[idx])
            loss = loss_fn(logits, y[idx])
            # the gradients as values this step sets (backward calls stay in 03's training loop)
            for parameter, grad in zip(parameters, torch.autograd.grad(loss, parameters)):
                parameter.grad = grad
            nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item() * len(idx)
            right += int((logits.argmax(1) == y[idx]).sum())
        history.append((loss_sum / len(x), right / len(x)))
    return model.eval(), history


def unsettled(losses):
    """Whether a head's training loss (``losses``, each epoch's mean) still fell over the second half of its
    epochs by more than ``UNSETTLED`` of its fall over the first half: a head that has not converged."""
    if len(losses) < 2:
        return False
    half = losses[len(losses) // 2 - 1]
    late = half - losses[-1]
    return late > 0 and late > UNSETTLED * max(losses[0] - half, 0.0)


def features(emb, rows):
    return emb[rows].reshape(len(rows), -1).astype(np.float32)


def classify(emb, train, test, seed=42, epochs=10):
    """{"acc_1k", "acc_10k", "acc_all"}: test accuracy of heads trained on that many training documents (all of
    them where the split is smaller); whether each head got each test document right, as a
    ``uncertainty.Sample`` (its interval is a bootstrap over the test documents: each head trained once); and
    {figure: its head's training loss at its first, middle and last epoch} of the heads that have not converged
    (``unsettled``)."""
    (train_rows, train_labels), (test_rows, test_labels) = train, test
    names = sorted(set(train_labels) | set(test_labels))
    code = {name: k for k, name in enumerate(names)}
    y_train = np.array([code[v] for v in train_labels], dtype=np.int64)
    y_test = np.array([code[v] for v in test_labels], dtype=np.int64)
    x_test = torch.from_numpy(features(emb, test_rows))
    correct, moving = [], {}
    for name, limit in SIZES:
        keep = shorten(train_labels, limit)
        model, history = train_head(features(emb, train_rows[keep]), y_train[keep], len(names), seed, epochs)
        with torch.no_grad():
            correct.append(model(x_test).argmax(1).numpy() == y_test)
        losses = [loss for loss, _ in history]
        if unsettled(losses):
            moving[f"acc_{name}"] = (losses[0], losses[len(losses) // 2 - 1], losses[-1])
    sample = uncertainty.means(np.stack(correct, 1), [f"acc_{name}" for name, _ in SIZES],
                               ("test document", "test documents"))
    return {name: float(x.mean()) for name, x in zip(sample.names, correct)}, sample, moving
