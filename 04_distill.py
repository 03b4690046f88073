"""Step 4: teacher–student distillation into a long-document student (Burian 2023, "Document embedding using
Transformers"); what each command does and writes: docs/distill.md, docs/contract.md.

  python 04_distill.py teachers --data work/data --out work/teach --teacher sentence-transformers/all-mpnet-base-v2
  python 04_distill.py convert-long --model bert-base-uncased --out work/student --max-length 4096 --window 512
  accelerate launch 04_distill.py train --data work/data --teachers work/teach --model allenai/longformer-base-4096 \\
      --out runs/distill --preset mse-contextual
"""

import os
import sys

from common import cli
from common.outdir import folders, provenance
from common.io import InputError
from common.models.batching import BATCH_TOKENS
from common.distill.paragraph_vector import MAX_WORDS, PRESETS
from common.models.precision import check_here


def add_teachers_arguments(p, argv):
    p.add_argument("--data", required=True, type=cli.reads, help="data directory (docs.jsonl)")
    p.add_argument("--out", required=True, help="teacher directory to write")
    p.add_argument("--teacher", default="sentence-transformers/all-mpnet-base-v2", type=cli.reads,
                   help="structural teacher: a sentence-transformers checkpoint (the thesis's)")
    p.add_argument("--teacher-max-length", type=cli.number(int, cli.LENGTH), default=384,
                   help="structural-teacher tokens per document (the thesis's text; its code used 512)")
    p.add_argument("--teacher-dim", type=cli.number(int, cli.WIDTH), default=None,
                   help="project the structural teacher's vectors onto their top N principal axes (fitted on these "
                        "documents; the origin kept), so that a student N wide can take the structural loss from a "
                        "wider teacher. Not in the thesis, whose student and teacher are both 768 wide (default: the "
                        "teacher's own width; the full vectors are kept as sbert_full.npy)")
    precision = p.add_mutually_exclusive_group()  # not in the thesis
    precision.add_argument("--bf16", dest="precision", action="store_const", const="bf16", default="float32",
                           help="embed with the structural teacher under bfloat16 autocast, on a CPU with native "
                                "bfloat16 (avx512_bf16 or AMX; refused elsewhere, and on a GPU, where embedding is "
                                "always bfloat16); its mean cosine to float32's vectors goes into the manifest")
    precision.add_argument("--int8", dest="precision", action="store_const", const="int8",
                           help="embed with an int8 copy of the structural teacher (dynamic quantisation of its "
                                "Linear layers, CPU only); its mean cosine to float32's vectors goes into the "
                                "manifest")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=32,
                   help="at most this many documents per forward pass of the structural teacher")
    p.add_argument("--batch-tokens", type=cli.number(int, cli.COUNT_0), default=None,
                   help="and at most this many padded tokens per forward pass (0: --batch-size alone; default: "
                        f"{BATCH_TOKENS['cpu']} on a CPU, {BATCH_TOKENS['cuda']} on a GPU)")
    p.add_argument("--pv-preset", choices=tuple(PRESETS), default="dm-100d",
                   help="Paragraph-Vector configuration the thesis chose: its values are the defaults of --pv, "
                        "--pv-vector-size and --pv-preprocess (dm-100d for MSE-contextual, pv-2048d for "
                        "cosine-masked; --pv-preset NAME --help shows them)")
    p.add_argument("--pv", choices=("dm", "dbow", "dm+dbow"),
                   help="Doc2Vec model(s); dm+dbow concatenates both, DM first")
    p.add_argument("--pv-vector-size", type=cli.number(int, cli.WIDTH), help="dimensions per Doc2Vec model")
    p.add_argument("--pv-preprocess",
                   help="none, lowercase or stem (Porter), one per model, comma-separated")
    p.add_argument("--pv-min-count", type=cli.number(int, cli.COUNT), default=2, help="drop rarer words (thesis)")
    p.add_argument("--pv-window", type=cli.number(int, cli.LENGTH), default=5, help="context window (thesis)")
    p.add_argument("--pv-negative", type=cli.number(int, cli.between(1, 1000)), default=5,
                   help="negative samples (thesis; hs 0, sample 0)")
    p.add_argument("--pv-epochs", type=cli.number(int, cli.COUNT), default=10,
                   help="training and inference epochs (thesis)")
    p.add_argument("--pv-max-vocab-size", type=cli.number(int, cli.COUNT), default=None,
                   help="gensim's max_vocab_size: prune rare words while scanning (thesis: 6e7 DM, 1.2e7 PV)")
    p.add_argument("--pv-workers", type=cli.number(int, cli.between(1, cli.WORKERS_MAX)), default=1,
                   help="training threads; only 1 makes the teacher reproducible (gensim's threads race)")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed of Doc2Vec training and inference")
    first = cli.Parser(add_help=False)  # one line for a bad preset, as the full parser gives
    first.add_argument("--pv-preset", choices=tuple(PRESETS), default="dm-100d")
    first.add_argument("--pv")  # so that --pv is itself, not read as short for --pv-preset
    p.set_defaults(**PRESETS[first.parse_known_args(argv)[0].pv_preset])


def run_teachers(args):
    from tqdm import tqdm

    from common.data.docs_jsonl import Documents
    from common.distill import teachers
    from common.distill.paragraph_vector import ParagraphVector, parse_preprocess
    check_here(args.precision)
    preprocess = parse_preprocess(args.pv_preprocess, args.pv)
    if not os.path.isdir(args.data):
        raise InputError(f"{args.data}: no such data directory")
    docs = Documents(args.data)
    counts = {"documents": len(docs.ids)}
    if args.teacher_dim is not None:
        teachers.check_teacher_dim(args.teacher, args.teacher_dim, len(docs.ids))
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        with tqdm(total=len(docs.ids), desc="structural teacher", unit=" docs", mininterval=1.0) as bar:
            vectors, lengths, max_length, agreement = teachers.structural_teacher(
                outputs, docs, args.teacher, args.teacher_max_length, args.batch_size, args.batch_tokens, bar,
                name=teachers.STRUCTURAL if args.teacher_dim is None else teachers.STRUCTURAL + "_full",
                precision=args.precision)
        if agreement is not None:
            from common.models.precision import AGREEMENT_SAMPLE
            counts.update(precision=args.precision, mean_cosine_to_float32=round(agreement, 6))
            print(f"structural teacher in {args.precision}: mean cosine {agreement:.4f} to float32's (first "
                  f"{min(len(docs.ids), AGREEMENT_SAMPLE)} documents)")
        if args.teacher_dim is not None:
            vectors, kept = teachers.projected_teacher(outputs, vectors, docs.ids, args.teacher_dim, args.seed)
            counts.update({"teacher_dim": args.teacher_dim, "teacher_variance_kept": round(kept, 4)})
            print(f"structural teacher projected to {args.teacher_dim} of its dimensions, keeping {kept:.1%} of "
                  "their variance")
        teachers.write_rows(outputs, teachers.LENGTHS, lengths, docs.ids)
        counts.update({"teacher_max_length": max_length, "longer_than_teacher": int((lengths > max_length).sum())})
        pv = ParagraphVector.train(teachers.pv_texts(docs), args.pv, args.pv_vector_size, args.pv_window,
                                   args.pv_negative, args.pv_min_count, args.pv_epochs, preprocess, args.pv_workers,
                                   args.seed, args.pv_max_vocab_size, counts)
        with tqdm(total=len(docs.ids), desc="contextual teacher", unit=" docs", mininterval=1.0) as bar:
            contextual = teachers.contextual_teacher(outputs, docs, pv, bar, counts)
        outputs.finish(args, inputs=[os.path.join(args.data, "docs.jsonl")], counts=counts, seed=args.seed,
                       reproducible=args.pv_workers == 1)
    print(f"{len(docs.ids)} documents: structural {vectors.shape[1]}d ({counts['longer_than_teacher']} longer than "
          f"its {max_length} tokens), contextual {contextual.shape[1]}d ({counts['pv_documents_chunked']} documents "
          f"over {MAX_WORDS:,} words, inferred in chunks) → {args.out}")


def training_script():
    """03_train.py, whose flags and loop train the student."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_script", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "03_train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_train_arguments(p, argv):
    from common.train.objectives.distill import DistillObjective
    from common.train.training_flags import add_training_arguments
    add_training_arguments(p, DistillObjective, argv)


def run_train(args):
    """The student trained on the teachers' vectors: the distill objective on 03_train.py's loop."""
    from common.train.objectives.distill import DistillObjective
    args.objective = DistillObjective.name
    DistillObjective.check_args(args)
    return training_script().train_runs(args, __file__)


# Longformer's window is even (half of it on each side of a token)
WINDOW = (f"an even number between 2 and {1 << 17:,}", lambda v: 2 <= v <= 1 << 17 and v % 2 == 0)


def add_convert_arguments(p):
    p.add_argument("--model", required=True, type=cli.reads,
                   help="a BERT or RoBERTa model (hub name or folder; architectures: bert, roberta, xlm-roberta, "
                        "camembert)")
    p.add_argument("--out", required=True, help="folder for the Longformer (Hugging Face + sentence-transformers)")
    p.add_argument("--max-length", type=cli.number(int, cli.LENGTH), default=4096,
                   help="tokens the Longformer reads (Longformer paper)")
    # 2^17 tokens: 16 times Longformer's own 4096 and 32 times its largest published window; the position table
    # alone grows by hidden size × this many floats
    p.add_argument("--window", type=cli.number(int, WINDOW), default=512,
                   help="sliding attention window in every layer (Longformer): a token attends to half of it on "
                        "each side")


def run_convert(args):
    from common.models import card
    from common.models.encoder import Encoder
    from common.models.longformer import check_convertible, check_length, convert_to_longformer
    from common.models.saving import save_model_files
    check_convertible(args.model)
    check_length(args.model, args.max_length)
    base = card.base_model(args.model)  # what the card quotes is read before the conversion
    commit = provenance.git_commit()
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        model, tokenizer = convert_to_longformer(args.model, args.max_length, args.window)
        # mean pooling, not normalised: the student's pooling in the thesis
        encoder = Encoder(model, "mean", False)
        save_model_files(outputs, encoder, tokenizer, args.max_length,
                         {"converted_from": args.model, "window": args.window},
                         card=card.conversion_card(args.out, encoder, args.model, args.max_length, args.window,
                                                   commit, base))
        outputs.finish(args, counts={"max_length": args.max_length, "window": args.window})
    print(f"{args.model} → Longformer, {args.max_length} tokens, window {args.window} → {args.out}")


def commands(argv):
    """The sub-commands; a preset named in ``argv`` gives the defaults of the flags it sets, so that --help shows
    them."""
    return {
        "teachers": ("teacher vectors of every document: Sentence-BERT (structural) and Paragraph Vector "
                     "(contextual)", lambda p: add_teachers_arguments(p, argv), run_teachers),
        "convert-long": ("a BERT or RoBERTa encoder → a Longformer (Beltagy et al. 2020's recipe)",
                         add_convert_arguments, run_convert),
        "train": ("train the student on the teachers' vectors (Burian 2023's final runs; 03_train.py's loop)",
                  lambda p: add_train_arguments(p, argv), run_train),
    }


def main(argv):
    return cli.dispatch(__doc__, commands(argv), argv)


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
