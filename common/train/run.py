"""What 03_train.py and 04_distill.py train share: the training flags, their per-objective defaults, and one run
(data check → Accelerator → model → data → run folder and loop → manifest).

Flags are parsed in two passes: the first reads ``--objective`` and ``--data`` so that a bad data directory fails
before torch is imported or a model is loaded; the second adds the chosen objective's own flags. Each flag is
declared with its limit (``cli.number``), so a value that cannot train is refused as the command line is read.
"""

import argparse
import hashlib
import json
import os

from common import cli, folders, io, provenance
from common.train import objectives

# flags that change the trained weights or which checkpoint becomes RUN/model: a resume must match them all
RESULT_ARGS = ("model", "max_length", "pooling", "normalize", "lr", "weight_decay", "warmup", "schedule", "epochs",
               "max_steps", "batch_size", "grad_accum", "clip", "seed", "eval_every", "drop_last", "length_buckets",
               "chunk_tokens")
# flags that change only speed, memory or logging: tests/test_hardening.py trains with each changed and checks that
# the weights stay the same (--chunk-tokens does not: its parts draw other dropout masks)
SPEED_ARGS = ("checkpoint_every", "keep", "log_every", "length_groups", "gradient_checkpointing", "report_to",
              "save_epochs")


def add_training_arguments(p):
    """The shared flags. Those whose default depends on the objective default to None here and take the
    objective's value (its paper's) after parsing; the help text names them per objective."""
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
                   help="tokens per text [objective's default]")
    p.add_argument("--pooling", choices=("cls", "mean"), default=None, help="document vector [objective's default]")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalise embeddings [objective's default; none: as the model's sentence-transformers "
                        "config says]")
    p.add_argument("--lr", type=cli.number(float, cli.POSITIVE), default=None,
                   help="peak learning rate [objective's default]")
    p.add_argument("--weight-decay", type=cli.number(float, cli.AT_LEAST_0), default=None,
                   help="AdamW weight decay, none on biases and LayerNorm [objective's default, else 0.01]")
    p.add_argument("--warmup", type=cli.number(float, cli.AT_LEAST_0), default=None,
                   help="warm-up: < 1 is a share of all steps, >= 1 a number of steps [objective's default]")
    p.add_argument("--schedule", choices=("linear", "cosine"), default=None,
                   help="decay after the warm-up (transformers' schedulers) [objective's default, else linear]")
    p.add_argument("--epochs", type=cli.number(int, cli.COUNT), default=None, help="epochs [objective's default]")
    p.add_argument("--max-steps", type=cli.number(int, cli.COUNT_0), default=0,
                   help="stop after this many optimizer steps, the schedule spanning them (0: run all epochs)")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=None,
                   help="examples per process and micro-batch [objective's default]. The effective batch is this × "
                        "processes × --grad-accum (printed at start): the WikiSpecter thesis's batch of 16 on 4 GPUs "
                        "is --batch-size 4 under 4 processes, or 16 on one")
    p.add_argument("--grad-accum", type=cli.number(int, cli.COUNT), default=None,
                   help="micro-batches per optimizer step [objective's default, else 1]")
    p.add_argument("--clip", type=cli.number(float, cli.AT_LEAST_0), default=1.0,
                   help="gradient norm clipping (SPECTER), 0 = off")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42,
                   help="seed for initialisation, data order and dropout")
    p.add_argument("--seeds", type=cli.number(int, cli.SEED), action="extend", nargs="+", default=None,
                   metavar="SEED",
                   help="train one run per seed, one after another, into OUT/seed_SEED (the key-sentence thesis "
                        "averages 5 seeds: --seeds 1 2 3 4 5; report them with 05_evaluate.py --runs OUT/seed_*); "
                        "one process only")
    p.add_argument("--drop-last", action=argparse.BooleanOptionalAction, default=None,
                   help="drop the last partial batch of an epoch [objective's default: yes for in-batch-negative "
                        "and batch-statistics losses]")
    p.add_argument("--length-buckets", type=cli.number(int, cli.COUNT_0), default=None,
                   help="> 0: batches of similar length, sorted within windows of this many batches of the "
                        "(seed, epoch) permutation, batch order shuffled [objective's default, else 0: off]")
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
                   help="write the mean training loss every N steps")
    p.add_argument("--report-to", default="none",
                   help="also log every log.jsonl record to these experiment trackers through Accelerate, "
                        "comma-separated (tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive, swanlab, "
                        "trackio; all: every one installed; none); local ones write under RUN/trackers")
    p.add_argument("--length-groups", type=cli.number(int, cli.between(1, 1024)), default=3,
                   help="pad a batch as this many length-sorted sub-batches (speed only: the loss is the same). "
                        "Training on a CPU packs a batch without padding instead for BERT, DistilBERT and ELECTRA "
                        "models, where this has no effect")
    p.add_argument("--chunk-tokens", type=cli.number(int, cli.COUNT_0), default=0,
                   help="objectives whose examples are independent (triplet, contrastive, cosine): run forward and "
                        "backward on parts of a batch of about this many tokens, one after another, so that only "
                        "one part's activations are in memory (the gradient is the same; 0: the whole batch)")


FALLBACKS = {"weight_decay": 0.01, "schedule": "linear", "grad_accum": 1, "drop_last": False, "length_buckets": 0}


def parser(description, names, name, fixed=None):
    """The parser of a training command line for the objective ``name``, one of ``names`` (``fixed``: the only
    one, no ``--objective`` flag): the shared flags and the objective's own."""
    cls = objectives.get(name)
    p = cli.parser(description)
    if not fixed:
        p.add_argument("--objective", choices=names, default=names[0],
                       help="training objective (--objective NAME --help lists its own flags and defaults)")
    add_training_arguments(p)
    shown = ", ".join(f"{k}={'the model’s own' if v is None else v}" for k, v in cls.defaults.items())
    group = p.add_argument_group(f"{name} objective ({cls.paper}); its defaults for the flags above: {shown}")
    cls.add_arguments(group)
    return p


def parse(argv, description, names, fixed=None):
    """Parse a training command line for one of the objectives ``names`` (``fixed``: the only one, no flag)."""
    first = argparse.ArgumentParser(add_help=False)
    if not fixed:
        first.add_argument("--objective", choices=names, default=names[0])
    first.add_argument("--data")
    known, _ = first.parse_known_args(argv)
    name = fixed or known.objective
    if known.data is not None and not any(a in ("-h", "--help") for a in argv):
        objectives.check_data(name, known.data)
    cls = objectives.get(name)
    p = parser(description, names, name, fixed)
    args = p.parse_args(argv)
    cli.check_out(p, args)  # before anything is read or loaded
    args.objective = name
    for key, value in {**FALLBACKS, **cls.defaults}.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    cls.complete_args(args)
    cls.check_model(args)
    if args.chunk_tokens and not cls.independent:
        raise io.InputError(f"--chunk-tokens {args.chunk_tokens}: the {name} objective's loss is not a mean of "
                            "independent per-example losses, so a batch cannot be run in parts"
                            + (f" ({cls.in_parts})" if cls.in_parts else ""))
    return args


def data_fingerprint(name, data_dir):
    """What the data directory holds, for the resume identity: its manifest's inputs (with their sha256) and
    settings when 02 wrote one, else the sha256 of the files the objective reads. A directory rebuilt from other
    inputs or with another seed has another fingerprint."""
    manifest = io.read_manifest(data_dir)
    if manifest:
        found = {"inputs": manifest.get("inputs"),
                 "args": {k: v for k, v in (manifest.get("args") or {}).items() if k != "out"}}
    else:
        found = {file: io.sha256(os.path.join(data_dir, file)) for file in objectives.REGISTRY[name].data_files}
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()


def trackers(report_to):
    """``--report-to`` as Accelerate's ``log_with``: known tracker names that are installed."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    names = [n.strip() for n in report_to.split(",") if n.strip() and n.strip() != "none"]
    if names == ["all"]:
        return names
    installed = {t.value for t in get_available_trackers()}
    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            raise io.InputError(f"--report-to {name}: not a tracker Accelerate knows (one of "
                                f"{', '.join(sorted(LOGGER_TYPE_TO_CLASS))}, all, none)")
        if name not in installed:
            raise io.InputError(f"--report-to {name}: not installed (pip install {name.replace('_', '-')})")
    return names


def finished(args, script):
    """A finished run in ``args.out`` (its manifest.json, the run's last file, is there): its counts where it was
    trained with the settings of this command (``command_identity``), so that the command has nothing to do; else
    an InputError, unless ``--overwrite``. None where ``--out`` holds no finished run of this project."""
    from common.train.run_folder import RUN_FILE
    if args.overwrite or not all(os.path.isfile(os.path.join(args.out, name)) for name in ("manifest.json",
                                                                                            RUN_FILE)):
        return None
    try:
        manifest = io.read_manifest(args.out)
    except io.InputError:
        raise folders.finished_error(args.out, f"{os.path.basename(script)} run whose manifest.json cannot be "
                                               "read") from None
    what = f"{manifest.get('script') or os.path.basename(script)} run"
    recorded, wanted = manifest.get("identity"), command_identity(args)
    if recorded == wanted:
        return manifest.get("counts") or {}
    if not isinstance(recorded, dict):  # a run of an earlier version, or a manifest edited by hand
        raise folders.finished_error(args.out, f"{what} whose settings its manifest.json does not record")
    changed = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
    raise io.InputError(f"{args.out}: holds a finished {what} with other settings ({', '.join(changed[:8])}"
                        f"{' and more' if len(changed) > 8 else ''}); give --overwrite to train it again (only what "
                        "the run wrote is removed), or another --out")


def train(args, script):
    """One training run as the scripts start it; returns the run's counts (also written to its manifest). A run
    that finished with the same settings is not trained again (``finished``)."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed

    from common.models.attention import fast_dropout
    from common.train.loop import TrainConfig, Trainer
    from common.train.run_folder import RunFolder
    done = finished(args, script)
    if done is not None:
        if os.environ.get("RANK", "0") == "0":  # one line under accelerate launch, before Accelerate starts
            print(f"{args.out}: finished with these settings already ({os.path.join(args.out, 'manifest.json')}); "
                  "nothing to do (--overwrite trains it again)")
        return done
    started = provenance.now()
    log_with = trackers(args.report_to)
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum, log_with=log_with or None,
                              project_config=ProjectConfiguration(args.out, os.path.join(args.out, "trackers")))
    set_seed(args.seed)
    if accelerator.device.type == "cpu" and accelerator.mixed_precision == "bf16":
        from common.models.precision import native_bf16
        if not native_bf16():
            accelerator.print("note: bf16 mixed precision on a CPU without native bfloat16 (avx512_bf16 or AMX) runs "
                              "slower than float32 (docs/benchmarks.md, \"bfloat16 on a CPU\")")
    objective = objectives.get(args.objective)(args, accelerator)
    model = objective.build()
    if accelerator.device.type == "cpu":  # on a GPU PyTorch's own dropout is fused and fast
        fast_dropout(model)
    if args.gradient_checkpointing:
        transformer = objective.encoder_of(model).transformer
        if hasattr(transformer, "activation_checkpointing_enable"):  # the name since transformers 5
            transformer.activation_checkpointing_enable({"use_reentrant": False})
        else:
            transformer.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with accelerator.main_process_first():
        objective.load_data()
    objective.card_facts()  # what the model card quotes is read and checked now, before any step
    cfg = TrainConfig(lr=args.lr, weight_decay=args.weight_decay, warmup=args.warmup, schedule=args.schedule,
                      epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
                      grad_accum=args.grad_accum, clip=args.clip, seed=args.seed, eval_every=args.eval_every,
                      checkpoint_every=args.checkpoint_every, keep=args.keep, log_every=args.log_every,
                      drop_last=args.drop_last, length_buckets=args.length_buckets, save_epochs=args.save_epochs)
    folder = RunFolder(args.out, accelerator, identity(args, objective), overwrite=args.overwrite,
                       tracked=bool(log_with))
    trainer = Trainer(cfg, objective, model, accelerator, folder)
    try:  # the run folder stays locked until its manifest is written
        best = trainer.train()
        counts = {"train_examples": len(objective.train_rows), "val_examples": len(objective.val_rows),
                  "steps": trainer.total_steps, "warmup_steps": trainer.warmup,
                  "processes": accelerator.num_processes}
        if best is not None:
            counts[f"best_{objective.selection}"] = best
        if accelerator.is_main_process:
            inputs = [os.path.join(args.data, name) for name in sorted(os.listdir(args.data))
                      if name.endswith(".jsonl")]
            folders.write_json(os.path.join(args.out, "manifest.json"),
                               provenance.manifest(script, args, started, inputs=inputs, counts=counts, seed=args.seed,
                                           identity=command_identity(args)))
            print(f"model → {os.path.join(args.out, 'model')}")
    finally:
        folder.release()
    return counts


def train_seeds(args, script):
    """``--seeds``: the same run once per seed, into OUT/seed_SEED; returns each run's counts."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise io.InputError("--seeds runs one process; under several processes launch once per --seed")
    return [train(argparse.Namespace(**{**vars(args), "seed": seed, "seeds": None,
                                        "out": os.path.join(args.out, f"seed_{seed}")}), script)
            for seed in args.seeds]


def command_identity(args):
    """Every flag of the command that changes the result, the data's path and content included, as JSON values:
    what a finished run records in its manifest and a later command must match to find it done."""
    found = {"objective": args.objective, "data": os.path.abspath(args.data),
             "data_content": data_fingerprint(args.objective, args.data)}
    found.update({key: getattr(args, key) for key in RESULT_ARGS + objectives.get(args.objective).result_args})
    return json.loads(json.dumps(found))


def identity(args, objective):
    """What a checkpoint must share with the command that resumes it: ``command_identity``, with the settings the
    model was actually loaded with."""
    return {**command_identity(args), "max_length": objective.max_length, "pooling": objective.encoder.pooling,
            "normalize": objective.encoder.normalize}
