"""01_extract.py hf (common/extract/hf_source.py): one split of a dataset as Hugging Face datasets reads it — a
save_to_disk folder, parquet, JSON lines and CSV written here, and a hub name (the hub replaced by a local dataset)
— into articles.jsonl or pairs.jsonl, with one-line errors naming the row."""

import gzip
import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from common.io import InputError
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
    read = {"save_to_disk": ["state.json", "dataset_info.json", "data-00000-of-00001.arrow"],
            "save_to_disk-dict": ["dataset_dict.json", "test/state.json", "test/dataset_info.json",
                                  "test/data-00000-of-00001.arrow"],
            "repository": ["data/test-00000-of-00001.parquet"]}  # the files of the split read, and only those
    files = [path / name for name in read[form]] if form in read else [path]
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
        f"error: {tmp_path / 'empty'} [train]: datasets cannot read it (EmptyDatasetError: The directory at "
        f"{tmp_path / 'empty'} doesn't contain any data files)")


def test_paths_a_dataset_names_outside_itself_are_refused_naming_the_path(tmp_path):
    """A save_to_disk folder's state.json and dataset_dict.json, a repository's README configs and a link among its
    data files may name files outside the folder; none is read."""
    import datasets
    outside = tmp_path / "outside.csv"
    outside.write_text("text,label\nsecret,1\n")
    labelled().save_to_disk(str(tmp_path / "other"))
    saved, _ = write_dataset(tmp_path, "save_to_disk")
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"] = [{"filename": "../other/data-00000-of-00001.arrow"}]
    (saved / "state.json").write_text(json.dumps(state))
    listed = tmp_path / "listed"
    datasets.DatasetDict(train=labelled()).save_to_disk(str(listed))
    (listed / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "../other"]}))
    readme = tmp_path / "readme"
    (readme / "data").mkdir(parents=True)
    (readme / "data" / "train.csv").write_text("text,label\nin,0\n")
    (readme / "README.md").write_text('---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n'
                                      '    path: "../outside.csv"\n---\n')
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "train.csv").symlink_to(outside)
    for path, split, named in ((saved, "test", saved / "../other/data-00000-of-00001.arrow"),
                               (listed, "../other", listed / "../other"),
                               (readme, "train", tmp_path / "outside.csv"),
                               (linked, "train", linked / "train.csv")):
        error = script_error("01_extract.py", "hf", "--dataset", path, "--split", split, "--out", tmp_path / "out")
        assert error.startswith(f"error: {os.path.normpath(named)}: outside {path}, "
                                "which names it"), error
        assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("name, data, expected", [
    ("ragged.csv", b"text,label\na,1,extra\nb,0\n", ":2: 3 fields, where its header has 2"),
    ("short.csv", b"text,label\na,1\nb\n", ":3: 1 fields, where its header has 2"),
    ("twice.csv", b"text,text\na,b\n", ":1: its header: column 'text' named twice"),
    ("latin.csv", b"text\ncaf\xe9\n", ":2: not UTF-8 text"),
    ("cut.csv.gz", gzip.compress(b"text\n" + b"".join(b"row %d\n" % k for k in range(1000)))[:-100],
     "truncated or corrupt compressed file"),
    ("cut.jsonl", b'{"text": "a"}\n{"text": "b\n', "[train]: datasets cannot read it (ArrowInvalid: JSON parse"),
    ("page.parquet", None, "[train]: datasets cannot read it ("),
])
def test_a_file_the_libraries_cannot_read_is_one_line_naming_it_and_nothing_is_written(tmp_path, name, data,
                                                                                       expected):
    path = tmp_path / name
    if data is None:  # a parquet file whose column pages are overwritten: its footer still reads
        labelled().to_parquet(str(path))
        raw = bytearray(path.read_bytes())
        raw[4:200] = b"\xff" * 196
        path.write_bytes(bytes(raw))
    else:
        path.write_bytes(data)
    error = script_error("01_extract.py", "hf", "--dataset", path, "--text-field", "text" if data else "body",
                         "--out", tmp_path / "out")
    assert error.startswith(f"error: {path}") and expected in error, error
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_csv_columns_are_checked_against_every_row_and_named_once(tmp_path):
    (tmp_path / "pairs.csv").write_text("1,one,two\n0,three\n")
    flags = ["--text-field", "a", "b", "--label-field", "label", "--out", tmp_path / "out"]
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "pairs.csv", "--csv-columns", "label", "a",
                        "b", *flags) == f"error: {tmp_path / 'pairs.csv'}:2: 2 fields, where --csv-columns names 3"
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "pairs.csv", "--csv-columns", "a", "b",
                        *flags) == f"error: {tmp_path / 'pairs.csv'}:1: 3 fields, where --csv-columns names 2"
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "pairs.csv", "--csv-columns", "label", "a",
                        "a", *flags) == "error: --csv-columns: column 'a' named twice"


def test_a_folder_holding_a_dataset_script_is_refused_and_the_script_never_runs(tmp_path):
    (tmp_path / "scripted").mkdir()
    (tmp_path / "scripted" / "scripted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    (tmp_path / "scripted" / "train.csv").write_text("text\na\n")
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "scripted", "--out", tmp_path / "out") == (
        f"error: {tmp_path / 'scripted' / 'scripted.py'}: a dataset script, which datasets no longer runs and this "
        "project never does; give the dataset's data files (parquet, JSON lines, CSV)")
    assert not (tmp_path / "ran").exists()


def test_damaged_save_to_disk_metadata_is_one_line_naming_the_file(tmp_path):
    saved, _ = write_dataset(tmp_path, "save_to_disk")
    (saved / "state.json").write_text("{not json")
    error = script_error("01_extract.py", "hf", "--dataset", saved, "--split", "test", "--out", tmp_path / "out")
    assert error.startswith(f"error: {saved / 'state.json'}: not JSON text"), error
    saved, _ = write_dataset(tmp_path / "b", "save_to_disk")
    arrow = saved / "data-00000-of-00001.arrow"
    arrow.write_bytes(arrow.read_bytes()[:100])
    error = script_error("01_extract.py", "hf", "--dataset", saved, "--split", "test", "--out", tmp_path / "out")
    assert error.startswith(f"error: {saved} [test]: datasets cannot read it ("), error


def test_empty_class_names_and_split_names_with_whitespace_are_refused(tmp_path):
    import datasets
    labelled(names=("neg", " ")).to_parquet(str(tmp_path / "in.parquet"))
    features = labelled(names=("neg", " ")).features
    datasets.Dataset.from_dict(ROWS, features=features).save_to_disk(str(tmp_path / "saved"))
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "saved", *FIELDS, "--out",
                        tmp_path / "out") == (
        f"error: {tmp_path / 'saved'} [train] row 1: field 'sentiment' (--label-field) is empty (its class \" \")")
    # datasets refuses such a split's name in a file's data_files; a save_to_disk folder of one split takes any
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "saved", "--split", "my split", "--text-field",
                        "body", "--out", tmp_path / "out").startswith(
        "error: --split 'my split': rows without an id are named SPLIT-ROW")


def test_one_pair_text_under_two_titles_is_refused_where_02_would_refuse_it(tmp_path):
    (tmp_path / "in.csv").write_text("label,t0,t1,a,b\n1,First,Other,same text,x\n0,Second,Other,same text,y\n")
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "in.csv", "--text-field", "a", "b",
                        "--title-field", "t0", "t1", "--label-field", "label", "--out", tmp_path / "out") == (
        f"error: {tmp_path / 'in.csv'} [train] row 2: id "
        f"\"{hashlib.sha256(b'same text').hexdigest()[:16]}\" names another title or text than in an earlier row "
        "(a document is one title and one text)")


def test_a_row_past_memory_is_one_line_naming_the_dataset_and_no_flag_it_lacks(tmp_path, monkeypatch):
    """A compressed file that expands past memory ends in a MemoryError, in the library or in 01's own hands; cli's
    advice of smaller --batch-size and --max-length names flags 01 hf does not have."""
    from common.extract import hf_source

    def rows():
        yield {"text": "a"}
        raise MemoryError
    with pytest.raises(InputError) as e:
        list(hf_source.guarded(rows(), "big.jsonl.gz [train]"))
    assert str(e.value) == ("big.jsonl.gz [train] after row 1: out of memory reading its rows (a row, or a compressed "
                            "file, that expands past this machine's memory)")
    (tmp_path / "in.jsonl").write_text('{"text": "a text"}\n')
    monkeypatch.setattr(hf_source, "one_line", lambda text: (_ for _ in ()).throw(MemoryError()))
    assert script_error("01_extract.py", "hf", "--dataset", tmp_path / "in.jsonl", "--out", tmp_path / "out") == (
        f"error: {tmp_path / 'in.jsonl'} [train]: out of memory reading its rows (a row, or a compressed file, that "
        "expands past this machine's memory)")
