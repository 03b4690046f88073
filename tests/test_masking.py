"""The masked-LM objective's inputs (common/train/masking.py): tokens chosen and replaced as Hugging Face's collator
does and never a special token, whole words masked together, blocks cut from the concatenated texts, and the
tokenised texts read back from their cache."""

import numpy as np

from conftest import corpus_text


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
    ids, offsets = np.arange(12), np.array([0, 3, 7, 12])
    part = Part.of_texts(ids, ids % 2 == 0, offsets, np.array([0, 2]))  # texts 0 and 2
    assert part.ids.tolist() == [0, 1, 2, 7, 8, 9, 10, 11] and part.offsets.tolist() == [0, 3, 8]
    blocks = part.blocks(3)
    assert len(blocks) == 2 and [blocks.get(i)[0].tolist() for i in range(2)] == [[0, 1, 2], [7, 8, 9]]
    assert blocks.get(1)[1].tolist() == [False, True, False]


def test_a_second_mlm_run_reads_the_tokenised_texts_from_the_cache_without_tokenising(tiny_model, tmp_path):
    from unittest import mock

    from transformers import AutoTokenizer

    from common.train.masking import tokenize
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    texts = corpus_text(3, 20)
    first = tokenize(texts, tokenizer, 32, False, str(tmp_path / "cache"))
    with mock.patch.object(type(tokenizer), "__call__", side_effect=AssertionError("tokenised again")):
        second = tokenize(texts, tokenizer, 32, False, str(tmp_path / "cache"))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert len(first[2]) == len(texts) + 1 and first[2][-1] == len(first[0]) > 0
