"""A new WordPiece vocabulary for a model trained from scratch: BERT's tokenizer (Devlin et al. 2019) learnt from the
training texts with Hugging Face ``tokenizers``, as transformers' language-modeling examples do before
``run_mlm_no_trainer.py --model_type bert``.

The learnt tokenizer is cached under a key of the texts and settings, and a resumed run, or every process after the
first, reads it instead of learning it again. That matters beyond speed: ``tokenizers``' WordPiece learner is not
deterministic (huggingface/tokenizers#1794: continuing-subword tokens get ids in hash-map order, and equally frequent
merges are chosen by id), so two learnings from the same texts can differ in a few tied entries. The vocabulary a
run used is saved with its model.
"""

import os

from common.io import InputError
from common.models.token_cache import cache_folder

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece(texts, vocab_size, lowercase=True, min_frequency=2, model_max_length=512, cache_dir=None):
    """A ``BertTokenizerFast`` with a WordPiece vocabulary of at most ``vocab_size`` entries learnt from ``texts``
    (BERT's normaliser and pre-tokeniser: Unicode clean-up, lower-casing and accent stripping with ``lowercase``,
    splitting on whitespace and punctuation; sub-words marked ``##``). ``cache_dir``: where it is kept (None: not
    kept)."""
    from transformers import BertTokenizerFast

    path = None
    if cache_dir is not None:
        from datasets.fingerprint import Hasher
        key = Hasher.hash([list(texts), vocab_size, lowercase, min_frequency, SPECIAL])
        path = os.path.join(cache_folder(cache_dir), f"wordpiece-{key}")
        if os.path.lexists(path):
            return _cached(path, model_max_length)
    from tokenizers import BertWordPieceTokenizer
    learner = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=lowercase or None,
                                     lowercase=lowercase)
    learner.train_from_iterator(iter(texts), vocab_size=vocab_size, min_frequency=min_frequency,
                                special_tokens=list(SPECIAL), show_progress=False)
    tokenizer = BertTokenizerFast(tokenizer_object=learner._tokenizer, do_lower_case=lowercase,
                                  strip_accents=lowercase or None, model_max_length=model_max_length,
                                  unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                                  mask_token="[MASK]")
    if path is not None:
        import shutil

        from common.outdir.folders import private_dir
        private = private_dir(cache_dir)
        try:
            tokenizer.save_pretrained(os.path.join(private, "tokenizer"))
            os.replace(os.path.join(private, "tokenizer"), path)
        except OSError:  # another process cached the same vocabulary first
            pass
        finally:
            shutil.rmtree(private, ignore_errors=True)
    return tokenizer


def _cached(path, model_max_length):
    """The vocabulary an earlier run learnt and kept at ``path``. One that is not there whole is one line, not
    learnt again: a run resumed from checkpoints must keep the vocabulary it trained with, and the learner may
    give another (above)."""
    from transformers import BertTokenizerFast
    if os.path.islink(path) or not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise InputError(f"{path}: not a vocabulary of the masked LM's cache (no tokenizer.json); remove it to learn "
                         "the vocabulary again")
    try:
        return BertTokenizerFast.from_pretrained(path, model_max_length=model_max_length)
    except Exception:  # noqa: BLE001 (tokenizers raises a bare Exception for a file it cannot read)
        raise InputError(f"{path}: a damaged vocabulary in the masked LM's cache; remove it to learn the vocabulary "
                         "again") from None
