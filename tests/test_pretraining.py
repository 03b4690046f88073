"""BERT's pre-training, 03 --objective mlm: a masked-LM run that resumes bit-identically and saves a masked LM that
sentence-transformers loads; with next-sentence prediction (--nsp), the pairs cut as BERT's
create_pretraining_data.py cuts them, a run that resumes bit-identically and saves a model that loads as BertModel
with its trained pooler; and the bases' table of reproduce/bases.py. The masking: test_masking.py; the masked LM
against BertForMaskedLM: test_masked_lm.py; the loss against BertForPreTraining: test_losses.py."""

import json
import random
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import corpus_text, read_jsonl, script_error, train_in_process, unfinish

from common.train import nsp


# -- masked-LM training --------------------------------------------------------------------------------------------

def train_mlm(data, model, out, *extra):
    argv = ["--objective", "mlm", "--data", str(data), "--model", str(model), "--out", str(out), "--log-every", "1",
            *map(str, extra)]
    return train_in_process(argv)


def test_mlm_trains_resumes_bit_identically_and_saves_a_masked_lm_that_sentence_transformers_loads(
        tiny_model, paper_data, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForMaskedLM
    extra = ["--max-length", "32", "--epochs", "2", "--batch-size", "16", "--checkpoint-every", "2", "--keep", "10",
             "--eval-every", "0",
             "--cache-dir", tmp_path / "cache", "--whole-word-mask"]
    ref = tmp_path / "ref"
    counts = train_mlm(paper_data, tiny_model, ref, *extra)
    assert counts["steps"] >= 4
    log = read_jsonl(ref / "log.jsonl")
    assert {"val_loss", "perplexity"} <= set(log[-1]) and log[-1]["perplexity"] == pytest.approx(
        np.exp(log[-1]["val_loss"]))
    out = tmp_path / "resumed"
    import shutil
    shutil.copytree(ref, out)
    unfinish(out)
    for path in sorted((out / "checkpoints").iterdir(), key=lambda p: int(p.name.split("_")[1]))[1:]:
        shutil.rmtree(path)  # resume from step 2
    train_mlm(paper_data, tiny_model, out, *extra)
    a, b = load_file(str(ref / "model" / "model.safetensors")), load_file(str(out / "model" / "model.safetensors"))
    assert set(a) == set(b) and any(k.startswith("cls.") for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert AutoModelForMaskedLM.from_pretrained(str(ref / "model")).config.architectures == ["BertForMaskedLM"]
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tok, settings = load_encoder(str(ref / "model"))
    assert (settings["pooling"], settings["max_length"]) == ("mean", 32)
    texts = corpus_text(4, 5)
    st = SentenceTransformer(str(ref / "model"), device="cpu")
    np.testing.assert_allclose(st.encode(texts), embed(encoder, TokenStore(tok, texts, 32)), rtol=1e-5, atol=1e-5)


# -- next-sentence pairs -------------------------------------------------------------------------------------------

def documents(sentence_counts, lengths, seed=0):
    """``tokenize_sentences``'s offsets for texts of the given sentence counts, each sentence's length drawn from
    ``lengths``."""
    rng = random.Random(seed)
    sizes = [rng.choice(lengths) for _ in range(sum(sentence_counts))]
    return (np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            np.concatenate([[0], np.cumsum(sentence_counts)]).astype(np.int64))


def test_pairs_tile_each_document_with_a_and_true_continuations_and_take_random_b_from_another_document():
    """Documents shorter than half the target: a chunk is the rest of its document, and no pair needs truncating.
    Then, as BERT cuts them: a document's A segments and true-continuation B segments tile it exactly (a random
    B's chunk puts its unused sentences back); a continuation B runs from A's end to the document's end; a random
    B starts at a sentence of another document of the part and runs to that document's end; a one-sentence chunk
    (A ends the document) always takes a random B, a longer one half the time."""
    rng = random.Random(1)
    counts = [rng.randint(1, 10) for _ in range(400)]
    sentences, per_text = documents(counts, range(1, 6))
    part = np.arange(0, 400, 2)
    table = nsp.pairs(sentences, per_text, part, max_tokens=100, short_seq_prob=0.0, seed=3)
    starts = sentences[per_text[:-1]]
    ends = sentences[per_text[1:]]
    owner = np.searchsorted(starts, table[:, 0], side="right") - 1
    sentence_starts = set(sentences.tolist())
    multi = []
    for text in part.tolist():
        mine = table[owner == text]
        runs = sorted([tuple(r) for r in mine[:, 0:2].tolist()]
                      + [tuple(r) for r in mine[mine[:, 4] == 0][:, 2:4].tolist()])
        assert runs[0][0] == starts[text] and runs[-1][1] == ends[text]
        assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
        for a0, a1, b0, b1, label in mine.tolist():
            assert a0 in sentence_starts and a1 in sentence_starts
            if label == 0:
                assert (b0, b1) == (a1, ends[text])
            else:
                other = int(np.searchsorted(starts, b0, side="right") - 1)
                assert other != text and other in set(part.tolist()) and b0 in sentence_starts and b1 == ends[other]
            if a1 == ends[text]:
                assert label == 1
            else:
                multi.append(label)
    assert len(table) > len(part)
    n = len(multi)
    assert abs(sum(multi) - n / 2) < 3 * np.sqrt(n / 4)
    again = nsp.pairs(sentences, per_text, part, max_tokens=100, short_seq_prob=0.0, seed=3)
    assert np.array_equal(table, again)
    assert not np.array_equal(table, nsp.pairs(sentences, per_text, part, max_tokens=100, short_seq_prob=0.0, seed=4))


def bert_truncate(a, b, max_tokens, rng):
    """BERT's truncate_seq_pair as the original loops: one token at a time from the longer segment (B on a tie),
    its front or its end with ½."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]
    return a, b


def test_truncation_keeps_the_lengths_bert_keeps_and_cuts_fronts_as_often_as_ends():
    rng, generator = random.Random(0), np.random.default_rng(0)
    fronts, removed = 0, 0
    for _ in range(500):
        la, lb, limit = rng.randint(1, 80), rng.randint(1, 80), rng.randint(2, 60)
        a, b = [100, 100 + la], [500, 500 + lb]
        nsp._truncate(a, b, limit, generator)
        ref_a, ref_b = bert_truncate(range(100, 100 + la), range(500, 500 + lb), limit, rng)
        assert (a[1] - a[0], b[1] - b[0]) == (len(ref_a), len(ref_b))
        assert 100 <= a[0] < a[1] <= 100 + la and 500 <= b[0] < b[1] <= 500 + lb
        fronts += (a[0] - 100) + (b[0] - 500)
        removed += la + lb - (a[1] - a[0]) - (b[1] - b[0])
    assert abs(fronts - removed / 2) < 3 * np.sqrt(removed / 4)


def test_pairs_fit_the_model_and_short_targets_make_shorter_pairs():
    """Long sentences (up to 40 tokens) make truncation common; short ones (up to 5) let a chunk's length follow its
    target, uniform in 2 … 61 for every document with --short-seq-prob 1, so that pairs are shorter and more
    numerous than at the full target."""
    rng = random.Random(2)
    sentences, per_text = documents([rng.randint(1, 30) for _ in range(300)], range(1, 40))
    part = np.arange(300)
    full = nsp.pairs(sentences, per_text, part, max_tokens=61, short_seq_prob=0.0)
    short = nsp.pairs(sentences, per_text, part, max_tokens=61, short_seq_prob=1.0)
    for table in (full, short):
        a, b = table[:, 1] - table[:, 0], table[:, 3] - table[:, 2]
        assert (a >= 1).all() and (b >= 1).all() and (a + b <= 61).all()
        starts = sentences[per_text[:-1]]
        owner_a = np.searchsorted(starts, table[:, 0], side="right")
        owner_b = np.searchsorted(starts, table[:, 2], side="right")
        assert ((owner_a == owner_b) == (table[:, 4] == 0)).all() and (table[table[:, 4] == 0, 2] >= table[
            table[:, 4] == 0, 1]).all()
    sentences, per_text = documents([rng.randint(20, 60) for _ in range(300)], range(1, 6))
    full, short = (nsp.pairs(sentences, per_text, part, max_tokens=61, short_seq_prob=p) for p in (0.0, 1.0))
    lengths = [(t[:, 1] - t[:, 0] + t[:, 3] - t[:, 2]).mean() for t in (full, short)]
    assert lengths[1] < 0.5 * lengths[0] and len(short) > 2 * len(full)


def test_a_pair_is_bert_input_with_token_types_zero_for_cls_a_sep_and_one_for_b_sep():
    pairs = nsp.Pairs(np.arange(10, 20), np.arange(10) % 2 == 0, np.array([[2, 5, 7, 9, 1]]), cls_id=2, sep_id=3)
    ids, starts, types, label = pairs.get(0)
    assert ids.tolist() == [2, 12, 13, 14, 3, 17, 18, 3]
    assert starts.tolist() == [True, True, False, True, True, False, True, True]
    assert types.tolist() == [0, 0, 0, 0, 0, 1, 1, 1] and label == 1 and pairs.lengths().tolist() == [8]


def test_sentences_are_punkt_sentences_tokenised_one_by_one(tiny_model, tmp_path):
    from nltk.tokenize.punkt import PunktSentenceTokenizer
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    texts = ["Kaupunki maa joki. Meri vuori metsä!  Järvi saari?", "", "One sentence only", "Tie. Silta."]
    ids, word_start, sentences, per_text = nsp.tokenize_sentences(texts, tokenizer, str(tmp_path))
    expected = [s for text in texts for s in PunktSentenceTokenizer().tokenize(text)]
    assert per_text.tolist() == [0, 3, 3, 4, 6] and len(expected) == 6
    for k, sentence in enumerate(expected):
        assert ids[sentences[k]:sentences[k + 1]].tolist() == tokenizer(sentence, add_special_tokens=False)[
            "input_ids"]
    assert word_start[sentences[:-1]].all()


# -- next-sentence training ----------------------------------------------------------------------------------------

def write_documents(path, n_sentences=700, seed=5):
    """A docs.jsonl of documents of 1 to 8 sentences."""
    sentences, rng = corpus_text(seed, n_sentences), random.Random(seed)
    rows, i = [], 0
    while i < len(sentences):
        n = rng.randint(1, 8)
        rows.append({"id": f"d{len(rows)}", "title": "", "text": " ".join(sentences[i:i + n])})
        i += n
    path.mkdir(parents=True, exist_ok=True)
    (path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def nsp_data(tmp_path_factory):
    return write_documents(tmp_path_factory.mktemp("nsp") / "data")


def pretrain(data, out, *extra):
    argv = ["--objective", "mlm", "--data", str(data), "--out", str(out), "--nsp", "--log-every", "1",
            *map(str, extra)]
    return train_in_process(argv)


def test_nsp_pretraining_logs_both_objectives_resumes_bit_identically_and_saves_bert_with_its_trained_pooler(
        nsp_data, tiny_model, tmp_path):
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, BertForPreTraining
    new = ["--model-type", "bert", "--tokenizer-name", tiny_model, "--config-overrides",
           "num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=64,max_position_embeddings=64",
           "--max-length", "48", "--batch-size", "8", "--max-steps", "4", "--lr", "1e-3", "--eval-every", "2",
           "--checkpoint-every", "2", "--keep", "10", "--cache-dir", tmp_path / "cache"]
    ref = tmp_path / "ref"
    counts = pretrain(nsp_data, ref, *new)
    assert counts["steps"] == 4
    log = read_jsonl(ref / "log.jsonl")
    training = [r for r in log if "lr" in r]
    validation = [r for r in log if "lr" not in r]
    assert [r["step"] for r in training] == [1, 2, 3, 4] and [r["step"] for r in validation] == [2, 4]
    for r in training:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"], rel=1e-5) and 0 <= r["nsp_accuracy"] <= 1
    for r in validation:
        assert 0 <= r["val_accuracy"] <= 1 and 0 <= r["val_nsp_accuracy"] <= 1 and r["val_nsp_loss"] > 0
    resumed = tmp_path / "resumed"
    shutil.copytree(ref, resumed)
    shutil.rmtree(resumed / "model")
    shutil.rmtree(resumed / "checkpoints" / "step_4")
    (resumed / "manifest.json").unlink()  # killed before its end: a finished run is not trained again
    pretrain(nsp_data, resumed, *new)
    a, b = load_file(str(ref / "model" / "model.safetensors")), load_file(str(resumed / "model" / "model.safetensors"))
    assert set(a) == set(b) and {"bert.pooler.dense.weight", "cls.seq_relationship.weight"} <= set(a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_jsonl(resumed / "log.jsonl") == [{**r, "steps_per_s": s["steps_per_s"]} if "lr" in r else r
                                                  for r, s in zip(log, read_jsonl(resumed / "log.jsonl"))]
    encoder = AutoModel.from_pretrained(str(ref / "model"))
    pretraining = BertForPreTraining.from_pretrained(str(ref / "model"))
    assert pretraining.config.architectures == ["BertForPreTraining"]
    for name, tensor in encoder.pooler.state_dict().items():
        assert torch.equal(tensor, a[f"bert.pooler.{name}"]) and torch.equal(
            tensor, pretraining.bert.pooler.state_dict()[name])
    first = load_file(str(ref / "checkpoints" / "step_2" / "model.safetensors"))
    assert not torch.equal(first["mlm.bert.pooler.dense.weight"], a["bert.pooler.dense.weight"])  # trained
    card = ModelCard.load(ref / "model" / "README.md")
    assert "masked-language-model and next-sentence-prediction training" in card.text
    assert "nsp" in card.data.tags and "{BERT}: Pre-training of Deep Bidirectional Transformers" in card.text
    assert "| `--nsp` | yes |" in card.text
    st = SentenceTransformer(str(ref / "model"), device="cpu")
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    loaded, tokenizer, _ = load_encoder(str(ref / "model"))
    texts = corpus_text(4, 5)
    np.testing.assert_allclose(st.encode(texts), embed(loaded, TokenStore(tokenizer, texts, 48)), rtol=1e-5,
                               atol=1e-5)


def test_nsp_from_a_model_without_the_heads_notes_what_starts_untrained(nsp_data, tiny_model, tmp_path, capsys):
    """The tiny model is a BertModel: its pooler is saved, both heads are not. A masked-LM-only model
    (BertForMaskedLM) has no pooler either."""
    from transformers import BertForMaskedLM
    steps = ["--max-length", "48", "--batch-size", "8", "--max-steps", "1", "--eval-every", "0",
             "--checkpoint-every", "0", "--cache-dir", tmp_path / "cache"]
    pretrain(nsp_data, tmp_path / "from-encoder", "--model", tiny_model, *steps)
    printed = capsys.readouterr().out
    assert f"note: {tiny_model} has no masked-LM head weights" in printed
    assert f"note: {tiny_model} has no next-sentence head or pooler weights (2 tensors newly initialised)" in printed
    masked_lm = tmp_path / "mlm-only"
    shutil.copytree(tiny_model, masked_lm)
    BertForMaskedLM.from_pretrained(str(tiny_model)).save_pretrained(str(masked_lm))
    pretrain(nsp_data, tmp_path / "from-mlm", "--model", masked_lm, *steps)
    printed = capsys.readouterr().out
    assert "has no masked-LM head weights" not in printed
    assert f"note: {masked_lm} has no next-sentence head or pooler weights (4 tensors newly initialised)" in printed


@pytest.mark.parametrize("args, expected", [
    (["--model-type", "roberta"], "--nsp: a new roberta model has no next-sentence-prediction head in transformers "
                                  "(roberta's pre-training model is RobertaForMaskedLM); BERT's is BertForPreTraining"),
    (["--model-type", "bert", "--line-by-line"], "--nsp cuts pairs of segments at sentence boundaries; "
                                                 "--line-by-line trains on single texts: give one of them"),
    (["--model-type", "bert", "--short-seq-prob", "1.5"],
     "argument --short-seq-prob: 1.5: must be a share between 0 and 1"),
])
def test_nsp_settings_that_cannot_work_are_one_line(nsp_data, tmp_path, args, expected):
    message = script_error("03_train.py", "--objective", "mlm", "--data", nsp_data, "--out", tmp_path / "run", "--nsp",
                           *args)
    assert message == f"error: {expected}"
    assert not (tmp_path / "run").exists()


# -- the bases table -----------------------------------------------------------------------------------------------

def test_the_bases_table_gives_each_phase_its_last_validation_and_no_nsp_accuracy_without_the_head(tmp_path):
    import importlib.util
    import os
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("bases", os.path.join(ROOT, "reproduce", "bases.py"))
    bases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bases)

    def run(name, records, val_examples):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        (folder / "manifest.json").write_text(json.dumps({"counts": {"val_examples": val_examples}}))
        return str(folder)

    mlm = run("bert-mini", [{"step": 50, "epoch": 0.1, "val_loss": 6.5, "perplexity": 665.1, "val_accuracy": 0.12},
                            {"step": 150, "epoch": 0.4, "loss": 6.2, "lr": 0.0},
                            {"step": 150, "epoch": 0.4, "val_loss": 6.18, "perplexity": 483.0, "val_accuracy": 0.131}],
              340)
    both = run("bert-mini-nsp", [{"step": 1384, "epoch": 3.1, "val_loss": 6.0123, "perplexity": 408.0,
                                  "val_accuracy": 0.14567, "val_nsp_loss": 0.4321, "val_nsp_accuracy": 0.8}], 2201)
    assert bases.table([("mlm-only", [mlm]), ("mlm+nsp", [both])]).splitlines() == [
        "| base | run | step | validated on | masked-token accuracy | masked-LM loss | NSP accuracy | NSP loss |",
        "|---|---|---:|---|---:|---:|---:|---:|",
        "| mlm-only | bert-mini | 150 | 340 blocks | 13.10 % | 6.180 | – (no next-sentence head) | – |",
        "| mlm+nsp | bert-mini-nsp | 1,384 | 2,201 segment pairs | 14.57 % | 6.012 | 80.00 % | 0.432 |"]


def test_the_bases_table_answers_a_missing_or_damaged_log_in_one_line(tmp_path):
    import os
    import subprocess
    import sys
    from conftest import ENV, ROOT
    script = os.path.join(ROOT, "reproduce", "bases.py")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "log.jsonl").write_text('{"step": 1, "val_loss": 6.0, "val_accuracy": "high"}\n')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "log.jsonl").write_text('{"step": 1, "val_loss": 6.0\n')
    for run, line in ((tmp_path / "none", f"error: {tmp_path / 'none' / 'log.jsonl'}: no such file (has "
                                           f"{tmp_path / 'none'} trained?)"),
                      (tmp_path / "text", f"error: {tmp_path / 'text' / 'log.jsonl'}:1: val_accuracy is not a number"),
                      (tmp_path / "bad", f"error: {tmp_path / 'bad' / 'log.jsonl'}:1: invalid JSON")):
        done = subprocess.run([sys.executable, script, f"base={run}"], capture_output=True, text=True, env=ENV)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(line) and done.stderr.count("\n") == 1
