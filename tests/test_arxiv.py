"""01_extract.py arxiv (common/extract/arxiv.py): the snapshot's whitespace collapsed, LaTeX kept, withdrawn, empty and
duplicate abstracts dropped and counted; a bad record or a truncated gzip is one line naming the file and line, with
nothing written."""

import gzip
import json
import os

import pytest

from conftest import read_jsonl, script_main, write_lines

from common.io import InputError


def record(i, title=None, abstract=None, categories="cs.CL stat.ML", **extra):
    return {"id": f"0704.{i:04d}", "title": title or f"Title  {i}\n  of paper", "categories": categories,
            "abstract": f"  Abstract {i} with $x^2$\n  wrapped text.\n" if abstract is None else abstract,
            "authors": "A. Author and\n  B. Author", "update_date": "2008-11-26", **extra}


def test_arxiv_extraction_normalises_whitespace_keeps_latex_and_drops_withdrawn_empty_and_duplicate_abstracts(
        tmp_path):
    records = [record(1), record(2, abstract="  This paper has been withdrawn by the authors.\n"),
               record(3, abstract="   \n"), record(4, abstract="Abstract 1 with $x^2$ wrapped\n text."),
               record(5, categories="hep-th"), record(6, categories="math.CO cs.CG", abstract="Other.")]
    path = write_lines(tmp_path / "snapshot.json.gz", [json.dumps(r) for r in records], gz=True)
    script_main("01_extract.py")(["arxiv", "--input", str(path), "--out", str(tmp_path / "out"),
                                  "--categories", "cs.,stat.ML"])
    articles = read_jsonl(tmp_path / "out" / "articles.jsonl")
    assert articles[0] == {"id": "0704.0001", "title": "Title 1 of paper",
                           "text": "Abstract 1 with $x^2$ wrapped text.", "links": [],
                           "categories": ["cs.CL", "stat.ML"], "labels": {"top": "cs", "second": "cs.CL"},
                           "authors": "A. Author and B. Author", "update_date": "2008-11-26"}
    assert [a["id"] for a in articles] == ["0704.0001", "0704.0006"]
    assert articles[1]["labels"] == {"top": "math", "second": "math.CO"}
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert counts == {"records": 6, "articles": 2, "withdrawn": 1, "empty_abstract": 1, "duplicate_abstract": 1,
                      "other_categories": 1}


@pytest.mark.parametrize("case, expected", [
    ("missing", "snapshot.json:2: missing field 'abstract'"),
    ("json", "snapshot.json:2: invalid JSON"),
    ("truncated", "snapshot.json.gz:"),
])
def test_arxiv_bad_input_names_file_and_line_and_writes_nothing(tmp_path, case, expected):
    good = json.dumps(record(1))
    if case == "missing":
        path = write_lines(tmp_path / "snapshot.json", [good, json.dumps({"id": "x", "title": "t", "categories": "a"})])
    elif case == "json":
        path = write_lines(tmp_path / "snapshot.json", [good, '{"id": "0704.0002", "title": '])
    else:
        data = gzip.compress("".join(json.dumps(record(i)) + "\n" for i in range(1, 200)).encode())
        path = tmp_path / "snapshot.json.gz"
        path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError) as e:
        script_main("01_extract.py")(["arxiv", "--input", str(path), "--out", str(tmp_path / "out")])
    assert str(e.value).startswith(str(tmp_path / expected)) if case != "truncated" else \
        str(e.value).startswith(str(path) + ":") and "truncated" in str(e.value)
    assert os.listdir(tmp_path / "out") == []
