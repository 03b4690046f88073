"""Batches of texts for embedding: by count and by a budget of padded tokens, and the flags that set them."""

import numpy as np

from common import cli

# padded tokens per forward pass when --batch-tokens is not given: a GPU is busiest on large batches; on a CPU,
# batches whose activations stay in cache are faster (measured in docs/benchmarks.md, "Defaults")
BATCH_TOKENS = {"cuda": 16384, "cpu": 2048}


def length_batches(lengths, batch_size, batch_tokens=0):
    """Positions of ``lengths`` longest first, cut into batches of at most ``batch_size`` texts and, when
    ``batch_tokens`` > 0, at most that many padded tokens (texts × the batch's longest): short texts travel in larger
    batches, long ones in smaller, as text-embeddings-inference batches. A text longer than the budget goes alone."""
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = batch_size
        if batch_tokens:
            size = max(1, min(batch_size, batch_tokens // max(int(lengths[order[start]]), 1)))
        batches.append(order[start:start + size])
        start += size
    return batches


def token_budget(batch_tokens, device_type):
    """``--batch-tokens`` as given (0: off), or this device's default where it was not given (None)."""
    if batch_tokens is not None:
        return batch_tokens
    return BATCH_TOKENS.get(device_type, BATCH_TOKENS["cuda"])


def add_batch_arguments(p, batch_size, what):
    """--batch-size and --batch-tokens of a command that embeds texts."""
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=batch_size,
                   help=f"at most this many {what} per forward pass")
    p.add_argument("--batch-tokens", type=cli.number(int, cli.COUNT_0), default=None,
                   help="and at most this many padded tokens per forward pass (texts × the longest): short texts go "
                        "in larger batches, long ones in smaller; 0: --batch-size alone "
                        f"[{BATCH_TOKENS['cpu']} on a CPU, {BATCH_TOKENS['cuda']} on a GPU]")
