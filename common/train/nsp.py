"""Next-sentence prediction's training pairs, as BERT's ``create_pretraining_data.py`` cuts them (Devlin et al.
2019, §3.1 and appendix A.2): documents split into sentences, segments A and B of whole sentences, B the true
continuation half of the time and a span of another document otherwise.

| step      | what                                                                                          |
|-----------|-----------------------------------------------------------------------------------------------|
| sentences | each document split by the project's sentence splitter (untrained NLTK Punkt, no downloaded   |
|           | data: ``common/extract/sentences.py``), each sentence tokenised without special tokens;       |
|           | empty documents dropped                                                                       |
| target    | per document, ``max_tokens`` (the model's length − 3 for ``[CLS]``, ``[SEP]``, ``[SEP]``),    |
|           | or with ``short_seq_prob`` a length drawn uniformly from 2 … ``max_tokens``                   |
| chunk     | sentences gathered until they reach the target or the document ends                           |
| A         | the chunk's first ``a_end`` sentences, ``a_end`` uniform in 1 … chunk − 1 (1 for a            |
|           | one-sentence chunk)                                                                           |
| B         | with ½ (always for a one-sentence chunk): sentences of another document of the same part from |
|           | a random sentence on until B reaches the target less A (label 1, random), the chunk's unused  |
|           | sentences put back for the next chunk; else the chunk's remaining sentences (label 0, the     |
|           | continuation)                                                                                 |
| truncate  | while A + B exceed ``max_tokens``, the longer (B on a tie) loses a token at its front or its  |
|           | end, each with ½                                                                              |

The labels are ``BertForPreTraining``'s ``next_sentence_label``: 0 where B continues A, 1 where B is random.
Each document's draws come from a generator seeded by (seed, document), so a run, a resumed run and every process
cut the same pairs. A pair is four offsets into one flat token array (A and B are each a contiguous run of
tokens: whole sentences, trimmed at their ends) and its label.
"""

import os

import numpy as np

from common.models.token_cache import cache_folder, cached_map

PAIRS = int.from_bytes(b"pairs", "little")  # the generator's stream tag: pairs, apart from the masks' epochs


def tokenize_sentences(texts, tokenizer, cache_dir):
    """The sentences of ``texts`` tokenised without special tokens, as flat arrays: token ids (int32), word starts
    (bool), sentence offsets into the tokens ``[S + 1]`` and each text's sentence offsets ``[len(texts) + 1]``.
    Split and tokenised with ``datasets.map`` into an Arrow cache file keyed by the texts and the tokenizer, so
    every process after the first (under ``main_process_first``) reads it."""
    import datasets
    from datasets.fingerprint import Hasher

    def encode(batch):
        from common.extract.sentences import split, splitter
        punkt = splitter("punkt")
        per_text = [[s for s, _, _ in split(text, punkt)] for text in batch["text"]]
        flat = [s for sentences in per_text for s in sentences]
        enc = tokenizer(flat, add_special_tokens=False, verbose=False) if flat else {"input_ids": []}
        ids, starts, lengths, k = [], [], [], 0
        for sentences in per_text:
            row_ids, row_starts, row_lengths = [], [], []
            for _ in sentences:
                words = enc.word_ids(k)
                if enc["input_ids"][k]:  # a sentence of no tokens (a lone symbol the vocabulary drops) is no segment
                    row_ids += enc["input_ids"][k]
                    row_starts += [int(w is None or j == 0 or w != words[j - 1]) for j, w in enumerate(words)]
                    row_lengths.append(len(enc["input_ids"][k]))
                k += 1
            ids.append(row_ids)
            starts.append(row_starts)
            lengths.append(row_lengths)
        return {"input_ids": ids, "word_start": starts, "sentence_lengths": lengths}

    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                                  "word_start": datasets.Sequence(datasets.Value("int8")),
                                  "sentence_lengths": datasets.Sequence(datasets.Value("int32"))})
    ds = datasets.Dataset.from_dict({"text": texts})
    key = Hasher.hash([ds._fingerprint, tokenizer, "sentences", "punkt"])
    ds = cached_map(ds, encode, os.path.join(cache_folder(cache_dir), f"nsp-sentences-{key}.arrow"), features,
                    batched=True, batch_size=200, remove_columns=["text"], desc="split and tokenise")
    ids = _flat(ds.data.column("input_ids"), np.int32)
    word_start = _flat(ds.data.column("word_start"), np.int8).astype(bool)
    column = ds.data.column("sentence_lengths")
    lengths = _flat(column, np.int64)
    per_text = np.concatenate([np.diff(c.offsets.to_numpy()) for c in column.chunks]) if column.num_chunks else []
    return (ids, word_start, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            np.concatenate([[0], np.cumsum(per_text)]).astype(np.int64))


def _flat(column, dtype):
    return np.concatenate([c.flatten().to_numpy() for c in column.chunks]).astype(dtype) if column.num_chunks \
        else np.zeros(0, dtype)


def _truncate(a, b, max_tokens, rng):
    """BERT's ``truncate_seq_pair`` on two ``[start, end)`` runs, in place. Its one token at a time is taken here
    a stretch at a time: while one segment is longer, it alone loses tokens until the two are level (or the pair
    fits); level, both lose the same number (B one more where the excess is odd). Of n tokens a segment loses,
    the number from its front is Binomial(n, ½), as n coin flips one at a time give."""
    while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
        la, lb = a[1] - a[0], b[1] - b[0]
        excess = la + lb - max_tokens
        if la != lb:
            cuts = [(a if la > lb else b, min(excess, abs(la - lb)))]
        elif excess > 1:
            cuts = [(b, excess // 2), (a, excess // 2)]
        else:
            cuts = [(b, 1)]
        for run, n in cuts:
            front = int(rng.binomial(n, 0.5))
            run[0] += front
            run[1] -= n - front


def pairs(sentence_offsets, text_sentences, texts, max_tokens, short_seq_prob=0.1, seed=42):
    """The next-sentence pairs of the texts at positions ``texts`` (one part: training or validation; B's random
    documents come from the same part), as an int64 array ``[P, 5]``: A's start and end, B's start and end (offsets
    into the flat tokens of ``tokenize_sentences``), and the label (1: B is random). Texts without sentences are
    left out."""
    if max_tokens < 2:
        raise ValueError("a pair needs room for two tokens besides [CLS], [SEP], [SEP]")
    texts = np.asarray([t for t in np.asarray(texts).tolist() if text_sentences[t + 1] > text_sentences[t]],
                       dtype=np.int64)
    out = []
    for position, text in enumerate(texts.tolist()):
        rng = np.random.default_rng([seed, PAIRS, text])
        first, count = int(text_sentences[text]), int(text_sentences[text + 1] - text_sentences[text])
        target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
        start, length, i = 0, 0, 0
        while i < count:
            length += int(sentence_offsets[first + i + 1] - sentence_offsets[first + i])
            if i == count - 1 or length >= target:
                chunk = i + 1 - start
                a_end = int(rng.integers(1, chunk)) if chunk >= 2 else 1
                a = [int(sentence_offsets[first + start]), int(sentence_offsets[first + start + a_end])]
                if chunk == 1 or rng.random() < 0.5:
                    label = 1
                    for _ in range(10):  # another document, where the part has one (BERT tries 10 times)
                        other = int(rng.integers(len(texts)))
                        if other != position:
                            break
                    other = int(texts[other])
                    o_first = int(text_sentences[other])
                    o_count = int(text_sentences[other + 1]) - o_first
                    j = o_first + int(rng.integers(o_count))
                    wanted = target - (a[1] - a[0])
                    b = [int(sentence_offsets[j]), int(sentence_offsets[j + 1])]
                    while b[1] - b[0] < wanted and j + 1 < o_first + o_count:
                        j += 1
                        b[1] = int(sentence_offsets[j + 1])
                    i -= chunk - a_end  # the chunk's sentences after A start the next chunk
                else:
                    label = 0
                    b = [a[1], int(sentence_offsets[first + i + 1])]
                _truncate(a, b, max_tokens, rng)
                out.append((a[0], a[1], b[0], b[1], label))
                start, length = i + 1, 0
            i += 1
    return np.array(out, dtype=np.int64).reshape(-1, 5)


class Pairs:
    """The pairs of one part over the flat tokens: pair i as BERT's input ``[CLS] A [SEP] B [SEP]``."""

    def __init__(self, ids, word_start, table, cls_id, sep_id):
        self.ids, self.word_start, self.table = ids, word_start, table
        self.cls_id, self.sep_id = cls_id, sep_id

    def __len__(self):
        return len(self.table)

    def lengths(self):
        """Tokens of each pair's input, special tokens included."""
        return self.table[:, 1] - self.table[:, 0] + self.table[:, 3] - self.table[:, 2] + 3

    def get(self, i):
        """(input ids, word starts, token type ids, label) of pair ``i``; the special tokens start words."""
        a0, a1, b0, b1, label = self.table[i].tolist()
        ids = np.concatenate([[self.cls_id], self.ids[a0:a1], [self.sep_id], self.ids[b0:b1], [self.sep_id]])
        starts = np.concatenate([[True], self.word_start[a0:a1], [True], self.word_start[b0:b1], [True]])
        types = np.zeros(len(ids), dtype=np.int64)
        types[a1 - a0 + 2:] = 1
        return ids, starts, types, label
