"""The masked-LM objective's inputs (common/train/masking.py): tokens chosen and replaced as Hugging Face's collator
does and never a special token, whole words masked together, blocks cut from the concatenated texts, and the texts
of each part tokenised as the tokenizer tokenises each alone; the draws pinned for one block, the same for one
example and for a batch, and the same as the three separate draws the masking was first written with, so that a run
resumed across the change (or a batch masked at once) sees the masks it saw before."""

import numpy as np
import pytest
from conftest import corpus_text

from common.train.masking import IGNORE, mask_batch, mask_tokens


def test_mlm_masks_like_the_hugging_face_collator_and_never_masks_special_tokens(tiny_model):
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    from common.train.masking import IGNORE, mask_tokens
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    enc = tok(corpus_text(5, 200), truncation=True, max_length=64)["input_ids"]
    special_ids = np.array(tok.all_special_ids)
    ours = {"chosen": 0, "mask": 0, "random_or_kept": 0, "tokens": 0}
    for i, ids in enumerate(enc):
        ids = np.array(ids)
        special = np.isin(ids, special_ids)
        out, labels = mask_tokens(ids, special, np.ones(len(ids), bool), np.random.default_rng([0, 0, i]),
                                  mask_id=tok.mask_token_id, vocab_size=len(tok))
        chosen = labels != IGNORE
        assert not chosen[special].any() and (out[~chosen] == ids[~chosen]).all()
        ours["chosen"] += chosen.sum()
        ours["mask"] += (out[chosen] == tok.mask_token_id).sum()
        ours["tokens"] += (~special).sum()
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=0)
    batch = collator([{"input_ids": ids} for ids in enc])
    theirs_chosen = (batch["labels"] != -100).sum().item()
    theirs_mask = ((batch["input_ids"] == tok.mask_token_id) & (batch["labels"] != -100)).sum().item()
    n = ours["tokens"]
    sigma = np.sqrt(n * 0.15 * 0.85)
    assert abs(ours["chosen"] - 0.15 * n) < 3 * sigma and abs(theirs_chosen - 0.15 * n) < 3 * sigma
    sigma_mask = np.sqrt(ours["chosen"] * 0.8 * 0.2)
    assert abs(ours["mask"] - 0.8 * ours["chosen"]) < 3 * sigma_mask
    assert abs(theirs_mask - 0.8 * theirs_chosen) < 3 * np.sqrt(theirs_chosen * 0.16)


def test_whole_word_masking_masks_every_token_of_a_chosen_word_with_mask():
    from common.train.masking import IGNORE, mask_tokens
    ids = np.arange(10, 30)
    special = np.zeros(20, bool)
    special[[0, 19]] = True
    word_start = np.array([1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1], bool)
    word = np.cumsum(word_start) - 1
    for seed in range(30):
        out, labels = mask_tokens(ids, special, word_start, np.random.default_rng(seed), probability=0.3,
                                  whole_word=True, mask_id=1)
        chosen = labels != IGNORE
        for w in np.unique(word[~special]):
            assert chosen[word == w].all() or not chosen[word == w].any()
        assert (out[chosen] == 1).all() and not chosen[special].any()


def test_blocks_are_cut_from_the_concatenated_texts_and_only_the_final_remainder_is_dropped():
    from common.train.masking import Part
    ids = np.array([0, 1, 2, 7, 8, 9, 10, 11])
    part = Part(ids, ids % 2 == 0, np.array([0, 3, 8]))  # texts of 3 and 5 tokens
    blocks = part.blocks(3)
    assert len(blocks) == 2 and [blocks.get(i)[0].tolist() for i in range(2)] == [[0, 1, 2], [7, 8, 9]]
    assert blocks.get(1)[1].tolist() == [False, True, False]


@pytest.mark.parametrize("line_by_line", [False, True], ids=["whole", "line-by-line"])
def test_the_texts_of_each_part_are_tokenised_in_their_order_as_the_tokenizer_tokenises_each_alone(
        tiny_model, line_by_line, monkeypatch):
    """2,500 texts, three calls of 1,000 at most, each text in the part ``part_of`` names (-1: none): a part's ids are
    its texts' ids one after the other, a word start where the tokenizer's word id changes, at a special token and
    at a text's first token; the texts are read as they come, never as a list."""
    from transformers import AutoTokenizer

    from common.train.masking import tokenize
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    texts = (corpus_text(3, 50) * 50)[:2500]
    part_of = np.random.default_rng(0).integers(-1, 2, len(texts))
    monkeypatch.setattr(type(tokenizer), "__call__", counted(type(tokenizer).__call__, calls := []))
    parts = tokenize(iter(texts), part_of, tokenizer, 12, line_by_line)
    assert calls == [1000, 1000, 500]
    for k, part in enumerate(parts):
        mine = [i for i in range(len(texts)) if part_of[i] == k]
        assert len(part) == len(mine) and part.ids.dtype == np.int32 and part.word_start.dtype == bool
        assert (np.diff(part.offsets).max() > 12) != line_by_line  # whole texts, or each cut at 12
        for example, i in enumerate(mine):
            one = tokenizer(texts[i], truncation=line_by_line, max_length=12 if line_by_line else None)
            words = one.word_ids()
            ids, word_start = part.get(example)
            assert ids.tolist() == one["input_ids"]
            assert word_start.tolist() == [w is None or j == 0 or w != words[j - 1] for j, w in enumerate(words)]
    assert [len(p) for p in parts] == [int((part_of == k).sum()) for k in range(2)]


def counted(call, calls):
    def count(self, texts, *args, **kwargs):
        calls.append(len(texts))
        return call(self, texts, *args, **kwargs)
    return count


# a block cut from concatenated texts, starting inside a word (its first token is no word start)
BLOCK = np.array([2023, 2003, 1037, 3231, 1997, 2616, 4372, 2000], dtype=np.int32)
STARTS = np.array([0, 1, 1, 1, 0, 1, 0, 1], bool)
NONE = np.zeros(8, bool)


def first_written(ids, special, word_start, rng, probability, mask_replace, random_replace, whole_word, mask_id,
                  vocab_size):
    """The masking as it was first written: a draw to choose, a draw to replace and a random id for every token
    (whole words: a draw to choose each word), three calls to the generator."""
    n = len(ids)
    if whole_word:
        word = np.cumsum(word_start | special) - 1
        chosen = (rng.random(int(word[-1]) + 1 if n else 0) < probability)[word] & ~special
        mask_replace, random_replace = 1.0, 0.0
    else:
        chosen = (rng.random(n) < probability) & ~special
    draw = rng.random(n)
    replaced = rng.integers(vocab_size, size=n)
    out = ids.astype(np.int64)
    out[chosen & (draw < mask_replace)] = mask_id
    randomised = chosen & (draw >= mask_replace) & (draw < mask_replace + random_replace)
    out[randomised] = replaced[randomised]
    return out, np.where(chosen, ids, IGNORE).astype(np.int64)


def test_a_block_is_masked_as_pinned_for_its_seed_epoch_and_example():
    found = [mask_tokens(BLOCK, NONE, STARTS, np.random.default_rng([7, 2, e]), 0.5, 0.5, 0.4, False, 103, 30522)
             for e in range(3)]
    assert [(o.tolist(), l.tolist()) for o, l in found] == [
        ([103, 30311, 1037, 3231, 28126, 2616, 103, 26478], [2023, 2003, IGNORE, IGNORE, 1997, 2616, 4372, 2000]),
        ([2023, 103, 10073, 3231, 103, 2616, 4372, 103], [IGNORE, 2003, 1037, IGNORE, 1997, IGNORE, 4372, 2000]),
        ([2023, 103, 1037, 3231, 1997, 2616, 4372, 2000], [IGNORE, 2003] + [IGNORE] * 6)]


def test_whole_words_are_masked_as_pinned_and_a_leading_word_piece_goes_with_the_last_word():
    found = [mask_tokens(BLOCK, NONE, STARTS, np.random.default_rng([7, 3, e]), 0.5, 0.8, 0.1, True, 103, 30522)
             for e in range(3)]
    assert [o.tolist() for o, _ in found] == [[103, 2003, 1037, 103, 103, 2616, 4372, 103],
                                              [2023, 2003, 103, 3231, 1997, 2616, 4372, 2000],
                                              [103, 2003, 103, 103, 103, 2616, 4372, 103]]


def random_examples(rng, count, whole_word):
    """Examples of 0 to 40 tokens, half of them with [CLS] and [SEP] (ids 101, 102) as a text's, each with a word
    start somewhere (the first written masking fails without one)."""
    out = []
    for _ in range(count):
        n = int(rng.integers(0, 41))
        ids = rng.integers(1000, 30000, n).astype(np.int32)
        starts = rng.random(n) < (0.6 if whole_word else 0.9)
        if n:
            starts[rng.integers(n)] = True
        if n and rng.random() < 0.5:
            ids[0], ids[-1] = 101, 102
        out.append((ids, np.isin(ids, [101, 102]), starts))
    return out


@pytest.mark.parametrize("whole_word", [False, True])
def test_one_example_and_a_batch_draw_what_the_first_written_masking_drew(whole_word):
    settings = (0.3, 0.6, 0.3, whole_word, 103, 30522)
    for seed in range(20):
        examples = random_examples(np.random.default_rng(seed), 6, whole_word)
        expected = [first_written(*e, np.random.default_rng([seed, 0, i]), *settings)
                    for i, e in enumerate(examples)]
        alone = [mask_tokens(*e, np.random.default_rng([seed, 0, i]), *settings) for i, e in enumerate(examples)]
        together = mask_batch(*(np.concatenate([e[k] for e in examples]) for k in range(3)),
                              [len(e[0]) for e in examples],
                              [np.random.default_rng([seed, 0, i]) for i in range(len(examples))], *settings)
        for k in range(2):
            want = np.concatenate([x[k] for x in expected])
            assert np.concatenate([x[k] for x in alone]).tolist() == want.tolist()
            assert together[k].tolist() == want.tolist()


def test_an_example_without_a_word_start_is_one_word_masked_whole_or_not_at_all():
    within = np.zeros(8, bool)  # eight pieces of one long word, its start in an earlier block
    masked = [mask_tokens(BLOCK, NONE, within, np.random.default_rng([1, 0, e]), 0.5, whole_word=True)[1]
              for e in range(8)]
    assert sorted({tuple(labels != IGNORE) for labels in masked}) == [(False,) * 8, (True,) * 8]
    batch = mask_batch(np.concatenate([BLOCK, BLOCK]), np.zeros(16, bool), np.concatenate([within, STARTS]), [8, 8],
                       [np.random.default_rng([1, 0, e]) for e in (2, 5)], 0.5, whole_word=True)
    alone = [mask_tokens(BLOCK, NONE, s, np.random.default_rng([1, 0, e]), 0.5, whole_word=True)
             for s, e in ((within, 2), (STARTS, 5))]
    assert batch[0].tolist() == np.concatenate([a[0] for a in alone]).tolist()
