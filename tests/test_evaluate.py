"""05_evaluate.py: what it refuses, with one line and nothing written."""

import json
import os
import re
import shutil

import pytest

from conftest import forget_hashes, script_error, script_module


@pytest.mark.parametrize("case", ["unknown-id", "bad-qrels-line", "task", "no-dir", "model-syntax", "model-name",
                                  "topic-level", "topic-one-label", "topic-unknown-id", "no-model", "qrels-is-a-dir",
                                  "out-is-a-file"])
def test_bad_evaluation_input_is_a_one_line_error(tiny_model, tiny_data, tmp_path, case):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
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
    elif case == "model-syntax":
        args[3] = str(tiny_model)
        expected = f"error: --model {str(tiny_model)!r}: expected NAME=MODEL"
    elif case == "model-name":  # the name becomes EVAL/<name>.npy
        args[3] = f"../../x={tiny_model}"
        expected = (f"error: --model {args[3]!r}: NAME '../../x' cannot be a file name: use at most 100 letters, "
                    "digits, '_', '-' and '.' (not first)")
    elif case == "topic-one-label":
        train = data / "topics.top.train.jsonl"
        train.write_text("".join(line.split('"label"')[0] + '"label": "tiede"}\n'
                                 for line in train.read_text().splitlines()))
        expected = f"error: {train}: 1 label ('tiede'); a topic task needs at least two"
    elif case == "topic-unknown-id":
        test = data / "topics.top.test.jsonl"
        test.write_text(test.read_text() + '{"id": "nowhere", "label": "tiede"}\n')
        expected = f"error: {test}:{len(test.read_text().splitlines())}: id 'nowhere' is not in docs.jsonl"
    elif case == "no-model":
        args[3] = f"base={tmp_path / 'none'}"
        expected = (f"error: {tmp_path / 'none'}: no such model folder, nor a model of that name in the local "
                    "Hugging Face cache")
    elif case == "qrels-is-a-dir":
        qrels.unlink()
        qrels.mkdir()
        (qrels / "x").write_text("x")
        expected = f"error: {qrels}: is a directory, not a file"
    elif case == "out-is-a-file":
        (tmp_path / "eval").write_text("")
        expected = f"error: {tmp_path / 'eval'}: exists and is not a directory"
    else:  # the level becomes EVAL/tsne_<level>.png
        for part in ("train", "test"):
            shutil.copy(data / f"topics.top.{part}.jsonl", data / f"topics.a b.{part}.jsonl")
        expected = (f"error: {data / 'topics.a b.train.jsonl'}: topic level 'a b' cannot be a file name: use at most "
                    "100 letters, digits, '_', '-' and '.' (not first)")
    assert script_error("05_evaluate.py", *args) == expected
    assert not (tmp_path / "eval").is_dir() or os.listdir(tmp_path / "eval") == []


def test_hub_named_sentence_transformer_is_scored_with_its_own_pooling_and_length(tiny_model, tiny_data, tmp_path):
    """A model named as on the hub, found (offline) in a Hugging Face cache laid out as ``SentenceTransformer(name)``
    leaves it, is embedded with the pooling, normalisation and length its sentence-transformers files give."""
    import subprocess
    import sys
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from common.data.docs_jsonl import Documents
    from common.models.loading import load_encoder
    from common.models.saving import save_model
    from conftest import ENV, ROOT
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean", normalize=True)
    folder = tmp_path / "sbert"
    save_model(encoder, tokenizer, str(folder), max_length=12)
    repo = tmp_path / "hf" / "hub" / "models--org--tiny-sbert"
    shutil.copytree(folder, repo / "snapshots" / ("a" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "05_evaluate.py"), "--data", tiny_data, "--model",
                           "hub=org/tiny-sbert", "--out", tmp_path / "eval", "--task", "crossref"], cwd=ROOT,
                          env=dict(ENV, HF_HOME=str(tmp_path / "hf")), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "hub: 60 documents, 32 dimensions (mean pooling, normalised, 12 tokens)" in proc.stdout
    docs = Documents(str(tiny_data))
    expected = SentenceTransformer(str(folder), device="cpu").encode(docs.inputs(tokenizer.sep_token))
    np.testing.assert_allclose(np.load(tmp_path / "eval" / "hub.npy"), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("documents", ["all", "scored"])
def test_two_processes_evaluate_with_the_vectors_and_metrics_of_one(tiny_model, tiny_data, tmp_path, documents):
    """Under `accelerate launch`, each process embeds one shard of the documents (every one, or those scored: each
    process cuts the same ones); the main one writes the same vectors and scores as a single process."""
    import json
    import subprocess
    import sys

    import numpy as np

    from conftest import ENV, ROOT, free_port, run_main
    args = ["--data", tiny_data, "--model", f"base={tiny_model}", "--task", "crossref", "topics", "--batch-size", "4",
            "--documents", documents]
    run_main("05_evaluate.py", *args, "--out", tmp_path / "one")
    env = dict(ENV, ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    str(free_port()), os.path.join(ROOT, "05_evaluate.py"), *map(str, args), "--out",
                    str(tmp_path / "two")], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    one, two = np.load(tmp_path / "one" / "base.npy"), np.load(tmp_path / "two" / "base.npy")
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "two" / "base.ids.txt").read_text() == (tmp_path / "one" / "base.ids.txt").read_text()
    scores = [json.loads((tmp_path / run / "metrics.json").read_text())["base"]["crossref"] for run in ("one", "two")]
    assert set(scores[1]) == set(scores[0]) == {"map", "ndcg", "map_ci", "ndcg_ci"}
    for key, value in scores[0].items():  # the intervals too: the bootstrap draws from the seed alone
        assert scores[1][key] == pytest.approx(value, rel=1e-6)


def test_list_flags_given_twice_extend():
    """--task, --runs and 03's --seeds given twice keep every value, as --model does."""
    import importlib.util
    from common import cli
    from common.train import objectives
    spec = importlib.util.spec_from_file_location("script_05_flags", os.path.join(os.path.dirname(__file__), "..",
                                                                                    "05_evaluate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    p = cli.parser("05")
    module.add_evaluate_arguments(p)
    args = p.parse_args(["--data", "d", "--out", "o", "--task", "crossref", "--task", "topics", "lexical",
                         "--runs", "a", "--runs", "b", "c"])
    assert args.task == ["crossref", "topics", "lexical"]
    assert args.runs == ["a", "b", "c"]
    p = cli.parser("03")
    script_module("03_train.py").add_training_arguments(p, objectives.get("triplet"), [])
    assert p.parse_args(["--data", "d", "--out", "o", "--seeds", "1", "2", "--seeds", "3"]).seeds == [1, 2, 3]


def test_pooling_and_normalize_are_spelled_as_in_03_for_every_model_or_per_model():
    import argparse
    import importlib.util
    from common.io import InputError
    spec = importlib.util.spec_from_file_location("script_05_names", os.path.join(os.path.dirname(__file__), "..",
                                                                                    "05_evaluate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = argparse.Namespace(model=["a=x", "b=y"], pooling=["b=cls", "mean"], normalize=["no"])
    module._check_names(args)
    assert (args.pooling, args.normalize) == ({"a": "mean", "b": "cls"}, {"a": "no", "b": "no"})
    with pytest.raises(InputError, match=re.escape("--pooling 'max': expected NAME=cls|mean")):
        module._check_names(argparse.Namespace(model=["a=x"], pooling=["max"], normalize=[]))


def test_a_classification_task_with_one_training_label_is_refused_before_embedding(tiny_model, tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    ids = [json.loads(line)["id"] for line in (data / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    for part, rows in (("train", ids[:10]), ("test", ids[10:14])):
        (data / f"classify.one.{part}.jsonl").write_text(
            "".join(json.dumps({"id": i, "label": "same"}) + "\n" for i in rows), encoding="utf-8")
    assert script_error("05_evaluate.py", "--data", data, "--model", f"base={tiny_model}", "--task", "classify",
                        "--out", tmp_path / "eval") == \
        f"error: {data / 'classify.one.train.jsonl'}: 1 label ('same'); a classification task needs at least two"
    assert not (tmp_path / "eval").is_dir() or os.listdir(tmp_path / "eval") == []


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_lower_precision_is_opt_in_says_how_far_it_is_from_float32_and_is_recorded(precision, tiny_model, tiny_data,
                                                                                     tmp_path, capsys, monkeypatch):
    """--int8 embeds with dynamically quantised Linear layers, --bf16 under bfloat16 autocast; without them
    everything runs in float32. Their vectors stay within a mean cosine of 0.97 of float32's on the tiny model
    (common/models/quantize.py measures 0.99 for int8 on all-MiniLM-L6-v2), printed and kept in the manifest and the
    report's embedding table. (bf16 is allowed here whatever the CPU: autocast computes the same values with or
    without native bfloat16, only slower.)"""
    from conftest import script_main
    import numpy as np
    from common.models import precision as precisions
    monkeypatch.setattr(precisions, "native_bf16", lambda: True)
    evaluate = script_main("05_evaluate.py")
    base = ["--data", str(tiny_data), "--model", f"base={tiny_model}", "--max-length", "32", "--task", "crossref"]
    evaluate(base + ["--out", str(tmp_path / "fp32")])
    capsys.readouterr()
    evaluate(base + ["--out", str(tmp_path / precision), f"--{precision}"])
    printed = capsys.readouterr().out
    found = re.search(rf"base: {precision} vectors, mean cosine ([01]\.\d{{4}}) to float32's \(first 60 documents\)",
                      printed)
    assert found, printed
    fp32, lower = np.load(tmp_path / "fp32" / "base.npy"), np.load(tmp_path / precision / "base.npy")
    cos = (fp32 * lower).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(lower, axis=1)
    assert abs(cos.mean() - float(found.group(1))) < 1e-4 and 0.97 < cos.mean() <= 1
    assert not np.array_equal(fp32, lower)  # computed in the lower precision: not the float32 vectors again
    assert f"| base | cls | no | 32 | {precision} (" in printed
    manifest = json.loads((tmp_path / precision / "manifest.json").read_text())
    assert manifest["embedding"]["base"]["precision"] == precision
    assert abs(manifest["embedding"]["base"]["mean_cosine_to_float32"] - cos.mean()) < 1e-5
    assert "precision" not in json.loads((tmp_path / "fp32" / "manifest.json").read_text())["embedding"]["base"]


def test_the_bf16_encoder_is_a_view_sharing_the_weights_and_the_float32_one_is_left_as_it_was(tiny_model,
                                                                                               monkeypatch):
    from common.models import precision
    from common.models.loading import load_encoder
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    encoder, _, _ = load_encoder(tiny_model)
    view = precision.encoder_for(encoder, "bf16")
    assert view.bf16 and not encoder.bf16 and view.transformer is encoder.transformer
    assert precision.encoder_for(encoder, "float32") is encoder


def test_bf16_is_refused_on_a_gpu_where_every_embedding_is_bfloat16_already():
    from common.io import InputError
    from common.models.precision import check
    with pytest.raises(InputError, match=r"^--bf16: on a GPU every embedding already runs in bfloat16"):
        check("bf16", "cuda")
    check("int8", "cpu"), check("float32", "cuda")  # accepted


def test_bf16_is_refused_on_a_cpu_without_native_bfloat16(tiny_model, tiny_data, tmp_path, monkeypatch, capsys):
    from conftest import script_main
    from common.io import InputError
    from common.models import precision as precisions
    monkeypatch.setattr(precisions, "native_bf16", lambda: False)
    with pytest.raises(InputError, match=r"^--bf16: this CPU has no native bfloat16 \(avx512_bf16 or AMX\)"):
        script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"base={tiny_model}", "--task", "crossref",
                                       "--out", str(tmp_path / "eval"), "--bf16"])
    assert not (tmp_path / "eval").exists() or os.listdir(tmp_path / "eval") == []
    with pytest.raises(SystemExit):
        script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"base={tiny_model}", "--out",
                                       str(tmp_path / "both"), "--bf16", "--int8"])
    assert "argument --int8: not allowed with argument --bf16" in capsys.readouterr().err


def _topic_split(x, labels):
    """Every fourth document a test document, the rest training documents."""
    ids = [f"d{i}" for i in range(len(x))]
    rows = {"train": [(ids[i], labels[i]) for i in range(len(x)) if i % 4],
            "test": [(ids[i], labels[i]) for i in range(len(x)) if i % 4 == 0]}
    return {d: i for i, d in enumerate(ids)}, rows


def test_topic_classification_reports_its_c_its_margin_over_the_next_c_its_place_in_the_grid_and_convergence(
        monkeypatch):
    import numpy as np
    from sklearn.svm import LinearSVC
    from common.eval import wikispecter
    labels = ["a", "b", "c"] * 20
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (60, 5)) * 100
    x[:, 0] += np.array(["abc".index(label) for label in labels]) * 300
    index, rows = _topic_split(x.astype(np.float32), labels)
    metrics, (truth, predicted) = wikispecter.topics(x.astype(np.float32), index, rows)
    assert {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()} == {
        "f1": 0.7222, "accuracy": 0.7333, "C": 1.0, "C_at_edge": False, "converged": True, "cv_margin": 0.0222,
        "C_tied": True}  # the next best C: one of the 45 training documents fewer right (1/45 = 0.0222)
    assert truth == labels[::4]
    per_label = []  # macro F1 by hand from the predictions returned
    for label in "abc":
        hits = sum(t == p == label for t, p in zip(truth, predicted))
        per_label.append(2 * hits / (truth.count(label) + predicted.count(label)))
    assert metrics["f1"] == pytest.approx(sum(per_label) / 3)
    # the same vectors for every document: every C scores alike, and the grid's first wins
    metrics, _ = wikispecter.topics(np.zeros((60, 5), np.float32), index, rows)
    assert (metrics["C"], metrics["C_at_edge"], metrics["converged"], metrics["cv_margin"], metrics["C_tied"]) == (
        1e-4, True, True, 0.0, True)

    class OneIteration(LinearSVC):
        def __init__(self, loss="squared_hinge", random_state=None, C=1.0, max_iter=1):
            super().__init__(loss=loss, random_state=random_state, C=C, max_iter=max_iter)

    monkeypatch.setattr("sklearn.svm.LinearSVC", OneIteration)
    assert wikispecter.topics(x.astype(np.float32), index, rows)[0]["converged"] is False


def test_documents_scored_embeds_only_what_crossref_and_topics_read_and_scores_them_as_all_does(tiny_model, tiny_data,
                                                                                               tmp_path):
    """--documents scored: the vectors of the cross-reference queries, their candidates and the topic documents
    alone, in docs.jsonl's order, each the same as in the run that embeds every document, and the same figures;
    beside a task that reads other documents, one line."""
    import numpy as np
    from conftest import run_main
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
    qrels = (data / "crossref.qrels").read_text().splitlines()
    first = qrels[0].split()[0]
    (data / "crossref.qrels").write_text("".join(line + "\n" for line in qrels if line.split()[0] == first))
    for part, n in (("train", 4), ("test", 2)):  # two labels, n documents of each
        rows = [json.loads(line) for line in (data / f"topics.top.{part}.jsonl").read_text().splitlines()]
        labels = sorted({r["label"] for r in rows})[:2]
        kept = [r for label in labels for r in [x for x in rows if x["label"] == label][:n]]
        (data / f"topics.top.{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    args = ["--data", data, "--model", f"base={tiny_model}", "--task", "crossref", "topics", "lexical",
            "--resplits", "0", "--resamples", "50"]
    run_main("05_evaluate.py", *args, "--out", tmp_path / "all")
    run_main("05_evaluate.py", *args, "--documents", "scored", "--out", tmp_path / "scored")
    every = (tmp_path / "all" / "base.ids.txt").read_text().split()
    wanted = {first} | {line.split()[2] for line in (data / "crossref.qrels").read_text().splitlines()}
    for part in ("train", "test"):
        wanted |= {json.loads(line)["id"] for line in (data / f"topics.top.{part}.jsonl").read_text().splitlines()}
    scored = (tmp_path / "scored" / "base.ids.txt").read_text().split()
    assert scored == [doc for doc in every if doc in wanted] and len(scored) < len(every) == 60
    rows = [every.index(doc) for doc in scored]
    np.testing.assert_allclose(np.load(tmp_path / "scored" / "base.npy"), np.load(tmp_path / "all" / "base.npy")[rows],
                               atol=1e-6, rtol=0)
    found = [json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("all", "scored")]
    assert found[1] == found[0]
    assert script_error("05_evaluate.py", "--data", data, "--model", f"base={tiny_model}", "--task", "crossref",
                        "classify", "--documents", "scored", "--out", tmp_path / "x") == \
        ("error: --documents scored: only for --task crossref lexical topics, whose documents their files name; "
         "classify reads others")
