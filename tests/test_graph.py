"""02_build_graph.py: the data directory from articles.jsonl, its main in this process (its exit status as a process of
its own: the invalid-JSON case of test_bad_articles_fail_with_file_and_line)."""

import collections
import json
import math
import os
import random

import pytest

from conftest import read_jsonl, run_main, script_error

DATA_FILES = ["crossref.qrels", "docs.jsonl", "graph.npz", "manifest.json", "splits.json", "topics.top.test.jsonl",
              "topics.top.train.jsonl", "triplets.train.jsonl", "triplets.val.jsonl"]


def write_articles(path, articles):
    with open(path, "w", encoding="utf-8") as f:
        for a in articles:
            f.write(json.dumps(a, ensure_ascii=False) + "\n")
    return path


def article(i, links, **extra):
    return {"id": i, "title": f"Title {i}", "text": f"Text of {i}.", "links": links, **extra}


def read_graph_npz(path):
    """graph.npz as graph.json's dict, read by its documented format (docs/contract.md)."""
    import numpy as np
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == ["counts", "ids", "indices", "indptr"]
        assert (z["indptr"].dtype, z["indices"].dtype, z["counts"].dtype) == (np.int64, np.int32, np.uint8)
        ids = [i.decode("utf-8") for i in z["ids"].tolist()]
        indptr, indices, counts = z["indptr"], z["indices"].tolist(), z["counts"].tolist()
    return {ids[q]: {ids[d]: {"count": c} for d, c in zip(indices[indptr[q]:indptr[q + 1]],
                                                           counts[indptr[q]:indptr[q + 1]])}
            for q in range(len(ids)) if indptr[q + 1] > indptr[q]}


def build(tmp_path, articles, *flags, name="data"):
    src = write_articles(tmp_path / "articles.jsonl", articles)
    out = tmp_path / name
    run_main("02_build_graph.py", "--articles", src, "--out", out, *flags)
    return out


def test_graph_json_has_direct_links_and_two_hop_hard_negatives(tmp_path):
    articles = [article("a", ["b", "c", "a"]), article("b", ["c", "d"]), article("c", ["e", "zz"]),
                article("d", []), article("e", ["a", "a"])]
    out = build(tmp_path, articles, "--graph-json")
    graph = json.loads((out / "graph.json").read_text())
    assert list(read_graph_npz(out / "graph.npz").items()) == list(graph.items())  # the same rows, in order
    # a → b, c; two hops: b → d, c → e (c is direct, a itself is never a candidate)
    assert graph == {"a": {"b": {"count": 5}, "c": {"count": 5}, "d": {"count": 1}, "e": {"count": 1}},
                     "b": {"c": {"count": 5}, "d": {"count": 5}, "e": {"count": 1}},
                     "c": {"e": {"count": 5}, "a": {"count": 1}},
                     "e": {"a": {"count": 5}, "b": {"count": 1}, "c": {"count": 1}}}
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["links_self"], counts["links_unknown_id"], counts["links_duplicate"]) == (1, 1, 1)
    assert read_jsonl(out / "docs.jsonl")[0] == {"id": "a", "title": "Title a", "text": "Text of a."}


def random_corpus(n=300, seed=0, labelled=True):
    rng = random.Random(seed)
    ids = [f"doc{i}" for i in range(n)]
    articles = []
    for i, doc_id in enumerate(ids):
        degree = rng.choice([0, 0, 1, 2, 3, 5, 6, 8, 12])
        links = rng.sample(ids, degree)
        extra = {"labels": {"top": f"T{i % 4}", "second": f"S{i % 9}"}} if labelled else {}
        if i % 50 == 7:
            extra["labels"] = {"top": "rare"}
        articles.append(article(doc_id, links, **extra))
    return articles


@pytest.fixture(scope="module")
def random_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graph")
    articles = random_corpus()
    return build(tmp, articles, "--seed", "7", "--eval-docs", "shared"), articles


def _links(articles):
    return {a["id"]: set(a["links"]) - {a["id"]} for a in articles}


def test_splits_are_disjoint_and_cover_all_queries(random_data):
    out, articles = random_data
    splits = json.loads((out / "splits.json").read_text())
    links = _links(articles)
    queries = {q for q, ls in links.items() if ls}
    train, val, hold = (set(splits[k]) for k in ("train", "val", "holdout"))
    assert not (train & val) and not (train & hold) and not (val & hold)
    assert train | val | hold == queries
    assert len(hold) == round(0.2 * len(queries)) and len(val) == round(0.1 * (len(queries) - len(hold)))


def test_triplets_follow_the_specter_definition(random_data):
    out, articles = random_data
    links = _links(articles)
    graph = read_graph_npz(out / "graph.npz")
    splits = json.loads((out / "splits.json").read_text())
    for part in ("train", "val"):
        triplets = read_jsonl(out / f"triplets.{part}.jsonl")
        per_query = collections.defaultdict(list)
        for t in triplets:
            per_query[t["query"]].append(t)
        assert sorted(per_query) == sorted(splits[part])
        for q, ts in per_query.items():
            hop = {d for d, v in graph[q].items() if v["count"] == 1}
            assert len(ts) == 5
            assert sum(t["hard"] for t in ts) == min(2, len(hop))
            for t in ts:
                assert t["pos"] in links[q]
                assert t["neg"] != q and t["neg"] not in links[q]
                assert (t["neg"] in hop) == t["hard"]  # easy negatives are not two hops away either
            negs = [t["neg"] for t in ts]
            assert len(set(negs)) == len(negs)


def test_query_without_two_hop_documents_gets_easy_negatives_only(tmp_path):
    articles = [article("q", ["p"]), article("p", [])] + [article(f"x{i}", []) for i in range(10)]
    out = build(tmp_path, articles, "--holdout", "0", "--val", "0")
    triplets = read_jsonl(out / "triplets.train.jsonl")
    assert len(triplets) == 5 and not any(t["hard"] for t in triplets)
    assert {t["pos"] for t in triplets} == {"p"} and len({t["neg"] for t in triplets}) == 5


def test_crossref_qrels_invariants(random_data):
    out, articles = random_data
    links = _links(articles)
    holdout = set(json.loads((out / "splits.json").read_text())["holdout"])
    rows = collections.defaultdict(list)
    for line in (out / "crossref.qrels").read_text().splitlines():
        qid, zero, doc, rel = line.split()
        assert zero == "0"
        rows[qid].append((doc, int(rel)))
    assert rows and set(rows) == {q for q in holdout if len(links[q]) >= 5}
    for q, cands in rows.items():
        pos = [d for d, r in cands if r == 1]
        neg = [d for d, r in cands if r == 0]
        assert len(pos) == 5 and set(pos) <= links[q] and len(set(pos)) == 5
        assert len(neg) == 25 and len(set(neg)) == 25 and not (set(neg) & links[q]) and q not in neg


def test_topics_drop_rare_labels_and_split_stratified(random_data):
    out, articles = random_data
    train = read_jsonl(out / "topics.top.train.jsonl")
    test = read_jsonl(out / "topics.top.test.jsonl")
    labels = {a["id"]: a["labels"]["top"] for a in articles}
    assert all(labels[r["id"]] == r["label"] for r in train + test)
    assert "rare" not in {r["label"] for r in train + test}  # 6 documents < 10
    assert len(test) == math.ceil(0.3 * (len(train) + len(test)))  # scikit-learn rounds the test share up
    by_label = collections.Counter(r["label"] for r in test)
    assert set(by_label) == {"T0", "T1", "T2", "T3"} and max(by_label.values()) - min(by_label.values()) <= 2
    assert not ({r["id"] for r in train} & {r["id"] for r in test})
    assert len(read_jsonl(out / "topics.second.train.jsonl")) + len(read_jsonl(out / "topics.second.test.jsonl")) \
        == sum(1 for a in articles if "second" in a["labels"])


def test_topic_cap_limits_documents_per_label(tmp_path):
    articles = random_corpus(n=120, seed=3)
    out = build(tmp_path, articles, "--topic-cap", "top=12,second=5")
    rows = read_jsonl(out / "topics.top.train.jsonl") + read_jsonl(out / "topics.top.test.jsonl")
    assert collections.Counter(r["label"] for r in rows) == {"T0": 12, "T1": 12, "T2": 12, "T3": 12}
    rows = read_jsonl(out / "topics.second.train.jsonl") + read_jsonl(out / "topics.second.test.jsonl")
    assert set(collections.Counter(r["label"] for r in rows).values()) == {5}  # the cap applies after --topic-min


def partly_labelled_corpus():
    """400 articles, the first 100 labelled: with 5 cross-reference queries the held-out evaluation documents
    leave about half of the corpus for training."""
    articles = random_corpus(n=400, seed=11)
    for a in articles[100:]:
        a.pop("labels", None)
    return articles


EVAL_FLAGS = ("--crossref-queries", "5", "--topic-cap", "top=15,second=8")


def _evaluation_ids(out, parts=("train", "test")):
    ids = set()
    for line in (out / "crossref.qrels").read_text().splitlines():
        qid, _, doc, _ = line.split()
        ids.update((qid, doc))
    for level in ("top", "second"):
        for part in parts:
            ids.update(r["id"] for r in read_jsonl(out / f"topics.{level}.{part}.jsonl"))
    return ids


def _edges_touching(articles, ids):
    known = {a["id"] for a in articles}
    edges = {(a["id"], b) for a in articles for b in a["links"] if b in known and b != a["id"]}
    return sum(1 for a, b in edges if a in ids or b in ids)


@pytest.mark.parametrize("mode,parts", [("heldout", ("train", "test")), ("test", ("test",))])
def test_no_evaluation_document_is_in_any_triplet(tmp_path, mode, parts):
    articles = partly_labelled_corpus()
    out = build(tmp_path, articles, *EVAL_FLAGS, "--eval-docs", mode)
    evaluation = _evaluation_ids(out, parts)
    triplets = read_jsonl(out / "triplets.train.jsonl") + read_jsonl(out / "triplets.val.jsonl")
    assert len(triplets) > 300
    assert not evaluation & {t[k] for t in triplets for k in ("query", "pos", "neg")}
    graph = read_graph_npz(out / "graph.npz")
    assert not evaluation & (set(graph) | {d for row in graph.values() for d in row})
    splits = json.loads((out / "splits.json").read_text())
    assert not evaluation & (set(splits["train"]) | set(splits["val"]))
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["eval_documents"] == len(evaluation)
    assert counts["eval_links_dropped"] == _edges_touching(articles, evaluation)


def test_shared_evaluation_documents_reach_the_triplets(tmp_path):
    out = build(tmp_path, partly_labelled_corpus(), *EVAL_FLAGS, "--eval-docs", "shared")
    triplets = read_jsonl(out / "triplets.train.jsonl")
    assert _evaluation_ids(out) & {t[k] for t in triplets for k in ("query", "pos", "neg")}
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["eval_documents"], counts["eval_links_dropped"]) == (0, 0)


def test_evaluation_documents_that_take_most_of_a_corpus_are_warned_about(tmp_path):
    src = write_articles(tmp_path / "articles.jsonl", random_corpus(n=150, seed=5))
    proc = run_main("02_build_graph.py", "--articles", src, "--out", tmp_path / "data")
    assert "warning: the 150 evaluation documents are 100% of the 150 documents; 0 of" in proc.stdout


def test_same_seed_gives_byte_identical_outputs(tmp_path):
    articles = partly_labelled_corpus()
    a = build(tmp_path, articles, "--seed", "3", *EVAL_FLAGS, name="a")
    b = build(tmp_path, articles, "--seed", "3", *EVAL_FLAGS, name="b")
    c = build(tmp_path, articles, "--seed", "4", *EVAL_FLAGS, name="c")
    assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == sorted(DATA_FILES + ["topics.second.test.jsonl",
                                                                                 "topics.second.train.jsonl"])
    for name in os.listdir(a):
        if name != "manifest.json":
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "triplets.train.jsonl").read_bytes() != (c / "triplets.train.jsonl").read_bytes()


# SHA-256 of every file 02 wrote for these corpora before graph.npz (the link matrix built whole, the held-out
# matrix a copy, graph.json always written): the rewrite changed memory, not a byte of these files.
RECORDED = {
    "heldout": {
        "crossref.qrels": "123f29996670b521ecdfd1eb33bb23fd1187864097b8036759c34b9e6c083741",
        "docs.jsonl": "7f197f5d40d287747b8c7d90f2f23dc9a071e7e6646756d066c276bb374cf668",
        "graph.json": "a127ae3c6bfe59e7c69747359e750aaae3f1f5b526c830f51ae099580234c26e",
        "splits.json": "8f63d1b1a0eca9045d6c2fa4a76012ba7c3ec83deeecef9333f53a8851147704",
        "topics.second.test.jsonl": "7fa57413eb9bf7866baee21e935cefeed4d949f33dc6ee18a510103ff0f345ff",
        "topics.second.train.jsonl": "ea64672d2ceff15eaf114e972922eebc6dfe8a91eaa78251630784b20323223d",
        "topics.top.test.jsonl": "6e3ae9fb841776b082d5b43f795c1b417f481b1c4f10eb1744f513671f1e5141",
        "topics.top.train.jsonl": "de464d2ed6829803958c38fce75f93e126eadab39c29c6b66eb0732af6df7df8",
        "triplets.train.jsonl": "1b94075c3e578e6eb543bdbe790e72cd665a286cd6885f023bc4b1b747a0e875",
        "triplets.val.jsonl": "5899220ac89dc292a0a43f5db4418eb49275e5a8b4a7c2e583c375f98438ffb6"},
    "shared": {
        "crossref.qrels": "9cd8409993060e54f7e73db74c155a51e04f147958983660d61d768c61e59025",
        "docs.jsonl": "7abfd4415823a41ffebe5030e58f7c5eb7bb7eaa6266485fe2677463bacf0c0d",
        "splits.json": "2344bdeaf86a29135ce2d52c4f0526c98e7d9b35603c823b8e160b9ab9666dfb",
        "topics.second.test.jsonl": "29a1279638f0e69eaf2e38bc8ec9b40a478e0d44e9fc3a1aec01eb718b410187",
        "topics.second.train.jsonl": "7998060a3a191606f0787d0a320fb64ff0a6a46bd85887304a1faba7efb79495",
        "topics.top.test.jsonl": "8722787b4ed543b49fce72b6b60b9fe7a4db872789b776724b2129dc149285d6",
        "topics.top.train.jsonl": "6dc7bbf9c62012b4b2ca64b491a7aa6fee02c2ab1a72fe6416db818ff9df0aac",
        "triplets.train.jsonl": "a145b06d0d4698a94feef01030fd0eaea016ad14f5b65daa3ec17299ef22773f",
        "triplets.val.jsonl": "be89b1863227eb605d2c75ae38e9a607fe24e9b2d7a06b8f3b42d65e6a0570c1"},
}


@pytest.mark.parametrize("mode,articles,flags", [
    ("heldout", partly_labelled_corpus, ("--seed", "3", *EVAL_FLAGS, "--graph-json")),
    ("shared", random_corpus, ("--seed", "7", "--eval-docs", "shared"))])
def test_outputs_are_those_recorded_before_the_compact_graph(tmp_path, mode, articles, flags):
    import hashlib
    out = build(tmp_path, articles(), *flags)
    written = {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in os.listdir(out)
               if name not in ("manifest.json", "graph.npz")}
    assert written == RECORDED[mode]


@pytest.mark.parametrize("lines,expected", [
    (['{"id": "a", "title": "A", "text": "x", "links": []}', '{"id": "b", "title": "B", "text": "y", "links": [}'],
     ":2: invalid JSON"),
    (['{"id": "a", "title": "A", "text": "x", "links": []}', '{"id": "b", "title": "B", "links": []}'],
     ":2: missing field 'text'"),
    (['{"id": "a", "title": "A", "text": "x", "links": []}', '{"id": "b", "title": "B", "text": "y", "links": []}',
      '{"id": "a", "title": "C", "text": "z", "links": []}'], ":3: duplicate id 'a'"),
    (['{"id": 1, "title": "A", "text": "x", "links": []}'], ":1: field 'id' must be a string"),
    (['{"id": "a", "title": "A", "text": "x", "links": "b"}'], ":1: field 'links' must be a list of strings"),
    (['{"id": "a", "title": "A", "text": "x", "links": [["b"]]}'], ":1: field 'links' must be a list of strings"),
    (['{"id": "a", "title": "A", "text": "x", "links": [2]}'], ":1: field 'links' must be a list of strings"),
    (['{"id": "a", "title": "A", "text": "x", "links": []}', '{"id": "tab\\there", "title": "B", "text": "y", '
      '"links": []}'], ":2: id 'tab\\there' holds whitespace, which the qrels files cannot carry"),
    (['{"id": "", "title": "A", "text": "x", "links": []}'], ":1: id '' is empty"),
    (['{"id": "a\\u0000", "title": "A", "text": "x", "links": []}'], ":1: id 'a\\x00' holds a control character"),
])
def test_bad_articles_fail_with_file_and_line(tmp_path, lines, expected):
    src = tmp_path / "articles.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    error = script_error("02_build_graph.py", "--articles", src, "--out", out,
                         in_subprocess=expected == ":2: invalid JSON")  # one case checks the exit status
    assert error.startswith(f"error: {src}{expected}")
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.parametrize("flags,expected", [
    (["--holdout", "1.5"], "argument --holdout: 1.5: must be a share between 0 and 1"),
    (["--val", "nan"], "argument --val: nan: must be a share between 0 and 1"),
    (["--per-query", "-1"], "argument --per-query: -1: must be between 1 and 1,024"),
    (["--hard", "-2"], "argument --hard: -2: must be between 0 and 1,024"),
    (["--topic-test", "1"], "argument --topic-test: 1: must be a share strictly between 0 and 1"),
    (["--topic-cap", "top=abc"], "argument --topic-cap: 'top=abc': expected LEVEL=NUMBER,..., e.g. top=300,second=200"),
    (["--topic-cap", "top=0"], "argument --topic-cap: 'top=0': expected LEVEL=NUMBER,..., e.g. top=300,second=200"),
])
def test_settings_that_cannot_work_are_refused_before_reading(tmp_path, flags, expected):
    out = tmp_path / "data"
    assert script_error("02_build_graph.py", "--articles", tmp_path / "none.jsonl", "--out", out, *flags) == \
        f"error: {expected}"
    assert not out.exists()


def test_a_label_level_that_is_no_safe_file_name_is_refused_and_nothing_is_written(tmp_path):
    (tmp_path / "a").mkdir()
    src = write_articles(tmp_path / "a" / "articles.jsonl", [article("a", ["b"], labels={"top": "x"}),
                                                             article("b", ["a"], labels={"x/../../../PWNED": "y"})])
    out = tmp_path / "a" / "data"
    assert script_error("02_build_graph.py", "--articles", src, "--out", out) == (
        f"error: {src}:2: label level 'x/../../../PWNED' cannot be a file name: use at most 100 letters, digits, "
        "'_', '-' and '.' (not first)")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "articles.jsonl", "data"]


def test_ids_with_quotes_backslashes_and_non_ascii_round_trip_through_every_file(tmp_path):
    odd = ["<&>", 'quote"d', "back\\slash", "ä-ö", "x"]
    articles = [article(odd[i], [odd[(i + 1) % 5], odd[(i + 2) % 5]]) for i in range(5)]
    out = build(tmp_path, articles, "--holdout", "0", "--val", "0", "--graph-json")
    graph = json.loads((out / "graph.json").read_text(encoding="utf-8"))
    assert read_graph_npz(out / "graph.npz") == graph
    assert graph[odd[0]] == {odd[1]: {"count": 5}, odd[2]: {"count": 5}, odd[3]: {"count": 1}, odd[4]: {"count": 1}}
    assert set(graph) == set(odd)
    triplets = read_jsonl(out / "triplets.train.jsonl")
    assert {t["query"] for t in triplets} == set(odd)
    assert all(t["pos"] in {odd[(odd.index(t["query"]) + k) % 5] for k in (1, 2)} for t in triplets)


def test_distinct_ranks_are_uniform_over_ordered_pairs():
    import numpy as np
    from common.data.triplets import _distinct_ranks
    ranks = _distinct_ranks(np.full(60000, 4), 2, np.random.default_rng(0))
    assert (ranks[:, 0] != ranks[:, 1]).all() and ranks.min() == 0 and ranks.max() == 3
    pairs = collections.Counter(map(tuple, ranks.tolist()))
    assert len(pairs) == 12 and all(abs(c - 5000) < 400 for c in pairs.values())


def test_pre_encoded_ids_take_memory_for_their_length_only():
    import tracemalloc
    from common.jsontext import json_bytes
    tracemalloc.start()
    pieces = [json_bytes(f"doc{i}") for i in range(10000)]
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pieces[0] == b'"doc0"' and used / len(pieces) < 200  # orjson's own result keeps ~4 KB each


def test_train_queries_samples_the_training_queries_and_leaves_evaluation_and_validation_as_they_were(
        tmp_path, random_data):
    full, articles = random_data
    out = build(tmp_path, articles, "--seed", "7", "--eval-docs", "shared", "--train-queries", "12")
    splits, full_splits = (json.loads((d / "splits.json").read_text()) for d in (out, full))
    assert len(splits["train"]) == 12 and set(splits["train"]) < set(full_splits["train"])
    assert splits["val"] == full_splits["val"] and splits["holdout"] == full_splits["holdout"]
    for name in ("crossref.qrels", "topics.top.train.jsonl", "topics.top.test.jsonl", "triplets.val.jsonl",
                 "graph.npz", "docs.jsonl"):
        assert (out / name).read_bytes() == (full / name).read_bytes(), name
    triplets = read_jsonl(out / "triplets.train.jsonl")
    assert sorted({t["query"] for t in triplets}) == sorted(splits["train"]) and len(triplets) == 12 * 5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["queries_train"] == 12 and manifest["counts"]["triplets_train"] == 60
    # as many or more queries than there are: every one, the data as without the flag
    again = build(tmp_path, articles, "--seed", "7", "--eval-docs", "shared", "--train-queries", "100000",
                  name="all")
    assert (again / "triplets.train.jsonl").read_bytes() == (full / "triplets.train.jsonl").read_bytes()
