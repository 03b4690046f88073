"""Reading inputs (common/io.py): the names that may become file names; a file changed since the run that wrote it,
text that is not UTF-8, a folder where a file belongs and a line longer than the bound are one line naming the file
and line."""

import json
import os

import pytest

from common import io
from common.outdir import folders
from common.io import InputError, safe_name
from conftest import SHORT_TRAIN, script_error


@pytest.mark.parametrize("name", ["top", "second", "fi-2", "Äiti.1", "a_b", "x" * 100])
def test_safe_names_are_kept(name):
    assert safe_name(name, "level") == name


@pytest.mark.parametrize("name", ["", ".hidden", "..", "a/b", "x/../../../PWNED", "a\\b", "a b", "/abs", "x" * 101,
                                  None, 3])
def test_names_that_could_leave_the_folder_or_hide_are_refused(name):
    with pytest.raises(InputError) as e:
        safe_name(name, "f.jsonl:3: label level")
    assert str(e.value) == (f"f.jsonl:3: label level {name!r} cannot be a file name: use at most 100 letters, "
                            "digits, '_', '-' and '.' (not first)")


def test_a_file_changed_after_its_run_is_refused_by_every_reader(tmp_path, tiny_data, tiny_model, capsys):
    import shutil
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    with open(data / "triplets.train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"query": "d1", "pos": "d2", "neg": "d3", "hard": False}) + "\n")
    assert script_error("03_train.py", "--data", data, "--model", tiny_model, "--out", tmp_path / "run",
                        *SHORT_TRAIN) == (
        f"error: {data / 'triplets.train.jsonl'}: differs from what 02_build_graph.py wrote (SHA-256 in "
        f"{data / 'manifest.json'}); it changed afterwards, or its run did not finish: run it again")


def test_a_file_rewritten_with_its_old_size_and_date_is_refused_in_the_same_process(tmp_path):
    out = tmp_path / "out"
    with folders.Outputs(out, "02_build_graph.py") as outputs:
        with outputs.open("docs.jsonl") as f:
            f.write('{"id": "a", "title": "A", "text": "one"}\n')
        outputs.write_manifest({"script": "02_build_graph.py"})
    assert [obj["id"] for _, obj in io.read_jsonl(out / "docs.jsonl")] == ["a"]  # checked, remembered
    stat = (out / "docs.jsonl").stat()
    (out / "docs.jsonl").write_text('{"id": "b", "title": "B", "text": "two"}\n')
    os.utime(out / "docs.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(InputError, match="differs from what 02_build_graph.py wrote"):
        list(io.read_jsonl(out / "docs.jsonl"))


def test_every_text_input_names_the_line_that_is_not_utf8(tmp_path):
    path = tmp_path / "map.tsv"
    path.write_bytes("ok\tTiede\t\n".encode() * 3 + b"bad \xc3\x28\tTiede\t\n")
    from common.extract.topic_labels import read_topic_map
    with pytest.raises(InputError) as e:
        read_topic_map(path)
    assert str(e.value) == f"{path}:4: not UTF-8 text (bytes b'\\xc3(\\tT'); give the file in UTF-8"
    qrels = tmp_path / "x.qrels"
    qrels.write_bytes(b"q 0 d 1\r\nq 0 \xe9 1\r\n")
    with pytest.raises(InputError) as e:
        io.read_trec_qrels(qrels)
    assert str(e.value) == f"{qrels}:2: not UTF-8 text (bytes b'\\xe9 1\\r'); give the file in UTF-8"


@pytest.mark.parametrize("content, expected", [
    (b"gene\n\xff\xfe expression\n", "{path}:2: not UTF-8 text (bytes b'\\xff\\xfe e'); give the file in UTF-8"),
    (None, "{path}: is a directory, not a file"),
])
def test_queries_that_are_not_utf8_text_or_a_folder_are_one_line(tmp_path, tiny_model, paper_data, content,
                                                                 expected):
    path = tmp_path / "queries.txt"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, "--queries", path) == \
        "error: " + expected.format(path=path)


def test_a_directory_given_as_an_input_file_is_a_one_line_error(tmp_path):
    (tmp_path / "articles").mkdir()
    assert script_error("02_build_graph.py", "--articles", tmp_path / "articles", "--out", tmp_path / "data") == \
        f"error: {tmp_path / 'articles'}: is a directory, not a file"


def test_a_line_longer_than_the_bound_names_file_and_line_without_being_read_whole(tmp_path, monkeypatch):
    from common import io
    monkeypatch.setattr(io, "MAX_LINE_BYTES", io.MAX_LINE_BYTES)  # the flag sets it for the process
    snapshot = tmp_path / "snapshot.json"
    good = json.dumps({"id": "1", "title": "t", "abstract": "a b", "categories": "cs.CL"})
    snapshot.write_text(good + "\n" + good.replace("a b", "a" * (2 << 20)) + "\n")
    assert script_error("01_extract.py", "arxiv", "--input", snapshot, "--out", tmp_path / "out", "--max-line-mb",
                        "1") == f"error: {snapshot}:2: line longer than 1 MB (--max-line-mb)"
    assert script_error("01_extract.py", "arxiv", "--input", "/dev/zero", "--out", tmp_path / "out",
                        "--max-line-mb", "1") == "error: /dev/zero:1: line longer than 1 MB (--max-line-mb)"
    assert list((tmp_path / "out").iterdir()) == []


def test_a_byte_order_mark_is_read_as_no_text(tmp_path):
    """A headerless qrels file saved with a byte-order mark keeps its first judgement, as every text input does."""
    plain, marked = tmp_path / "plain.qrels", tmp_path / "marked.qrels"
    plain.write_bytes(b"q1 0 d1 1\nq1 0 d2 0\n")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert io.read_trec_qrels(marked) == io.read_trec_qrels(plain) == {"q1": {"d1": 1, "d2": 0}}
    with io.open_input(marked) as f:
        assert f.read() == plain.read_text()


@pytest.mark.parametrize("doc_id", ["a b", "a\x1fb", ""])
def test_an_id_the_run_files_cannot_carry_is_refused_where_docs_and_queries_are_read(tmp_path, doc_id):
    """05 wrote a run line of seven fields for a docs.jsonl id holding a space; every id obeys io.plain_id."""
    from common.data.docs_jsonl import Documents
    from common.data.retrieval import read_queries
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d0", "title": "", "text": "x"}) + "\n"
                                         + json.dumps({"id": doc_id, "title": "", "text": "y"}) + "\n")
    with pytest.raises(InputError) as e:
        Documents(str(tmp_path))
    assert str(e.value) == (f"{tmp_path / 'docs.jsonl'}:2: id {io.shown(doc_id)} is empty or holds whitespace or a "
                            "control character (docs/contract.md)")
    (tmp_path / "queries.test.jsonl").write_text(json.dumps({"qid": doc_id, "text": "a query"}) + "\n")
    with pytest.raises(InputError) as e:
        read_queries(str(tmp_path / "queries.test.jsonl"))
    assert str(e.value) == (f"{tmp_path / 'queries.test.jsonl'}:1: qid {io.shown(doc_id)} is empty or holds whitespace "
                            "or a control character")
