"""The documents and token stores every training process of a node maps (common/data/shared_docs.py): what they
read is what ``Documents`` and ``TokenStore`` read, made once and read again from the cache, made again where it
cannot be read, and docs.jsonl's defects refused in the same one line; the arrays they are kept as likewise."""

import os

import numpy as np
import pytest

from common.data.docs_jsonl import Documents, read_triplets
from common.data.shared_docs import SharedDocuments, shared_arrays, shared_store, store_key
from common.io import InputError
from common.models.tokens import TokenStore


def test_shared_documents_read_what_documents_read_by_row_and_by_id(tiny_data, tmp_path):
    plain, shared = Documents(tiny_data), SharedDocuments(tiny_data, tmp_path / "cache")
    assert len(shared) == len(plain.ids) > 0
    assert list(shared.ids) == plain.ids and list(shared.titles) == plain.titles and list(shared.texts) == plain.texts
    assert [shared.texts[i] for i in (0, -1, 5)] == [plain.texts[i] for i in (0, -1, 5)]
    assert list(shared.inputs("[SEP]")) == plain.inputs("[SEP]")
    assert list(shared.inputs("[SEP]", [4, 1])) == plain.inputs("[SEP]", [4, 1])
    ids = [plain.ids[3], "no such id", plain.ids[0], plain.ids[3]]
    assert shared.rows(ids).tolist() == plain.rows(ids).tolist() == [3, -1, 0, 3]
    path = os.path.join(tiny_data, "triplets.train.jsonl")
    assert np.array_equal(read_triplets(path, shared), read_triplets(path, plain))


def test_the_documents_file_is_made_once_read_again_and_made_again_where_it_cannot_be_read(tiny_data, tmp_path):
    cache, notes = tmp_path / "cache", []
    SharedDocuments(tiny_data, cache)
    [made] = os.listdir(cache)
    assert made.startswith("docs-") and made.endswith(".arrow")
    stat = os.stat(cache / made)
    SharedDocuments(tiny_data, cache, say=notes.append)
    assert os.stat(cache / made).st_ino == stat.st_ino and notes == []
    (cache / made).write_bytes((cache / made).read_bytes()[:100])  # damaged
    again = SharedDocuments(tiny_data, cache, say=notes.append)
    assert notes == [f"note: {cache / made} cannot be read; made again from {tiny_data / 'docs.jsonl'}"]
    assert list(again.ids) == Documents(tiny_data).ids and os.listdir(cache) == [made]


@pytest.mark.parametrize("line, error", [
    ('{"id": "d0", "title": "again", "text": "x"}', "2: duplicate id 'd0'"),
    ('{"id": "d9", "title": 5, "text": "x"}', "2: field 'title' must be a string"),
])
def test_a_docs_file_documents_refuses_is_refused_in_the_same_line_with_nothing_kept(line, error, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "docs.jsonl").write_text('{"id": "d0", "title": "T", "text": "x"}\n' + line + "\n")
    with pytest.raises(InputError) as plain:
        Documents(data)
    with pytest.raises(InputError) as shared:
        SharedDocuments(data, tmp_path / "cache")
    assert str(shared.value) == str(plain.value) == f"{data / 'docs.jsonl'}:{error}"
    assert os.listdir(tmp_path / "cache") == []


def test_a_shared_token_store_holds_the_tokens_of_its_build_made_once_and_mapped_read_only(tiny_data, tiny_model,
                                                                                          tmp_path):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    docs = SharedDocuments(tiny_data, tmp_path)
    which = [7, 2, 3]
    built = []

    def build():
        built.append(True)
        return TokenStore(tokenizer, docs.inputs("[SEP]", which), 16)
    key = store_key(docs, tokenizer, 16, "[SEP]", np.array(which))
    first, second = shared_store(tmp_path, key, build), shared_store(tmp_path, key, build)
    expected = TokenStore(tokenizer, Documents(tiny_data).inputs("[SEP]", which), 16)
    for store in (first, second):
        assert np.array_equal(store.ids, expected.ids) and np.array_equal(store.offsets, expected.offsets)
        assert store.pad_id == expected.pad_id and not store.ids.flags.writeable
        assert [a.tolist() for a in store.pad([0, 2])] == [a.tolist() for a in expected.pad([0, 2])]
    assert built == [True]
    assert key != store_key(docs, tokenizer, 16, "[SEP]", np.array([7, 2]))


@pytest.mark.parametrize("damage", ["empty", "truncated", "missing", "refused"])
def test_shared_arrays_are_made_once_and_made_again_with_a_note_where_a_file_cannot_be_read(damage, tmp_path):
    """Arrays made by the first call and mapped read-only by every call after it (an empty one too); one of their
    files emptied, cut, removed, or holding what the reader refuses: made again, with a note."""
    built, said = [], []

    def build():
        built.append(True)
        return {"a": np.arange(5, dtype=np.int32), "b": np.zeros(0, dtype=bool)}

    def check(arrays):
        return arrays if sorted(arrays) == ["a", "b"] and arrays["a"].sum() == 10 else None
    first, second = (shared_arrays(tmp_path, "x-key", build, check, said.append) for _ in range(2))
    assert built == [True] and said == []
    for arrays in (first, second):
        assert arrays["a"].tolist() == [0, 1, 2, 3, 4] and arrays["a"].dtype == np.int32 and arrays["b"].shape == (0,)
        assert not arrays["a"].flags.writeable and isinstance(arrays["a"].base, np.memmap)
    damaged = tmp_path / "x-key" / "a.npy"
    if damage == "missing":
        damaged.unlink()
    elif damage == "refused":
        np.save(damaged, np.arange(4, dtype=np.int32))
    else:
        damaged.write_bytes(damaged.read_bytes()[:{"empty": 0, "truncated": 130}[damage]])
    again = shared_arrays(tmp_path, "x-key", build, check, said.append)
    assert built == [True, True] and said == [f"note: {tmp_path / 'x-key'} cannot be read; made again"]
    assert again["a"].tolist() == [0, 1, 2, 3, 4] and sorted(os.listdir(tmp_path / "x-key")) == ["a.npy", "b.npy"]


def test_a_file_at_the_name_of_shared_arrays_is_one_line_and_kept(tmp_path):
    (tmp_path / "x-key").write_text("mine")
    with pytest.raises(InputError) as e:
        shared_arrays(tmp_path, "x-key", dict, bool)
    assert str(e.value) == f"{tmp_path / 'x-key'}: not a folder of the cache (a file or a link); remove it"
    assert (tmp_path / "x-key").read_text() == "mine"
