"""The GPU benchmark in one command: every model row beside the tool a user would otherwise run, bf16 on both sides,
each side at least --seconds of work, model FLOP/s against the chip's bf16 matrix-product peak measured in the same
run, and the projections of the papers' full runs.

    bash bench/gpu.sh             # on a GPU machine (installs the wheels in .whl/ first, where there are any)
    python bench/gpu.py --dry     # any machine, CPU too: tiny models and sizes, every row end to end

Offline: the models are built at start from bench/configs (all-MiniLM-L6-v2's and BERT-base's config.json, MiniLM's
WordPiece vocabulary) with random weights (speed does not depend on their values); the texts are the shipped arXiv
sample's abstracts (data/arxiv-sample-1000.json.gz, repeated where a row needs more).

| row         | ours                                                | theirs                                           |
|-------------|-----------------------------------------------------|--------------------------------------------------|
| embed-300   | ``embed`` (05, 04, retrieval), 300 abstracts, 256   | ``SentenceTransformer.encode``, same batch       |
|             | tokens, batch 64, called again until --seconds      |                                                  |
| embed-20000 | the same, 20,000 abstracts, batch 128               | the same                                         |
| triplet     | 03 --objective triplet, batch 16 × 128 tokens,      | SentenceTransformerTrainer + TripletLoss         |
|             | title [SEP] abstract, links within an arXiv category |                                                 |
| mnrl        | 03 --objective mnrl, title → abstract, 16 × 256     | SentenceTransformerTrainer + MNRL (scale 20)     |
| mlm         | 03 --objective mlm, blocks of 8 × 256 tokens        | transformers' Trainer + DataCollatorForLanguage- |
|             |                                                     | Modeling, same blocks                            |
| distill     | 04_distill.py train: BERT-base converted to a       | none: the thesis's ~30 GPU-hours (1M documents,  |
|             | Longformer (4,096 tokens, window 512), batch 6,     | batch 60) stand beside the projection            |
|             | gradient checkpointing, cosine-masked (L_S and      |                                                  |
|             | SoftCCA), documents of 4,096 tokens                 |                                                  |
| long-embed  | ``embed`` with that Longformer, 480 documents of    | ``SentenceTransformer.encode`` of the same       |
|             | mixed length (bench/shared.py's ``long_texts``),    | folder (transformers' LongformerModel), same     |
|             | batch 8                                             | batch                                            |
| long-train  | the distill row's command                           | the same with transformers' LongformerModel      |
|             |                                                     | forward (bench/shared.py's                       |
|             |                                                     | TRANSFORMERS_LONGFORMER)                         |
| tiny-*      | triplet, mnrl, mlm and embed-300 on the tiny BERT   | the same as the row named                        |
|             | (bench/shared.py's TINY_SHAPE) at --tiny-batch ×    |                                                  |
|             | --tiny-length: what each side does around the       |                                                  |
|             | model's arithmetic; ours --log-every 10             |                                                  |

Each row runs in the MiniLM shape and, where --base-rows names it, in the BERT-base shape too; the Longformer rows
(distill, long-embed, long-train) in the BERT-base shape, the thesis's student's; the tiny rows in the tiny shape
(2 layers, hidden 64, MiniLM's vocabulary). Precision: ours
trains under Accelerate's bf16 mixed precision (ACCELERATE_MIXED_PRECISION=bf16: autocast, float32 weights) and
embeds under bf16 autocast (``embed``'s GPU default); theirs trains with ``bf16=True`` (the Trainer's autocast,
float32 weights) and embeds with the weights loaded in bfloat16 (``model_kwargs={"dtype": torch.bfloat16}``, as
sentence-transformers documents for fast inference). --dry on a CPU runs both sides in float32.

Every side runs in a fresh process. A training side's rate is the mean interval between consecutive optimizer-step
ends after --warm steps (ours: log.jsonl at --log-every 1, the run stopped by SIGTERM, which the loop answers with a
checkpoint and exit 143, once the timed steps pass --seconds; theirs: a callback stops the Trainer). Peak memory is
``torch.cuda.max_memory_allocated`` of the side's process. Model FLOP/s: 6 · N · tokens a training step (8 · N ·
tokens with gradient checkpointing, which runs the forward twice), 2 · N · tokens an embedded text, N = the
encoder's parameters outside its embeddings and pooler, tokens = the non-padding tokens of the step or text.

Projections under the table: WikiSpecter (2.1M triplets × 2 epochs, BERT-base, 128 tokens) from the BERT-base
triplet row's triplets/s; the distillation thesis's student (1M documents) from the distill row's documents/s.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.shared import (RUN_SCRIPT, TRANSFORMERS_LONGFORMER, best_rate, build_model, embed_texts,  # noqa: E402
                          embedder, ensure_distill, long_texts, machine, nonembedding, run_side, script,
                          step_tokens, token_counts, train_shape)

WIKISPECTER = (2_100_000 * 2, "2.1M triplets × 2 epochs", "4 GPUs × ~12 hours")
THESIS_DISTILL = (1_000_000, "1M documents, batch 60", 30)
GOALS = {"embed-300": 1.5, "embed-20000": 1.5, "triplet": 2.0, "mnrl": 1.3, "mlm": 2.0, "tiny-triplet": 1.5,
         "tiny-mnrl": 1.5, "tiny-mlm": 1.5, "tiny-embed": 1.5}
TINY_LOG_EVERY = 10  # the tiny rows' --log-every (03's default): a host sync every step would be ours' alone
# a script run under it writes its process's peak GPU memory to BENCH_PEAK as it exits
PEAK = ("import atexit, json, os, torch\n"
        "def peak():\n"
        "    with open(os.environ['BENCH_PEAK'], 'w') as f:\n"
        "        json.dump(torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0, f)\n"
        "atexit.register(peak)\n" + RUN_SCRIPT)


def sizes(args):
    """The work of each row, full or --dry."""
    if args.dry:
        return {"embed-300": 30, "embed-20000": 200, "distill_length": 256, "distill_window": 32, "distill_batch": 2,
                "distill_docs": 8, "pv": 64, "projection": "64(relu)x64", "long-embed": 12, "long_batch": 4}
    return {"embed-300": 300, "embed-20000": 20_000, "distill_length": 4096, "distill_window": 512,
            "distill_batch": 6, "distill_docs": 240, "pv": 2048, "projection": "768(relu)x4096(relu)x2048",
            "long-embed": 480, "long_batch": 8}


def device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def ensure_triplets(work):
    """A triplet data folder from the arXiv sample: each paper links to the next five papers of its first category
    (in file order), then 02 as bench/train.py builds the demo's."""
    from bench.train import ensure_arxiv
    data = os.path.join(work, "triplet-data")
    if os.path.exists(os.path.join(data, "manifest.json")):
        return data
    ensure_arxiv(work)
    with open(os.path.join(work, "arxiv", "articles.jsonl"), encoding="utf-8") as f:
        articles = [json.loads(line) for line in f]
    by_category = {}
    for a in articles:
        by_category.setdefault(a["labels"]["second"], []).append(a["id"])
    linked = os.path.join(work, "arxiv-linked.jsonl")
    with open(linked, "w", encoding="utf-8") as f:
        for a in articles:
            group = by_category[a["labels"]["second"]]
            at = group.index(a["id"])
            f.write(json.dumps({**a, "links": [group[(at + k) % len(group)] for k in range(1, min(6, len(group)))]})
                    + "\n")
    script("02_build_graph.py", "--articles", linked, "--out", data, "--per-query", "10", "--holdout", "0",
           "--crossref-min-links", "1")
    return data


def ceiling(dry):
    """The chip's bf16 matrix-product peak now: the best of 10 timed n × n products (8192 on a GPU; --dry on a CPU
    times float32 at 512)."""
    import torch
    dev = device()
    n, dtype = (8192, torch.bfloat16) if dev == "cuda" else (512, torch.float32)
    a, b = (torch.randn(n, n, device=dev).to(dtype) for _ in range(2))
    flops = best_rate(lambda: torch.mm(a, b), 2 * n ** 3, 10, torch.cuda.synchronize if dev == "cuda" else None)
    return {"flops": flops, "what": f"{n} × {n} {str(dtype).removeprefix('torch.')} torch.mm, best of 10"}


def one_embed(side, args, n, batch, length):
    """Texts/s of one side over repeated calls on the same ``n`` abstracts read up to ``length`` tokens until
    --seconds have passed."""
    import torch
    texts = embed_texts(args.work, n)
    dev = device()
    kwargs = {"dtype": torch.bfloat16} if dev == "cuda" else {}
    run = embedder(side, os.environ["BENCH_MODEL"], length, batch, None, dev, kwargs, say=lambda *a: None)
    return repeated(run, texts, n, args.seconds, dev)


def repeated(run, texts, n, budget, dev):
    """Texts/s of ``run(texts)`` (``n`` texts a call) called until ``budget`` seconds have passed, after one
    untimed call (allocator, kernels), and the device's peak memory."""
    import torch
    run(texts)
    calls, start = 0, time.perf_counter()
    while True:
        run(texts)
        calls += 1
        if time.perf_counter() - start >= budget:
            break
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    return {"rate": n * calls / seconds, "seconds": seconds, "peak": peak}


def one_long_embed(side, args):
    """Documents/s of one side over ``long_texts`` with the distill row's Longformer, repeated until --seconds."""
    import torch
    size = sizes(args)
    texts = long_texts(args.work, size["long-embed"])
    student = os.path.join(ensure_distill(args.work, os.environ["BENCH_MODEL"], size), "student")
    dev = device()
    kwargs = {"dtype": torch.bfloat16} if dev == "cuda" else {}
    run = embedder(side, student, None, size["long_batch"], None, dev, kwargs, say=lambda *a: None)
    return repeated(run, texts, len(texts), args.seconds, dev)


def step_times(log):
    """Step intervals from a run's log.jsonl, each record's mean interval once for each step since the record before
    (--log-every), without the steps of the record after each validation record (the validation at an epoch's end
    falls into them, and theirs validates nothing)."""
    times, skip, last = [], False, 0
    try:
        with open(log, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if "steps_per_s" not in record:
                    skip = True
                    continue
                if not skip:
                    times += [1 / record["steps_per_s"]] * (record["step"] - last)
                skip, last = False, record["step"]
    except (FileNotFoundError, ValueError):  # not written yet, or a line half-written
        pass
    return times


def run_ours(argv, args, env=None, prelude="", log_every=1):
    """One of our scripts with ``log_every`` under the peak-memory wrapper, stopped by SIGTERM once the steps after
    --warm add up to --seconds; returns (step times after --warm, peak bytes). ``prelude``: code run first
    (bench/shared.py's TRANSFORMERS_LONGFORMER)."""
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        out, peak = os.path.join(tmp, "run"), os.path.join(tmp, "peak.json")
        env = dict(os.environ, BENCH_PEAK=peak, **(env or {}))
        if not args.dry:
            env["ACCELERATE_MIXED_PRECISION"] = "bf16"
        proc = subprocess.Popen([sys.executable, "-c", prelude + PEAK, *map(str, argv), "--out", out,
                                 "--log-every", str(log_every), "--checkpoint-every", "0", "--eval-every", "0"],
                                cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        log, stopped = os.path.join(out, "log.jsonl"), False
        while proc.poll() is None:
            time.sleep(0.2)
            if not stopped and sum(step_times(log)[args.warm:]) >= args.seconds:
                proc.send_signal(signal.SIGTERM)
                stopped = True
        err = proc.stderr.read()
        if proc.returncode not in (0, 143):
            sys.exit(f"error: {' '.join(map(str, argv[:2]))} failed (exit {proc.returncode}):\n{err[-3000:]}")
        times = step_times(log)[args.warm:]
        with open(peak) as f:
            return times, json.load(f)


def one_train(side, args, row):
    """Steps/s of one side of a training row (triplet, mnrl, mlm or their tiny-* rows)."""
    import torch
    from bench.train import ensure_arxiv, run_theirs
    objective = row.removeprefix("tiny-")
    data = ensure_triplets(args.work) if objective == "triplet" else ensure_arxiv(args.work)
    batch, length = train_shape(args, row)
    if side == "ours":
        extra = {"mnrl": ["--query-max-length", length, "--no-normalize"],
                 "mlm": ["--cache-dir", os.path.join(args.work, "mlm-cache")]}.get(objective, [])
        times, peak = run_ours(["03_train.py", "--objective", objective, "--data", data, "--model",
                                os.environ["BENCH_MODEL"], "--pooling", "mean", "--max-length", length,
                                "--batch-size", batch, "--epochs", 1000, "--max-steps", 10 ** 6, *extra], args,
                               log_every=TINY_LOG_EVERY if row.startswith("tiny-") else 1)
    else:
        times = run_theirs(data, 10 ** 6, batch, objective, length, bf16=not args.dry, seconds=args.seconds,
                           warm=args.warm)[args.warm:]
        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return {"rate": len(times) / sum(times), "seconds": sum(times), "peak": peak}


def one_distill(args, prelude=""):
    size = sizes(args)
    root = ensure_distill(args.work, os.environ["BENCH_MODEL"], size)
    times, peak = run_ours(["04_distill.py", "train", "--data", os.path.join(root, "data"), "--teachers",
                            os.path.join(root, "teach"), "--model", os.path.join(root, "student"), "--preset",
                            "cosine-masked", "--student-projection", size["projection"], "--max-length",
                            size["distill_length"], "--batch-size", size["distill_batch"], "--grad-accum", 1,
                            "--warmup", 0, "--length-buckets", 0, "--gradient-checkpointing", "--epochs", 1000,
                            "--max-steps", 10 ** 6], args, prelude=prelude)
    return {"rate": len(times) / sum(times), "seconds": sum(times), "peak": peak}


def tokens_per_unit(row, args):
    """Non-padding tokens a text (embed rows) or a step (training rows), the same count for both sides."""
    from transformers import AutoTokenizer
    from bench.train import ensure_arxiv
    tokenizer = AutoTokenizer.from_pretrained(os.environ["BENCH_MODEL"])
    size = sizes(args)
    if row.startswith("embed"):
        return statistics.mean(token_counts(tokenizer, embed_texts(args.work, size[row]), args.length))
    if row == "tiny-embed":
        return statistics.mean(token_counts(tokenizer, embed_texts(args.work, size["embed-300"]), args.tiny_length))
    if row in ("distill", "long-train"):
        return size["distill_batch"] * size["distill_length"]
    if row == "long-embed":
        return statistics.mean(token_counts(tokenizer, long_texts(args.work, size["long-embed"]),
                                            size["distill_length"]))
    objective = row.removeprefix("tiny-")
    return step_tokens(tokenizer, objective, *train_shape(args, row),
                       lambda: ensure_arxiv(args.work) if objective == "mnrl" else ensure_triplets(args.work))


def one(row, side, args):
    if row.startswith("embed"):
        batch = args.batch if row == "embed-300" else args.large_batch
        return one_embed(side, args, sizes(args)[row], batch, args.length)
    if row == "tiny-embed":
        return one_embed(side, args, sizes(args)["embed-300"], args.tiny_batch, args.tiny_length)
    if row == "distill":
        return one_distill(args)
    if row == "long-embed":
        return one_long_embed(side, args)
    if row == "long-train":
        return one_distill(args, TRANSFORMERS_LONGFORMER if side == "theirs" else "")
    return one_train(side, args, row)


def measure(row, shape, side, args):
    return run_side([sys.executable, os.path.abspath(__file__), "--one", row, side, *args.passed],
                    f"{row} {shape} {side}", {"BENCH_MODEL": build_model(args.work, shape, args.dry)})


LONGFORMER_ROWS = ("distill", "long-embed", "long-train")


def rows_to_run(args):
    """(row, shape) pairs in order: every --rows row in the MiniLM shape (the tiny rows in the tiny shape), then the
    --base-rows in the BERT-base shape, then the Longformer rows (BERT-base converted)."""
    wanted = [r for r in args.rows.split(",") if r]
    out = [(r, "tiny" if r.startswith("tiny-") else "minilm") for r in wanted if r not in LONGFORMER_ROWS]
    out += [(r, "bert-base") for r in args.base_rows.split(",")
            if r in wanted and r not in LONGFORMER_ROWS and not r.startswith("tiny-")]
    return out + [(r, "bert-base") for r in LONGFORMER_ROWS if r in wanted]


def table(args, results, peak, machine, elapsed):
    """The markdown lines: one table and the projections under it. ``results``: {(row, shape): {"ours": {...},
    "theirs": {...} or None, "flops": model FLOPs a unit, "unit": ...}}."""
    lines = [f"`{' '.join(['bash bench/gpu.sh', *args.passed])}` on {machine}; {elapsed:.0f} s in all.", "",
             f"Peak: {peak['flops'] / 1e12:.1f} TFLOP/s ({peak['what']}, measured in this run). Precision: "
             + ("float32 on both sides (--dry)." if args.dry else
                "ours bf16 autocast over float32 weights (training: ACCELERATE_MIXED_PRECISION=bf16; embedding: "
                "embed's GPU default), theirs bf16=True in the Trainer (autocast over float32 weights) and, to "
                "embed, weights loaded in bfloat16."), "",
             "| row | shape | ours | theirs | ratio | goal | model TFLOP/s ours / theirs (share of peak) | "
             "peak memory ours / theirs | seconds timed ours / theirs |", "|---|---|---|---|---|---|---|---|---|"]
    for (row, shape), res in results.items():
        ours, theirs, unit = res["ours"], res["theirs"], res["unit"]
        tf = [side["rate"] * res["flops"] / 1e12 for side in (ours, theirs) if side]
        share = " / ".join(f"{x:.1f}" for x in tf) + " (" + " / ".join(
            f"{x * 1e12 / peak['flops']:.0%}" for x in tf) + ")"
        mem = " / ".join(f"{side['peak'] / 2 ** 30:.1f} GiB" for side in (ours, theirs) if side)
        secs = " / ".join(f"{side['seconds']:.1f}" for side in (ours, theirs) if side)
        ratio = f"**{ours['rate'] / theirs['rate']:.2f}×**" if theirs else "—"
        goal = f"≥ {GOALS[row]}×" if row in GOALS and theirs else "—"
        there = f"{theirs['rate']:.2f} {unit}" if theirs else f"thesis: ~{THESIS_DISTILL[2]} GPU-hours"
        lines.append(f"| {row} | {shape} | {ours['rate']:.2f} {unit} | {there} | {ratio} | {goal} | {share} | "
                     f"{mem} | {secs} |")
    lines.append("")
    triplet = results.get(("triplet", "bert-base"))
    if triplet:
        per_s = triplet["ours"]["rate"] * args.triplet_batch
        lines.append(f"WikiSpecter's run ({WIKISPECTER[1]}, BERT-base, {args.triplet_length} tokens; the thesis: "
                     f"{WIKISPECTER[2]}) projects to **{WIKISPECTER[0] / per_s / 3600:.2f} hours** on this one device "
                     f"({per_s:,.0f} triplets/s, batch {args.triplet_batch}; goal ≤ 1 hour).")
    distill = results.get(("distill", "bert-base"))
    if distill:
        docs_s = distill["ours"]["rate"] * sizes(args)["distill_batch"]
        lines.append(f"The distillation thesis's student ({THESIS_DISTILL[1]}, {sizes(args)['distill_length']} "
                     f"tokens) projects to **{THESIS_DISTILL[0] / docs_s / 3600:.1f} GPU-hours** (the thesis: "
                     f"~{THESIS_DISTILL[2]}), from {docs_s:.2f} documents/s with an optimizer step every batch of "
                     f"{sizes(args)['distill_batch']} (the thesis accumulates 10: an upper bound).")
    return lines + [""]


SECTION = "## GPU benchmark (bench/gpu.sh)"


def write_section(path, lines):
    """``path`` with its GPU benchmark section replaced by ``lines`` (or added at its end); other sections kept."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    at = text.find(SECTION)
    if at >= 0:
        after = text.find("\n## ", at + len(SECTION))
        rest = text[after + 1:] if after >= 0 else ""
        text = text[:at] + rest
    text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + "\n".join([SECTION, "", *lines])
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(path)), delete=False,
                                     encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")
    os.replace(f.name, path)


def main():
    from common import cli  # every number finite and in range, as in the numbered scripts
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry", action="store_true", help="tiny models and sizes, float32 on a CPU: checks every row runs")
    p.add_argument("--rows", default="embed-300,embed-20000,triplet,mnrl,mlm,distill,long-embed,long-train,"
                                     "tiny-triplet,tiny-mnrl,tiny-mlm,tiny-embed")
    p.add_argument("--base-rows", default="triplet,mlm", help="rows also run in the BERT-base shape")
    p.add_argument("--seconds", type=cli.number(float, cli.POSITIVE), default=10.0,
                   help="timed work of each side at least")
    p.add_argument("--warm", type=int, default=5, help="training steps left out of the timing")
    p.add_argument("--length", type=int, default=256, help="embed: tokens per abstract")
    p.add_argument("--batch", type=int, default=64, help="embed-300: texts per batch")
    p.add_argument("--large-batch", type=int, default=128, help="embed-20000: texts per batch")
    p.add_argument("--triplet-batch", type=int, default=16)
    p.add_argument("--triplet-length", type=int, default=128)
    p.add_argument("--mnrl-batch", type=int, default=16)
    p.add_argument("--mnrl-length", type=int, default=256)
    p.add_argument("--mlm-batch", type=int, default=8)
    p.add_argument("--mlm-length", type=int, default=256)
    p.add_argument("--tiny-batch", type=int, default=4, help="tiny-*: texts (triplets, pairs, blocks) a batch")
    p.add_argument("--tiny-length", type=int, default=16, help="tiny-*: tokens per text")
    p.add_argument("--work", default=None, help="[bench/out/gpu, or bench/out/gpu-dry with --dry]")
    p.add_argument("--out", default=None, help="the table's file [WORK/results.md]")
    p.add_argument("--results", default=None,
                   help="also write the table as this file's GPU benchmark section [bench/results.md; none with --dry]")
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.work = args.work or os.path.join(ROOT, "bench", "out", "gpu-dry" if args.dry else "gpu")
    os.makedirs(args.work, exist_ok=True)
    if args.one:
        row, side = args.one
        print(json.dumps(ceiling(args.dry) if row == "ceiling" else one(row, side, args)))
        return
    if not args.dry and device() != "cuda":
        p.error("no CUDA device here: run on a GPU machine, or --dry")
    args.passed = sys.argv[1:]
    started = time.perf_counter()
    peak = measure("ceiling", "minilm", "-", args)
    print(f"peak {peak['flops'] / 1e12:.1f} TFLOP/s ({peak['what']})", flush=True)
    results = {}
    for row, shape in rows_to_run(args):
        env_model = build_model(args.work, shape, args.dry)
        os.environ["BENCH_MODEL"] = env_model
        embeds = row.startswith("embed") or row in ("long-embed", "tiny-embed")
        flops = (8 if row in ("distill", "long-train") else 2 if embeds else 6) * nonembedding(env_model) \
            * tokens_per_unit(row, args)
        res = {"unit": "texts/s" if embeds else "steps/s", "flops": flops, "theirs": None}
        for side in ("ours",) if row == "distill" else ("ours", "theirs"):
            res[side] = measure(row, shape, side, args)
            print(f"[{time.perf_counter() - started:.0f} s] {row} {shape} {side}: {res[side]['rate']:.2f} "
                  f"{res['unit']} over {res[side]['seconds']:.1f} s, {res[side]['rate'] * flops / 1e12:.2f} "
                  f"model TFLOP/s", flush=True)
        results[row, shape] = res
    lines = table(args, results, peak, machine(), time.perf_counter() - started)
    print("\n".join(lines))
    out = args.out or os.path.join(args.work, "results.md")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join([SECTION, "", *lines]))
    results_md = args.results or (None if args.dry else os.path.join(ROOT, "bench", "results.md"))
    if results_md:
        write_section(results_md, lines)
    print(f"→ {out}" + (f" and {results_md}" if results_md else ""))


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
