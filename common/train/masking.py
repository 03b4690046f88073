"""The masked LM's examples: texts tokenised once into flat arrays (a part for training and one for validation,
kept in the run's cache), cut into blocks of the model's length (or one truncated text each), and BERT's masking of
one example or a batch of them (``DataCollatorForLanguageModeling``'s, each example drawn from a generator the
caller seeds). Next-sentence pairs, the other kind of example, are ``common/train/nsp.py``'s.
"""

import itertools

import numpy as np

IGNORE = -100  # label of unmasked positions (Hugging Face's convention)
PARTS = ("train", "val")
TOKENIZE_BATCH = 1000  # texts a tokenizer call takes


def mask_tokens(ids, special, word_start, rng, probability=0.15, mask_replace=0.8, random_replace=0.1,
                whole_word=False, mask_id=103, vocab_size=30522):
    """``(input ids, labels)`` of one example, as ``DataCollatorForLanguageModeling`` masks: each non-special
    token chosen with ``probability`` (whole words: each word, every token of a chosen word masked, always with
    ``[MASK]``); a chosen token becomes ``[MASK]`` with ``mask_replace``, a uniformly random id with
    ``random_replace``, else stays; labels are the original ids at chosen positions, ``IGNORE`` elsewhere.

    The draws from ``rng``, in order: ``random`` for each token (whole words: each word) to choose it, then
    ``random`` for each token's replacement, both in one call (PCG64's doubles follow one another), then
    ``integers(vocab_size)`` for the random ids, only as far as the last randomly replaced token (a prefix of the
    same values). Whole words: tokens before the first word start take the last word's draw; an example without
    any word start is one word."""
    n = len(ids)
    if whole_word:
        word = np.cumsum(word_start | special) - 1
        words = max(int(word[-1]) + 1, 1) if n else 0
        draws = rng.random(words + n)
        chosen = (draws[:words] < probability)[word] & ~special  # word -1: numpy's last
        return _replace(ids, chosen, draws[words:], 1.0, 0.0, mask_id, vocab_size, [(rng, 0, n)])
    draws = rng.random(2 * n)
    return _replace(ids, (draws[:n] < probability) & ~special, draws[n:], mask_replace, random_replace, mask_id,
                    vocab_size, [(rng, 0, n)])


def mask_batch(ids, special, word_start, lengths, rngs, probability=0.15, mask_replace=0.8, random_replace=0.1,
               whole_word=False, mask_id=103, vocab_size=30522):
    """``mask_tokens`` of several examples at once, the same draws from each example's generator: ``ids``,
    ``special`` and ``word_start`` hold the examples end to end, example i ``lengths[i]`` tokens long and drawn
    from ``rngs[i]``; returns the flat ``(input ids, labels)``. One call per example to each generator, the
    comparisons and replacements once over the whole batch."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if whole_word:
        boundary = np.cumsum(word_start | special)
        before = np.concatenate([[0], boundary])[starts]  # word starts ahead of each example
        words = np.concatenate([[0], boundary])[ends] - before
        words[(words == 0) & (lengths > 0)] = 1
        word = boundary - np.repeat(before, lengths) - 1
        word = np.where(word < 0, np.repeat(words, lengths) - 1, word)  # numpy's last, as mask_tokens indexes
        choices = words.tolist()
        mask_replace, random_replace = 1.0, 0.0
    else:
        choices = lengths.tolist()
    draws = [rng.random(c + k) for rng, c, k in zip(rngs, choices, lengths.tolist())]
    choice = np.concatenate([d[:c] for d, c in zip(draws, choices)] or [np.zeros(0)])
    draw = np.concatenate([d[c:] for d, c in zip(draws, choices)] or [np.zeros(0)])
    if whole_word:
        choice = choice[word + np.repeat(np.cumsum(choices) - choices, lengths)]
    return _replace(ids, (choice < probability) & ~special, draw, mask_replace, random_replace, mask_id, vocab_size,
                    list(zip(rngs, starts.tolist(), ends.tolist())))


def _replace(ids, chosen, draw, mask_replace, random_replace, mask_id, vocab_size, spans):
    """The chosen tokens replaced as ``draw`` says, and the labels; ``spans``: (generator, start, end) of each
    example, whose random ids are drawn last."""
    out = ids.astype(np.int64)
    out[chosen & (draw < mask_replace)] = mask_id
    randomised = chosen & (draw >= mask_replace) & (draw < mask_replace + random_replace)
    if randomised.any():
        for rng, start, end in spans:
            part = randomised[start:end]
            if part.any():
                drawn = end - start - int(part[::-1].argmax())  # up to the last random id
                at = part[:drawn]
                out[start:start + drawn][at] = rng.integers(vocab_size, size=drawn)[at]
    return out, np.where(chosen, ids, IGNORE).astype(np.int64)


class Part:
    """Examples over one flat token array: example i is ``ids[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, ids, word_start, offsets):
        self.ids, self.word_start, self.offsets = ids, word_start, offsets

    def __len__(self):
        return len(self.offsets) - 1

    def blocks(self, size):
        """Cut into blocks of ``size`` tokens, text boundaries ignored, the remainder dropped (once, at the end)."""
        n = len(self.ids) // size
        return Part(self.ids, self.word_start, np.arange(n + 1, dtype=np.int64) * size)

    def get(self, i):
        s, e = self.offsets[i], self.offsets[i + 1]
        return self.ids[s:e], self.word_start[s:e]


def tokenize(texts, part_of, tokenizer, max_length, line_by_line):
    """The texts of each part as one flat ``Part``: token ids (int32), word starts (bool) and offsets, text
    ``texts[i]`` in part ``part_of[i]``, in the order of ``texts``. ``texts`` is read once, 1,000 at a time, so that
    no list of them is made; whole texts are tokenised (blocks are cut after concatenation), or with
    ``line_by_line`` each truncated to ``max_length``."""
    chunks = [[] for _ in range(int(part_of.max(initial=-1)) + 1)]
    texts, start = iter(texts), 0
    while batch := list(itertools.islice(texts, TOKENIZE_BATCH)):
        enc = tokenizer(batch, truncation=line_by_line, max_length=max_length if line_by_line else None,
                        add_special_tokens=True, verbose=False)
        lengths = np.array([len(row) for row in enc["input_ids"]], dtype=np.int64)
        ids = np.fromiter(itertools.chain.from_iterable(enc["input_ids"]), np.int32, int(lengths.sum()))
        word_start = np.fromiter((w is None or k == 0 or w != words[k - 1] for words in map(enc.word_ids, range(
            len(batch))) for k, w in enumerate(words)), bool, len(ids))
        owner = part_of[start:start + len(batch)]
        start += len(batch)
        for k, chunk in enumerate(chunks):
            tokens = np.repeat(owner == k, lengths)
            chunk.append((ids[tokens], word_start[tokens], lengths[owner == k]))
    return [Part(np.concatenate([c[0] for c in chunk] or [np.zeros(0, np.int32)]),
                 np.concatenate([c[1] for c in chunk] or [np.zeros(0, bool)]),
                 np.concatenate([[0], *(c[2] for c in chunk)]).cumsum().astype(np.int64)) for chunk in chunks]


def part_arrays(parts):
    """``parts`` (training, validation) as the arrays they are kept as in the cache, by file name."""
    return {f"{name}-{field}": getattr(part, field) for name, part in zip(PARTS, parts)
            for field in ("ids", "word_start", "offsets")}


def parts_of(arrays):
    """The parts (training, validation) over ``arrays`` (``part_arrays``' names), or None where one is missing or
    they are not parts: ids int32, word starts bool beside them, offsets int64 rising from 0 to their end."""
    parts = []
    for name in PARTS:
        ids, word_start, offsets = (arrays.get(f"{name}-{field}") for field in ("ids", "word_start", "offsets"))
        if ids is None or word_start is None or offsets is None or ids.dtype != np.int32 or ids.ndim != 1 or \
                word_start.dtype != bool or word_start.shape != ids.shape or offsets.dtype != np.int64 or \
                offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(ids) or \
                (np.diff(offsets) < 0).any():
            return None
        parts.append(Part(ids, word_start, offsets))
    return parts
