"""Token ids of many texts in one flat array: tokenise once, pad per batch, in length-sorted groups."""

import itertools

import numpy as np
import torch

class TokenStore:
    """Token ids of many texts in one flat int32 array plus offsets (no Python list per token)."""

    def __init__(self, tokenizer, texts, max_length, batch=4096):
        """``texts``: any iterable (a generator streaming them is read once, ``batch`` at a time)."""
        lengths, chunks = [], []
        texts = iter(texts)
        while True:
            part = list(itertools.islice(texts, batch))
            if not part:
                break
            enc = tokenizer(part, truncation="longest_first", max_length=max_length,
                            add_special_tokens=True)["input_ids"]
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
