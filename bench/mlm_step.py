"""Seconds a masked-LM training step takes with BERT's last layer and the vocabulary projection on the masked
positions only (03's masked LM on a CPU, ``MaskedLM.masked_positions``) and with the model's own forward, which
computes both at every position (as ``BertForMaskedLM`` and transformers' Trainer do), interleaved in one process.

    python bench/mlm_step.py                      # all-MiniLM-L6-v2, 8 blocks of 256 tokens, 15 % masked
    python bench/mlm_step.py --rounds 5 --steps 10

Each round times --steps steps of each variant after 3 untimed ones: forward, the masked-LM loss, backward and a
fused AdamW step, with the rest of the CPU layer 03 installs (``cpu.install``: its dropout and attention) in both.
The blocks are random token ids with a fixed 15 % of positions masked, the same for both variants; the arithmetic
does not depend on the ids.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging
    from bench.train import minilm
    from common.models import cpu
    from common.models.masked_lm import IGNORE, MaskedLM
    from common.train import losses
    logging.set_verbosity_error()  # MiniLM has no masked-LM head: it starts untrained, as in 03
    model = cpu.install(MaskedLM(AutoModelForMaskedLM.from_pretrained(minilm()), "mean", False)).train()
    if not model.masked_positions:
        raise SystemExit("error: cpu.install did not compute this model's last layer at the masked positions")
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, fused=True)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (args.batch, args.length), generator=generator)
    mask = torch.ones_like(ids)
    masked = torch.rand(args.batch, args.length, generator=generator) < 0.15
    labels = torch.where(masked, ids, IGNORE)

    def step():
        out = model(ids, mask, labels)
        (losses.masked_lm(out.logits, out.labels).sum() / masked.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def timed(every_position):
        model.masked_positions = not every_position
        try:
            for _ in range(3):
                step()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            return (time.perf_counter() - start) / args.steps
        finally:
            model.masked_positions = True

    results = {"masked positions only": [], "every position": []}
    for _ in range(args.rounds):
        for name in results:
            results[name].append(timed(name == "every position"))
    print(f"{args.batch} blocks of {args.length} tokens, {int(masked.sum())} masked, torch threads "
          f"{torch.get_num_threads()}; seconds a step, rounds of {args.steps} steps:")
    for name, seconds in results.items():
        print(f"  {name:22s} {' '.join(f'{s:.3f}' for s in seconds)}  (best {min(seconds):.3f})")
    best = {name: min(seconds) for name, seconds in results.items()}
    saved = 1 - best["masked positions only"] / best["every position"]
    print(f"  the last layer and the vocabulary projection on the masked positions only take {saved:.0%} off a step")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
