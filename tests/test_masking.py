"""common/train/masking.py's masking draws: pinned for one block, the same for one example and for a batch, and the
same as the three separate draws it was first written with, so that a run resumed across the change (or a batch
masked at once) sees the masks it saw before."""

import numpy as np
import pytest

from common.train.masking import IGNORE, mask_batch, mask_tokens

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
