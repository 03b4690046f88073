"""Paper search's index (05_evaluate.py search, common/eval/retrieval.py and ann.py): exact search in chunks as a
full sort, the vectors 05 saved searched again, a faiss flat or HNSW index beside them finding what exact search
finds, built again when its vectors change; the queries embedded as the index's documents were (pooling,
normalisation, length, precision from its manifest) or refused; an index that does not fit the corpus or the model, search settings that
cannot work, a query without content and vectors that are not finite refused in one line; a full disk while saving
a faiss index."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from conftest import forget_hashes, read_jsonl, script_error, script_main, script_module

from common.io import InputError, sha256


def test_chunked_search_equals_a_full_sort_with_ties_by_position_descending():
    from common.eval.retrieval import search
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    docs[10] = docs[40]  # an exact tie
    queries = np.concatenate([docs[[40]], rng.standard_normal((4, 8)).astype(np.float32)])
    idx, scores = search(queries, docs, k=7, chunk=16, query_chunk=2)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    full = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T
    for row, expected in zip(idx, full):
        order = sorted(range(50), key=lambda j: (-expected[j], -j))[:7]
        assert row.tolist() == order
    assert idx[0][:2].tolist() == [40, 10]


def test_evaluate_retrieval_and_search_reuse_the_index(tiny_model, paper_data, tmp_path, capsys):
    evaluate = script_module("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--pooling", "base=mean", "--max-length", "32", "--task", "retrieval", "bm25"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"base", "bm25"}
    names = {"mrr@10", "ndcg@10", "recall@1", "recall@5", "recall@10", "recall@100", "map@100"}
    assert set(metrics["base"]["retrieval"]) == names | {f"{name}_ci" for name in names}
    assert metrics["bm25"]["retrieval"]["settings"]["k1"] == 1.5
    assert metrics["bm25"]["retrieval"]["recall@100"] == 1.0  # 60 documents: every one is in the top 100
    ids = (out / "base.ids.txt").read_text().split()
    assert len(ids) == 60 and np.load(out / "base.npy").shape == (60, 32)
    capsys.readouterr()
    docs = {d["id"]: d for d in read_jsonl(paper_data / "docs.jsonl")}
    evaluate.main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--index", str(out),
                   "--pooling", "mean", "--max-length", "32", "--top", "3", docs["p7"]["text"]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {docs['p7']['text']}" and len(lines) == 4
    assert lines[1].split("\t")[0] == "  1. p7" and lines[1].endswith(docs["p7"]["title"])
    (tmp_path / "queries.txt").write_text("gene cell\n\nriver\n")
    with pytest.raises(InputError, match=re.escape("queries.txt:2: a query without a letter or digit ('')")):
        evaluate.main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--queries",
                       str(tmp_path / "queries.txt")])


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_faiss_index_beside_the_vectors_finds_what_exact_search_finds(tiny_model, paper_data, tmp_path, capsys,
                                                                       kind):
    pytest.importorskip("faiss")
    evaluate = script_module("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--pooling", "base=mean", "--max-length", "32", "--task", "retrieval"])
    search = ["search", "--model", str(tiny_model), "--data", str(paper_data), "--index", str(out), "--pooling",
              "mean", "--max-length", "32", "--top", "5", "gene expression in cells", "rivers and lakes"]
    capsys.readouterr()

    class Ranked(list):
        """Printed lines (query lines, and rank, id, score of each hit); equal to another where every query line,
        rank and score (to the 4 printed decimals, ±1e-4) agree and every id does, except between two hits whose
        scores tie to within 2e-4, or at a query's last hit, which may tie with the first one left out (faiss and
        numpy sum a dot product in different orders, and the tiny model gives some documents equal vectors)."""

        def __eq__(self, other):
            if len(self) != len(other):
                return False
            for i, (a, b) in enumerate(zip(self, other)):
                if len(a) != len(b) or (len(a) == 1 and a != b) or (len(a) == 3 and a[0] != b[0]):
                    return False
                if len(a) == 3 and abs(a[2] - b[2]) > 1e-4:
                    return False
                if len(a) == 3 and a[1] != b[1]:
                    last = i + 1 == len(self) or len(self[i + 1]) != 3
                    near = [j for j in (i - 1, i + 1) if 0 <= j < len(self) and len(self[j]) == 3
                            and abs(self[j][2] - a[2]) <= 2e-4]
                    if not last and not any(other[j][1] == a[1] for j in near):
                        return False
            return True

    def ranked(*flags):
        evaluate.main(search + list(flags))
        lines = []
        for line in capsys.readouterr().out.splitlines():
            if "\t" not in line:
                lines.append((line,))
                continue
            rank_id, score, _ = line.split("\t", 2)
            rank, doc = rank_id.split()
            lines.append((rank, doc, float(score)))
        return Ranked(lines)

    exact = ranked()
    assert ranked("--index-type", kind) == exact  # 60 documents: HNSW's search reaches every one
    built = (out / f"base.{kind}.faiss").stat().st_mtime_ns
    assert ranked("--index-type", kind) == exact
    assert (out / f"base.{kind}.faiss").stat().st_mtime_ns == built  # read back, not built again
    # vectors rewritten in place (same rows, dimension and date): the recorded hash no longer matches, so the
    # index is built again from the new vectors, not reused
    vectors = np.load(out / "base.npy")
    stat = (out / "base.npy").stat()
    forget_hashes(out)  # else 05's manifest refuses the rewritten vectors first
    np.save(out / "base.npy", vectors[::-1].copy())
    os.utime(out / "base.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ranked("--index-type", kind) == ranked()
    assert (out / f"base.{kind}.faiss.sha256").read_text().split() == [sha256(str(out / "base.npy")),
                                                                      sha256(str(out / f"base.{kind}.faiss"))]
    # a damaged or truncated index whose record still names the vectors: built again, not read as it is
    for damage in (b"garbage", (out / f"base.{kind}.faiss").read_bytes()[:100]):
        (out / f"base.{kind}.faiss").write_bytes(damage)
        assert ranked("--index-type", kind) == ranked()
        assert (out / f"base.{kind}.faiss").stat().st_size > 100
    with pytest.raises(InputError, match=f"--index-type {kind} needs --index EVAL"):
        evaluate.main(search[:5] + ["--index-type", kind, "a query"])


@pytest.fixture(scope="module")
def index(tiny_model, paper_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "eval"
    script_main("05_evaluate.py")(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                                   "--max-length", "32", "--task", "retrieval"])
    return out


@pytest.mark.parametrize("case, expected", [
    ("half", "base.npy: 30 rows, {index}/base.ids.txt names 60"),
    ("dims", "{index}: its vectors have 16 dimensions, {model} makes 32 (vectors of another model?)"),
    ("ids", "base.ids.txt:1: id 'x0', but docs.jsonl has 'p0' there"),
    ("no-ids", "base.ids.txt: no such file"),
    ("run-folder", "{index}: not an evaluation directory of 05_evaluate.py (its manifest.json names no NAME=MODEL "
                   "vectors; a run folder?)"),
])
def test_a_saved_index_that_does_not_fit_the_corpus_or_the_model_is_a_one_line_error(tiny_model, paper_data, index,
                                                                                      tmp_path, case, expected):
    bad = tmp_path / "eval"
    shutil.copytree(index, bad)
    forget_hashes(bad)
    vectors = np.load(bad / "base.npy")
    if case == "half":
        np.save(bad / "base.npy", vectors[:30])
    elif case == "dims":
        np.save(bad / "base.npy", vectors[:, :16])
    elif case == "ids":
        (bad / "base.ids.txt").write_text("x0\n")
    elif case == "no-ids":
        os.remove(bad / "base.ids.txt")
    else:
        (bad / "manifest.json").write_text(json.dumps({"script": "03_train.py", "args": {"model": str(tiny_model)}}))
    with pytest.raises(InputError) as e:
        script_main("05_evaluate.py")(["search", "--model", str(tiny_model), "--data", str(paper_data), "--index",
                                       str(bad), "--max-length", "32", "query"])
    message = expected.format(index=bad, model=tiny_model)
    assert str(e.value) == (message if message.startswith(str(bad)) else f"{bad}/{message}")


@pytest.mark.parametrize("flag, value", [("--top", "0"), ("--top", "-1"), ("--batch-size", "0"),
                                         ("--max-length", "0")])
def test_search_settings_that_cannot_work_are_refused(tiny_model, paper_data, flag, value):
    most = "131,072" if flag == "--max-length" else "1,073,741,824"
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, flag, value,
                        "query") == f"error: argument {flag}: {value}: must be between 1 and {most}"


@pytest.mark.parametrize("query, expected", [
    ("", "error: query '': no letter or digit to search for"),
    ("   ", "error: query '   ': no letter or digit to search for"),
    ("?!", "error: query '?!': no letter or digit to search for"),
    ("FILE:\n", "error: {file}:1: a query without a letter or digit ('')"),
    ("FILE:gene expression\n -- \n", "error: {file}:2: a query without a letter or digit (' -- ')"),
    ("FILE:", "error: {file}: no queries"),
])
def test_a_query_without_content_is_refused_in_one_line(tiny_model, paper_data, tmp_path, query, expected):
    flags = ["search", "--model", tiny_model, "--data", paper_data, "--max-length", "32"]
    file = tmp_path / "queries.txt"
    if query.startswith("FILE:"):
        file.write_text(query[len("FILE:"):], encoding="utf-8")
        flags += ["--queries", file]
    else:
        flags.append(query)
    assert script_error("05_evaluate.py", *flags) == expected.format(file=file)


def test_vectors_that_are_not_finite_are_refused_wherever_they_are_read(tiny_model, paper_data, tmp_path):
    """A NaN row in the vectors 05 wrote (search --index) is one line naming the row and its document."""
    evaluate = script_module("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--max-length", "32", "--task", "retrieval"])
    vectors = np.load(out / "base.npy")
    vectors[7, 3] = np.nan
    forget_hashes(out)
    np.save(out / "base.npy", vectors)
    doc = (out / "base.ids.txt").read_text(encoding="utf-8").split("\n")[7]
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, "--index", out,
                        "--max-length", "32", "gene expression") == \
        f"error: {out / 'base.npy'}: row 7 (document {doc!r}) is not finite (1 of {len(vectors)} rows are not)"


def test_a_full_disk_while_saving_a_faiss_index_is_one_line_and_leaves_no_index(tmp_path, monkeypatch):
    faiss = pytest.importorskip("faiss")
    from common.eval import ann
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    np.save(tmp_path / "base.npy", vectors)

    def full(index, path):  # faiss's own words when fwrite fails on a full disk
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise RuntimeError(f"Error in void faiss::write_HNSW(const HNSW*, IOWriter*) at index_write.cpp:362: Error: "
                           f"'ret == (size)' failed: write error in {path}: 56 != 1945 (No space left on device)")
    monkeypatch.setattr(faiss, "write_index", full)
    with pytest.raises(InputError) as e:
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}: no space left on the device \(needs more than 1,000 bytes, "
                        r"[\d,]+ free\); the hnsw index was not saved", str(e.value)), str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.npy"]
    monkeypatch.setattr(faiss, "write_index", lambda index, path: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other error is not taken for a full disk
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")


def test_search_over_an_index_embeds_its_queries_as_the_documents_were(tiny_model, paper_data, tmp_path, capsys):
    """An evaluation that embedded with mean pooling, normalised, at 24 tokens: a search over its index with no
    flag embeds the queries alike, so each printed score is the cosine between the document's saved vector and the
    query as sentence-transformers embeds it with that pooling, normalisation and length (the tiny model's own
    default would be CLS pooling at 64 tokens)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    evaluate = script_module("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out), "--pooling",
                   "base=mean", "--normalize", "base=yes", "--max-length", "24", "--task", "retrieval"])
    assert json.loads((out / "manifest.json").read_text())["embedding"]["base"] == \
        {"pooling": "mean", "normalize": True, "max_length": 24}
    query = "gene expression in the cells of a mouse, a knockout of the protein " * 3
    capsys.readouterr()
    evaluate.main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--index", str(out), "--top",
                   "5", query])
    hits = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    transformer = Transformer(str(tiny_model), max_seq_length=24)
    st = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean"),
                                      Normalize()], device="cpu")
    expected = st.encode([query], convert_to_numpy=True)[0]
    vectors = np.load(out / "base.npy")
    row = {doc: i for i, doc in enumerate((out / "base.ids.txt").read_text().split())}
    for hit in hits:
        vector = vectors[row[hit[0].split()[1]]]
        cosine = float(expected @ vector / np.linalg.norm(expected) / np.linalg.norm(vector))
        assert abs(float(hit[1]) - cosine) < 1e-4


@pytest.mark.parametrize("change, flags, expected", [
    (None, ["--pooling", "mean"], "its vectors of {model} were embedded with pooling cls; the queries would be with "
                                  "pooling mean"),
    (None, ["--max-length", "16"], "its vectors of {model} were embedded with max_length 32; the queries would be "
                                   "with max_length 16"),
    ({"precision": "float32"}, ["--int8"], "its vectors of {model} were embedded with precision float32; the queries "
                                           "would be with precision int8"),
    ({"pooling": "max"}, [], "{index}/manifest.json: embedding 'base': field 'pooling' is 'max', not a value "
                             "05_evaluate.py records; run it again"),
    ({"max_length": True}, [], "{index}/manifest.json: embedding 'base': field 'max_length' is True, not a value "
                               "05_evaluate.py records; run it again"),
    ({"precision": "fp8"}, [], "{index}/manifest.json: embedding 'base': field 'precision' is 'fp8', not a value "
                               "05_evaluate.py records; run it again"),
    ("none", [], "{index}/manifest.json: records no embedding of 'base' (its pooling, normalisation and length), so "
                 "its queries cannot be embedded alike; run 05_evaluate.py again"),
])
def test_a_search_that_would_embed_its_queries_otherwise_than_the_index_is_refused_in_one_line(
        tiny_model, paper_data, index, tmp_path, change, flags, expected):
    """The ``index`` fixture's evaluation embedded with the tiny model's defaults, CLS pooling, unnormalised, at 32
    tokens (its --max-length), in float32: a flag asking for another setting, and a manifest whose record is
    missing or not what 05 writes, are one line before any query is embedded."""
    bad = tmp_path / "eval"
    shutil.copytree(index, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    assert manifest["embedding"]["base"] == {"pooling": "cls", "normalize": False, "max_length": 32}
    if change == "none":
        del manifest["embedding"]
    elif change:
        manifest["embedding"]["base"].update(change)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    forget_hashes(bad)
    message = expected.format(index=bad, model=tiny_model)
    if not message.startswith(str(bad)):
        message = f"{bad}: {message} (leave out the flag that asks for it; a precision runs as the device allows: " \
                  "search where the index was made)"
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, "--index", bad,
                        *flags, "gene expression") == f"error: {message}"


def test_the_queries_take_the_recorded_precision_where_no_flag_gives_one():
    """int8 and a CPU's bf16 are asked as recorded; a GPU's bf16 is asked as float32, which runs there under
    bfloat16 autocast; a flag given is kept (and checked against the record once the model is loaded)."""
    import torch

    from common.eval.embedding import Embedding
    from common.eval.retrieval import queries_alike
    recorded = {"pooling": "mean", "normalize": True, "max_length": 24}
    for precision in ("float32", "int8") + (() if torch.cuda.is_available() else ("bf16",)):
        how = queries_alike(Embedding(max_length=None), {**recorded, "precision": precision})
        assert (how.pooling, how.normalize, how.max_length, how.precision) == \
            ({"model": "mean"}, {"model": "yes"}, 24, precision)
    how = queries_alike(Embedding(pooling={"model": "cls"}, max_length=16, precision="int8"),
                        {**recorded, "precision": "float32"})
    assert (how.pooling, how.max_length, how.precision) == ({"model": "cls"}, 16, "int8")
