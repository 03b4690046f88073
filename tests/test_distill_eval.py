"""The thesis's evaluation: the classification head's training-set cuts, similarity ranking by hand, and the Lee
corpus gensim installs, through 05_evaluate.py."""

import importlib.util
import json
import os

import numpy as np
import pytest

from conftest import ROOT, script_error

from common import io
from common.outdir import folders
from common.data import testsets
from common.eval import classify, similarity


def test_training_cuts_take_the_first_documents_of_each_label_in_proportion():
    labels = ["a", "a", "a", "b", "b", "c"]
    assert classify.shorten(labels, 3).tolist() == [0, 3, 5]  # a 1, b 1, c 0 → the rarest topped up
    assert classify.shorten(labels, 10).tolist() == list(range(6))


def test_the_head_separates_separable_documents_and_pairs_are_concatenated():
    rng = np.random.default_rng(0)
    emb = np.concatenate([rng.normal(-2, 0.3, (30, 4)), rng.normal(2, 0.3, (30, 4))]).astype(np.float32)
    labels = ["neg"] * 30 + ["pos"] * 30
    order = rng.permutation(60)
    train = (order[:40, None], [labels[i] for i in order[:40]])
    test = (order[40:, None], [labels[i] for i in order[40:]])
    accuracy, sample, _ = classify.classify(emb, train, test)
    assert accuracy == {"acc_1k": 1.0, "acc_10k": 1.0, "acc_all": 1.0}
    assert sample.names == ("acc_1k", "acc_10k", "acc_all") and sample.values.tolist() == [[1.0] * 3] * 20
    pairs = np.array([[0, 1], [2, 3]])
    assert classify.features(emb, pairs).tolist() == [emb[0].tolist() + emb[1].tolist(),
                                                      emb[2].tolist() + emb[3].tolist()]


@pytest.mark.parametrize("losses, moving", [
    ([2.20, 2.15, 2.10, 2.05], True),  # the second half's fall (0.10) twice the first's (0.05)
    ([2.20, 1.00, 0.90, 0.88], False),  # 0.12 after 1.20: a tenth
    ([0.50, 0.50, 0.50, 0.50], False),
    ([0.48, 0.54, 0.52, 0.50], True),  # rose, then fell
    ([0.9], False),
])
def test_a_head_is_unsettled_while_its_loss_falls_late_by_a_quarter_of_its_early_fall(losses, moving):
    assert classify.unsettled(losses) is moving


def test_a_head_of_too_few_epochs_is_reported_and_the_same_head_trained_longer_is_not():
    rng = np.random.default_rng(0)
    emb = np.concatenate([rng.normal(-2, 0.3, (30, 4)), rng.normal(2, 0.3, (30, 4))]).astype(np.float32)
    labels = ["neg"] * 30 + ["pos"] * 30
    train, test = (np.arange(0, 60, 2)[:, None], labels[::2]), (np.arange(1, 60, 2)[:, None], labels[1::2])
    _, _, moving = classify.classify(emb, train, test, epochs=10)
    assert list(moving) == ["acc_1k", "acc_10k", "acc_all"]  # 30 documents: the three heads are one
    assert classify.classify(emb, train, test, epochs=400)[2] == {}


def test_similarity_ranks_the_corpus_without_the_source_and_scores_map_and_mrr():
    emb = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.7, 0.7]])
    index = {f"d{i}": i for i in range(4)}
    # d0 ranks d1, d3, d2; its targets d3 (rank 2) and d2 (rank 3): AP (1/2 + 2/3) / 2, first hit at rank 2
    got, sample = similarity.ranking(emb, index, {"d0": {"d3": 1, "d2": 1, "d1": 0}})
    assert got == pytest.approx({"map": (1 / 2 + 2 / 3) / 2, "mrr": 1 / 2})
    assert sample.names == ("map", "mrr") and sample.values.shape == (1, 2)  # one source: one row
    assert sample.values[0].tolist() == pytest.approx([(1 / 2 + 2 / 3) / 2, 1 / 2])


def test_the_lee_corpus_becomes_a_similarity_data_directory_that_05_scores(tiny_model, tmp_path):
    with folders.Outputs(tmp_path / "lee") as out:
        counts = testsets.lee(out)
    assert counts == {"documents": 50, "rated_pairs": 1225, "similarity_targets": 286}
    first = json.loads((tmp_path / "lee" / "similarity.ratings.jsonl").read_text().split("\n")[0])
    assert first == {"a": "lee0", "b": "lee1", "score": 0.3}
    spec = importlib.util.spec_from_file_location("evaluate_script", os.path.join(ROOT, "05_evaluate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--data", str(tmp_path / "lee"), "--model", f"tiny={tiny_model}", "--out", str(tmp_path / "eval")])
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert set(metrics["tiny"]) == {"similarity"} and set(metrics["tiny"]["similarity"]) == {
        "map", "mrr", "spearman", "map_ci", "mrr_ci", "spearman_ci"}
    emb = np.load(tmp_path / "eval" / "tiny.npy").astype(np.float64)
    pairs, scores = similarity.read_ratings(str(tmp_path / "lee" / "similarity.ratings.jsonl"),
                                            {f"lee{i}": i for i in range(50)})
    from scipy.stats import bootstrap, spearmanr
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    cosine = (unit[pairs[:, 0]] * unit[pairs[:, 1]]).sum(1)
    expected = spearmanr(cosine, scores).statistic
    assert metrics["tiny"]["similarity"]["spearman"] == pytest.approx(expected, abs=1e-6)
    # the interval: 05's default 1,000 resamples of the rated pairs, drawn from its default seed, as scipy draws them
    reference = bootstrap((cosine, scores), lambda x, y: spearmanr(x, y).statistic, paired=True, vectorized=False,
                          n_resamples=1000, method="percentile", rng=np.random.default_rng(42))
    assert metrics["tiny"]["similarity"]["spearman_ci"] == pytest.approx(list(reference.confidence_interval),
                                                                         abs=1e-6)


def test_an_empty_classification_split_is_one_line(tmp_path):
    index = {f"d{i}": i for i in range(4)}
    (tmp_path / "classify.x.train.jsonl").write_text("")
    with pytest.raises(io.InputError) as e:
        classify.read_split(str(tmp_path / "classify.x.train.jsonl"), index)
    assert str(e.value) == f"{tmp_path}/classify.x.train.jsonl: no rows (an empty split); rebuild the data with " \
                           "more documents"


def test_testsets_refuse_a_foreign_folder_and_an_impossible_threshold_and_commit_both_parts_or_neither(
        tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("graph_script", os.path.join(ROOT, "02_build_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(io.InputError) as e:
        module.main(["testsets", "--out", str(tmp_path)])
    assert str(e.value) == f"{tmp_path}: not empty and not an output folder of this project (no manifest.json); " \
                           "give a new or empty folder"
    for value in ("-1", "nan"):
        assert script_error("02_build_graph.py", "testsets", "--out", tmp_path / "t", "--lee-threshold", value) == \
            f"error: argument --lee-threshold: {value}: must be a share between 0 and 1"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]

    def unreadable(out, seed):
        raise io.InputError("mini_newsgroup: unreadable")
    monkeypatch.setattr(testsets, "newsgroups", unreadable)
    with pytest.raises(io.InputError):
        module.main(["testsets", "--out", str(tmp_path / "t")])
    assert [(d, f) for d, _, f in os.walk(tmp_path / "t") if f] == []  # lee was built, but not committed


def test_distill_probe_refits_the_teachers_axes_and_scores_each_step_to_the_students_target(tmp_path, capsys):
    """reproduce/distill_probe.py: the axes refitted from TEACH/sbert_full.npy give 04 teachers' projected vectors
    exactly, and each row's MAP is 05's crossref MAP of those vectors (trec_eval's, through pytrec_eval)."""
    import importlib.util
    import numpy as np
    import pytrec_eval
    from common.distill import teachers
    spec = importlib.util.spec_from_file_location("distill_probe", os.path.join(ROOT, "reproduce", "distill_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    rng = np.random.default_rng(0)
    teach, data, ev, raw = (tmp_path / n for n in ("teach", "data", "eval", "raw"))
    for d in (teach, data, ev, raw):
        d.mkdir()
    full = (rng.normal(size=(60, 20)) * np.linspace(5, 0.1, 20)).astype(np.float32)
    axes, _ = teachers.principal_axes(full, 18, 7)
    np.save(teach / "sbert_full.npy", full)
    (teach / "manifest.json").write_text(json.dumps({"seed": 7, "counts": {"teacher_dim": 18}}))
    ids = [f"d{i}" for i in range(12)]
    (data / "docs.jsonl").write_text("".join(json.dumps({"id": i, "title": i, "text": i}) + "\n" for i in ids))
    qrels = {"d0": {"d1": 1, "d2": 1, "d3": 0, "d4": 0, "d5": 0}, "d6": {"d7": 1, "d8": 0, "d9": 0, "d10": 1, "d11": 0}}
    (data / "crossref.qrels").write_text("".join(f"{q} 0 {d} {r}\n" for q, j in qrels.items() for d, r in j.items()))
    vectors = {"sbert": rng.normal(size=(12, 20)), "sbert-raw": rng.normal(size=(12, 20)),
               "student": rng.normal(size=(12, 18))}
    for name, x in vectors.items():
        folder = raw if name == "sbert-raw" else ev
        np.save(folder / f"{name}.npy", x.astype(np.float32))
        (folder / f"{name}.ids.txt").write_text("".join(i + "\n" for i in ids))
    probe.sys.argv = ["distill_probe.py", "--data", str(data), "--teach", str(teach), "--eval", str(ev), "--raw",
                      str(raw), "--student", "student"]
    probe.main()
    lines = capsys.readouterr().out.splitlines()

    def trec_map(x):
        run = {q: {d: -float(np.linalg.norm(x[ids.index(d)] - x[ids.index(q)])) for d in j} for q, j in qrels.items()}
        found = pytrec_eval.RelevanceEvaluator(qrels, {"map"}).evaluate(run)
        return 100 * np.mean([v["map"] for v in found.values()])

    raw32 = vectors["sbert-raw"].astype(np.float32).astype(np.float64)
    target = raw32 @ axes.T.astype(np.float64)
    student = vectors["student"].astype(np.float32).astype(np.float64)
    cos = np.mean([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(student, target)])
    unit = student / np.linalg.norm(student, axis=1, keepdims=True)
    assert lines[2].endswith(f"| {trec_map(vectors['sbert'].astype(np.float32)):.2f} |  |  |  |  |  |")
    assert lines[3].endswith(f"| {trec_map(raw32):.2f} |  |  |  |  |  |")
    target_unit = target / np.linalg.norm(target, axis=1)[:, None]
    assert lines[4].endswith(f"| {trec_map(target):.2f} | {trec_map(target_unit):.2f} |  |  |  |  |")
    assert "18 axes" in lines[4]
    top = target[:, :16]
    assert lines[5] == (f"| the target's top 16 axes alone | {trec_map(top):.2f} | "
                        f"{trec_map(top / np.linalg.norm(top, axis=1)[:, None]):.2f} |  |  |  |  |")

    def r2(a, b):
        return 1 - ((a - b) ** 2).sum() / ((b - b.mean(axis=0)) ** 2).sum()
    centred = target - full.astype(np.float64).mean(axis=0) @ axes.T.astype(np.float64)
    cos_centred = np.mean([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(student, centred)])
    assert lines[6] == (f"| student | {trec_map(student):.2f} | {trec_map(unit):.2f} | {cos:.3f} | {cos_centred:.3f} | "
                        f"{r2(student[:, :16], top):.3f} | {r2(student[:, 16:], target[:, 16:]):.3f} |")
    # the refitted axes are 04 teachers' own: its projection of the full vectors, to the last bit
    out = np.zeros((60, 18), dtype=np.float32)

    class Flushing(np.ndarray):
        def flush(self):
            pass
    projected = teachers.project_rows(full, axes, out.view(Flushing))
    refitted, _, _ = probe.teacher_axes(str(teach))
    assert np.array_equal(full @ refitted.T, projected)


def test_distill_fit_gives_each_epochs_cosine_to_the_target_on_training_and_held_out_documents(tiny_model, tmp_path,
                                                                                                  capsys):
    """reproduce/distill_fit.py: each saved epoch's mean cosine to the target, the student embedded as transformers
    computes it ([CLS], the tiny model has no sentence-transformers config), the held-out target being that
    documents' full teacher vectors projected onto the training teachers' PCA axes."""
    import importlib.util
    import shutil
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer
    from common.distill import teachers
    spec = importlib.util.spec_from_file_location("distill_fit", os.path.join(ROOT, "reproduce", "distill_fit.py"))
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    rng = np.random.default_rng(3)
    words = "alpha beta gamma delta tiede taide maa".split()
    full = {}
    for part, n in (("train", 40), ("heldout", 9)):
        data, teach = tmp_path / f"{part}-data", tmp_path / f"{part}-teach"
        data.mkdir()
        teach.mkdir()
        ids = [f"{part}{i}" for i in range(n)]
        (data / "docs.jsonl").write_text("".join(json.dumps({"id": i, "title": i, "text": " ".join(
            rng.choice(words, 12))}) + "\n" for i in ids))
        full[part] = (rng.normal(size=(n, 40)) * np.linspace(3, 0.2, 40)).astype(np.float32)
        np.save(teach / "sbert_full.npy", full[part])
        (teach / "sbert_full.ids.txt").write_text("".join(i + "\n" for i in ids))
    axes, _ = teachers.principal_axes(full["train"], 32, 7)
    np.save(tmp_path / "train-teach" / "sbert.npy", full["train"] @ axes.T)
    (tmp_path / "train-teach" / "sbert.ids.txt").write_text("".join(f"train{i}\n" for i in range(40)))
    (tmp_path / "train-teach" / "manifest.json").write_text(json.dumps({"seed": 7, "counts": {"teacher_dim": 32}}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"args": {"epochs": 2, "model": str(tiny_model)},
                                                   "counts": {"steps": 10}}))
    shutil.copytree(tiny_model, run / "epoch_1")
    model = AutoModel.from_pretrained(str(tiny_model))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.8)
    model.save_pretrained(str(run / "epoch_2"))
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(str(run / "epoch_2"))
    fit.main(["--train", str(tmp_path / "train-data"), "--teachers", str(tmp_path / "train-teach"),
              "--heldout", str(tmp_path / "heldout-data"), "--heldout-teachers", str(tmp_path / "heldout-teach"),
              "--run", f"s={run}", "--max-length", "24", "--goal", "0.99"])
    lines = capsys.readouterr().out.splitlines()

    def cosine(folder, part, target):
        tokenizer, encoder = AutoTokenizer.from_pretrained(str(folder)), AutoModel.from_pretrained(str(folder)).eval()
        docs = [json.loads(line) for line in open(tmp_path / f"{part}-data" / "docs.jsonl")]
        batch = tokenizer([f"{d['title']}[SEP]{d['text']}" for d in docs], truncation=True, max_length=24,
                          padding=True, return_tensors="pt")
        with torch.no_grad():
            y = encoder(**batch).last_hidden_state[:, 0].double().numpy()
        t = np.asarray(target, dtype=np.float64)
        return np.mean((y * t).sum(1) / np.linalg.norm(y, axis=1) / np.linalg.norm(t, axis=1))

    assert lines[:2] == ["| run | epoch | steps | cosine, 40 training documents | cosine, 9 held-out documents |",
                         "|---|---:|---:|---:|---:|"]
    targets = {"train": np.load(tmp_path / "train-teach" / "sbert.npy"),
               "heldout": full["heldout"].astype(np.float64) @ axes.T.astype(np.float64)}
    for line, (epoch, step, folder) in zip(lines[2:5], ((0, 0, tiny_model), (1, 5, run / "epoch_1"),
                                                        (2, 10, run / "epoch_2"))):
        assert line == (f"| s | {epoch} | {step:,} | {cosine(folder, 'train', targets['train']):.3f} | "
                        f"{cosine(folder, 'heldout', targets['heldout']):.3f} |")
    assert lines[5].startswith("s: the training documents' cosine reaches ")
    # held-out documents that are training documents are refused
    with pytest.raises(io.InputError, match="are in --train"):
        fit.main(["--train", str(tmp_path / "train-data"), "--teachers", str(tmp_path / "train-teach"),
                  "--heldout", str(tmp_path / "train-data"), "--heldout-teachers", str(tmp_path / "train-teach"),
                  "--run", f"s={run}"])


def test_distill_fit_projects_the_steps_to_the_goal_linearly_in_log_steps():
    import importlib.util
    spec = importlib.util.spec_from_file_location("distill_fit", os.path.join(ROOT, "reproduce", "distill_fit.py"))
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    # cosine = 0.1 + 0.2 * log10(steps) over the last three epochs: 0.9 at 10 ** 4
    rows = [(0, 0.0), (10, 0.3), (100, 0.5), (1000, 0.7)]
    assert fit.projection(rows, 0.9) == pytest.approx(10_000)
    assert fit.projection([(0, 0.0), (10, 0.5), (100, 0.4)], 0.9) is None
