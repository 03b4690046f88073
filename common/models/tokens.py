"""Token ids of many texts in one flat array: tokenise once, pad per batch, in length-sorted groups."""

import itertools

import numpy as np
import torch

# texts cut before tokenising whose head is also tokenised whole, to check that the cut changes nothing
CHECKED_CUTS = 8


class TokenStore:
    """Token ids of many texts in one flat int32 array plus offsets (no Python list per token).

    A text is tokenised only as far as ``max_length`` tokens reach: it is cut after its first ``max_length``
    whitespace-separated words (each word is at least one token, and a tokenizer that splits at whitespace gives
    the words before a cut the tokens it gives them in the whole text), which on long documents is most of the
    tokenising saved. A head that does not fill ``max_length`` tokens is tokenised whole again, and so are the first
    ``CHECKED_CUTS`` heads of a store, compared with their cut ids: a tokenizer whose tokens cross whitespace is
    found there, and the store then tokenises every text whole. The ids are the whole texts' truncated ids."""

    def __init__(self, tokenizer, texts, max_length, batch=4096):
        """``texts``: any iterable (a generator streaming them is read once, ``batch`` at a time)."""
        lengths, chunks = [], []
        texts = iter(texts)
        checks, cutting = CHECKED_CUTS, True
        while True:
            part = list(itertools.islice(texts, batch))
            if not part:
                break
            heads = [_head(text, max_length) for text in part] if cutting else part
            enc = tokenizer(heads, truncation="longest_first", max_length=max_length,
                            add_special_tokens=True)["input_ids"]
            cut = [i for i, (head, text) in enumerate(zip(heads, part)) if head is not text]
            checked = set(cut[:checks])
            again = [i for i in cut if len(enc[i]) < max_length or i in checked]
            if again:
                whole = tokenizer([part[i] for i in again], truncation="longest_first", max_length=max_length,
                                  add_special_tokens=True)["input_ids"]
                if any(enc[i] != ids for i, ids in zip(again, whole) if i in checked):  # tokens cross whitespace
                    cutting = False
                    enc = tokenizer(part, truncation="longest_first", max_length=max_length,
                                    add_special_tokens=True)["input_ids"]
                else:
                    for i, ids in zip(again, whole):
                        enc[i] = ids
            checks -= len(checked)
            sizes = list(map(len, enc))
            lengths.extend(sizes)
            chunks.append(np.fromiter(itertools.chain.from_iterable(enc), dtype=np.int32, count=sum(sizes)))
        self.ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.pad_id = tokenizer.pad_token_id or 0

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

    def groups(self, indices, n_groups):
        """Pad ``indices`` as up to ``n_groups`` length-sorted groups; returns the groups and, for each input
        position, its row in the groups' concatenated output (to undo the sort)."""
        indices = np.asarray(indices)
        order = np.argsort(self.lengths()[indices], kind="stable")
        parts = [p for p in np.array_split(order, min(n_groups, len(order))) if len(p)]
        row = np.empty(len(order), dtype=np.int64)
        row[order] = np.arange(len(order))
        return [self.pad(indices[p]) for p in parts], torch.from_numpy(row)

    def packed(self, indices):
        """``(input_ids, lengths)`` of these texts laid end to end, without padding (for variable-length
        attention)."""
        parts = [self.get(i) for i in indices]
        return (torch.from_numpy(np.concatenate(parts).astype(np.int64)),
                torch.tensor([len(p) for p in parts], dtype=torch.int64))


def _head(text, words):
    """``text`` cut after its first ``words`` whitespace-separated words (the text itself where it has no more)."""
    parts = text.split(None, words)
    if len(parts) <= words:
        return text
    return text[:len(text) - len(parts[-1])].rstrip()
