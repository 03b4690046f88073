"""Write the seed inputs of every fuzz target (``fuzz/seeds/TARGET/``) from the test data: the tests' own inputs
(tests/conftest.py's dump and articles, tests/test_corpora.py's dictionary, reStructuredText, folder and CSV), the
shipped samples (data/), and the files 02–05 write, as the tests build them.

    python fuzz/seeds.py
"""

import bz2
import collections
import gzip
import json
import os
import pickle
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), HERE]

import numpy as np  # noqa: E402

from conftest import ENGLISH_NAMESPACES, linked_articles, make_dump  # noqa: E402
from targets import DOCS, SEP  # noqa: E402
from test_corpora import ENTRIES, RST, b64  # noqa: E402


def jsonl(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def safetensors(tensors):
    from safetensors.numpy import save
    return save(tensors)


def npy(array):
    import io
    f = io.BytesIO()
    np.save(f, array)
    return f.getvalue()


def hf_disk_metadata():
    """The state.json and dataset_info.json that save_to_disk writes for hf_disk's dataset of two rows."""
    import tempfile
    import datasets
    with tempfile.TemporaryDirectory() as folder:
        datasets.Dataset.from_dict({"text": ["one text", "another"]}).save_to_disk(folder)
        with open(os.path.join(folder, "state.json"), "rb") as s, open(os.path.join(folder, "dataset_info.json"),
                                                                        "rb") as i:
            return s.read(), i.read()


def seeds():
    pages = [(1, "Amsterdam", 0, "'''Amsterdam''' is the [[capital]] of the {{country|Netherlands}}.\n\n== History ==\n"
                                 "[[Category:Cities]] Text with <ref>a note</ref> and a [[File:x.jpg|thumb|pic]]."),
             (2, "Capital", 0, "#REDIRECT [[Capital city]]", "Capital city"),
             (3, "Category:Cities", 14, "[[Category:Places]]"),
             (4, "Capital city", 0, "A '''capital''' is a city.\n{| class=wikitable\n| a || b\n|}\nMore prose.")]
    dump = make_dump(pages, ENGLISH_NAMESPACES, "en").encode()
    yield "dump", "pages.xml", dump
    yield "dump", "empty.xml", make_dump([], ENGLISH_NAMESPACES, "en").encode()
    yield "dump_bz2", "pages.xml.bz2", bz2.compress(dump)
    for n, page in enumerate(pages):
        yield "wikitext", f"page{n}", bytes([n]) + page[3].encode()
    yield "wikitext", "hostile", b"\x07" + ("{{a|" * 50 + "x" + "}}" * 50 + "=" * 300 + "x [[Category:a" + " " * 300
                                            + "[//x " * 100 + "#REDIRECT" + " " * 100).encode()
    with gzip.open(os.path.join(ROOT, "data", "arxiv-sample-1000.json.gz"), "rb") as f:
        records = [json.loads(next(f)) for _ in range(3)]
    for r in records:
        r["abstract"] = r["abstract"][:300]
    yield "arxiv", "three.json", jsonl(records)
    yield "arxiv", "three.json.gz", gzip.compress(jsonl(records), mtime=0)
    body, rows = b"", []
    for heads, text in ENTRIES:
        data = text.encode()
        rows += [(h.lower(), len(body), len(data)) for h in heads]
        body += data
    index = "".join(f"{h}\t{b64(o)}\t{b64(n)}\n" for h, o, n in sorted(rows)).encode()
    yield "dictd", "foldoc", index + SEP + body
    yield "dictd", "foldoc-dz", index + SEP + gzip.compress(body, mtime=0)
    yield "rst", "json", b"library/json.rst\x01" + RST.encode() + SEP + b"empty.rst\x01Title\n=====\n\n.. toctree::\n"
    yield "folder", "bbc", (b"Ink helps drive democracy\n\nThe Kyrgyz Republic is using ink." + SEP
                            + b"Title\n\nCost \xa33m, paid in cash by the club." + SEP + b"readme.md\x01not a document")
    table = (b'article_id,title,text,source\n7,"Senate votes, 51-50","The Senate voted ""this afternoon"".",abc\n'
             b'8,Short one,Too short,bbc\n')
    yield "csv", "news.csv", b"\x00" + table
    yield "csv", "labelled.csv", b"\x03id,title,text,label\n1,A,First text here.,x\n2,B,Second text.,y\n"
    configs = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {}\n---\n# A "
               "dataset\n")
    table = b"data/train.csv\x01text,label\nA first text.,1\n\"A second, quoted\",0\n"
    yield "hf_repository", "files", b"---\nlicense: mit\n---\n" + SEP + table
    yield "hf_repository", "configs", configs.format("data/*.csv").encode() + SEP + table
    yield "hf_repository", "outside", configs.format("../../outside.csv").encode() + SEP + table
    yield "hf_repository", "splits", b"---\n---\n" + SEP + table + SEP + b"data/test.csv\x01text\nA test text.\n"
    yield "hf_csv", "header.csv", b"\x00text,label\nA text.,1\nAnother,0\n"
    yield "hf_csv", "pairs.csv", b"\x02" + b'1,one text,two text\n0,"two  text","three\x01text"\n'
    yield "hf_csv", "labelled.csv.gz", b"\x01" + gzip.compress(b"1,a text\n0,another\n", mtime=0)
    yield "hf_csv", "twice.csv", b"\x03a,b\n"
    state, info = hf_disk_metadata()
    yield "hf_disk", "dataset", state + SEP + info
    yield "hf_disk", "dict", state + SEP + info + SEP + json.dumps({"splits": ["train"]}).encode()
    outside = json.loads(state)
    outside["_data_files"] = [{"filename": "../../outside.arrow"}]
    yield "hf_disk", "outside", json.dumps(outside).encode() + SEP + info
    with open(os.path.join(ROOT, "data", "keysent-demo.jsonl"), "rb") as f:
        yield "sentences", "demo.jsonl", b"".join(f.readlines()[:2])
    yield "sentences", "split.jsonl", jsonl([{"id": "a", "sentences": ["One.", "Two."], "labels": [0, 1]}])
    yield "articles", "linked.jsonl", jsonl(linked_articles(24)[:6])
    yield "splits", "retrieval.json", json.dumps({"train": ["d0", "d2"], "val": ["d1"], "test": ["d3"]}).encode()
    yield "triplets", "train.jsonl", jsonl([{"query": "d0", "pos": "d1", "neg": "d2", "hard": False},
                                            {"query": "d1", "pos": "d0", "neg": "d3", "hard": True}])
    yield "pairs", "pairs.jsonl", jsonl([{"query": "what is a capital", "doc": "d0"},
                                         {"query": "what is a capital", "doc": "d1"}, {"query": "rivers", "doc": "d2"}])
    yield "beir", "scifact", (jsonl([{"_id": "1", "title": "T", "text": "a text"}, {"_id": "2", "text": "b"}]) + SEP
                              + jsonl([{"_id": "1", "text": "a query"}]) + SEP
                              + b"query-id\tcorpus-id\tscore\n1\t1\t2\n1\t2\t0\n1\t9\t1\n")
    article = {"id": "train-1", "title": "", "text": "a text", "links": [], "labels": {"top": "x"}}
    yield "classify_splits", "documents", jsonl([article, {**article, "id": "train-2", "labels": {"top": "y"}}]) + SEP \
        + jsonl([{**article, "id": "test-1"}])
    pair = {"id": "train-1", "docs": [{"id": "h1", "title": "", "text": "x"}, {"id": "h2", "title": "", "text": "y"}],
            "label": "1"}
    yield "classify_splits", "pairs", jsonl([pair]) + SEP + jsonl([{**pair, "label": "0"}])
    gt = collections.defaultdict(dict, {"Champagne": {"Cava": 1, "Prosecco": 1}, "Cava": {"Champagne": 1}})
    yield "similar_articles", "wines", ("title,sections\nChampagne,\"[('', 'Sparkling wine.'), ('History', '')]\"\n"
                                        "Cava,\"[('Making', 'Traditional method.')]\"\n").encode() + SEP \
        + pickle.dumps(gt, protocol=4)
    yield "qrels", "crossref.qrels", b"d0 0 d1 1\nd0 0 d2 0\nd3 0 d1 1\n"
    yield "topics", "topics", (jsonl([{"id": "d0", "label": "a"}, {"id": "d1", "label": "b"}]) + SEP
                               + jsonl([{"id": "d2", "label": "a"}]))
    yield "topics", "pairs", jsonl([{"ids": ["d0", "d1"], "label": "x"}, {"a": "d0", "b": "d2", "score": 0.5}])
    yield "topics", "map.tsv", "Cities\tGeography\tPlaces\nRivers\tGeography\t\n".encode()
    yield "queries", "val.jsonl", jsonl([{"qid": "q:d0", "text": "a capital"}, {"qid": "q:d1", "text": "rivers"}])
    yield "queries", "queries.txt", b"gene expression in cells\nrivers and lakes\n"
    yield "log", "log.jsonl", jsonl([{"step": 1, "epoch": 0.5, "loss": 0.9, "lr": 1e-5, "steps_per_s": 2.0},
                                     {"step": 2, "epoch": 1.0, "val_ndcg@10": 0.5}])
    yield "manifest", "data.json", json.dumps({"script": "02_build_graph.py", "args": {"seed": 1, "out": "x"},
                                               "inputs": {"articles.jsonl": "00"}, "files": ["docs.jsonl"],
                                               "sha256": {"docs.jsonl": "00"}, "language": "en"}).encode()
    yield "manifest", "eval.json", json.dumps({"script": "05_evaluate.py",
                                               "args": {"model": {"base": "/m"}}, "state": "committing"}).encode()
    previous = {"script": "01_extract.py", "args": {"out": "out"}, "files": ["a.txt", "pv"],
                "sha256": {"a.txt": "00", "pv/x.bin": "00"}}
    yield "manifest_files", "previous.json", json.dumps(previous).encode()
    hostile = {**previous, "files": [".", "..", "sub", "pv", "../outside.txt", "/tmp", "notes.txt/.."],
               "sha256": {"pv/notes.txt/..": "0", "sub/mine.txt/": "0"}}
    yield "manifest_files", "hostile.json", json.dumps(hostile).encode()
    yield "manifest_files", "files.json", json.dumps([".", "a.txt", "pv", "pv/x.bin", "pv/notes.txt/.."]).encode()
    yield "manifest_files", "committing.json", json.dumps({**previous, "state": "committing",
                                                           "replacing": [".", "a.txt", "pv/x.bin", "sub"]}).encode()
    yield "teacher_ids", "ids.txt", "".join(d["id"] + "\n" for d in DOCS).encode()
    yield "npy", "float32.npy", npy(np.ones((4, 3), np.float32))
    yield "npy", "int64.npy", npy(np.arange(4))
    yield "npy", "fortran.npy", npy(np.asfortranarray(np.ones((4, 2), np.float16)))
    yield "safetensors_header", "float32", safetensors({"embeddings.weight": np.ones((3, 2), np.float32),
                                                        "pooler.dense.bias": np.zeros(2, np.float32)})
    yield "safetensors_header", "int8", safetensors({"dense.weight": np.ones((2, 2), np.int8),
                                                     "position_ids": np.arange(4, dtype=np.int64)})
    yield "safetensors_header", "empty", safetensors({})
    yield "safetensors_header", "sharded", (json.dumps({"metadata": {}, "weight_map": {"a": "part.safetensors"}})
                                            .encode() + SEP + safetensors({"a": np.ones(2, np.float32)}))
    yield "card_front_matter", "hub.md", ("---\nbase_model: sentence-transformers/all-MiniLM-L6-v2\nlanguage: en\n"
                                          "tags:\n- sentence-transformers\n---\n\n# A model\n\n| a | b |\n|---|---|\n"
                                          "| `x` | y |\n").encode()
    yield "card_front_matter", "list.md", b"---\nbase_model:\n- a/b\n- c\n---\n# Merged\n"
    yield "card_front_matter", "plain.md", b"# No front matter\n\nText <b>bold</b> and [a](b).\n"
    yield "training_flags", "sizes", b"\x00" + "\x01".join(["--batch-size", "4", "--max-length", "32", "--lr", "1e-5",
                                                            "--seeds", "1", "2"]).encode()
    yield "training_flags", "mnrl", b"\x01" + "\x01".join(["--cache-chunk", "4", "--scale", "20", "--warmup",
                                                           "0.1"]).encode()
    yield "name_values", "models", "\x01".join(["base=/m", "trained=run/model", "cls", "top=300,second=200"]).encode()
    yield "projection", "thesis", b"768(relu)x4096(relu)x2048"
    yield "projection", "small", b"8x4(relu)"


def main():
    out = os.path.join(HERE, "seeds")
    shutil.rmtree(out, ignore_errors=True)
    for target, name, data in seeds():
        os.makedirs(os.path.join(out, target), exist_ok=True)
        with open(os.path.join(out, target, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
