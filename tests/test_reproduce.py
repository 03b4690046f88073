"""The reproduction scripts (reproduce/*.py): a missing or damaged input is one line, and exit status 2 from each
script as a user runs it."""

import json
import os

import numpy as np
import pytest

from common import io
from common.io import InputError
from conftest import script_error, write_linked_articles


def _reproduce(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"reproduce_{name}", os.path.join(os.path.dirname(__file__), "..",
                                                                                      "reproduce", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _eval_folder(folder, metrics, embedding, ids=("d0", "d1"), rows=2):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "manifest.json").write_text(json.dumps({"script": "05_evaluate.py", "embedding": embedding}))
    (folder / "base-cls.ids.txt").write_text("".join(f"{i}\n" for i in ids))
    np.save(folder / "base-cls.npy", np.ones((rows, 3), np.float32))
    return folder


@pytest.mark.parametrize("script, args, expected", [
    ("compare", ["wikispecter", "{root}/nowhere.json"], "{root}/nowhere.json: no such file"),
    ("compare", ["wikispecter", "{root}/list.json"], "{root}/list.json: not a JSON object"),
    ("compare", ["wikispecter", "{root}/text.json"], "the metrics of m: crossref map is 'high', not a number"),
    ("manifests", ["{root}/nowhere"], "{root}/nowhere: no such folder"),
    ("manifests", ["{root}/badargv"], "{root}/badargv/manifest.json: argv is not a list of strings or versions not an "
                                      "object; re-run the step that wrote it"),
    ("label_links", ["{root}/articles.jsonl", "{root}"], "{root}/graph.npz: no such file"),
    ("label_links", ["{root}/articles.jsonl", "{root}/badgraph"], "{root}/badgraph/graph.npz: not 02's graph.npz "
                                                                  "(not a zip archive)"),
    ("ablation", ["--data", "{data}", "--base", "{root}/nowhere", "--out", "{root}", "--rows", "default"],
     "{root}/nowhere/base-cls.ids.txt: no such file"),
    ("ablation", ["--data", "{data}", "--base", "{root}/noscores", "--out", "{root}", "--rows", "default"],
     "{root}/noscores/metrics.json: no base-cls"),
    ("ablation", ["--data", "{data}", "--base", "{root}/nopooling", "--out", "{root}", "--rows", "default"],
     "{root}/nopooling/manifest.json: no base-cls → pooling"),
    ("distill_probe", ["--data", "{data}", "--teach", "{root}/nowhere", "--eval", "{root}", "--raw", "{root}"],
     "{root}/sbert.npy: no such file"),
])
def test_a_reproduction_script_answers_a_missing_or_damaged_input_in_one_line(script, args, expected, tmp_path,
                                                                              tiny_data, capsys):
    root = tmp_path
    (root / "list.json").write_text("[]")
    (root / "text.json").write_text(json.dumps({"m": {"crossref": {"map": "high"}}}))
    (root / "badargv").mkdir()
    (root / "badargv" / "manifest.json").write_text(json.dumps({"script": "x", "argv": "python x.py"}))
    (root / "badgraph").mkdir()
    (root / "badgraph" / "graph.npz").write_bytes(b"not a zip")
    write_linked_articles(root / "articles.jsonl")
    ids = [obj["id"] for _, obj in io.read_jsonl(tiny_data / "docs.jsonl")]
    _eval_folder(root / "noscores", {}, {"base-cls": {"pooling": "cls"}}, ids, len(ids))
    _eval_folder(root / "nopooling", {"base-cls": {}}, {"base-cls": {}}, ids, len(ids))
    fill = {"root": str(root), "data": str(tiny_data)}
    with pytest.raises(InputError) as e:
        _reproduce(script)([a.format(**fill) for a in args])
    assert str(e.value).startswith(expected.format(**fill)), str(e.value)


@pytest.mark.parametrize("script", ["ablation", "distill_probe", "compare", "label_links", "manifests"])
def test_each_reproduction_script_exits_2_with_one_line_for_a_missing_input(script, tmp_path):
    args = {"ablation": ["--data", tmp_path, "--base", tmp_path, "--out", tmp_path, "--rows", "x"],
            "distill_probe": ["--data", tmp_path, "--teach", tmp_path, "--eval", tmp_path, "--raw", tmp_path],
            "compare": ["wikispecter", tmp_path / "metrics.json"], "label_links": [tmp_path / "a.jsonl", tmp_path],
            "manifests": [tmp_path / "nowhere"]}[script]
    line = script_error(os.path.join("reproduce", f"{script}.py"), *args, in_subprocess=True)
    assert line.startswith(f"error: {tmp_path}") and "no such" in line
