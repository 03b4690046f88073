"""TokenStore (common/models/tokens.py): the ids of each text are the tokenizer's own for the whole text, truncated,
although long texts are cut before they are tokenised: whatever characters a text holds and wherever it stands
among the texts; a tokenizer that does not show where it splits words reads every text whole."""

import sys
import unicodedata

import numpy as np
import pytest

from common.models import tokens
from common.models.tokens import TokenStore

TEXTS = ["alpha beta gamma " * 40, "short one", "", "   leading and trailing spaces   " * 9,
         "zero\u200bwidth \u200b \u200b \u200b words " * 30, "x" * 3000, "tab\tseparated\nlines\r\nhere " * 25,
         "ünïcödé wörds ñ " * 30, "a " * 200 + "end"]


def whole(tokenizer, texts, max_length):
    return tokenizer(texts, truncation="longest_first", max_length=max_length, add_special_tokens=True)["input_ids"]


@pytest.mark.parametrize("max_length", [3, 8, 32, 64])
def test_the_ids_are_the_whole_texts_truncated_ids(tiny_model, max_length):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    store = TokenStore(tokenizer, iter(TEXTS * 3), max_length, batch=7)
    assert [store.get(i).tolist() for i in range(len(store))] == whole(tokenizer, TEXTS * 3, max_length)


def test_long_texts_are_cut_before_they_are_tokenised(tiny_model, monkeypatch):
    """A text of many words reaches the tokenizer cut after ``max_length`` words."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    longest = []
    call = type(tokenizer).__call__

    def counting(self, texts, **kwargs):
        longest.append(max(len(t.split()) for t in texts))
        return call(self, texts, **kwargs)
    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    texts = ["word " * 1000] * 5
    store = TokenStore(tokenizer, texts, 16)
    assert longest == [16] and store.lengths().tolist() == [16] * 5


def test_a_tokenizer_whose_tokens_cross_whitespace_reads_every_text_whole():
    """A byte-pair vocabulary learnt with no pre-tokenizer merges across spaces ("a b" is one token): cut heads
    would differ from the whole texts; no character is a word separator to it, and the store gives the whole
    texts' ids."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.train_from_iterator(["ab cd " * 50, "cd ab " * 50], trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]", pad_token="[UNK]")
    texts = ["ab cd ab cd ab cd ab cd ab cd ab", "cd ab cd ab cd ab cd ab cd"] * 6
    assert whole(tokenizer, [tokens._cutter(" ", 4)(t) for t in texts[:2]], 4) != whole(tokenizer, texts[:2], 4)
    assert tokens.word_separators(tokenizer) == ""
    store = TokenStore(tokenizer, texts, 4)
    assert [store.get(i).tolist() for i in range(len(store))] == whole(tokenizer, texts, 4)


def dropped_characters(tokenizer):
    """Every character BERT's normaliser deletes (control, format and private-use ones; surrogates
    cannot stand in a Python string sent to the tokenizer), found by normalising them all at once between bars."""
    chars = [chr(c) for c in range(sys.maxunicode + 1)
             if chr(c) != "|" and unicodedata.category(chr(c)) != "Cs"]
    pieces = tokenizer.backend_tokenizer.normalizer.normalize_str("|".join(chars)).split("|")
    assert len(pieces) == len(chars)
    return [c for c, piece in zip(chars, pieces) if piece == ""]


WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def test_bert_splits_words_at_its_whitespace_and_not_at_the_control_characters_python_splits_at(tiny_model):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    separators = tokens.word_separators(tokenizer)
    assert [f"{ord(c):x}" for c in sorted(set(WHITESPACE) - set(separators))] == \
        ["b", "c", "1c", "1d", "1e", "1f", "85"]
    assert set(separators) < set(WHITESPACE)


def test_every_whitespace_and_every_dropped_character_gives_the_whole_texts_ids(tiny_model):
    """Each whitespace character and each character the normaliser deletes joins thirty words (once and twice):
    where the tokenizer deletes it they are one word of 200 characters, past WordPiece's 100 ([UNK]), which a cut
    inside would read as word pieces. All the deleted characters (some 137,000: control, format and private-use
    ones) stand in runs between words too. After a few texts of plain words, whose cuts show nothing, every text's
    ids are its whole ids."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    dropped = dropped_characters(tokenizer)
    assert len(dropped) > 130_000 and {"\x1c", "\x1f", "\x0b", "\x85", "\u200b", "\x00"} <= set(dropped)
    words = "science physics chemistry biology history war peace king president state".split()
    joins = WHITESPACE + [c for c in dropped if unicodedata.category(c) in ("Cc", "Cf")]
    texts = [" ".join(words)] * 8
    texts += [(join * times).join(words * 3) + " " + " ".join(words) for join in joins for times in (1, 2)]
    texts += ["gene " + "".join(dropped[i:i + 20_000]) + " cell" * (i // 20_000) + " protein" * 20
              for i in range(0, len(dropped), 20_000)]
    store = TokenStore(tokenizer, texts, 8, batch=512)
    assert [store.get(i).tolist() for i in range(len(store))] == whole(tokenizer, texts, 8)


def test_a_text_has_the_same_ids_and_vector_wherever_it_stands(tiny_model):
    """A document of forty words joined by \\x1f, which BERT deletes: to the tokenizer one word of 160
    characters ([UNK]), cut by Python's ``str.split`` into word pieces. Put first, in the middle and last of many
    texts (each cut), it has the same ids and the same vector (the tiny model's mean pooling)."""
    from transformers import AutoTokenizer
    from common.models.inference import embed
    from common.models.loading import load_encoder
    document = "war\x1f" * 40 + "peace " * 10
    others = [f"history {i} " + "town village " * 9 for i in range(40)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    expected = whole(tokenizer, [document], 16)[0]
    assert expected[1] == tokenizer.unk_token_id
    encoder, tokenizer, _ = load_encoder(tiny_model, pooling="mean", max_length=16)
    vectors = []
    for at in (0, 20, 40):
        texts = others[:at] + [document] + others[at:]
        store = TokenStore(tokenizer, texts, 16, batch=7)
        assert store.get(at).tolist() == expected
        vectors.append(embed(encoder, store, batch_size=8)[at])
    np.testing.assert_allclose(vectors[1], vectors[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(vectors[2], vectors[0], rtol=0, atol=1e-6)


def test_a_tokenizer_that_truncates_from_the_left_reads_every_text_whole(tiny_model):
    """Truncated from the left, a text keeps its last tokens: no head of it holds them, so nothing is cut."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model, truncation_side="left")
    assert tokens.word_separators(tokenizer) == ""
    store = TokenStore(tokenizer, TEXTS, 8)
    assert [store.get(i).tolist() for i in range(len(store))] == whole(tokenizer, TEXTS, 8)
    assert store.get(0).tolist() != whole(AutoTokenizer.from_pretrained(tiny_model), TEXTS[:1], 8)[0]
