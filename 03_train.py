"""Step 3: fine-tune an encoder on a data directory with one of the project's objectives.

  accelerate launch 03_train.py --objective triplet --data work/fi/data --model TurkuNLP/bert-base-finnish-cased-v1 \\
      --out runs/wikispecter
  python 03_train.py ...            (one process)

Objectives and where their defaults come from:
  triplet      SPECTER / WikiSpecter: L2 triplet margin loss on (query, linked, negative) documents
  contrastive  key-sentence thesis: contrastive loss on (query, sentence, key?) pairs, cosine distance
  cosine       key-sentence thesis: MSE between cos(query, sentence) and the 0/1 label

Mixed precision and the number of GPUs come from `accelerate config` / `accelerate launch`. A run writes
RUN/model (Hugging Face + sentence-transformers), RUN/checkpoints/step_N and RUN/log.jsonl; starting again with
the same --out resumes from the newest checkpoint. SIGTERM saves a checkpoint and exits with status 143.
"""

import argparse
import os
import sys

from common import cli, io
from common.io import InputError

DEFAULTS = {  # objective → defaults from its paper
    "triplet": {"lr": 3e-5, "batch_size": 16, "epochs": 2, "warmup": 0.1, "pooling": "cls", "max_length": 128,
                "margin": 1.0, "normalize": False},
    "contrastive": {"lr": 2e-5, "batch_size": 32, "epochs": 1, "warmup": 100, "pooling": "mean", "max_length": None,
                    "margin": 0.5, "normalize": None},
    "cosine": {"lr": 2e-5, "batch_size": 32, "epochs": 1, "warmup": 100, "pooling": "mean", "max_length": None,
               "margin": None, "normalize": None},
}
KEYSENT_QUERY = "knock mutat silence disrupt crispr lack cell gene remove edit"


def parse_args(argv):
    p = cli.parser(__doc__)
    p.add_argument("--objective", choices=sorted(DEFAULTS), default="triplet", help="training objective")
    p.add_argument("--data", required=True, help="data directory from 02_build_graph.py")
    p.add_argument("--model", required=True, help="Hugging Face model name or local folder to start from")
    p.add_argument("--out", required=True, help="run directory (model, checkpoints, log)")
    p.add_argument("--max-length", type=int, default=None,
                   help="tokens per text [triplet: 128, WikiSpecter; pairs: the model's own max_seq_length]")
    p.add_argument("--pooling", choices=("cls", "mean"), default=None,
                   help="document vector [triplet: cls, SPECTER; pairs: mean, key-sentence thesis]")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalise embeddings [triplet: no, SPECTER's margin is for raw vectors; pairs: as the "
                        "model's sentence-transformers config says]")
    p.add_argument("--margin", type=float, default=None,
                   help="loss margin [triplet: 1.0 on L2 distance, SPECTER; contrastive: 0.5 on cosine distance]")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate [triplet: 3e-5; pairs: 2e-5]")
    p.add_argument("--weight-decay", type=float, default=0.01,
                   help="AdamW weight decay, none on biases and LayerNorm (both papers)")
    p.add_argument("--warmup", type=float, default=None,
                   help="linear warm-up then linear decay: < 1 is a share of all steps, >= 1 a number of steps "
                        "[triplet: 0.1, SPECTER; pairs: 100 steps]")
    p.add_argument("--epochs", type=int, default=None, help="epochs [triplet: 2, SPECTER; pairs: 1]")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many optimizer steps, the schedule spanning them (0: run all epochs)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="examples per process and micro-batch [triplet: 16, SPECTER; pairs: 32]. The effective batch "
                        "is this × processes × --grad-accum (printed at start): the WikiSpecter thesis's batch of "
                        "16 on 4 GPUs is --batch-size 4 under 4 processes, or 16 on one")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping (SPECTER), 0 = off")
    p.add_argument("--seed", type=int, default=42, help="seed for initialisation, data order and dropout")
    p.add_argument("--seeds", type=int, nargs="*", default=None, metavar="SEED",
                   help="train one run per seed, one after another, into OUT/seed_SEED (the key-sentence thesis "
                        "averages 5 seeds: --seeds 1 2 3 4 5; report them with 05_evaluate.py --runs OUT/seed_*); "
                        "one process only")
    p.add_argument("--eval-every", type=int, default=1000,
                   help="validate every N optimizer steps, besides each epoch's end (0: epoch ends only)")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="save a checkpoint every N steps (0: never)")
    p.add_argument("--keep", type=int, default=2, help="checkpoints to keep (the newest)")
    p.add_argument("--log-every", type=int, default=10, help="write the mean training loss every N steps")
    p.add_argument("--length-groups", type=int, default=3,
                   help="pad a batch as this many length-sorted sub-batches (speed only: the loss is the same)")
    p.add_argument("--query", default=KEYSENT_QUERY,
                   help="pair objectives: the query text (the key-sentence thesis's best query)")
    p.add_argument("--query-token", default=None,
                   help="pair objectives: use a new vocabulary token (e.g. '[QUERY]') as the query instead")
    p.add_argument("--query-init", choices=("zero", "random"), default="zero",
                   help="pair objectives: initial embedding of --query-token")
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.objective].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def build_objective(args, encoder, tokenizer, max_length):
    if args.objective == "triplet":
        from common.train.objectives.triplet import TripletObjective
        return TripletObjective(args.data, tokenizer, max_length, args.margin, args.length_groups)
    from common.train.objectives.pairs import PairObjective
    return PairObjective(args.data, tokenizer, encoder, max_length, args.objective, args.margin, args.query,
                         args.query_token, args.query_init, args.length_groups, args.seed)


def train_seeds(argv, args):
    """One run per --seeds value in OUT/seed_K: the same command with --seed K and that --out (a trailing bare
    --seeds turns the loop off for each run)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InputError("--seeds runs one process; under several processes launch once per --seed")
    for seed in args.seeds:
        main([*argv, "--seed", str(seed), "--out", os.path.join(args.out, f"seed_{seed}"), "--seeds"])


def main(argv):
    args = parse_args(argv)
    if args.seeds:
        return train_seeds(argv, args)
    if not os.path.isdir(args.data):
        raise InputError(f"{args.data}: no such data directory")
    from common.train.loop import TrainConfig, Trainer
    from common.models.encoder import load_encoder
    started = io.now()
    encoder, tokenizer, settings = load_encoder(args.model, pooling=args.pooling, normalize=args.normalize,
                                                max_length=args.max_length, default_max_length=128)
    if args.objective == "triplet" and settings["st_config"].get("normalize") and not encoder.normalize:
        print("note: this model ends in a Normalize module; SPECTER's L2 margin of 1 is meant for unnormalised "
              "vectors (unit vectors are at most 2 apart), so training drops it (--normalize keeps it)")
    max_length = settings["max_length"]
    objective = build_objective(args, encoder, tokenizer, max_length)
    cfg = TrainConfig(lr=args.lr, weight_decay=args.weight_decay, warmup=args.warmup, epochs=args.epochs,
                      max_steps=args.max_steps, batch_size=args.batch_size, grad_accum=args.grad_accum,
                      clip=args.clip, seed=args.seed, eval_every=args.eval_every,
                      checkpoint_every=args.checkpoint_every, keep=args.keep, log_every=args.log_every)
    identity = {"objective": args.objective, "data": os.path.abspath(args.data), "model": args.model,
                "max_length": max_length, "pooling": encoder.pooling, "normalize": encoder.normalize,
                "margin": args.margin, "lr": args.lr, "weight_decay": args.weight_decay, "warmup": args.warmup,
                "epochs": args.epochs, "max_steps": args.max_steps, "batch_size": args.batch_size,
                "grad_accum": args.grad_accum, "seed": args.seed, "query": args.query, "query_token": args.query_token}
    info = {"objective": args.objective, **getattr(objective, "info", {})}
    trainer = Trainer(cfg, objective, encoder, tokenizer, args.out, max_length, identity, info)
    best = trainer.train()
    if trainer.accelerator.is_main_process:
        counts = {"train_examples": len(objective.train_rows), "val_examples": len(objective.val_rows),
                  "steps": trainer.total_steps, "warmup_steps": trainer.warmup,
                  "processes": trainer.accelerator.num_processes}
        if best is not None:
            counts[f"best_{objective.selection}"] = best
        inputs = [os.path.join(args.data, name) for name in sorted(os.listdir(args.data)) if name.endswith(".jsonl")]
        io.write_json(os.path.join(args.out, "manifest.json"),
                      io.manifest(__file__, args, started, inputs=inputs, counts=counts, seed=args.seed))
        print(f"model → {os.path.join(args.out, 'model')}")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
