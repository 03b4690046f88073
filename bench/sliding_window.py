"""Seconds of a Longformer's forward (no gradient) at several lengths: ``sliding_window.hidden_states`` at several
block sizes beside transformers' ``LongformerModel.forward``, interleaved in one process, so that load from other
work falls on all alike; the median of --rounds rounds and its ratio to transformers'.

    python bench/sliding_window.py                        # all-MiniLM-L6-v2 as a Longformer, 4,096 tokens, window 512
    python bench/sliding_window.py --shapes 1024x2 4096x1 --blocks 64 128 256 --rounds 5

The model is all-MiniLM-L6-v2 converted by ``04_distill.py convert-long`` (built once under --work); the texts are
random token ids, every token real (a length's speed does not depend on the ids).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def student(work, window):
    from bench.train import minilm
    path = os.path.join(work, f"minilm-long-{window}")
    if not os.path.exists(os.path.join(path, "config.json")):
        os.makedirs(work, exist_ok=True)
        subprocess.run([sys.executable, "04_distill.py", "convert-long", "--model", minilm(), "--out", path,
                        "--max-length", "4096", "--window", str(window)], cwd=ROOT, check=True, capture_output=True)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=["256x8", "1024x2", "4096x1"], help="TOKENSxTEXTS a forward")
    p.add_argument("--blocks", nargs="+", type=int, default=[64, 128, 256], help="sliding_window block sizes")
    p.add_argument("--window", type=int, default=512, help="the Longformer's attention window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "sliding-window"))
    args = p.parse_args()
    import torch
    from transformers import LongformerModel

    from common.models import sliding_window
    from common.models.loading import quiet_transformers
    with quiet_transformers():
        model = LongformerModel.from_pretrained(student(args.work, args.window)).eval()
    print(f"torch threads {torch.get_num_threads()}; window {args.window}; load average {os.getloadavg()[0]:.1f}")
    for shape in args.shapes:
        length, texts = map(int, shape.split("x"))
        ids = torch.randint(1000, model.config.vocab_size, (texts, length))
        mask = torch.ones_like(ids)
        sides = {f"block {b}": (lambda b=b: sliding_window.hidden_states(model, ids, mask, block=b))
                 for b in args.blocks}
        with quiet_transformers():
            sides["transformers"] = lambda: model(input_ids=ids, attention_mask=mask)
            times = {name: [] for name in sides}
            with torch.inference_mode():
                for fn in sides.values():  # warm-up
                    fn()
                for _ in range(args.rounds):
                    for name, fn in sides.items():
                        start = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - start)
        theirs = statistics.median(times["transformers"])
        print(f"{length} tokens × {texts}: " + "; ".join(
            f"{name} {statistics.median(t):.3f} s ({theirs / statistics.median(t):.2f}×)" for name, t in times.items())
            + f"; load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
