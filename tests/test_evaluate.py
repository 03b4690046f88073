"""05_evaluate.py: what it refuses, with one line and nothing written."""

import os
import shutil

import pytest

from conftest import script_error


@pytest.mark.parametrize("case", ["unknown-id", "bad-qrels-line", "task", "no-dir", "model-syntax"])
def test_bad_evaluation_input_is_a_one_line_error(tiny_model, tiny_data, tmp_path, case):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    args = ["--data", data, "--model", f"base={tiny_model}", "--out", tmp_path / "eval"]
    qrels = data / "crossref.qrels"
    if case == "unknown-id":
        qrels.write_text(qrels.read_text() + "d0 0 nowhere 1\n")
        expected = f"error: {qrels}: id 'nowhere' is not in docs.jsonl"
    elif case == "bad-qrels-line":
        qrels.write_text(qrels.read_text() + "d0 0 d1\n")
        expected = f"error: {qrels}:{len(qrels.read_text().splitlines())}: expected 'qid 0 docid rel'"
    elif case == "task":
        args += ["--task", "keysent"]
        expected = f"error: {data}: has no data for task(s) keysent"
    elif case == "no-dir":
        args[1] = tmp_path / "nowhere"
        expected = f"error: {tmp_path / 'nowhere'}: no such data directory"
    else:
        args[3] = str(tiny_model)
        expected = f"error: --model {str(tiny_model)!r}: expected NAME=MODEL"
    assert script_error("05_evaluate.py", *args) == expected
    assert not (tmp_path / "eval").exists() or os.listdir(tmp_path / "eval") == []
