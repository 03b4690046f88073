"""01_extract.py hf (common/extract/hf_source.py): one split of a dataset as Hugging Face datasets reads it — a
save_to_disk folder, parquet, JSON lines and CSV written here, and a hub name (the hub replaced by a local dataset)
— into articles.jsonl or pairs.jsonl, with one-line errors naming the row."""

import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from conftest import read_jsonl, run_main, script_error

ROWS = {"doc_id": ["r1", "r2", "r3"], "heading": ["First", "", "Third"],
        "body": ["A  film\nthat works.", "Dull,\tslow.", "Fine\x01enough."], "sentiment": [1, 0, 1]}


def labelled(names=("neg", "pos")):
    import datasets
    features = datasets.Features({"doc_id": datasets.Value("string"), "heading": datasets.Value("string"),
                                  "body": datasets.Value("string"), "sentiment": datasets.ClassLabel(names=names)})
    return datasets.Dataset.from_dict(ROWS, features=features)


def write_dataset(tmp_path, form, dataset=None):
    """``dataset`` (``labelled()``) in one of the forms datasets reads; returns the path and the split to ask for."""
    import datasets
    dataset = dataset or labelled()
    path = tmp_path / f"in.{form}"
    if form == "save_to_disk":
        dataset.save_to_disk(str(path))
    elif form == "save_to_disk-dict":
        datasets.DatasetDict(test=dataset, train=dataset.select([0])).save_to_disk(str(path))
        return path, "test"
    elif form == "repository":  # a hub dataset's repository, cloned: its splits named by its files
        (path / "data").mkdir(parents=True)
        dataset.to_parquet(str(path / "data" / "test-00000-of-00001.parquet"))
        dataset.select([0]).to_parquet(str(path / "data" / "train-00000-of-00001.parquet"))
        (path / ".git").mkdir()
        (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    elif form == "parquet":
        dataset.to_parquet(str(path))
    elif form == "jsonl":
        dataset.to_json(str(path))
    else:
        dataset.to_csv(str(path), index=False)
    return path, "test"


FIELDS = ["--id-field", "doc_id", "--title-field", "heading", "--text-field", "body", "--label-field", "sentiment"]


@pytest.mark.parametrize("form, names", [("save_to_disk", True), ("save_to_disk-dict", True), ("repository", True),
                                         ("parquet", True), ("jsonl", False), ("csv", False)])
def test_every_form_datasets_reads_gives_the_same_articles_class_labels_by_name_where_the_form_keeps_them(
        tmp_path, form, names):
    path, split = write_dataset(tmp_path, form)
    run_main("01_extract.py", "hf", "--dataset", path, "--split", split, *FIELDS, "--out", tmp_path / "out")
    label = {1: "pos", 0: "neg"} if names else {1: "1", 0: "0"}  # JSON lines and CSV keep the numbers only
    assert read_jsonl(tmp_path / "out" / "articles.jsonl") == [
        {"id": "r1", "title": "First", "text": "A film that works.", "links": [], "categories": [label[1]],
         "labels": {"top": label[1]}},
        {"id": "r2", "title": "", "text": "Dull, slow.", "links": [], "categories": [label[0]],
         "labels": {"top": label[0]}},
        {"id": "r3", "title": "Third", "text": "Fine enough.", "links": [], "categories": [label[1]],
         "labels": {"top": label[1]}}]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {k: manifest["dataset"][k] for k in ("name", "config", "split", "rows")} == {
        "name": path.name, "config": None, "split": split, "rows": 3}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and ".git" not in p.parts)
    assert sorted(manifest["inputs"]) == sorted(map(str, files))


def test_without_an_id_field_documents_are_named_by_split_and_row(tmp_path):
    path, _ = write_dataset(tmp_path, "parquet")
    run_main("01_extract.py", "hf", "--dataset", path, "--split", "test", "--text-field", "body", "--out",
             tmp_path / "out")
    assert [(a["id"], a["title"], "labels" in a) for a in read_jsonl(tmp_path / "out" / "articles.jsonl")] == [
        ("test-1", "", False), ("test-2", "", False), ("test-3", "", False)]


def test_two_text_fields_make_pairs_whose_documents_are_named_by_their_text(tmp_path):
    """Zhou et al. 2020's pair sets: a CSV without a header, label,text_0,text_1 a row; a text in two rows is one
    document."""
    (tmp_path / "pla_train.csv").write_text('1,one text,two text\n0,"two  text","three\x01text"\n')
    run_main("01_extract.py", "hf", "--dataset", tmp_path / "pla_train.csv", "--csv-columns", "label", "text_0",
             "text_1", "--text-field", "text_0", "text_1", "--label-field", "label", "--out", tmp_path / "out")

    def doc(text):
        return {"id": hashlib.sha256(text.encode()).hexdigest()[:16], "title": "", "text": text}
    assert read_jsonl(tmp_path / "out" / "pairs.jsonl") == [
        {"id": "train-1", "docs": [doc("one text"), doc("two text")], "label": "1"},
        {"id": "train-2", "docs": [doc("two text"), doc("three text")], "label": "0"}]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"] == {
        "rows": 2, "pairs": 2, "label_1": 1, "label_0": 1, "documents": 3}


def test_a_hub_dataset_is_read_streaming_at_the_commit_its_revision_names(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub
    asked = {}
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info",
                        lambda self, name, revision=None: asked.update(info=(name, revision)) or
                        SimpleNamespace(sha="c0ffee" * 6 + "abcd"))

    def load_dataset(name, config, split, revision, streaming, cache_dir):
        asked.update(load=(name, config, split, revision, streaming))
        assert cache_dir.startswith(str(tmp_path / "out"))  # the library's cache stays inside --out
        return labelled().to_iterable_dataset()
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    run_main("01_extract.py", "hf", "--dataset", "ccdv/arxiv-classification", "--config", "no_ref", "--split",
             "test", "--text-field", "body", "--label-field", "sentiment", "--out", tmp_path / "out")
    commit = "c0ffee" * 6 + "abcd"
    assert asked == {"info": ("ccdv/arxiv-classification", "main"),
                     "load": ("ccdv/arxiv-classification", "no_ref", "test", commit, True)}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {k: manifest["dataset"][k] for k in ("name", "config", "split", "revision", "rows")} == {
        "name": "ccdv/arxiv-classification", "config": "no_ref", "split": "test", "revision": commit, "rows": 3}
    assert manifest["inputs"] == {}
    assert [a["labels"]["top"] for a in read_jsonl(tmp_path / "out" / "articles.jsonl")] == ["pos", "neg", "pos"]


def changed(column, value, row=1):
    rows = {k: list(v) for k, v in ROWS.items()}
    rows[column][row] = value
    return rows


@pytest.mark.parametrize("rows, flags, expected", [
    (ROWS, ["--text-field", "text"], "no field 'text' (--text-field); its fields are doc_id, heading, body, "
                                     "sentiment"),
    (changed("body", " \n "), [], "row 2: field 'body' (--text-field) is empty"),
    (changed("body", None), [], "row 2: field 'body' (--text-field) is missing"),
    (changed("doc_id", "r1"), [], "row 2: duplicate id \"r1\" (first in row 1)"),
    (changed("doc_id", "r 2"), [], "row 2: id \"r 2\" is empty or holds whitespace or a control character"),
    (changed("sentiment", -1), [], "row 2: field 'sentiment' (--label-field) is -1, none of its 2 classes"),
])
def test_bad_rows_are_one_line_naming_the_row_and_nothing_is_written(tmp_path, rows, flags, expected):
    import datasets
    features = labelled().features
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "in.parquet"))
    args = dict(zip(FIELDS[::2], FIELDS[1::2]))
    args.update(zip(flags[::2], flags[1::2]))
    error = script_error("01_extract.py", "hf", "--dataset", tmp_path / "in.parquet", *sum(args.items(), ()),
                         "--out", tmp_path / "out")
    assert error.startswith(f"error: {tmp_path / 'in.parquet'} [train]") and expected in error, error
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_non_string_text_in_json_lines_names_its_row(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"text": ["a", "list"]}\n')
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "in.jsonl", "--out", tmp_path / "out") == (
        f"error: {tmp_path / 'in.jsonl'} [train] row 1: field 'text' (--text-field) is not a string: [\"a\", \"list\"]")


def test_a_pair_set_needs_as_many_id_and_title_fields_as_text_fields(tmp_path):
    (tmp_path / "in.csv").write_text("label,a,b\n1,x,y\n")
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "in.csv", "--text-field", "a", "b",
                        "--id-field", "a", "--out", tmp_path / "out") == (
        "error: --id-field a: give one name for each --text-field (2)")


def test_csv_columns_name_only_a_csv_files_columns(tmp_path):
    path, _ = write_dataset(tmp_path, "parquet")
    assert script_error("01_extract.py", "hf", "--dataset", path, "--csv-columns", "a", "b", "--out",
                        tmp_path / "out") == (
        f"error: --csv-columns: {path} is not a CSV file; only a CSV file without a header row needs its columns named")


def test_a_folder_datasets_cannot_read_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "empty", "--out", tmp_path / "out") == (
        f"error: {tmp_path / 'empty'}: datasets cannot read it (EmptyDatasetError: The directory at "
        f"{tmp_path / 'empty'} doesn't contain any data files)")
