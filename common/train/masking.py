"""The masked LM's examples: texts tokenised once into flat arrays (cached), cut into blocks of the model's length
(or one truncated text each), and BERT's masking of one example or a batch of them
(``DataCollatorForLanguageModeling``'s, each example drawn from a generator the caller seeds). Next-sentence pairs,
the other kind of example, are ``common/train/nsp.py``'s.
"""

import os

import numpy as np

from common.models.token_cache import cache_folder, cached_map

IGNORE = -100  # label of unmasked positions (Hugging Face's convention)


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

    @classmethod
    def of_texts(cls, ids, word_start, offsets, which):
        """The texts at positions ``which``, in that order, as one flat array."""
        lengths = offsets[which + 1] - offsets[which]
        new = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        take = np.arange(new[-1]) - np.repeat(new[:-1], lengths) + np.repeat(offsets[which], lengths)
        return cls(ids[take], word_start[take], new)

    def blocks(self, size):
        """Cut into blocks of ``size`` tokens, text boundaries ignored, the remainder dropped (once, at the end)."""
        n = len(self.ids) // size
        return Part(self.ids, self.word_start, np.arange(n + 1, dtype=np.int64) * size)

    def get(self, i):
        s, e = self.offsets[i], self.offsets[i + 1]
        return self.ids[s:e], self.word_start[s:e]


def tokenize(texts, tokenizer, max_length, line_by_line, cache_dir):
    """Token ids (int32) and word starts (int8) of ``texts`` as flat arrays plus offsets, tokenised with
    ``datasets.map`` into an Arrow cache file keyed by the texts, tokenizer and settings, so a second run (or
    every process after the first, under ``main_process_first``) reads it instead of tokenising again
    (``token_cache.cached_map``: a damaged one is made again)."""
    import datasets
    from datasets.fingerprint import Hasher

    def encode(batch):
        # blocks are cut after concatenation, so whole texts are tokenised (no warning about their length)
        enc = tokenizer(batch["text"], truncation=line_by_line, max_length=max_length if line_by_line else None,
                        add_special_tokens=True, verbose=False)
        starts = []
        for i in range(len(batch["text"])):
            words = enc.word_ids(i)
            starts.append([int(w is None or k == 0 or w != words[k - 1]) for k, w in enumerate(words)])
        return {"input_ids": enc["input_ids"], "word_start": starts}

    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                                  "word_start": datasets.Sequence(datasets.Value("int8"))})
    ds = datasets.Dataset.from_dict({"text": texts})
    key = Hasher.hash([ds._fingerprint, tokenizer, max_length, line_by_line])
    ds = cached_map(ds, encode, os.path.join(cache_folder(cache_dir), f"mlm-tokens-{key}.arrow"), features,
                    batched=True, batch_size=1000, remove_columns=["text"], desc="tokenise")
    ids = ds.data.column("input_ids")
    flat = np.concatenate([c.flatten().to_numpy() for c in ids.chunks]) if ids.num_chunks else np.zeros(0, np.int32)
    starts = ds.data.column("word_start")
    word_start = np.concatenate([c.flatten().to_numpy() for c in starts.chunks]).astype(bool) \
        if starts.num_chunks else np.zeros(0, bool)
    lengths = np.concatenate([np.diff(c.offsets.to_numpy()) for c in ids.chunks]) if ids.num_chunks else []
    return flat, word_start, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
