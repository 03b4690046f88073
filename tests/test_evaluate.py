"""05_evaluate.py: what it refuses, with one line and nothing written."""

import json
import os
import re
import shutil

import pytest

from conftest import forget_hashes, script_error, script_module


@pytest.mark.parametrize("case", ["unknown-id", "bad-qrels-line", "task", "no-dir", "model-syntax", "model-name",
                                  "topic-level", "topic-one-label", "topic-two-per-label", "topic-unknown-id",
                                  "no-model", "qrels-is-a-dir", "out-is-a-file"])
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
    elif case == "topic-two-per-label":  # the 3-fold grid search of C would fail in its forked process
        train = data / "topics.top.train.jsonl"
        train.write_text('{"id": "d0", "label": "tiede"}\n{"id": "d3", "label": "tiede"}\n'
                         '{"id": "d1", "label": "taide"}\n{"id": "d4", "label": "taide"}\n')
        expected = (f"error: {train}: no label has 3 documents; the 3-fold grid search of the classifier's C needs "
                    "a label with one in each fold")
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


@pytest.mark.slow
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


# -- every flag of 05 declared in 05 --------------------------------------------------------------------------------

def test_every_flag_of_every_05_command_is_declared_in_05_itself(monkeypatch):
    """A reader of 05_evaluate.py finds each of its flags there, with its default, help and limit: no flag of
    evaluate, extract or search is added by a function elsewhere."""
    import argparse
    import sys
    from conftest import ROOT
    from common import cli
    declared = []
    add = argparse._ActionsContainer.add_argument

    def recording(self, *args, **kwargs):
        where = sys._getframe(1).f_code.co_filename
        declared.append((args[0], where if where == argparse.__file__ else os.path.relpath(where, ROOT)))
        return add(self, *args, **kwargs)

    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", recording)
    import importlib.util
    spec = importlib.util.spec_from_file_location("script_05_layout", os.path.join(ROOT, "05_evaluate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (_, add_arguments, _) in module.COMMANDS.items():
        parser = cli.parser(name)
        add_arguments(parser)
        for action in parser._actions:
            assert action.help, f"05 {name} {action.dest}: no help"
    elsewhere = [(flag, where) for flag, where in declared if where not in ("05_evaluate.py", argparse.__file__)]
    assert elsewhere == [] and len(declared) > 40


# -- names that collide ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["lexical", "bm25", "twice", "twice-same-path", "baseline-later"])
def test_a_model_name_is_unique_and_never_a_row_05_adds_itself(tiny_model, tiny_data, tmp_path, case):
    """--model lexical=… was silently replaced by the lexical baseline's figures (and --compare compared the
    baseline); --model a=X --model a=Y kept Y alone. Each is one line before anything is read or written."""
    other = tmp_path / "other"
    args = {"lexical": [f"lexical={tiny_model}"], "bm25": [f"bm25={tiny_model}"],
            "twice": [f"a={tiny_model}", f"a={other}"], "twice-same-path": [f"a={tiny_model}", f"a={tiny_model}"],
            "baseline-later": [f"a={tiny_model}", f"lexical={other}"]}[case]
    expected = {
        "lexical": f"error: --model 'lexical={tiny_model}': NAME 'lexical' is the row of the lexical baseline, which 05 "
                   "adds itself; give the model another name",
        "bm25": f"error: --model 'bm25={tiny_model}': NAME 'bm25' is the row of the BM25 baseline, which 05 adds "
                "itself; give the model another name",
        "twice": f"error: --model 'a={other}': NAME 'a' is given twice (also 'a={tiny_model}'); give each model a "
                 "name of its own",
        "twice-same-path": f"error: --model 'a={tiny_model}': NAME 'a' is given twice (also 'a={tiny_model}'); give "
                           "each model a name of its own",
        "baseline-later": f"error: --model 'lexical={other}': NAME 'lexical' is the row of the lexical baseline, which "
                          "05 adds itself; give the model another name"}[case]
    models = [x for value in args for x in ("--model", value)]
    assert script_error("05_evaluate.py", "--data", tiny_data, *models, "--out", tmp_path / "eval",
                        "--compare", "a=lexical" if case != "lexical" else "lexical=lexical") == expected
    assert not (tmp_path / "eval").exists()


def test_a_colliding_name_exits_with_status_2_and_writes_nothing(tiny_model, tiny_data, tmp_path):
    assert script_error("05_evaluate.py", "--data", tiny_data, "--model", f"lexical={tiny_model}", "--out",
                        tmp_path / "eval", in_subprocess=True) == (
        f"error: --model 'lexical={tiny_model}': NAME 'lexical' is the row of the lexical baseline, which 05 adds "
        "itself; give the model another name")
    assert not (tmp_path / "eval").exists()


# -- what a user sees: the cards by name, the precision that ran ----------------------------------------------------

def test_the_printed_table_names_each_card_and_report_md_links_it(tiny_model, tiny_data, tmp_path, capsys):
    """A card is named by its folder's name (and its parent's) in the printed table, never by a path that climbs
    out of --out; report.md links it by that relative path."""
    from conftest import script_main
    run = tmp_path / "runs" / "trained"
    shutil.copytree(tiny_model, run / "model")
    (run / "model" / "README.md").write_text("# card\n")
    out = tmp_path / "work" / "eval"
    script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"trained={run / 'model'}", "--model",
                                   f"plain={tiny_model}", "--out", str(out), "--task", "crossref",
                                   "--resamples", "0"])
    printed = capsys.readouterr().out
    assert "| trained | " in printed and printed.count(" trained/model |") == 1 and ".." not in printed
    assert re.search(r"^\| plain \| .* \| – \|$", printed, re.M)
    assert " [trained/model](../../runs/trained/model/README.md) |" in (out / "report.md").read_text()


@pytest.mark.parametrize("asked, device, ran", [("float32", "cpu", "float32"), ("float32", "cuda", "bf16"),
                                                ("bf16", "cpu", "bf16"), ("int8", "cpu", "int8")])
def test_the_precision_recorded_is_the_one_that_ran_on_the_device(asked, device, ran):
    """On a GPU every embedding runs under bfloat16 autocast (inference.embed), so float32 asked for is bf16 run."""
    from common.eval.embedding import precision_run
    assert precision_run(asked, device) == ran


def test_a_gpu_run_is_recorded_as_bf16_in_the_manifest_and_the_report(tiny_model, tiny_data, tmp_path, monkeypatch,
                                                                       capsys):
    """The manifest and the report's embedding table take the precision from where the encoder's weights are: an
    encoder on a (faked) CUDA device, embedding without --bf16, is recorded as bf16, its cosine to float32 not
    measured (float32 itself runs under autocast there)."""
    from conftest import script_main
    from common.eval import embedding
    monkeypatch.setattr(embedding, "device_type", lambda encoder: "cuda")
    out = tmp_path / "eval"
    script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"base={tiny_model}", "--out", str(out),
                                   "--task", "crossref", "--resamples", "0"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["embedding"]["base"] == {"pooling": "cls", "normalize": False, "max_length": 64,
                                             "precision": "bf16", "mean_cosine_to_float32": None}
    assert "| base | cls | no | 64 | bf16 (not measured) |" in capsys.readouterr().out


# -- numbers in the files 05 reads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rel, shown", [("1" * 300, '"' + "1" * 39 + "…"), ("99999999999", '"99999999999"'),
                                        ("2147483648", '"2147483648"'), ("-2147483649", '"-2147483649"'),
                                        ("1.5", '"1.5"'), ("abc", '"abc"'), ("²", '"²"'), ("١", '"١"'),
                                        ("+1", '"+1"')])
def test_a_qrels_relevance_is_a_whole_number_within_a_c_int(tmp_path, rel, shown):
    """Every qrels file 05 reads (crossref.qrels, similarity.qrels, retrieval.test.qrels) goes through one reader:
    hundreds of digits, a fraction, a superscript or another script's digit are one line naming the line."""
    from common.io import InputError, read_trec_qrels
    path = tmp_path / "crossref.qrels"
    path.write_text(f"q 0 d1 1\nq 0 d2 {rel}\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trec_qrels(str(path))
    assert str(e.value) == (f"{path}:2: relevance {shown} is not a whole number between -2,147,483,648 and "
                            "2,147,483,647 (trec_eval's)")
    path.write_text("q 0 d1 2147483647\nq 0 d2 -2147483648\nq 0 d3 0\n")
    assert read_trec_qrels(str(path)) == {"q": {"d1": 2147483647, "d2": -2147483648, "d3": 0}}


@pytest.mark.parametrize("score, shown", [('"abc"', '"abc"'), ("[1]", "[1]"), ("true", "true"), ("null", "null"),
                                          ('"0.5"', '"0.5"'), ("{}", "{}")])
def test_a_similarity_rating_is_a_json_number(tmp_path, score, shown):
    from common.eval.similarity import read_ratings
    from common.io import InputError
    path = tmp_path / "similarity.ratings.jsonl"
    path.write_text('{"a": "d0", "b": "d1", "score": 0.25}\n{"a": "d0", "b": "d2", "score": ' + score + "}\n")
    with pytest.raises(InputError) as e:
        read_ratings(str(path), {"d0": 0, "d1": 1, "d2": 2})
    assert str(e.value) == f"{path}:2: field 'score' must be a number, not {shown}"
    path.write_text('{"a": "d0", "b": "d1", "score": 0.25}\n{"a": "d0", "b": "d2", "score": -3}\n')
    pairs, scores = read_ratings(str(path), {"d0": 0, "d1": 1, "d2": 2})
    assert pairs.tolist() == [[0, 1], [0, 2]] and scores.tolist() == [0.25, -3.0]
    path.write_text('{"a": ["d0"], "b": "d1", "score": 0.25}\n')
    with pytest.raises(InputError, match=re.escape(f"{path}:1: id ['d0'] (field 'a') is not in docs.jsonl")):
        read_ratings(str(path), {"d0": 0, "d1": 1})


@pytest.mark.parametrize("line, expected", [
    ('{"id": "d0", "label": true}', "field 'label' must be a string or a whole number, not true"),
    ('{"id": "d0", "label": 1.5}', "field 'label' must be a string or a whole number, not 1.5"),
    ('{"id": "d0", "label": [1]}', "field 'label' must be a string or a whole number, not [1]"),
    ('{"id": "d0", "label": null}', "field 'label' must be a string or a whole number, not null"),
    ('{"id": ["d0"], "label": "a"}', "id ['d0'] is not in docs.jsonl"),
    ('{"ids": "d0", "label": "a"}', "field 'ids' must be a pair of ids, not \"d0\""),
    ('{"ids": ["d0"], "label": "a"}', "field 'ids' must be a pair of ids, not [\"d0\"]"),
    ('{"ids": 5, "label": "a"}', "field 'ids' must be a pair of ids, not 5")])
def test_a_classification_label_is_a_string_or_a_whole_number_and_its_ids_are_ids(tmp_path, line, expected):
    from common.eval.classify import read_split
    from common.io import InputError
    path = tmp_path / "classify.x.train.jsonl"
    path.write_text('{"id": "d1", "label": "a"}\n' + line + "\n")
    with pytest.raises(InputError) as e:
        read_split(str(path), {"d0": 0, "d1": 1})
    assert str(e.value) == f"{path}:2: {expected}"
    path.write_text('{"id": "d1", "label": 3}\n{"id": "d0", "label": "3"}\n')
    assert read_split(str(path), {"d0": 0, "d1": 1})[1] == ["3", "3"]


@pytest.mark.parametrize("labels", ["[true, 0]", "[1.0, 0]", "[2, 0]", '["1", 0]', "[-1, 0]"])
def test_a_key_sentence_label_is_the_whole_number_0_or_1(tmp_path, labels):
    from common.data.keysent_splits import read_sentences
    from common.io import InputError
    path = tmp_path / "keysent.test.jsonl"
    path.write_text('{"id": "a", "sentences": ["x", "y"], "labels": [1, 0]}\n'
                    '{"id": "b", "sentences": ["x", "y"], "labels": ' + labels + "}\n")
    with pytest.raises(InputError) as e:
        read_sentences(str(path))
    assert str(e.value) == f"{path}:2: field 'labels' must hold one 0 or 1 per sentence"


@pytest.mark.parametrize("record, expected", [
    ('{"step": 4, "val_ap_max": "x"}', "field 'val_ap_max' must be a number between 0 and 1, not \"x\""),
    ('{"step": 4, "val_ap_max": 0.5, "val_ap_cosine": 1.5}',
     "field 'val_ap_cosine' must be a number between 0 and 1, not 1.5"),
    ('{"step": 4, "val_ap_max": true}', "field 'val_ap_max' must be a number between 0 and 1, not true"),
    ('{"step": "4", "val_ap_max": 0.5}', "field 'step' must be a whole number of at least 0, not \"4\""),
    ('{"step": 4.5, "val_ap_max": 0.5}', "field 'step' must be a whole number of at least 0, not 4.5"),
    ('{"val_ap_max": 0.5}', "field 'step' must be a whole number of at least 0, not null")])
def test_the_scores_of_a_runs_log_that_05_draws_are_numbers_in_range(tmp_path, record, expected):
    """The key-sentence task draws each run's validation AP from RUN/log.jsonl beside RUN/model."""
    from common.eval.keysent import _run_log
    from common.io import InputError
    (tmp_path / "model").mkdir()
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "epoch": 0, "loss": 0.5, "lr": 0.1, "steps_per_s": 2.0}\n'
                   '{"step": 2, "val_ap_max": 0.75, "val_ap_cosine": 0.75, "val_ap_dot": null}\n' + record + "\n")
    with pytest.raises(InputError) as e:
        _run_log(str(tmp_path / "model"))
    assert str(e.value) == f"{log}:3: {expected}"
    log.write_text('{"step": 2, "val_ap_max": 0.75, "val_ap_cosine": 0.75, "val_ap_dot": null}\n')
    assert _run_log(str(tmp_path / "model")) == [{"step": 2, "val_ap_max": 0.75, "val_ap_cosine": 0.75,
                                                 "val_ap_dot": None}]


@pytest.mark.parametrize("case", ["rating", "qrels", "topic-id"])
def test_a_bad_number_in_a_data_file_stops_05_with_one_line_and_nothing_written(tiny_model, tiny_data, tmp_path,
                                                                                 case):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
    task = {"rating": "similarity", "qrels": "crossref", "topic-id": "topics"}[case]
    if case == "rating":
        path = data / "similarity.ratings.jsonl"
        path.write_text('{"a": "d0", "b": "d1", "score": 0.5}\n{"a": "d0", "b": "d2", "score": true}\n')
        expected = f"error: {path}:2: field 'score' must be a number, not true"
    elif case == "qrels":
        path = data / "crossref.qrels"
        lines = path.read_text().splitlines()
        lines[1] = " ".join(lines[1].split()[:3] + ["9" * 400])
        path.write_text("\n".join(lines) + "\n")
        expected = (f"error: {path}:2: relevance \"{'9' * 39}… is not a whole number between -2,147,483,648 and "
                    "2,147,483,647 (trec_eval's)")
    else:
        path = data / "topics.top.test.jsonl"
        path.write_text(path.read_text() + '{"id": ["d0"], "label": "tiede"}\n')
        expected = f"error: {path}:{len(path.read_text().splitlines())}: id ['d0'] is not in docs.jsonl"
    assert script_error("05_evaluate.py", "--data", data, "--model", f"base={tiny_model}", "--task", task, "--out",
                        tmp_path / "eval") == expected
    assert not (tmp_path / "eval").is_dir() or os.listdir(tmp_path / "eval") == []


def test_05_says_and_records_how_its_time_split_between_embedding_and_the_rest(tiny_model, tiny_data, tmp_path,
                                                                              capsys):
    """The embedding (loading each model and embedding its documents) against everything else: the line 05 prints
    last but one, and the manifest's seconds, from which docs/benchmarks.md takes the ratio."""
    from conftest import script_main
    from common.eval.report import time_split
    assert time_split(40.0, 52.5) == "time: 40.0 s embedding, 12.5 s everything else (0.31 × the embedding's)\n"
    assert time_split(0.0, 3.0) == "time: 0.0 s embedding, 3.0 s everything else\n"
    out = tmp_path / "eval"
    script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"a={tiny_model}", "--model",
                                   f"b={tiny_model}", "--out", str(out), "--task", "crossref", "--resamples", "0"])
    seconds = json.loads((out / "manifest.json").read_text())["seconds"]
    assert set(seconds) == {"embedding", "total"} and 0 < seconds["embedding"] < seconds["total"]
    line = capsys.readouterr().out.splitlines()[-2]
    assert re.fullmatch(r"time: \d+\.\d s embedding, \d+\.\d s everything else \(\d+\.\d\d × the embedding's\)", line)
