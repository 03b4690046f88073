"""Every model benchmark against its sentence-transformers peer, in one command; writes bench/results.md.

    python bench/all.py                    # embed, triplet, mnrl; 3 interleaved rounds
    python bench/all.py --rounds 5 --only embed

Each measurement is a fresh process. Rounds interleave the two sides (ours first in odd rounds, theirs first in
even ones), so that load from other work on the machine falls on both alike; the table gives the median of each
side, the median of the per-round ratios and every round's ratio, with the load average around each round.

| case    | ours                                                   | theirs                                           |
|---------|--------------------------------------------------------|--------------------------------------------------|
| embed   | ``embed`` (05, 04, retrieval) on the arXiv sample's    | ``SentenceTransformer.encode``, same batch size  |
|         | abstracts, 256 tokens, --batch-size and --batch-tokens |                                                  |
| embed-small | the same, both sides at --small-batch (the batch   | the same                                         |
|         | size at which sentence-transformers is fastest on a CPU) |                                                |
| triplet | 03 --objective triplet, the demo's triplets            | SentenceTransformerTrainer + TripletLoss         |
| mnrl    | 03 --objective mnrl, arXiv title → abstract            | SentenceTransformerTrainer + MNRL (scale 20)     |

Same model (all-MiniLM-L6-v2), loss, batch, token length and fp32 on both sides; the embeddings of the two sides
are compared (largest absolute difference). Training steps/s come from ``bench/train.py``'s measurement (the
interval between consecutive optimizer-step ends, data loading included, after --warm steps).

On a CUDA machine a GPU section follows: training tokens/s in bfloat16 and model FLOPs utilisation
(6 · parameters · tokens per second / the GPU's dense bf16 peak, 989 TFLOP/s for an H100) for MiniLM and a
BERT-base-sized model, and embedding tokens/s.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s of an H100 SXM


def embed_texts(work, docs):
    from bench.train import ensure_arxiv
    from common.data.documents import Documents
    abstracts = Documents(ensure_arxiv(work)).texts
    return [abstracts[i % len(abstracts)] for i in range(docs)]


def one_embed(side, args, batch=None):
    """Documents/s of one side, tokenisation included; the vectors are saved for the comparison."""
    import numpy as np
    import torch
    from bench.train import minilm
    texts = embed_texts(args.work, args.docs)
    batch = batch or args.batch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if side == "ours":
        from common.models.encoder import embed, load_encoder
        from common.models.tokens import TokenStore
        encoder, tokenizer, settings = load_encoder(minilm(), max_length=args.length)
        encoder.to(device)

        def run(texts):
            return embed(encoder, TokenStore(tokenizer, texts, settings["max_length"]), batch, args.batch_tokens)
    else:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(minilm(), device=device)
        st.max_seq_length = args.length

        def run(texts):
            return st.encode(texts, batch_size=batch, convert_to_numpy=True)
    run(texts[:batch])  # warm-up: allocator, kernels, caches
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    vectors = run(texts)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    np.save(os.path.join(args.work, f"embed-{batch}-{side}.npy"), vectors)
    return {"rate": len(texts) / seconds}


def one_train(side, args, objective):
    from bench.train import ensure_data, run_ours, run_theirs
    data = ensure_data(args.work, objective)
    batch, length = (args.triplet_batch, args.triplet_length) if objective == "triplet" else \
        (args.mnrl_batch, args.mnrl_length)
    fn = run_ours if side == "ours" else run_theirs
    times = fn(data, args.steps, batch, objective, length)[args.warm:]
    return {"rate": 1 / statistics.mean(times)}


def budget(a):
    from common.models.batching import token_budget
    import torch
    return a.batch_tokens if a.batch_tokens is not None else \
        f"{token_budget(None, 'cuda' if torch.cuda.is_available() else 'cpu')} (its default here)"


CASES = {
    "embed": ("docs/s", lambda side, args: one_embed(side, args),
              lambda a: f"{a.docs} arXiv abstracts, {a.length} tokens, batch {a.batch}, ours --batch-tokens "
                        f"{budget(a)}"),
    "embed-small": ("docs/s", lambda side, args: one_embed(side, args, args.small_batch),
                    lambda a: f"the same at batch {a.small_batch} on both sides"),
    "triplet": ("steps/s", lambda side, args: one_train(side, args, "triplet"),
                lambda a: f"batch {a.triplet_batch}, {a.triplet_length} tokens, {a.steps} steps, first {a.warm} "
                          "left out"),
    "mnrl": ("steps/s", lambda side, args: one_train(side, args, "mnrl"),
             lambda a: f"batch {a.mnrl_batch}, {a.mnrl_length} tokens, {a.steps} steps, first {a.warm} left out"),
}
GOALS = {"embed": 1.5, "embed-small": None, "triplet": 2.0, "mnrl": 1.3}


def measure(case, side, args):
    """One side of one case in a fresh process; returns its JSON result."""
    argv = [sys.executable, os.path.abspath(__file__), "--one", case, side, *args.passed]
    out = subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                                  TOKENIZERS_PARALLELISM="false"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine():
    import torch
    from importlib import metadata
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("torch", "transformers", "sentence-transformers",
                                                                 "accelerate"))
    return (f"{cpu}, {os.cpu_count()} cores (torch threads {torch.get_num_threads()}), GPU: {gpu}; "
            f"Python {platform.python_version()}; {versions}")


def gpu_section(args):
    """bf16 training tokens/s and MFU, and bf16 embedding tokens/s, of MiniLM and a BERT-base-sized encoder."""
    import torch
    from transformers import AutoConfig, BertConfig, BertModel
    from bench.train import minilm
    from common.models.encoder import Encoder
    rows = []
    for name, config in (("all-MiniLM-L6-v2", AutoConfig.from_pretrained(minilm())), ("BERT-base size", BertConfig())):
        config._attn_implementation = "sdpa"
        encoder = Encoder(BertModel(config), "mean").cuda()
        params = sum(p.numel() for p in encoder.parameters())
        batch, length = args.gpu_batch, args.gpu_length
        ids = torch.randint(1000, config.vocab_size, (batch, length), device="cuda")
        mask = torch.ones_like(ids)
        optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-5)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = encoder.embed(ids, mask).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        def timed(fn, n):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            return batch * length * n / (time.perf_counter() - start)

        train_tokens = timed(step, args.gpu_steps)
        encoder.eval()
        with torch.inference_mode():
            embed_tokens = timed(lambda: encoder.embed(ids, mask), args.gpu_steps)
        rows.append(f"| {name} | {params / 1e6:.1f}M | {batch} × {length} | {train_tokens:,.0f} | "
                    f"{6 * params * train_tokens / H100_BF16_PEAK:.1%} | {embed_tokens:,.0f} |")
        del encoder, optimizer
        torch.cuda.empty_cache()
    return ["## GPU (bf16)", "", f"{torch.cuda.get_device_name(0)}; MFU = 6 · parameters · training tokens/s / "
            f"{H100_BF16_PEAK / 1e12:.0f} TFLOP/s (the H100's dense bf16 peak).", "",
            "| model | parameters | batch × tokens | training tokens/s | MFU | embedding tokens/s |",
            "|---|---|---|---|---|---|", *rows, ""]


def _kept_sections(path):
    """The sections of ``path`` that other benchmarks write (from "## Scale" on, bench/scale.py's), kept as they
    are when this one rewrites its own."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    at = text.find("\n## Scale")
    return [text[at + 1:].rstrip("\n"), ""] if at >= 0 else []


def write_results(args, cases, results, started, done, gpu=()):
    """bench/results.md from the rounds done so far (rewritten after each round, so a stopped run leaves its
    finished rounds); ``gpu``: the GPU section's lines."""
    lines = ["# Benchmarks against sentence-transformers", "",
             f"`{' '.join(['python bench/all.py', *args.passed])}`", "",
             f"Measured {started}, {done} of {args.rounds} interleaved rounds, each side a fresh process. "
             f"Machine: {machine()}.",
             "", "| case | settings | ours | theirs | ratio (median of rounds) | goal | rounds | load average "
                 "(start → end of each round) |", "|---|---|---|---|---|---|---|---|"]
    for case in cases:
        res, unit = results[case], CASES[case][0]
        ratios = [a / b for a, b in zip(res["ours"], res["theirs"])]
        if case.startswith("embed"):
            import numpy as np
            batch = args.small_batch if case == "embed-small" else args.batch
            a, b = (np.load(os.path.join(args.work, f"embed-{batch}-{s}.npy")) for s in ("ours", "theirs"))
            res["diff"] = float(np.abs(a - b).max())
        settings = CASES[case][2](args) + (f"; vectors agree to {res['diff']:.1e}" if "diff" in res else "")
        lines.append(f"| {case} | {settings} | {statistics.median(res['ours']):.3f} {unit} | "
                     f"{statistics.median(res['theirs']):.3f} {unit} | **{statistics.median(ratios):.2f}×** | "
                     f"{f'≥ {GOALS[case]}×' if GOALS[case] else '—'} | {', '.join(f'{x:.2f}×' for x in ratios)} | "
                     f"{', '.join(f'{a:.1f} → {b:.1f}' for a, b in res['load'])} |")
    lines += ["", *(gpu or ["No GPU section: no CUDA device on this machine.", ""])]
    lines += _kept_sections(args.out)
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(args.out), delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(f.name, args.out)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--docs", type=int, default=300, help="embed: abstracts (the sample's 994, repeated)")
    parser.add_argument("--length", type=int, default=256, help="embed: tokens per abstract (paper search)")
    parser.add_argument("--batch", type=int, default=64, help="embed: texts per batch, both sides")
    parser.add_argument("--batch-tokens", type=int, default=None,
                        help="embed: ours' padded-token budget [its default on this device]")
    parser.add_argument("--small-batch", type=int, default=8,
                        help="embed-small: the batch size of both sides (sentence-transformers' fastest on 2 CPU "
                             "cores among 4-64)")
    parser.add_argument("--steps", type=int, default=10, help="training steps per measurement")
    parser.add_argument("--warm", type=int, default=3, help="training steps left out of the mean")
    parser.add_argument("--triplet-batch", type=int, default=16)
    parser.add_argument("--triplet-length", type=int, default=128)
    parser.add_argument("--mnrl-batch", type=int, default=16)
    parser.add_argument("--mnrl-length", type=int, default=256)
    parser.add_argument("--gpu-batch", type=int, default=32)
    parser.add_argument("--gpu-length", type=int, default=256)
    parser.add_argument("--gpu-steps", type=int, default=20)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results.md"))
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        case, side = args.one
        print(json.dumps(CASES[case][1](side, args)))
        return
    args.passed = sys.argv[1:]
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"--only: unknown case(s) {sorted(unknown)}; known: {', '.join(CASES)}")
    results = {c: {"ours": [], "theirs": [], "load": []} for c in cases}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for r in range(args.rounds):
        for case in cases:
            load = os.getloadavg()[0]
            for side in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
                results[case][side].append(measure(case, side, args)["rate"])
            results[case]["load"].append((load, os.getloadavg()[0]))
            ratio = results[case]["ours"][-1] / results[case]["theirs"][-1]
            print(f"round {r + 1} {case:8s} ours {results[case]['ours'][-1]:8.3f}  theirs "
                  f"{results[case]['theirs'][-1]:8.3f} {CASES[case][0]}  ratio {ratio:.2f}x", flush=True)
        write_results(args, cases, results, started, r + 1)
    import torch
    gpu = gpu_section(args) if torch.cuda.is_available() else []
    print("\n".join(write_results(args, cases, results, started, args.rounds, gpu)))
    print(f"→ {args.out}")


if __name__ == "__main__":
    main()
