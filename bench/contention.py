"""float32 embedding on a CPU that other work shares: our ``embed`` at several token budgets against
``SentenceTransformer.encode`` at batch 64 and 8, with 2 and 1 torch threads, alone and beside busy-loop processes
this script starts (and stops) itself. ``embed`` picks each batch's thread count up to the threads torch has
(common/models/threads.py); "ours 2048 fixed" is the same with that choice turned off (every batch at the threads
torch has), as ``embed`` ran before it, and gives the median share of CPU time a thread got in its batches (the
signal the choice reads: 1.00 when every thread has its core).

    python bench/contention.py                  # 0 and 1 busy processes, 2 and 1 threads
    python bench/contention.py --busy 0,1,2 --docs 200
    python bench/contention.py --stop-after 12  # one embedding while a busy process runs its first 12 s

The arXiv sample's abstracts at 256 tokens, as bench/all.py's embed row (all-MiniLM-L6-v2, fp32). For each number
of busy processes and each thread count, every variant runs --rounds times, interleaved, in this one process after
a warm-up; the table gives the best of its rounds in documents/s, then the ratio of ours at the default budget to
encode at batch 64 (bench/all.py's embed row).
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


@contextlib.contextmanager
def chooser(**settings):
    """``embed`` with its thread chooser made with ``settings`` (``Threads``' own; ``fixed=True``: one candidate, the
    threads torch has, so the choice is off) and recording every timed batch's (seconds from the start of the
    ``with``, thread count, CPU-time share) into the list it yields."""
    from common.models import threads
    original = threads.Threads
    record, start = [], time.perf_counter()
    fixed = settings.pop("fixed", False)

    class Recorded(original):
        def __init__(self, **kw):
            super().__init__(**kw, **settings)
            if fixed:
                self.candidates = [self.most]

        def timed(self, count, seconds, cpu, tokens):
            record.append((time.perf_counter() - start, count, cpu / seconds / count))
            super().timed(count, seconds, cpu, tokens)

    threads.Threads = Recorded  # embed reads it from common/models/threads.py at each call
    try:
        yield record
    finally:
        threads.Threads = original


def recovery(args, encoder, tokenizer, texts):
    """One embedding of the texts (4 times over) with a busy process beside it for its first --stop-after seconds,
    with ``embed``'s looks at the machine's idle time and without them: when the thread count changed, and the
    total time."""
    import threading
    from common.models.inference import embed
    from common.models.tokens import TokenStore
    for name, settings in (("with the idle-time looks", {}), ("without them", {"idle_clock": lambda: None})):
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        timer = threading.Timer(args.stop_after, busy.terminate)
        try:
            with chooser(**settings) as record:
                timer.start()
                embed(encoder, TokenStore(tokenizer, texts * 4, args.length))
        finally:
            timer.cancel()
            busy.terminate()
            busy.wait()
        changes = [(t, c) for i, (t, c, _) in enumerate(record) if i == 0 or record[i - 1][1] != c]
        print(f"{name}: {len(texts) * 4} texts in {record[-1][0]:.1f} s, a busy process beside them for the first "
              f"{args.stop_after:g} s; thread count from then on (seconds: count): "
              f"{', '.join(f'{t:.1f}: {c}' for t, c in changes)}", flush=True)


def main():
    from common import cli  # every number finite and in range, as in the numbered scripts
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--budgets", default="1024,2048,4096,0", help="ours' --batch-tokens values (0: batch 64)")
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--busy", default="0,1", help="numbers of busy-loop processes beside the measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    parser.add_argument("--stop-after", type=cli.number(float, cli.POSITIVE), default=None,
                        help="instead of the table: one embedding beside a busy process stopped after this many "
                             "seconds, and when embed changed its thread count")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from sentence_transformers import SentenceTransformer
    from bench.shared import embed_texts
    from bench.train import minilm
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    texts = embed_texts(args.work, args.docs)
    encoder, tokenizer, _ = load_encoder(minilm(), max_length=args.length, say=lambda *a: None)
    if args.stop_after is not None:
        return recovery(args, encoder, tokenizer, texts)
    st = SentenceTransformer(minilm(), device="cpu")
    st.max_seq_length = args.length
    variants = {f"ours {b}" if b else "ours batch 64": (lambda b=b: embed(encoder, TokenStore(tokenizer, texts,
                                                                                            args.length), 64, b))
                for b in (int(x) for x in args.budgets.split(","))}
    shares = []

    def fixed():
        with chooser(fixed=True) as record:
            embed(encoder, TokenStore(tokenizer, texts, args.length), 64, 2048)
        shares.extend(share for _, _, share in record)

    variants["ours 2048 fixed"] = fixed
    variants.update({f"encode {b}": (lambda b=b: st.encode(texts, batch_size=b)) for b in (64, 8)})
    header = (f"| busy processes | threads | {' | '.join(variants)} | ours 2048 / encode 64 | fixed / encode 64 | "
              "CPU-time share a thread, fixed (median) | load average |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for busy in (int(x) for x in args.busy.split(",")):
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(2 if busy else 0)
            for threads in (int(x) for x in args.threads.split(",")):
                torch.set_num_threads(threads)
                # warm-up at this thread count
                embed(encoder, TokenStore(tokenizer, texts[:64], args.length), 64, 2048)
                st.encode(texts[:64], batch_size=64)
                best, before = {}, os.getloadavg()[0]
                shares.clear()
                for _ in range(args.rounds):
                    for name, fn in variants.items():
                        start = time.perf_counter()
                        fn()
                        best[name] = max(best.get(name, 0), len(texts) / (time.perf_counter() - start))
                ratio = best.get("ours 2048", 0) / best["encode 64"]
                fixed_ratio = best["ours 2048 fixed"] / best["encode 64"]
                lines.append(f"| {busy} | {threads} | {' | '.join(f'{best[n]:.1f}' for n in variants)} | "
                             f"{ratio:.2f}× | {fixed_ratio:.2f}× | {statistics.median(shares):.2f} | "
                             f"{before:.1f} → {os.getloadavg()[0]:.1f} |")
                print(lines[-1], flush=True)
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
