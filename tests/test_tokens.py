"""TokenStore (common/models/tokens.py): the ids of each text are the tokenizer's own for the whole text, truncated,
although long texts are cut before they are tokenised; a tokenizer whose tokens cross whitespace is found and then
reads every text whole."""

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
    """After the checked heads, a text of many words reaches the tokenizer cut after ``max_length`` words."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    longest = []
    call = type(tokenizer).__call__

    def counting(self, texts, **kwargs):
        longest.append(max(len(t.split()) for t in texts))
        return call(self, texts, **kwargs)
    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    monkeypatch.setattr(tokens, "CHECKED_CUTS", 0)
    texts = ["word " * 1000] * 5
    store = TokenStore(tokenizer, texts, 16)
    assert longest == [16] and store.lengths().tolist() == [16] * 5


def test_a_tokenizer_whose_tokens_cross_whitespace_reads_every_text_whole():
    """A byte-pair vocabulary learnt with no pre-tokenizer merges across spaces ("a b" is one token): the checked
    heads differ from the whole texts, and the store gives the whole texts' ids."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.train_from_iterator(["ab cd " * 50, "cd ab " * 50], trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]", pad_token="[UNK]")
    texts = ["ab cd ab cd ab cd ab cd ab cd ab", "cd ab cd ab cd ab cd ab cd"] * 6
    assert whole(tokenizer, [tokens._head(t, 4) for t in texts[:2]], 4) != whole(tokenizer, texts[:2], 4)
    store = TokenStore(tokenizer, texts, 4)
    assert [store.get(i).tolist() for i in range(len(store))] == whole(tokenizer, texts, 4)
