"""The flags of a training run (03_train.py, and 04_distill.py train on the same loop): those every objective
shares, with their defaults and limits, and the objective's own, its paper's values as the parser's defaults."""

import argparse

from common import cli


# a share of the run's steps, or a whole number of them within the counts a step flag takes (--max-steps)
WARMUP = (f"a share below 1, or a whole number of steps from 1 to {1 << 30:,}",
          lambda v: 0 <= v < 1 or (v.is_integer() and cli.COUNT[1](v)))


def add_training_arguments(p, objective, argv):
    """The flags every objective shares and ``objective``'s own; the objective's values (its paper's, and its preset
    named in ``argv``) are the parser's defaults, so that ``--help`` shows what will run."""
    p.add_argument("--data", required=True, type=cli.reads, help="data directory from 02_build_graph.py")
    p.add_argument("--model", default=None, type=cli.reads,
                   help="Hugging Face model name or local folder to start from (required, except for an objective "
                        "that can start from a configuration: mlm's --model-type / --config-name)")
    p.add_argument("--out", required=True, help="run directory (model, checkpoints, log)")
    p.add_argument("--overwrite", action="store_true",
                   help="train from the start in an --out that holds a run: a finished one (refused without it "
                        "when its settings differ) or one whose checkpoints another command made; only what the "
                        "run wrote there is removed (transformers' --overwrite_output_dir)")
    p.add_argument("--max-length", type=cli.number(int, cli.LENGTH), default=None,
                   help="tokens per text (none: the model's own, as its sentence-transformers config says)")
    p.add_argument("--pooling", choices=("cls", "mean"), default=None,
                   help="document vector (none: as the model's sentence-transformers config says, else cls)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalise embeddings (none: as the model's sentence-transformers config says)")
    p.add_argument("--lr", type=cli.number(float, cli.POSITIVE), default=5e-5, help="peak learning rate")
    p.add_argument("--weight-decay", type=cli.number(float, cli.NON_NEGATIVE), default=0.01,
                   help="AdamW weight decay, none on biases and LayerNorm")
    p.add_argument("--warmup", type=cli.number(float, WARMUP), default=0.0,
                   help="warm-up: < 1 is a share of all steps, >= 1 a number of steps (a note says where it "
                        "spans the whole run, so that no step reaches --lr)")
    p.add_argument("--schedule", choices=("linear", "cosine"), default="linear",
                   help="decay after the warm-up (transformers' schedulers)")
    p.add_argument("--epochs", type=cli.number(int, cli.COUNT), default=1, help="epochs")
    p.add_argument("--max-steps", type=cli.number(int, cli.COUNT_0), default=0,
                   help="stop after this many optimizer steps, the schedule spanning them (0: run all epochs)")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=16,
                   help="examples per process and micro-batch. The effective batch is this × processes × "
                        "--grad-accum (printed at start): the WikiSpecter thesis's batch of 16 on 4 GPUs is "
                        "--batch-size 4 under 4 processes, or 16 on one")
    p.add_argument("--grad-accum", type=cli.number(int, cli.COUNT), default=1,
                   help="micro-batches per optimizer step")
    p.add_argument("--clip", type=cli.number(float, cli.NON_NEGATIVE), default=1.0,
                   help="gradient norm clipping (SPECTER), 0 = off")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42,
                   help="seed for initialisation, data order and dropout")
    p.add_argument("--seeds", type=cli.number(int, cli.SEED), action="extend", nargs="+", default=None,
                   metavar="SEED",
                   help="train one run per seed, one after another, into OUT/seed_SEED (the key-sentence thesis "
                        "averages 5 seeds: --seeds 1 2 3 4 5; report them with 05_evaluate.py --runs OUT/seed_*); "
                        "one process only")
    p.add_argument("--drop-last", action=argparse.BooleanOptionalAction, default=False,
                   help="drop the last partial batch of an epoch (in-batch-negative and batch-statistics losses need "
                        "full batches)")
    p.add_argument("--length-buckets", type=cli.number(int, cli.COUNT_0), default=0,
                   help="> 0: batches of similar length, sorted within windows of this many batches of the "
                        "(seed, epoch) permutation, batch order shuffled (0: off)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass (less memory, same result)")
    p.add_argument("--eval-every", type=cli.number(int, cli.COUNT_0), default=1000,
                   help="validate every N optimizer steps, besides each epoch's end (0: epoch ends only)")
    p.add_argument("--checkpoint-every", type=cli.number(int, cli.COUNT_0), default=1000,
                   help="save a checkpoint every N steps (0: never)")
    p.add_argument("--keep", type=cli.number(int, cli.COUNT_0), default=2, help="checkpoints to keep (the newest)")
    p.add_argument("--save-epochs", action="store_true",
                   help="also save the model at the end of every epoch as RUN/epoch_K (to evaluate each epoch)")
    p.add_argument("--log-every", type=cli.number(int, cli.COUNT), default=10,
                   help="write the mean training loss every N steps (several processes agree there, and at "
                        "checkpoints, to stop on a SIGTERM)")
    p.add_argument("--report-to", default="none",
                   help="also log every log.jsonl record to these experiment trackers through Accelerate, "
                        "comma-separated (tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive, swanlab, "
                        "trackio; all: every one installed; none); local ones write under RUN/trackers")
    p.add_argument("--loader-workers", type=cli.number(int, cli.between(0, 64)), default=2,
                   help="on a GPU, processes that collate batches ahead of the step into pinned memory, copied "
                        "without blocking (a CPU run collates in its own process: its cores train)")
    p.add_argument("--length-groups", type=cli.number(int, cli.between(1, 1024)), default=3,
                   help="pad a batch as this many length-sorted sub-batches (less padding; each draws its own "
                        "dropout masks, so the count changes the trained weights and a resume must match it). "
                        "Training on a CPU packs a batch without padding instead for BERT, DistilBERT and ELECTRA "
                        "models, where this has no effect")
    p.add_argument("--chunk-tokens", type=cli.number(int, cli.COUNT_0), default=0,
                   help="objectives whose examples are independent (triplet, contrastive, cosine): run forward and "
                        "backward on parts of a batch of about this many tokens, one after another, so that only "
                        "one part's activations are in memory (the gradient is the same; 0: the whole batch)")
    p.add_argument("--cache-chunk", type=cli.number(int, cli.COUNT_0), default=0,
                   help="objectives whose loss is computed from the batch's embeddings together (mnrl): > 0 runs it "
                        "with GradCache (Gao et al. 2021; sentence-transformers' Cached* losses), embedding this "
                        "many examples at a time: the same loss, less memory; dropout draws other masks per chunk, "
                        "so the count changes the trained weights and a resume must match it (0: the whole batch)")
    objective.add_arguments(p.add_argument_group(f"{objective.name} objective ({objective.paper}); the defaults "
                                                 "above are its own"))
    p.set_defaults(**objective.defaults_for(argv))
