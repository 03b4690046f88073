"""Saved models as sentence-transformers and MTEB read them (config_sentence_transformers.json), and 05_evaluate.py
mteb (common/eval/mteb_run.py): the similarity a model states ranks as 05 ranks, and a local BEIR folder gives the
same nDCG@10 through MTEB as through 02 beir → 05."""

import json
import os

import numpy as np
import pytest

from conftest import SHORT_TRAIN, corpus_text, read_jsonl, run_main, script_error, train_in_process


@pytest.fixture(scope="module")
def triplet_model(tiny_model, tiny_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("triplet") / "run"
    train_in_process([*SHORT_TRAIN, "--data", str(tiny_data), "--model", str(tiny_model), "--out", str(run)])
    return run / "model"


def beir_folder(root, n_docs=14, n_queries=8):
    """A BEIR folder with graded qrels, a query judged only 0 (02 beir leaves it out), a document without a title,
    and judgements of things it lacks."""
    (root / "qrels").mkdir(parents=True)
    texts = corpus_text(21, n_docs)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"c{i}", "title": f"T{i}" if i % 5 else "", "text": t}) + "\n"
        for i, t in enumerate(texts)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"{q}", "text": texts[q][:30]}) + "\n"
                                                for q in range(n_queries + 2)))
    test = [f"{q}\tc{q}\t2" for q in range(n_queries)] + [f"{q}\tc{(q + 3) % n_docs}\t1" for q in range(n_queries)]
    train = [f"{q}\tc{q}\t1" for q in range(n_queries, n_queries + 2)] + ["0\tc1\t1", "1\tc2\t1"]
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(
        [*test, f"{n_queries + 1}\tc2\t0", "0\tmissing\t1", "nobody\tc1\t1"]) + "\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(train) + "\n")
    return root


def test_a_triplet_model_states_euclidean_and_the_versions_and_sentence_transformers_reads_them(triplet_model):
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    config = json.loads((triplet_model / "config_sentence_transformers.json").read_text())
    assert config == {"__version__": {"sentence_transformers": sentence_transformers.__version__,
                                      "transformers": transformers.__version__, "pytorch": torch.__version__},
                      "model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                      "similarity_fn_name": "euclidean"}
    assert SentenceTransformer(str(triplet_model)).similarity_fn_name == "euclidean"


def test_a_model_trained_from_a_base_with_prompts_keeps_them(tiny_model, tiny_data, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    prompts = {"query": "query: ", "document": "passage: "}
    SentenceTransformer(modules=[Transformer(str(tiny_model)), Pooling(32, "mean")], prompts=prompts,
                        default_prompt_name="document").save(str(tmp_path / "base"))
    train_in_process([*SHORT_TRAIN, "--data", str(tiny_data), "--model", str(tmp_path / "base"), "--out",
                      str(tmp_path / "run")])
    config = json.loads((tmp_path / "run" / "model" / "config_sentence_transformers.json").read_text())
    assert (config["prompts"], config["default_prompt_name"], config["similarity_fn_name"]) == (
        prompts, "document", "euclidean")


def test_sentence_transformers_similarity_ranks_a_triplet_models_candidates_as_05(triplet_model, tiny_data, tmp_path):
    from sentence_transformers import SentenceTransformer
    from common.data.docs_jsonl import Documents
    from common.eval import wikispecter
    out = tmp_path / "eval"
    run_main("05_evaluate.py", "--data", tiny_data, "--model", f"m={triplet_model}", "--task", "crossref",
             "--resamples", "0", "--out", out)
    emb, docs = np.load(out / "m.npy"), Documents(tiny_data)
    model = SentenceTransformer(str(triplet_model))
    # sentence-transformers embeds 05's input string of each document to 05's vector
    np.testing.assert_allclose(model.encode(docs.inputs(model.tokenizer.sep_token)[:8]), emb[:8], atol=1e-5)
    qrels = wikispecter.read_qrels(tiny_data / "crossref.qrels", docs.index)
    ranked = {}
    for line in (out / "m.crossref.trec").read_text().splitlines():
        qid, _, doc, *_ = line.split()
        ranked.setdefault(qid, []).append(doc)
    for qid, judged in qrels.items():
        candidates = list(judged)
        scores = model.similarity(emb[docs.index[qid]][None], emb[[docs.index[d] for d in candidates]])[0]
        order = sorted(range(len(candidates)), key=lambda j: (float(scores[j]), candidates[j]), reverse=True)
        assert [candidates[j] for j in order] == ranked[qid]
    # 05 search ranks by it exactly; a faiss index, which ranks by cosine, is refused for such a model
    assert script_error("05_evaluate.py", "search", "--model", triplet_model, "--data", tiny_data, "--index", out,
                        "--index-type", "flat", "kaupunki") == (
        f"error: --index-type flat: a faiss index ranks by cosine, and {triplet_model} states euclidean "
        "(config_sentence_transformers.json); search it with --index-type exact")


def test_a_model_saved_without_the_file_loads_and_ranks_as_before(triplet_model, tiny_data, tmp_path):
    import shutil
    from common.eval import wikispecter
    from common.models.loading import load_encoder, st_config
    old = tmp_path / "old"
    shutil.copytree(triplet_model, old)
    os.remove(old / "config_sentence_transformers.json")
    assert "similarity" not in st_config(old) and st_config(old)["pooling"] == "mean"
    _, _, settings = load_encoder(old)
    assert settings["similarity"] is None and settings["max_length"] == 32
    emb = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    qrels = {"a": {"b": 1, "c": 0, "d": 0, "e": 1}}
    index = dict(zip("abcde", range(5)))
    # a model that states no similarity is ranked by SPECTER's L2 distance, as 05 ranked every model before
    assert wikispecter.crossref_run(emb, index, qrels) == wikispecter.crossref_run(emb, index, qrels, "euclidean")
    distances = {d: -float(np.linalg.norm(emb[index[d]] - emb[0])) for d in "bcde"}
    assert wikispecter.crossref_run(emb, index, qrels)["a"] == pytest.approx(distances)


@pytest.mark.parametrize("config,line", [
    ({"similarity_fn_name": "jaccard"}, "similarity_fn_name 'jaccard' is not one of cosine, dot, euclidean, manhattan"),
    ({"prompts": {"query": 1}}, "prompts is not an object of prompt names to strings"),
    ({"prompts": {"query": "q: "}, "default_prompt_name": "passage"},
     "default_prompt_name 'passage' is not one of its prompts")])
def test_a_damaged_sentence_transformers_config_is_one_line(triplet_model, tmp_path, config, line):
    import shutil
    from common.io import InputError
    from common.models.loading import st_config
    shutil.copytree(triplet_model, tmp_path / "m")
    path = tmp_path / "m" / "config_sentence_transformers.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    with pytest.raises(InputError) as e:
        st_config(tmp_path / "m")
    assert str(e.value) == f"{path}: {line}"


def test_05_ranks_retrieval_by_the_similarity_a_model_states():
    import torch
    from sentence_transformers.util import cos_sim, dot_score, euclidean_sim, manhattan_sim
    from common.eval.retrieval import search
    rng = np.random.default_rng(1)
    queries, docs = rng.normal(size=(3, 6)).astype(np.float32), rng.normal(size=(40, 6)).astype(np.float32) * \
        rng.uniform(0.1, 3, size=(40, 1)).astype(np.float32)
    for name, reference in (("cosine", cos_sim), ("dot", dot_score), ("euclidean", euclidean_sim),
                            ("manhattan", manhattan_sim)):
        indices, scores = search(queries, docs, k=10, chunk=7, similarity=name)
        expected = torch.topk(reference(torch.from_numpy(queries), torch.from_numpy(docs)), 10)
        assert indices.tolist() == expected.indices.tolist(), name
        np.testing.assert_allclose(scores, expected.values.numpy(), rtol=1e-5, atol=1e-5)


def test_a_baselines_dense_module_and_prompts_are_named_in_one_note(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling
    from common.models.loading import load_encoder
    st = SentenceTransformer(modules=[Transformer(str(tiny_model)), Pooling(32, "mean"), Dense(32, 8)],
                             prompts={"query": "query: ", "document": ""}, similarity_fn_name="dot")
    st.save(str(tmp_path / "dense"))
    said = []
    _, _, settings = load_encoder(tmp_path / "dense", say=said.append)
    assert settings["similarity"] == "dot" and settings["st_config"]["prompts"] == {"query": "query: ", "document": ""}
    # sentence-transformers 6 saves the length as the tokenizer's, where 05 reads it too
    assert settings["max_length"] == st.max_seq_length == 64 and settings["pooling"] == "mean"
    assert said == [f"note: {tmp_path / 'dense'}: embedded without its Dense (2_Dense), prompt 'query': the "
                    "project's encoder is the transformer, its pooling and normalisation; `05_evaluate.py mteb` "
                    "embeds it as sentence-transformers loads it, whole"]


def test_mteb_on_a_beir_folder_gives_05s_ndcg_at_10(tiny_model, tmp_path):
    folder = beir_folder(tmp_path / "scifact")
    run_main("02_build_graph.py", "beir", "--input", folder, "--out", tmp_path / "data")
    train_in_process(["--objective", "mnrl", "--data", str(tmp_path / "data"), "--model", str(tiny_model),
                      "--out", str(tmp_path / "run"), "--max-length", "32", "--batch-size", "2", "--epochs", "1",
                      "--log-every", "1", "--eval-every", "0"])
    model = tmp_path / "run" / "model"
    run_main("05_evaluate.py", "--data", tmp_path / "data", "--model", f"mnrl={model}", "--task", "retrieval",
             "--out", tmp_path / "eval")
    ours = json.loads((tmp_path / "eval" / "metrics.json").read_text())["mnrl"]["retrieval"]
    out = tmp_path / "mteb"
    run_main("05_evaluate.py", "mteb", "--model", f"mnrl={model}", "--task", folder, "--out", out)
    manifest = json.loads((out / "manifest.json").read_text())
    found = manifest["scores"]["mnrl"]["scifact"]
    assert found["main_score"] == pytest.approx(ours["ndcg@10"], abs=1e-4)
    assert found["ndcg@10"] == pytest.approx(ours["ndcg@10"], abs=1e-9)
    assert found["ndcg@10_ci"] == pytest.approx(ours["ndcg@10_ci"], abs=1e-9)
    saved = json.loads(next(out.glob("mnrl/results/*/*/scifact.json")).read_text())
    assert saved["scores"]["test"][0]["ndcg_at_10"] == pytest.approx(found["main_score"])
    meta = json.loads(next(out.glob("mnrl/results/*/*/model_meta.json")).read_text())
    assert meta["loader_kwargs"]["docembed_wrapper"]["documents"].startswith("title and text joined by a space")
    assert meta["similarity_fn_name"] == "cosine"
    assert manifest["wrapper"]["mnrl"]["similarity"] == "cosine"
    report = (out / "report.md").read_text()
    low, high = (round(x * 100, 2) for x in ours["ndcg@10_ci"])
    assert f"| mnrl | {found['main_score'] * 100:.2f} [{low:.2f}, {high:.2f}] |" in report


def test_mteb_ranks_a_triplet_models_title_sep_text_documents_by_l2_distance(triplet_model, tmp_path):
    from sentence_transformers import SentenceTransformer
    from common.eval import retrieval
    from common.eval.mteb_run import read_beir
    folder = beir_folder(tmp_path / "scidocs")
    out = tmp_path / "mteb"
    run_main("05_evaluate.py", "mteb", "--model", f"specter={triplet_model}", "--task", folder, "--out", out)
    found = json.loads((out / "manifest.json").read_text())["scores"]["specter"]["scidocs"]
    corpus, queries, qrels = read_beir(folder)
    model = SentenceTransformer(str(triplet_model))
    ids = list(corpus)
    docs = model.encode([f"{corpus[d]['title']}[SEP]{corpus[d]['text']}" for d in ids])
    indices, scores = retrieval.search(model.encode(list(queries.values())), docs, similarity="euclidean")
    expected = retrieval.retrieval_metrics(retrieval.ranked_ids(retrieval.ranking(indices, scores, ids, list(queries))),
                                           qrels)
    assert found["main_score"] == pytest.approx(expected["ndcg@10"], abs=1e-4)
    assert found["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-6)


def test_the_wrapper_joins_documents_as_each_objective_read_them(triplet_model, tiny_model):
    from mteb.types import PromptType
    from common.eval.mteb_run import ProjectEncoder
    from common.train.objectives.base import document_reader
    batch = {"title": ["A", ""], "body": ["x y", "z"], "text": ["A x y", "z"]}
    triplet = ProjectEncoder("t", triplet_model, document_reader(str(triplet_model)), 4)
    assert triplet.texts(batch, PromptType.document) == ["A[SEP]x y", "[SEP]z"]
    assert triplet.texts(batch, PromptType.query) == ["A x y", "z"]
    assert triplet.says["similarity"] == "euclidean"
    assert triplet.says["documents"] == "title + '[SEP]' + text (SPECTER's input)"
    join, _ = document_reader(str(tiny_model))  # a model not trained here reads SPECTER's input
    assert join("A", "x y", "[SEP]") == "A[SEP]x y"


def test_a_model_without_sentence_transformers_files_is_read_as_05_reads_it(tiny_model):
    import torch
    from common.eval.mteb_run import sentence_transformer
    from common.models.loading import load_encoder
    said = []
    model = sentence_transformer(str(tiny_model), say=said.append)
    encoder, tokenizer, settings = load_encoder(tiny_model, say=lambda _: None)
    texts = ["Kaupunki joki meri.", "Science and art of the harbour town, a longer text than the first."]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=settings["max_length"], return_tensors="pt")
    with torch.no_grad():
        expected = encoder.eval().embed(batch["input_ids"], batch["attention_mask"]).numpy()
    np.testing.assert_allclose(model.encode(texts), expected, atol=1e-5)
    assert said == [f"note: {tiny_model}: no sentence-transformers files; read as 05 reads it, with cls pooling and "
                    "64 tokens"]


def test_two_tasks_of_one_name_are_one_line(tmp_path, tiny_model):
    first, second = beir_folder(tmp_path / "a" / "scifact"), beir_folder(tmp_path / "b" / "scifact")
    assert script_error("05_evaluate.py", "mteb", "--model", f"m={tiny_model}", "--task", first, "--task", second,
                        "--out", tmp_path / "out") == (
        f"error: --task {second}: the task 'scifact', as --task {first} is (MTEB names its results after the task); "
        "give each task once, a BEIR folder under a name of its own")
    assert not (tmp_path / "out").exists()


def test_a_model_that_cannot_be_had_is_one_line_before_any_work(tmp_path, tiny_model):
    folder = beir_folder(tmp_path / "scifact")
    assert script_error("05_evaluate.py", "mteb", "--model", f"m={folder}", "--task", folder, "--out",
                        tmp_path / "out") == f"error: {folder}: no model there (no config.json)"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["no beir", "unknown", "offline"])
def test_a_task_that_cannot_be_had_is_one_line(tmp_path, tiny_model, case):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "corpus.jsonl").write_text("")
    task = {"no beir": str(tmp_path / "notes"), "unknown": "NoSuchTask", "offline": "SCIDOCS"}[case]
    line = script_error("05_evaluate.py", "mteb", "--model", f"m={tiny_model}", "--task", task, "--out",
                        tmp_path / "out")
    assert line == {"no beir": f"error: {tmp_path / 'notes'}: not a BEIR dataset (a BEIR folder holds corpus.jsonl, "
                               "queries.jsonl and qrels/test.tsv)",
                    "unknown": "error: --task NoSuchTask: no such MTEB task and no such folder (mteb.get_tasks() "
                               "lists the tasks)",
                    "offline": line if line.startswith("error: --task SCIDOCS: its data cannot be loaded offline "
                                                       "(HF_HUB_OFFLINE is set): ") else "the offline line"}[case]
    assert not (tmp_path / "out").exists()
