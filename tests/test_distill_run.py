"""04_distill.py as a user runs it, in-process on the tiny model: teacher files aligned with docs.jsonl, a
reproducible Paragraph-Vector teacher past gensim's 10,000 words, training that resumes bit-identically with its
heads and running covariances, a student sentence-transformers loads, and bad teacher files refused in one line."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, forget_hashes, one_error_line, read_jsonl, run_script, script_error, unfinish

from common.data.docs_jsonl import Documents
from common.distill.paragraph_vector import MAX_WORDS, ParagraphVector, chunks
from common.io import InputError

TRAIN = ["--max-length", "64", "--batch-size", "4", "--grad-accum", "1", "--warmup", "0", "--log-every", "1",
         "--checkpoint-every", "5", "--keep", "10", "--length-buckets", "0", "--preset", "cosine-masked",
         "--student-projection", "16(relu)x8", "--teacher-projection", "", "--max-structural-length", "12",
         "--epochs", "1"]


def distill():
    spec = importlib.util.spec_from_file_location("distill_script", os.path.join(ROOT, "04_distill.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_teacher_rows_follow_docs_jsonl_and_lengths_exclude_special_tokens(teach, tiny_model, tiny_data):
    from transformers import AutoTokenizer

    from common.models.loading import load_encoder
    docs = Documents(tiny_data)
    for name in ("sbert", "pv", "lengths"):
        with open(teach / f"{name}.ids.txt", encoding="utf-8") as f:
            assert f.read().split("\n")[:-1] == docs.ids
    sbert, lengths = np.load(teach / "sbert.npy"), np.load(teach / "lengths.npy")
    assert sbert.shape == (len(docs.ids), 32) and np.load(teach / "pv.npy").shape == (len(docs.ids), 8)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    text = docs.inputs(tokenizer.sep_token)[7]
    assert lengths[7] == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean", normalize=False)
    enc = tokenizer([text], truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        expected = encoder.eval().embed(enc["input_ids"], enc["attention_mask"])[0].numpy()
    np.testing.assert_allclose(sbert[7], expected, rtol=1e-4, atol=1e-5)  # mean-pooled, not normalised


def test_paragraph_vectors_are_reproducible_order_free_and_read_past_ten_thousand_words():
    vocab = [f"w{i}" for i in range(40)]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(vocab[:20], 30)) for _ in range(20)]
    head = " ".join(rng.choice(vocab[:20], MAX_WORDS))
    long_a, long_b = head + " " + " ".join(["w30"] * 500), head + " " + " ".join(["w31"] * 500)
    texts += [long_a, long_b, " ".join(["w30", "w31"] * 20)]
    assert [len(c) for c in chunks(long_a.split())] == [MAX_WORDS, 500]
    counts = {}
    a = ParagraphVector.train(texts, vector_size=8, min_count=1, epochs=2, counts=counts)
    b = ParagraphVector.train(texts, vector_size=8, min_count=1, epochs=2)
    assert counts["pv_documents_chunked"] == 2 and len(a.models["dm"].dv) == len(texts)  # chunks share a tag
    forward = a.embed(texts)
    np.testing.assert_array_equal(forward, b.embed(texts))
    np.testing.assert_array_equal(forward[::-1], a.embed(texts[::-1]))
    assert not np.allclose(forward[-3], forward[-2])  # the words after 10,000 count


def test_convert_long_writes_a_manifest_that_reproduce_manifests_lists_with_its_command_line(tiny_model, tmp_path,
                                                                                               monkeypatch, capsys):
    """The command line as a user runs it from the repository root (``sys.argv``, which the manifest records)."""
    import sys
    student = tmp_path / "student"
    args = ["convert-long", "--model", str(tiny_model), "--out", str(student), "--max-length", "64", "--window", "16"]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, "04_distill.py"), *args])
    distill()(args)
    manifest = json.loads((student / "manifest.json").read_text())
    assert (manifest["script"], manifest["args"]["command"], manifest["counts"]) == \
        ("04_distill.py", "convert-long", {"max_length": 64, "window": 16})
    capsys.readouterr()
    spec = importlib.util.spec_from_file_location("reproduce_manifests",
                                                  os.path.join(ROOT, "reproduce", "manifests.py"))
    manifests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manifests)
    manifests.main([str(student)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["```", f"    python 04_distill.py convert-long --model {tiny_model} --out {student} "
                                "--max-length 64 --window 16", "    #   max_length 64, window 16", "```"]
    assert lines[5].startswith(f"commit {manifest['git_commit']}; ")


def test_training_resumes_bit_identically_with_heads_and_running_covariances(teach, tiny_model, tiny_data,
                                                                             tmp_path):
    main = distill()
    student = tmp_path / "student"
    main(["convert-long", "--model", str(tiny_model), "--out", str(student), "--max-length", "64", "--window", "16"])

    def train(out):
        return main(["train", "--data", str(tiny_data), "--teachers", str(teach), "--model", str(student), "--out",
                     str(out), *TRAIN])
    ref = tmp_path / "ref"
    counts = train(ref)
    assert counts["steps"] == 15  # 60 documents, batch 4, the last partial batch dropped
    heads = load_file(str(ref / "model" / "heads.safetensors"))
    assert heads["softcca.student.norm"].item() == pytest.approx(sum(0.95 ** k for k in range(15)), rel=1e-5)
    assert {"student_projection.0.weight", "softcca.teacher.running",
            "softcca.student.batch_norm.running_var"} <= set(heads)
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    unfinish(out)
    shutil.rmtree(out / "checkpoints" / "step_15")
    train(out)  # resumes from step 10
    for name in ("heads.safetensors", "model.safetensors"):
        a, b = load_file(str(ref / "model" / name)), load_file(str(out / "model" / name))
        assert all(torch.equal(a[k], b[k]) for k in a)
    losses = lambda run: [r["loss"] for r in read_jsonl(run / "log.jsonl")]  # noqa: E731
    assert losses(out) == losses(ref)

    from sentence_transformers import SentenceTransformer

    from common.models.loading import load_encoder
    docs = Documents(tiny_data)
    texts = docs.inputs("[SEP]")[:3]
    st = SentenceTransformer(str(ref / "model"), device="cpu").encode(texts, convert_to_numpy=True)
    encoder, tokenizer, settings = load_encoder(str(ref / "model"))
    assert settings["pooling"] == "mean" and not settings["normalize"] and settings["max_length"] == 64
    enc = tokenizer(texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = encoder.eval().embed(enc["input_ids"], enc["attention_mask"]).numpy()
    np.testing.assert_allclose(st, ours, rtol=1e-4, atol=1e-5)


def test_the_documents_and_their_tokens_are_made_once_in_the_runs_cache_and_a_resumed_run_maps_them(
        teach, tiny_model, tiny_data, tmp_path, monkeypatch, capsys):
    """What every process of a node maps (the first one makes it): docs.jsonl as one Arrow file and every document's
    tokens, those of 04's TokenStore of the documents' inputs, made under a progress bar; a resumed run reads them,
    it tokenises nothing."""
    from transformers import AutoTokenizer

    from common.models.tokens import TokenStore
    from common.train.objectives import distill as objective
    main, out = distill(), tmp_path / "run"
    args = ["train", "--data", str(tiny_data), "--teachers", str(teach), "--model", str(tiny_model), "--out", str(out),
            *TRAIN, "--max-steps", "6"]
    capsys.readouterr()
    main(args)
    bar = capsys.readouterr().err
    assert "tokenise: 100%" in bar and " 60/60 " in bar
    assert len(list((out / "cache").glob("docs-*.arrow"))) == 1
    [store] = (out / "cache").glob("tokens-*")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    expected = TokenStore(tokenizer, Documents(tiny_data).inputs(tokenizer.sep_token), 64)
    assert np.array_equal(np.load(store / "ids.npy"), expected.ids)
    assert np.array_equal(np.load(store / "offsets.npy"), expected.offsets)
    unfinish(out)

    def tokenise(*_):
        raise AssertionError("tokenised again")
    monkeypatch.setattr(objective, "TokenStore", tokenise)
    assert main(args)["steps"] == 6  # resumed from step 5
    assert "tokenise" not in capsys.readouterr().err


def test_teacher_files_that_do_not_match_docs_jsonl_are_refused_before_anything_is_written(
        teach, tiny_model, tiny_data, tmp_path):
    main = distill()
    for name, change, message in (
            ("ids", lambda d: (d / "sbert.ids.txt").write_text("x\n" * 60), "sbert.ids.txt:1: id 'x', but "),
            ("dims", lambda d: np.save(d / "sbert.npy", np.zeros((60, 5), dtype=np.float32)),
             "sbert.npy: 5 dimensions, the student has 32")):
        bad = tmp_path / name
        shutil.copytree(teach, bad)
        forget_hashes(bad)
        change(bad)
        with pytest.raises(InputError, match=message):
            main(["train", "--data", str(tiny_data), "--teachers", str(bad), "--model", str(tiny_model), "--out",
                  str(tmp_path / f"run-{name}"), *TRAIN])
        assert not (tmp_path / f"run-{name}").exists()
    proc = run_script("04_distill.py", "train", "--data", tiny_data, "--teachers", tmp_path / "ids", "--model",
                      tiny_model, "--out", tmp_path / "run-cli", *TRAIN, check=False)
    assert proc.returncode == 2 and "sbert.ids.txt:1: id 'x'" in one_error_line(proc.stderr)
    assert not (tmp_path / "run-cli").exists()


@pytest.mark.parametrize("name, change, message", [
    ("inf", lambda d: np.save(d / "sbert.npy", np.where(np.arange(32) == 2, np.inf, np.load(d / "sbert.npy"))),
     "sbert.npy: row 0 (document 'd0') is not finite (60 of 60 rows are not)"),
    ("nan-row", lambda d: np.save(d / "pv.npy", np.where(np.arange(60)[:, None] == 4, np.nan, np.load(d / "pv.npy"))),
     "pv.npy: row 4 (document 'd4') is not finite (1 of 60 rows are not)"),
    ("2-d-lengths", lambda d: np.save(d / "lengths.npy", np.stack([np.load(d / "lengths.npy")] * 2, axis=1)),
     "lengths.npy: expected one non-negative token count per document, got int64 [60, 2]"),
])
def test_teacher_values_that_cannot_train_are_refused_when_read(teach, tiny_model, tiny_data, tmp_path, name, change,
                                                                message):
    bad = tmp_path / "teach"
    shutil.copytree(teach, bad)
    forget_hashes(bad)
    change(bad)
    with pytest.raises(InputError) as e:
        distill()(["train", "--data", str(tiny_data), "--teachers", str(bad), "--model", str(tiny_model), "--out",
                   str(tmp_path / "run"), *TRAIN])
    assert str(e.value) == f"{bad}/{message}"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command, flag, value, message", [
    ("teachers", "--pv-window", "0", "argument --pv-window: 0: must be between 1 and 131,072"),
    ("teachers", "--teacher-max-length", "0", "argument --teacher-max-length: 0: must be between 1 and 131,072"),
    ("teachers", "--pv-vector-size", "0", "argument --pv-vector-size: 0: must be between 1 and 65,536"),
    ("teachers", "--seed", "-1", "argument --seed: -1: must be between 0 and 2**32 - 1 (NumPy's seed range)"),
    ("train", "--student-projection", "16x0",
     "--student-projection '16x0': block '0' is not SIZE or SIZE(relu) with a SIZE between 1 and 65,536"),
    ("convert-long", "--max-length", "1000000000",
     "argument --max-length: 1000000000: must be between 1 and 131,072"),
])
def test_settings_that_cannot_work_are_refused_before_any_input_is_read(tiny_data, tmp_path, command, flag, value,
                                                                        message):
    missing = tmp_path / "missing"  # the teachers and models, never read
    args = {"teachers": ["--data", missing, "--teacher", missing],
            "train": ["--data", tiny_data, "--teachers", missing, "--model", missing, *TRAIN],  # data: checked first
            "convert-long": ["--model", missing]}[command]
    assert script_error("04_distill.py", command, *args, "--out", tmp_path / "out", flag, value) == f"error: {message}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--lambda", "nan", "argument --lambda: nan: must be a share between 0 and 1"),
    ("--gamma", "nan", "argument --gamma: nan: must be a number from 0 to 65,504 (half precision's largest)"),
])
def test_training_settings_that_cannot_work_are_refused_as_the_command_line_is_read(tiny_data, tmp_path, capsys, flag,
                                                                                  value, message):
    missing = tmp_path / "missing"  # the teachers and model, never read
    with pytest.raises(SystemExit) as e:
        distill()(["train", "--data", str(tiny_data), "--teachers", str(missing), "--model", str(missing), *TRAIN,
                   "--out", str(tmp_path / "out"), flag, value])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_a_dying_gensim_worker_is_an_error_not_a_wait():
    with pytest.raises(InputError, match=r"Paragraph Vector \(dm\) training failed in a gensim worker: ValueError"):
        ParagraphVector.train(["a b c d e f"] * 5, vector_size=4, window=0, min_count=1, epochs=1)
    with pytest.raises(InputError, match="--pv-min-count 50: no word occurs that often"):
        ParagraphVector.train(["a b c d e f"] * 5, vector_size=4, min_count=50, epochs=1)


def test_teachers_claim_their_folder_and_convert_long_never_replaces_a_user_folder(tiny_model, tiny_data, tmp_path):
    from transformers import GPT2Config, GPT2Model
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    with pytest.raises(InputError) as e:
        distill()(["teachers", "--data", str(tiny_data), "--out", str(data), "--teacher", str(tiny_model)])
    assert str(e.value) == f"{data}: holds the output of 02_build_graph.py; 04_distill.py writes to a folder of its own"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(InputError) as e:
        distill()(["convert-long", "--model", str(tiny_model), "--out", str(mine)])
    assert str(e.value) == f"{mine}: not empty and not an output folder of this project (no manifest.json); give a " \
                           "new or empty folder"
    assert os.listdir(mine) == ["notes.txt"]
    gpt2 = tmp_path / "gpt2"
    GPT2Model(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20)).save_pretrained(gpt2)
    nowhere = tmp_path / "nowhere"
    for model, message in ((gpt2, "a gpt2 model; convert-long converts bert, roberta, xlm-roberta, camembert"),
                           (nowhere, "no such model folder (nor a model in the local Hugging Face cache)")):
        with pytest.raises(InputError) as e:
            distill()(["convert-long", "--model", str(model), "--out", str(tmp_path / "long")])
        assert str(e.value) == f"{model}: {message}"
    assert not (tmp_path / "long").exists()


def test_teachers_stopped_while_saving_paragraph_vector_leave_no_temporary_folder(tiny_model, tiny_data, tmp_path,
                                                                                 monkeypatch):
    def stopped(self, directory):
        os.makedirs(directory)
        (Path(directory) / "dm.model").write_text("half")
        raise SystemExit(143)  # what SIGTERM raises under cli.run
    monkeypatch.setattr(ParagraphVector, "save", stopped)
    out = tmp_path / "teach"
    with pytest.raises(SystemExit):
        distill()(["teachers", "--data", str(tiny_data), "--out", str(out), "--teacher", str(tiny_model),
                   "--teacher-max-length", "64", "--pv-vector-size", "8", "--pv-epochs", "1", "--pv-min-count", "1"])
    assert os.listdir(out) == []


def test_paragraph_vector_streams_its_corpus_from_a_words_file_with_the_vectors_of_an_in_memory_corpus(tmp_path):
    from gensim.models.doc2vec import Doc2Vec, TaggedDocument

    from common.distill.paragraph_vector import TaggedLines, write_words
    rng = np.random.default_rng(1)
    vocab = [f"W{i}" for i in range(30)] + ["Ärrä", "x\u00a0y"]  # a no-break space splits like any space
    texts = [" ".join(rng.choice(vocab, rng.integers(0, 40))) for _ in range(25)] + ["", "  \t ", "a\x85b\u2028c"]
    texts.append(" ".join(rng.choice(vocab, MAX_WORDS + 7)))
    paths, chunked = write_words(iter(texts), ("none", "lowercase", "none"), str(tmp_path))
    assert chunked == 1 and sorted(paths) == ["lowercase", "none"]
    expected = [TaggedDocument(part, [tag]) for tag, text in enumerate(texts) for part in chunks(text.split())]
    assert list(TaggedLines(paths["none"])) == expected  # line k is document k, words exactly as str.split gives
    streamed = ParagraphVector.train(iter(texts), vector_size=8, min_count=1, epochs=2, work_dir=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["words.lowercase.txt", "words.none.txt"]  # its own folder is gone
    listed = Doc2Vec(expected, dm=1, vector_size=8, window=5, negative=5, hs=0, sample=0, dbow_words=1, min_count=1,
                     epochs=2, workers=1, seed=42)
    np.testing.assert_array_equal(streamed.models["dm"].dv.vectors, listed.dv.vectors)
    np.testing.assert_array_equal(streamed.models["dm"].wv.vectors, listed.wv.vectors)


def test_teacher_dim_projects_the_structural_teacher_onto_its_principal_axes_and_is_checked_first(
        teach, tiny_model, tiny_data, tmp_path):
    """--teacher-dim N: sbert.npy is sbert_full.npy projected onto its top N principal axes (scikit-learn's PCA on
    the same rows), origin kept; sbert_full.npy equals the teacher without the flag; N at or over the teacher's width
    is one line, before anything is embedded."""
    from sklearn.decomposition import PCA
    out = tmp_path / "teach16"
    distill()(["teachers", "--data", str(tiny_data), "--out", str(out), "--teacher", str(tiny_model),
               "--teacher-max-length", "64", "--pv-vector-size", "8", "--pv-epochs", "3", "--pv-min-count", "1",
               "--teacher-dim", "16"])
    full, reduced = np.load(out / "sbert_full.npy"), np.load(out / "sbert.npy")
    np.testing.assert_allclose(full, np.load(teach / "sbert.npy"), rtol=1e-5, atol=1e-6)
    axes = PCA(n_components=16, random_state=42).fit(full.astype(np.float64)).components_
    assert reduced.shape == (len(full), 16)
    np.testing.assert_allclose(reduced, full @ axes.T, rtol=1e-4, atol=1e-5)
    import json
    with open(out / "manifest.json", encoding="utf-8") as f:
        assert json.load(f)["counts"]["teacher_dim"] == 16
    with pytest.raises(InputError, match=r"^--teacher-dim 32: must be below the teacher's 32 dimensions"):
        distill()(["teachers", "--data", str(tiny_data), "--out", str(tmp_path / "wide"), "--teacher",
                   str(tiny_model), "--teacher-dim", "32"])
    assert not (tmp_path / "wide").exists()


def test_a_bf16_teacher_is_refused_before_any_work_on_a_cpu_without_native_bfloat16(tiny_model, tiny_data,
                                                                                     tmp_path, monkeypatch):
    from common.models import precision as precisions
    monkeypatch.setattr(precisions, "native_bf16", lambda: False)
    with pytest.raises(InputError, match=r"^--bf16: this CPU has no native bfloat16"):
        distill()(["teachers", "--data", str(tiny_data), "--out", str(tmp_path / "teach"), "--teacher",
                   str(tiny_model), "--bf16"])
    assert not (tmp_path / "teach").exists()


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_lower_precision_structural_teacher_is_opt_in_and_its_distance_to_float32_is_recorded(
        precision, teach, tiny_model, tiny_data, tmp_path, capsys, monkeypatch):
    from common.models import precision as precisions
    monkeypatch.setattr(precisions, "native_bf16", lambda: True)  # bf16 autocast computes the same on any CPU
    out = tmp_path / f"teach-{precision}"
    distill()(["teachers", "--data", str(tiny_data), "--out", str(out), "--teacher", str(tiny_model),
               "--teacher-max-length", "64", "--pv-vector-size", "8", "--pv-epochs", "3", "--pv-min-count", "1",
               f"--{precision}"])
    fp32, lower = np.load(teach / "sbert.npy"), np.load(out / "sbert.npy")
    cos = (fp32 * lower).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(lower, axis=1)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    recorded = counts["mean_cosine_to_float32"]
    assert counts["precision"] == precision
    assert abs(recorded - cos.mean()) < 1e-5 and 0.97 < recorded <= 1 and not np.array_equal(fp32, lower)
    assert "mean_cosine_to_float32" not in json.loads((teach / "manifest.json").read_text())["counts"]
    assert f"mean cosine {recorded:.4f} to float32's (first 60 documents)" in capsys.readouterr().out


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "pv.json").write_text("[]"), "pv.json: not a Paragraph Vector's settings"),
    (lambda f: (f / "pv.json").write_text('{"models": ["dm"], "preprocess": {"dm": "none"}}'),
     "pv.json: not a Paragraph Vector's settings"),
    (lambda f: (f / "dm.model").write_bytes(b"\x80\x04garbage"), "dm.model: cannot be loaded as a gensim Doc2Vec "
                                                                  "model"),
    (lambda f: (f / "dm.model").write_bytes(b""), "dm.model: cannot be loaded as a gensim Doc2Vec model"),
])
def test_a_damaged_paragraph_vector_folder_is_one_line_naming_its_file(damage, message, tmp_path):
    from common.distill.paragraph_vector import ParagraphVector
    folder = tmp_path / "pv"
    ParagraphVector.train(["a b c d e f"] * 5, vector_size=4, min_count=1, epochs=1).save(str(folder))
    damage(folder)
    with pytest.raises(InputError) as e:
        ParagraphVector.load(str(folder))
    assert str(e.value).startswith(f"{folder}/{message}")
