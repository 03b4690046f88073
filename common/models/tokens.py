"""Token ids of many texts in one flat array: tokenise once, pad per batch, in length-sorted groups, or lay a batch's
texts end to end (``Packed``)."""

import functools
import itertools
import re
import sys
from typing import NamedTuple

import numpy as np
import torch


class Packed(NamedTuple):
    """Texts laid end to end without padding: their token ids ``[T]`` and lengths ``[n]`` (int64, on the host), the
    form of a batch's group that ``Encoder.forward`` runs as one row on a CPU."""
    ids: torch.Tensor
    lengths: torch.Tensor


class TokenStore:
    """Token ids of many texts in one flat int32 array plus offsets (no Python list per token).

    A text is tokenised only as far as ``max_length`` tokens reach: it is cut after its first ``max_length`` words,
    which on long documents is most of the tokenising saved. The words are split only at the characters that the
    tokenizer itself splits at (``word_separators``: its normaliser and pre-tokenizer, asked once per store), so
    that each word before a cut is tokenised as in the whole text and gives at least one token unless the normaliser
    deletes all of it; a head that does not fill ``max_length`` tokens is tokenised whole again. A tokenizer that
    does not show where it splits (no pre-tokenizer, or a slow one) reads every text whole. The ids are the whole
    texts' truncated ids, whatever the text and wherever it stands in ``texts``."""

    def __init__(self, tokenizer, texts, max_length, batch=4096):
        """``texts``: any iterable (a generator streaming them is read once, ``batch`` at a time)."""
        lengths, chunks = [], []
        texts = iter(texts)
        head = _cutter(word_separators(tokenizer), max_length)
        while True:
            part = list(itertools.islice(texts, batch))
            if not part:
                break
            heads = [head(text) for text in part]
            enc = tokenizer(heads, truncation="longest_first", max_length=max_length,
                            add_special_tokens=True)["input_ids"]
            again = [i for i, (cut, text) in enumerate(zip(heads, part))
                     if cut is not text and len(enc[i]) < max_length]
            if again:
                whole = tokenizer([part[i] for i in again], truncation="longest_first", max_length=max_length,
                                  add_special_tokens=True)["input_ids"]
                for i, ids in zip(again, whole):
                    enc[i] = ids
            sizes = list(map(len, enc))
            lengths.extend(sizes)
            chunks.append(np.fromiter(itertools.chain.from_iterable(enc), dtype=np.int32, count=sum(sizes)))
        self.ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.pad_id = tokenizer.pad_token_id or 0

    @classmethod
    def of_arrays(cls, ids, offsets, pad_id):
        """A store of token ``ids`` and ``offsets`` already made (mapped from a file: ``shared_docs.shared_store``)."""
        store = cls.__new__(cls)
        store.ids, store.offsets, store.pad_id = ids, offsets, pad_id
        return store

    def __len__(self):
        return len(self.offsets) - 1

    def length(self, i):
        return int(self.offsets[i + 1] - self.offsets[i])

    def lengths(self):
        return np.diff(self.offsets)

    def get(self, i):
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def pad(self, indices):
        """A padded ``(input_ids, attention_mask)`` pair for these texts (dynamic padding)."""
        seqs = [self.get(i) for i in indices]
        width = max(len(s) for s in seqs)
        ids = np.full((len(seqs), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def groups(self, indices, n_groups, packed=False):
        """Pad ``indices`` as up to ``n_groups`` length-sorted groups, or with ``packed`` lay them end to end in the
        same order as one ``Packed`` group; returns the groups and, for each input position, its row in the groups'
        concatenated output (to undo the sort)."""
        indices = np.asarray(indices)
        order = np.argsort(self.lengths()[indices], kind="stable")
        row = np.empty(len(order), dtype=np.int64)
        row[order] = np.arange(len(order))
        if packed:
            return [Packed(*self.packed(indices[order]))], torch.from_numpy(row)
        parts = [p for p in np.array_split(order, min(n_groups, len(order))) if len(p)]
        return [self.pad(indices[p]) for p in parts], torch.from_numpy(row)

    def packed(self, indices):
        """``(input_ids, lengths)`` of these texts laid end to end, without padding (for variable-length
        attention)."""
        parts = [self.get(i) for i in indices]
        return (torch.from_numpy(np.concatenate(parts).astype(np.int64)),
                torch.tensor([len(p) for p in parts], dtype=torch.int64))


@functools.cache
def _whitespace():
    return "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())


def word_separators(tokenizer):
    """The whitespace characters (Python's ``str.isspace``) at which ``tokenizer`` always ends a word: after its
    normaliser, ``a<c>b`` is two pre-tokens, one ending in ``a``, the other in ``b`` (with whatever mark of a word's
    start the pre-tokenizer adds), so that no token holds characters from both sides of ``c``. BERT's normaliser deletes ``\\x0b``,
    ``\\x0c``, ``\\x1c``-``\\x1f`` and ``\\x85`` (control characters to it, whitespace to Python): those
    are not separators. Empty for a tokenizer without a fast backend or a pre-tokenizer, and for one that
    truncates from the left (it keeps a text's last tokens, which no head holds)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    left = getattr(tokenizer, "truncation_side", "right") != "right"
    if backend is None or backend.pre_tokenizer is None or left:
        return ""

    def pieces(text):
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        return [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
    return "".join(c for c in _whitespace()
                   if len(pair := pieces(f"a{c}b")) == 2 and pair[0].endswith("a") and pair[1].endswith("b")
                   and "b" not in pair[0] and "a" not in pair[1])


def _cutter(separators, words):
    """A function giving a text cut after its first ``words`` words, the words split at ``separators`` (the text
    itself where it has no more words, or no separators are known). The pattern is a run of separators, then
    ``words`` words each but the first after a run of separators: each quantifier meets a character class disjoint
    from the next one's, so the match is linear in the head's length, and it reads no further than the head."""
    if not separators or words < 1:
        return lambda text: text
    sep = "[" + "".join(map(re.escape, separators)) + "]"
    word = "[^" + "".join(map(re.escape, separators)) + "]"
    pattern = re.compile(f"{sep}*{word}+(?:{sep}+{word}+){{{words - 1}}}(?={sep}+{word})")

    def head(text):
        match = pattern.match(text)
        return text[:match.end()] if match else text
    return head
