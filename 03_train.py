"""Step 3: fine-tune an encoder on a data directory with one of the project's objectives.

  accelerate launch 03_train.py --objective triplet --data work/fi/data --model TurkuNLP/bert-base-finnish-cased-v1 \\
      --out runs/wikispecter
  python 03_train.py ...            (one process)

Objectives and where their defaults come from (`03_train.py --objective NAME --help` lists each one's flags with the
values that will run):
  triplet      SPECTER / WikiSpecter: L2 triplet margin loss on (query, linked, negative) documents
  contrastive  key-sentence thesis: contrastive loss on (query, sentence, key?) pairs, cosine distance
  cosine       key-sentence thesis: MSE between cos(query, sentence) and the 0/1 label
  mlm          paper search, stage 1: masked-language-model domain adaptation on abstracts (transformers'
               run_mlm_no_trainer.py)
  mnrl         paper search, stage 2: Multiple Negatives Ranking, title → abstract with in-batch negatives
               (sentence-transformers' MultipleNegativesRankingLoss)

Mixed precision and the number of GPUs come from `accelerate config` / `accelerate launch`. A run writes
RUN/model (Hugging Face + sentence-transformers), RUN/checkpoints/step_N and RUN/log.jsonl; starting again with
the same --out resumes from the newest checkpoint. SIGTERM saves a checkpoint and exits with status 143.
04_distill.py train runs the same loop with the distill objective.
"""

import argparse
import contextlib
import math
import os
import signal
import sys
import time

from common import cli, provenance
from common.io import InputError, Preempted
from common.train import objectives


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
    p.add_argument("--warmup", type=cli.number(float, cli.NON_NEGATIVE), default=0.0,
                   help="warm-up: < 1 is a share of all steps, >= 1 a number of steps")
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
                   help="write the mean training loss every N steps")
    p.add_argument("--report-to", default="none",
                   help="also log every log.jsonl record to these experiment trackers through Accelerate, "
                        "comma-separated (tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive, swanlab, "
                        "trackio; all: every one installed; none); local ones write under RUN/trackers")
    p.add_argument("--loader-workers", type=cli.number(int, cli.between(0, 64)), default=2,
                   help="on a GPU, processes that collate batches ahead of the step into pinned memory, copied "
                        "without blocking (a CPU run collates in its own process: its cores train)")
    p.add_argument("--length-groups", type=cli.number(int, cli.between(1, 1024)), default=3,
                   help="pad a batch as this many length-sorted sub-batches (speed only: the loss is the same). "
                        "Training on a CPU packs a batch without padding instead for BERT, DistilBERT and ELECTRA "
                        "models, where this has no effect")
    p.add_argument("--chunk-tokens", type=cli.number(int, cli.COUNT_0), default=0,
                   help="objectives whose examples are independent (triplet, contrastive, cosine): run forward and "
                        "backward on parts of a batch of about this many tokens, one after another, so that only "
                        "one part's activations are in memory (the gradient is the same; 0: the whole batch)")
    objective.add_arguments(p.add_argument_group(f"{objective.name} objective ({objective.paper}); the defaults "
                                                 "above are its own"))
    p.set_defaults(**objective.defaults_for(argv))


def parse_args(argv):
    """The training command line ``argv`` of the objective ``--objective`` names: checked whole, every flag against
    its limit and the flags that constrain each other together, before torch is imported or a model loaded."""
    first = cli.Parser(add_help=False)
    names = objectives.names("03_train.py")
    first.add_argument("--objective", choices=names, default=names[0])
    first.add_argument("--data")
    known, _ = first.parse_known_args(argv)
    name = known.objective
    if known.data is not None and not any(a in ("-h", "--help") for a in argv):
        objectives.check_data(name, known.data)  # a bad data directory fails before the flags' own checks
    objective = objectives.get(name)
    p = cli.parser(__doc__)
    p.add_argument("--objective", choices=names, default=names[0],
                   help="training objective (--objective NAME --help lists its own flags and defaults)")
    add_training_arguments(p, objective, argv)
    args = p.parse_args(argv)
    args.objective = name
    cli.check_out(p, args)
    objective.check_args(args)
    return args


def train(args, script=__file__):
    """One training run, its recipe in order; returns the run's counts (also written to its manifest). A run that
    finished with the same settings is not trained again."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed
    from torch.utils.data import DataLoader
    from tqdm import tqdm
    from transformers import get_scheduler

    from common.models import cpu
    from common.models import precision
    from common.train import run_folder, run_identity, run_log
    from common.train.distributed import any_process
    from common.train.optimization import parameter_groups, warmup_steps
    from common.train.batches import BatchParts, BucketBatchSampler, EpochSampler, ignore_sigterm
    done = run_folder.finished(args, script)
    if done is not None:
        if os.environ.get("RANK", "0") == "0":  # one line under accelerate launch, before Accelerate starts
            print(f"{args.out}: finished with these settings already ({os.path.join(args.out, 'manifest.json')}); "
                  "nothing to do (--overwrite trains it again)")
        return done
    started = provenance.now()

    # the Accelerator: processes and mixed precision from `accelerate launch` / `accelerate config`
    log_with = run_log.trackers(args.report_to)
    work = run_folder.work_folder(args)  # --out, or inside it while replacing a finished run there (--overwrite)
    acc = Accelerator(gradient_accumulation_steps=args.grad_accum, log_with=log_with or None,
                      project_config=ProjectConfiguration(work, os.path.join(work, "trackers")))
    set_seed(args.seed)
    acc.print(precision.training_line(acc))
    if acc.device.type == "cpu" and acc.mixed_precision == "bf16" and not precision.native_bf16():
        acc.print("note: bf16 mixed precision on a CPU without native bfloat16 (avx512_bf16 or AMX) runs slower than "
                  "float32 (docs/benchmarks.md, \"bfloat16 on a CPU\")")

    # the model, as the objective builds it: the encoder, or a module holding it with heads and loss state
    objective = objectives.get(args.objective)(args, acc)
    model = objective.build()
    if acc.device.type == "cpu":
        cpu.install(model)  # the CPU's faster dropout, packed rows and masked-LM last layer; a GPU runs the model
    if args.gradient_checkpointing:
        transformer = objective.encoder_of(model).transformer
        if hasattr(transformer, "activation_checkpointing_enable"):  # the name since transformers 5
            transformer.activation_checkpointing_enable({"use_reentrant": False})
        else:
            transformer.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # the data: tokenised once; rows drawn in a permutation of (seed, epoch), optionally in batches of similar length
    with acc.main_process_first():
        objective.load_data()
    objective.card_facts()  # what the model card quotes is read and checked now, before any step
    rows, gpu = objective.train_rows, acc.device.type == "cuda"
    collate = BatchParts(objective, args.chunk_tokens) if args.chunk_tokens else objective.collate
    # on a GPU, batches are collated ahead by worker processes into pinned memory and copied while the kernels
    # queued before run; the same batches (each example's randomness is its own), in the same order
    ahead = {"pin_memory": gpu, "num_workers": args.loader_workers if gpu else 0}
    if ahead["num_workers"]:
        ahead["worker_init_fn"] = ignore_sigterm
    acc.dataloader_config.non_blocking = gpu
    if args.length_buckets:
        sampler = BucketBatchSampler(objective.train_lengths(), args.batch_size, args.length_buckets, args.seed,
                                     args.drop_last)
        train_dl = DataLoader(rows, batch_sampler=sampler, collate_fn=collate, **ahead)
    else:
        sampler = EpochSampler(len(rows), args.seed)
        train_dl = DataLoader(rows, batch_size=args.batch_size, sampler=sampler, drop_last=args.drop_last,
                              collate_fn=collate, **ahead)
    if not len(train_dl):
        raise InputError(f"{len(rows)} training rows make no full batch of {args.batch_size}")
    val_dl = DataLoader(objective.val_rows, batch_size=args.batch_size, collate_fn=objective.collate, pin_memory=gpu)

    # the optimizer (the fused kernel updates every parameter in one pass) and the schedule, its step counts taken
    # after prepare: on several processes each dataloader yields fewer batches
    optimizer = torch.optim.AdamW(parameter_groups(model, args.weight_decay), lr=args.lr, fused=True)
    model, optimizer, train_dl, val_dl = acc.prepare(model, optimizer, train_dl, val_dl)
    steps_per_epoch = math.ceil(len(train_dl) / args.grad_accum)
    total_steps = min(args.epochs * steps_per_epoch, args.max_steps or math.inf)
    warmup = warmup_steps(args.warmup, total_steps)
    # the prepared scheduler steps once per process per optimizer step
    scheduler = acc.prepare(get_scheduler(args.schedule, optimizer, num_warmup_steps=warmup * acc.num_processes,
                                          num_training_steps=total_steps * acc.num_processes))

    def seed_dropout(seed):
        """Seed the generators dropout draws from: the host's and this GPU's (torch.manual_seed also queues a seed
        for every other kind of device, at a quarter of a millisecond, where a tiny model's step takes a few)."""
        torch.default_generator.manual_seed(seed)
        if acc.device.type == "cuda":
            torch.cuda.manual_seed(seed)

    # the run folder: claimed and locked, resumed from its newest checkpoint of the same settings
    folder = run_folder.RunFolder(args, objective, acc, tracked=bool(log_with))
    try:  # locked until the manifest is written
        folder.claim()
        acc.wait_for_everyone()
        acc.print(f"effective batch {args.batch_size * acc.num_processes * args.grad_accum} = {args.batch_size} per "
                  f"process × {acc.num_processes} processes × {args.grad_accum} accumulation; {total_steps} steps")
        state = folder.resume() or {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best": None}
        step, epoch, batch_in_epoch, best = state["step"], state["epoch"], state["batch_in_epoch"], state["best"]
        if step:
            acc.print(f"resuming from {state['path']} (step {step} of {total_steps})")
        if folder.tracked:
            acc.init_trackers("docembed", config={k: v for k, v in folder.identity.items()
                                                  if isinstance(v, (int, float, str, bool))})
        validated = None

        def finite(weights=False):
            """Stop at a non-finite loss (or, before a save, non-finite weights), naming its step: the losses are
            read here, at log records and saves only, so that no step waits for them; what a NaN reached is never
            saved, and the checkpoints written so far hold the last good state."""
            folder.check_finite(window, step, model if weights else None)

        def log():
            nonlocal window, logged
            finite()
            mean = acc.reduce(torch.stack([loss for _, loss in window]).mean(), reduction="mean").item()
            folder.write_log({"step": step, "epoch": round(step / steps_per_epoch, 4), "loss": mean,
                              **objective.log_metrics(acc), "lr": scheduler.get_last_lr()[0],
                              "steps_per_s": (step - logged[0]) / (time.perf_counter() - logged[1])})
            bar.set_postfix(loss=f"{mean:.4f}")
            window, logged = [], (step, time.perf_counter())

        def save(name="model"):
            finite(weights=True)
            unwrapped = acc.unwrap_model(model)
            folder.save_model(name, lambda path: objective.save(unwrapped, path, folder.identity, folder.log))

        def checkpoint():
            finite(weights=True)
            folder.save_checkpoint({"step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch, "best": best,
                                    "window": folder.window_state(window), "log_window": objective.log_state()},
                                   args.keep)

        def validate():
            """Validate once at this step (an epoch's end or --max-steps may fall on an --eval-every step) and keep
            the model if the objective selects by a metric and this one is its best."""
            nonlocal validated, best
            if not len(objective.val_rows) or validated == step:
                return
            finite()
            validated = step
            model.eval()
            metrics = objective.validate(model, val_dl, acc)
            model.train()
            record = {"step": step, "epoch": round(step / steps_per_epoch, 4), **metrics}
            folder.write_log(record)
            acc.print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))
            key = objective.selection
            if key and key in metrics and (best is None or metrics[key] > best):
                best = metrics[key]
                save()

        # the loop
        stop = []  # SIGTERM (what Slurm sends before preemption): checkpoint and exit at the next step
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
        bar = tqdm(total=total_steps, initial=step, desc="train", unit=" steps", disable=not acc.is_main_process,
                   mininterval=1.0)
        model.train()
        # (step, loss) of each micro-batch since the last log record, the losses on the device; a resumed run's first
        # record averages what the uninterrupted run's would (the checkpoint keeps them)
        window = [(at, torch.tensor(loss, device=acc.device)) for at, loss in state.get("window", ())]
        objective.restore_log_state(state.get("log_window", ()))
        logged, micro = (step, time.perf_counter()), step * args.grad_accum
        try:
            while epoch < args.epochs and step < total_steps:
                sampler.epoch = epoch
                objective.set_epoch(epoch)
                for batch in acc.skip_first_batches(train_dl, batch_in_epoch) if batch_in_epoch else train_dl:
                    # dropout noise from (seed, micro-step, process): a resumed run draws the masks it would have
                    seed_dropout((args.seed * 1_000_003 + micro) * acc.num_processes + acc.process_index)
                    micro += 1
                    batch_in_epoch += 1
                    with acc.accumulate(model):
                        window.append((step + 1, backward(acc, model, objective, batch)))
                        if acc.sync_gradients and args.clip > 0:
                            acc.clip_grad_norm_(model.parameters(), args.clip)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad()
                    if not acc.sync_gradients:
                        continue
                    step += 1
                    bar.update(1)
                    if step % args.log_every == 0 or step == total_steps:
                        log()
                    if args.eval_every and step % args.eval_every == 0:
                        validate()
                    if args.checkpoint_every and step % args.checkpoint_every == 0:
                        checkpoint()
                    if step >= total_steps:
                        break
                    if any_process(acc, bool(stop)):
                        checkpoint()
                        bar.close()
                        acc.print(f"stopped by SIGTERM at step {step}; checkpoint saved in "
                                  f"{os.path.join(folder.path, 'checkpoints')}; run the same command to resume")
                        acc.end_training()
                        raise Preempted(step)
                if step >= total_steps and batch_in_epoch < len(train_dl):
                    validate()  # stopped by --max-steps inside an epoch
                    break
                epoch, batch_in_epoch = epoch + 1, 0
                validate()
                if args.save_epochs:
                    save(f"epoch_{epoch}")
        finally:
            signal.signal(signal.SIGTERM, previous)
            bar.close()

        # the save: the last checkpoint, the model (unless validation chose one), the curves, the manifest
        if args.checkpoint_every and not folder.has_checkpoint(step):
            checkpoint()
        if not objective.selection or best is None:
            save()
        if acc.is_main_process:
            folder.draw_curves()
        acc.end_training()
        counts = {"train_examples": len(objective.train_rows), "val_examples": len(objective.val_rows),
                  "steps": total_steps, "warmup_steps": warmup, "processes": acc.num_processes}
        if best is not None:
            counts[f"best_{objective.selection}"] = best
        if acc.is_main_process:
            inputs = [os.path.join(args.data, name) for name in sorted(os.listdir(args.data))
                      if name.endswith(".jsonl")]
            folder.commit(provenance.manifest(script, args, started, inputs=inputs, counts=counts, seed=args.seed,
                                              identity=run_identity.command_identity(args),
                                              precision=acc.mixed_precision, device=acc.device.type))
            print(f"model → {os.path.join(args.out, 'model')}")
    finally:
        folder.release()
    return counts


def backward(accelerator, model, objective, batch):
    """The micro-batch's mean loss, back-propagated; returns it detached. A batch that ``--chunk-tokens`` cut into
    parts (``batches.BatchParts``) runs forward and backward one part at a time, each part's loss summed and divided
    by the whole batch's example count: the gradient of the batch mean, with the activations of one part alive at a
    time (a memory bound, not a speed-up: parts lose the batch's shared documents). Under DDP only the last part
    synchronises."""
    parts = batch.get("parts") if isinstance(batch, dict) else None
    if not parts:
        loss = objective.losses(model, batch).mean()
        accelerator.backward(loss)
        return loss.detach()
    total, examples = 0.0, sum(batch["sizes"])
    for n, part in enumerate(parts):
        with accelerator.no_sync(model) if n < len(parts) - 1 else contextlib.nullcontext():
            loss = objective.losses(model, part).sum() / examples
            accelerator.backward(loss)
        total = total + loss.detach()
    return total


def train_runs(args, script=__file__):
    """``train(args)``, or with ``--seeds`` the same run once per seed, into OUT/seed_SEED (each run's counts)."""
    if not args.seeds:
        return train(args, script)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InputError("--seeds runs one process; under several processes launch once per --seed")
    return [train(argparse.Namespace(**{**vars(args), "seed": seed, "seeds": None,
                                        "out": os.path.join(args.out, f"seed_{seed}")}), script)
            for seed in args.seeds]


def main(argv):
    return train_runs(parse_args(argv))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
