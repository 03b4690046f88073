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
the same --out resumes from the newest checkpoint. SIGTERM saves a checkpoint (under several processes at the
next log record or checkpoint) and exits with status 143.
04_distill.py train runs the same loop with the distill objective.
"""

import argparse
import contextlib
import math
import os
import signal
import sys

from common import cli
from common.outdir import provenance
from common.io import InputError, Preempted
from common.train import objectives
from common.train.training_flags import add_training_arguments


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
    from tqdm import tqdm
    from transformers import get_scheduler

    from common.models import cpu, precision
    from common.models.saving import drop_tied_copies
    from common.train.rundir import replacement, run_folder, run_log, run_status
    from common.distributed import check_joined, joins_on_cpu, stop_agreed
    from common.train.optimization import parameter_groups, warmup_steps
    from common.models.encoder import checkpoint_activations
    from common.train.batches import loaders
    done = run_status.finished(args, script)
    if done is not None:
        if os.environ.get("RANK", "0") == "0":  # one line under accelerate launch, before Accelerate starts
            print(f"{args.out}: finished with these settings already ({os.path.join(args.out, 'manifest.json')}); "
                  "nothing to do (--overwrite trains it again)")
        return done
    started = provenance.now()

    # the Accelerator: processes and mixed precision from `accelerate launch` / `accelerate config`, several processes
    # joined into one run on a GPU each or on the CPU
    log_with = run_log.trackers(args.report_to)
    work = replacement.work_folder(args)  # --out, or inside it while replacing a finished run there (--overwrite)
    acc = Accelerator(cpu=joins_on_cpu(), gradient_accumulation_steps=args.grad_accum, log_with=log_with or None,
                      project_config=ProjectConfiguration(work, os.path.join(work, "trackers")))
    check_joined(acc)
    acc.register_save_state_pre_hook(drop_tied_copies)  # a checkpoint stores a tied weight once, by its own name
    set_seed(args.seed)
    say = acc.on_main_process(print)  # once per run: Accelerator.print prints once per node
    say(precision.training_line(acc))
    if acc.device.type == "cpu" and acc.mixed_precision == "bf16" and not precision.native_bf16():
        say("note: bf16 mixed precision on a CPU without native bfloat16 (avx512_bf16 or AMX) runs slower than "
                  "float32 (docs/benchmarks.md, \"bfloat16 on a CPU\")")

    # the run folder: claimed and locked before any work writes into it (the masked LM's token cache)
    folder = run_folder.RunFolder(args, acc, tracked=bool(log_with))
    try:  # locked until the manifest is written
        folder.claim()
        acc.wait_for_everyone()

        # the model, as the objective builds it: the encoder, or a module holding it with heads and loss state
        objective = objectives.get(args.objective)(args, acc)
        model = objective.build()
        if acc.device.type == "cpu":  # the CPU's kernels (cpu.py); a GPU runs the model as transformers wrote it:
            # dropout masks from NumPy, attention with them, a BERT masked LM's last layer at its masked positions,
            # and a batch's texts packed end to end in one row, which collate then makes
            objective.packed = cpu.packs_rows(cpu.install(model, say=say))
        if args.gradient_checkpointing:
            checkpoint_activations(objective.encoder.transformer)

        # the data: tokenised once; rows drawn in a permutation of (seed, epoch), optionally in batches of like length
        with acc.main_process_first():
            objective.load_data()
        objective.card_facts()  # what the model card quotes is read and checked now, before any step
        sampler, train_dl, val_dl = loaders(objective, args, gpu=acc.device.type == "cuda")
        acc.dataloader_config.non_blocking = acc.device.type == "cuda"

        # the optimizer (the fused kernel updates every parameter in one pass) and the schedule, its step counts taken
        # after prepare: on several processes each dataloader yields fewer batches
        optimizer = torch.optim.AdamW(parameter_groups(model, args.weight_decay), lr=args.lr, fused=True)
        model, optimizer, train_dl, val_dl = acc.prepare(model, optimizer, train_dl, val_dl)
        steps_per_epoch = math.ceil(len(train_dl) / args.grad_accum)
        total_steps = min(args.epochs * steps_per_epoch, args.max_steps or math.inf)
        warmup = warmup_steps(args.warmup, total_steps)
        if warmup and warmup >= total_steps:
            say(f"note: --warmup {args.warmup:g} is {warmup} steps, the run's {total_steps} or more: no step "
                      f"reaches the full learning rate ({args.lr:g})")
        # the prepared scheduler steps once per process per optimizer step
        scheduler = acc.prepare(get_scheduler(args.schedule, optimizer, num_warmup_steps=warmup * acc.num_processes,
                                              num_training_steps=total_steps * acc.num_processes))

        say(f"effective batch {args.batch_size * acc.num_processes * args.grad_accum} = {args.batch_size} per "
                  f"process × {acc.num_processes} processes × {args.grad_accum} accumulation; {total_steps} steps")
        # the loop's state (step, epoch, best, the loss window): resumed whole from the newest checkpoint of the same
        # settings, the model's as loaded among them
        state = folder.start(objective)
        if state.step:
            say(f"resuming from {folder.checkpoint_path(state.step)} (step {state.step} of {total_steps})")
        if folder.tracked:
            acc.init_trackers("docembed", config={k: v for k, v in folder.identity.items()
                                                  if isinstance(v, (int, float, str, bool))})

        # the loop
        # SIGTERM (what Slurm sends before preemption): checkpoint and exit at the next step, or under several
        # processes at the next log record or checkpoint, where they agree
        stop = []
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
        bar = tqdm(total=total_steps, initial=state.step, desc="train", unit=" steps",
                   disable=not acc.is_main_process, mininterval=1.0)
        model.train()
        try:
            while state.epoch < args.epochs and state.step < total_steps:
                sampler.epoch = state.epoch
                objective.set_epoch(state.epoch)
                skipped = state.batch_in_epoch
                for batch in acc.skip_first_batches(train_dl, skipped) if skipped else train_dl:
                    # dropout noise from (seed, micro-step, process): a resumed run draws the masks it would have
                    # (torch.manual_seed would also seed every other kind of device, at a quarter of a millisecond)
                    seed = (args.seed * 1_000_003 + state.micro) * acc.num_processes + acc.process_index
                    torch.default_generator.manual_seed(seed)
                    if acc.device.type == "cuda":
                        torch.cuda.manual_seed(seed)
                    state.micro += 1
                    state.batch_in_epoch += 1
                    with acc.accumulate(model):
                        # the backward: the whole batch's, or a strategy that bounds its memory
                        if "parts" in batch:  # --chunk-tokens: the batch cut into parts of independent examples
                            loss, logs = backward_in_parts(acc, model, objective, batch)
                        elif "chunks" in batch:  # --cache-chunk: GradCache over chunks of the batch's embeddings
                            loss, logs = backward_cached(acc, model, objective, batch)
                        else:
                            losses, logs = objective.losses(model, batch)
                            loss = losses.mean()
                            acc.backward(loss)
                        state.record(loss, logs)
                        if acc.sync_gradients and args.clip > 0:
                            acc.clip_grad_norm_(model.parameters(), args.clip)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad()
                    if not acc.sync_gradients:
                        continue
                    state.step += 1
                    bar.update(1)
                    records = state.step % args.log_every == 0 or state.step == total_steps
                    saves = bool(args.checkpoint_every) and state.step % args.checkpoint_every == 0
                    if records:
                        means = folder.window_means(state)
                        folder.write_log({"step": state.step, "epoch": round(state.step / steps_per_epoch, 4), **means,
                                          "lr": scheduler.get_last_lr()[0], "steps_per_s": state.steps_per_second()})
                        bar.set_postfix(loss=f"{means['loss']:.4f}")
                        state.logged()
                    # validated every --eval-every steps and at an epoch's end (or --max-steps inside one)
                    if (args.eval_every and state.step % args.eval_every == 0) or state.step >= total_steps or \
                            state.batch_in_epoch == len(train_dl):
                        metrics = validate(acc, model, objective, val_dl, folder, state, steps_per_epoch)
                        if objective.selection in metrics and (state.best is None or
                                                               metrics[objective.selection] > state.best):
                            state.best = metrics[objective.selection]  # the best model so far is RUN/model
                            folder.save_model("model", model, objective, state)
                    if saves:
                        folder.save_checkpoint(model, state)
                    if state.step >= total_steps:
                        break
                    if stop_agreed(acc, bool(stop), boundary=records or saves):
                        if not saves:
                            folder.save_checkpoint(model, state)
                        bar.close()
                        say(f"stopped by SIGTERM at step {state.step}; checkpoint saved in "
                                  f"{os.path.join(folder.path, 'checkpoints')}; run the same command to resume")
                        acc.end_training()
                        raise Preempted(state.step)
                if state.step >= total_steps and state.batch_in_epoch < len(train_dl):
                    break
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
                if args.save_epochs:
                    folder.save_model(f"epoch_{state.epoch}", model, objective, state)
        finally:
            signal.signal(signal.SIGTERM, previous)
            bar.close()

        # the save: the last checkpoint, the model (unless validation chose one), the curves, the manifest
        if args.checkpoint_every and not folder.has_checkpoint(state.step):
            folder.save_checkpoint(model, state)
        if not objective.selection or state.best is None:
            folder.save_model("model", model, objective, state)
        if acc.is_main_process:
            folder.draw_curves()
        acc.end_training()
        counts = {"train_examples": len(objective.train_rows), "val_examples": len(objective.val_rows),
                  "steps": total_steps, "warmup_steps": warmup, "processes": acc.num_processes}
        if state.best is not None:
            counts[f"best_{objective.selection}"] = state.best
        if acc.is_main_process:
            folder.commit(script, started, counts)
            print(f"model → {os.path.join(args.out, 'model')}")
    finally:
        folder.release()
    return counts


def backward_in_parts(acc, model, objective, batch):
    """``--chunk-tokens``'s backward: the loss of a batch cut into parts (``batches.BatchParts``), each part forward
    and backward in turn, its summed loss divided by the whole batch's example count, so that the gradient is the
    batch mean's with the activations of one part alive at a time (a memory bound, not a speed-up: parts lose the
    batch's shared documents). Under DDP only the last part synchronises. Returns the loss and the log values, each
    part's weighted by its examples."""
    total, logs, examples, last = 0.0, {}, sum(batch["sizes"]), len(batch["parts"]) - 1
    for n, (part, size) in enumerate(zip(batch["parts"], batch["sizes"])):
        with acc.no_sync(model) if n < last else contextlib.nullcontext():
            losses, part_logs = objective.losses(model, part)
            loss = losses.sum() / examples
            acc.backward(loss)
        total = total + loss.detach()
        logs = {name: logs.get(name, 0) + value * (size / examples) for name, value in part_logs.items()}
    return total, logs


def backward_cached(acc, model, objective, batch):
    """``--cache-chunk``'s backward, GradCache (Gao et al. 2021): every chunk of the batch embedded without gradient,
    its random state kept; the loss of those embeddings and its gradient with respect to them; then each chunk
    embedded again under its random state (the same dropout) and that gradient back-propagated through it: the whole
    batch's loss and gradient with one chunk's activations alive at a time, ``acc.backward`` scaling each chunk's as
    it would the loss (accumulation, the fp16 scaler). Under DDP only the last chunk synchronises."""
    import torch

    from common.train import grad_cache
    states, embeddings = grad_cache.embed_chunks(model, objective, batch["chunks"])
    losses, logs = objective.loss_from_embeddings(embeddings, batch)
    loss = losses.mean()
    grads = torch.autograd.grad(loss, embeddings)
    start, last = 0, len(states) - 1
    for n, (chunk, state) in enumerate(zip(batch["chunks"], states)):
        state.restore()
        with acc.no_sync(model) if n < last else contextlib.nullcontext():
            chunk_embeddings = objective.embed(model, chunk)
            acc.backward(grad_cache.surrogate(chunk_embeddings, grads, start))
        start += len(chunk_embeddings[0])
    return loss.detach(), logs


def validate(acc, model, objective, loader, folder, state, steps_per_epoch):
    """The objective's validation metrics at ``state.step``, written to the log and printed (none without validation
    rows), once the losses since the last log record are checked finite."""
    if not len(objective.val_rows):
        return {}
    folder.check_finite(state)
    model.eval()
    metrics = objective.validate(model, loader, acc)
    model.train()
    record = {"step": state.step, "epoch": round(state.step / steps_per_epoch, 4), **metrics}
    folder.write_log(record)
    line = " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items())
    acc.on_main_process(print)(line)
    return metrics


def train_runs(args, script=__file__):
    """``train(args)``, or with ``--seeds`` the same run once per seed, into OUT/seed_SEED (each run's counts)."""
    if not args.seeds:
        return train(args, script)
    from common.distributed import launched_processes
    if launched_processes() > 1:
        raise InputError("--seeds runs one process; under several processes launch once per --seed")
    return [train(argparse.Namespace(**{**vars(args), "seed": seed, "seeds": None,
                                        "out": os.path.join(args.out, f"seed_{seed}")}), script)
            for seed in args.seeds]


def main(argv):
    return train_runs(parse_args(argv))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
