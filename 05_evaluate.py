"""Step 5: embed a data directory's documents with one or more models and evaluate them (docs/pipeline.md).

  python 05_evaluate.py --data work/fi/data --model base=TurkuNLP/bert-base-finnish-cased-v1 \\
      --model trained=runs/wikispecter/model --out work/fi/eval
  python 05_evaluate.py --data work/keysent/data --model trained=runs/keysent/model --out work/keysent/eval
  python 05_evaluate.py --data work/testsets/lee --model student=runs/distill/model --model pv=work/teach/pv \\
      --task similarity --out work/eval-lee
  python 05_evaluate.py extract --model runs/keysent/model --input new.jsonl --top 1 --out keys.jsonl
  [accelerate launch] python 05_evaluate.py --data work/arxiv/data --model mnrl=runs/mnrl/model --out work/arxiv/eval
  python 05_evaluate.py search --model runs/mnrl/model --data work/arxiv/data --index work/arxiv/eval "query"
  python 05_evaluate.py mteb --model specter=runs/wikispecter/model --task SCIDOCS --task corpora/scifact --out mteb
"""

import os
import sys
import time

from common import cli, io
from common.outdir import folders
from common.eval import ann, embedding, keysent, report, retrieval, tasks, uncertainty
from common.models.batching import BATCH_TOKENS
from common.models.precision import check_here


def add_batch_arguments(p, what):
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=64,
                   help=f"at most this many {what} per forward pass")
    p.add_argument("--batch-tokens", type=cli.number(int, cli.COUNT_0), default=None,
                   help="and at most this many padded tokens per forward pass (texts × the longest): short texts go "
                        "in larger batches, long ones in smaller; 0: --batch-size alone "
                        f"[{BATCH_TOKENS['cpu']} on a CPU, {BATCH_TOKENS['cuda']} on a GPU]")


def add_precision_arguments(p):
    group = p.add_mutually_exclusive_group()
    group.add_argument("--bf16", dest="precision", action="store_const", const="bf16", default="float32",
                       help="embed with every model under bfloat16 autocast, on a CPU with native bfloat16 "
                            "(avx512_bf16 or AMX; refused elsewhere, and on a GPU, where embedding is always "
                            "bfloat16); the mean cosine of the documents' vectors to float32's is printed and kept in "
                            "the manifest")
    group.add_argument("--int8", dest="precision", action="store_const", const="int8",
                       help="embed with an int8 copy of every model (dynamic quantisation of its Linear layers, CPU "
                            "only); the mean cosine of the documents' vectors to float32's (about 0.99) is printed and "
                            "kept in the manifest; docs/benchmarks.md gives the metric change")


def add_evaluate_arguments(p):
    p.add_argument("--data", required=True, type=cli.reads, help="data directory from 02_build_graph.py")
    p.add_argument("--model", action="append", default=[], metavar="NAME=MODEL", type=cli.reads_named,
                   help="a model to evaluate, as name=hub-name-or-folder (repeatable; each NAME once, and not "
                        f"{' or '.join(tasks.BASELINES)}, the rows 05 adds itself); a hub name is read from the local "
                        "Hugging Face cache as SentenceTransformer(name) reads it, with its pooling and length")
    p.add_argument("--runs", action="extend", nargs="+", default=None, metavar="RUN", type=cli.reads,
                   help="keysent: run folders of several seeds of one setting, reported as mean ± 2σ")
    p.add_argument("--out", required=True, help="evaluation directory to write")
    p.add_argument("--task", action="extend", nargs="+", choices=tasks.TASKS, default=None,
                   help="tasks to run (default: every task the data directory supports)")
    p.add_argument("--pooling", action="append", default=[], metavar="[NAME=]cls|mean",
                   help="pooling for every model, or NAME=… for one (repeatable; default: its sentence-transformers "
                        "config, else cls)")
    p.add_argument("--normalize", action="append", default=[], metavar="[NAME=]yes|no",
                   help="L2-normalise every model's vectors or not, or NAME=… one model's (repeatable; default: as its "
                        "sentence-transformers config says)")
    p.add_argument("--max-length", type=cli.number(int, cli.LENGTH), default=None,
                   help="tokens per document for every model (default: each model's own setting, else 128)")
    add_batch_arguments(p, "documents")
    add_precision_arguments(p)
    p.add_argument("--documents", choices=("all", "scored"), default="all",
                   help="embed every document of docs.jsonl (all; EVAL/<model>.npy holds them all) or only those "
                        "crossref, topics and lexical score (scored: queries, candidates, topic documents)")
    p.add_argument("--language", default=None,
                   help="Snowball stemmer language for the lexical baseline (default: the dump's language)")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed of the classifier and t-SNE")
    p.add_argument("--head-epochs", type=cli.number(int, cli.COUNT), default=10,
                   help="classify: epochs of the MLP head (Burian 2023; small splits need more)")
    p.add_argument("--resamples", type=cli.number(int, cli.between(0, uncertainty.MAX_RESAMPLES)), default=1000,
                   help="each figure's 95 %% interval: percentile bootstrap over the task's queries, test documents, "
                        "articles or rated pairs, this many resamples drawn from --seed (1,000, ranx's number of "
                        "permutations; scipy.stats.bootstrap takes 9,999, steadier ends at 10 times the cost); also "
                        "--compare's random swaps where its units are more than 16; 0: no bootstrap; below "
                        f"{uncertainty.MIN_RESAMPLES} (too few for the 2.5 %% and 97.5 %% ends): no interval, with a "
                        "note")
    p.add_argument("--resplits", type=cli.number(int, cli.between(0, uncertainty.MAX_RESPLITS)), default=10,
                   help="topics: stratified re-splits of the topic documents at the protocol's test share, each "
                        "classified as the protocol's split is; the interval of F1 and accuracy spans the "
                        "protocol's split and these (the protocol's stays the figure); 0: none; below "
                        f"{uncertainty.MIN_UNITS - 1} (fewer than {uncertainty.MIN_UNITS} splits): no interval, "
                        "with a note")
    p.add_argument("--compare", action="append", default=[], metavar="A=B",
                   help="add the paired differences A − B on every task both rows score: the difference, its 95 %% "
                        "interval and a two-sided p-value (a paired permutation test over the same queries, "
                        "documents or articles; over the same splits for topics); A and B name a --model, lexical "
                        "or bm25 (repeatable)")


def add_extract_arguments(p):
    p.add_argument("--model", required=True, type=cli.reads,
                   help="a model trained with --objective contrastive or cosine")
    p.add_argument("--input", required=True, type=cli.reads, help="JSONL of {id, text} (HTML and LaTeX are cleaned)")
    p.add_argument("--max-line-mb", type=cli.number(int, cli.line_mb()), default=io.MAX_LINE_BYTES >> 20,
                   help="refuse a JSONL line longer than this (a line is held whole in memory while read); at most "
                        "this machine's memory")
    p.add_argument("--out", required=True, help="JSONL to write: {id, key_sentences: [{text, score, start, end}]}")
    p.add_argument("--top", type=cli.number(int, cli.COUNT), default=1, help="sentences per article, best first")
    p.add_argument("--threshold", type=cli.number(float, cli.between(-1, 1)), default=None,
                   help="keep only sentences scoring at least this")
    p.add_argument("--query", default=None, help="query text, for a model that was not fine-tuned here")
    p.add_argument("--splitter", choices=("punkt", "punkt-english"), default="punkt",
                   help="sentence splitter (untrained Punkt, as in training)")
    add_batch_arguments(p, "sentences")


def add_search_arguments(p):
    p.add_argument("query", nargs="*", help="query texts")
    p.add_argument("--model", dest="model_path", required=True, type=cli.reads, help="the model (e.g. RUN/model)")
    p.add_argument("--data", required=True, type=cli.reads, help="data directory whose docs.jsonl is searched")
    p.add_argument("--index", default=None, type=cli.reads,
                   help="evaluation directory from 05_evaluate.py holding this model's vectors of the same documents")
    p.add_argument("--queries", default=None, type=cli.reads, help="text file, one query per line")
    p.add_argument("--top", type=cli.number(int, cli.COUNT), default=10, help="documents per query")
    p.add_argument("--index-type", choices=("exact", *ann.KINDS), default="exact",
                   help="exact: every document scored (the reference); flat or hnsw: a faiss index (faiss-cpu) "
                        "built beside --index's vectors on first use; hnsw is approximate and fast past a million "
                        "documents")
    p.add_argument("--pooling", choices=("cls", "mean"), default=None,
                   help="pooling (default: with --index, the one its documents were embedded with; else the model's "
                        "sentence-transformers config, else cls)")
    p.add_argument("--max-length", type=cli.number(int, cli.LENGTH), default=None,
                   help="tokens per text (default: with --index, its documents' length; else the model's setting)")
    add_batch_arguments(p, "texts")
    add_precision_arguments(p)


def add_mteb_arguments(p):
    p.add_argument("--model", action="append", required=True, metavar="NAME=MODEL", type=cli.reads_named,
                   help="name=hub-name-or-folder (repeatable), as sentence-transformers loads it, read as trained")
    p.add_argument("--task", action="append", required=True, metavar="TASK", type=cli.reads,
                   help="an MTEB task name (data from the hub or its cache), or a local BEIR folder as 02 beir reads "
                        "it, run offline as an MTEB retrieval task (repeatable)")
    p.add_argument("--out", required=True, help="folder to write: MTEB's result files under OUT/NAME/, report.md")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=32, help="texts a forward pass (MTEB's)")
    p.add_argument("--resamples", type=cli.number(int, cli.between(0, uncertainty.MAX_RESAMPLES)), default=1000,
                   help="a local BEIR task's 95 %% interval: percentile bootstrap over its queries, as 05 draws it")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed of the bootstrap")


def embedding_of(args):
    """The flags that say how every model embeds, as the value the library takes."""
    return embedding.Embedding(pooling=args.pooling, normalize=getattr(args, "normalize", {}), max_length=args.max_length,
                               batch_size=args.batch_size, batch_tokens=args.batch_tokens, precision=args.precision)


def _check_names(args):
    """--model as {NAME: MODEL} (``tasks.model_names``), --pooling and --normalize to its names."""
    args.model = tasks.model_names(args.model)
    args.pooling = cli.per_name(args.pooling, ("cls", "mean"), args.model, "--pooling")
    args.normalize = cli.per_name(args.normalize, ("yes", "no"), args.model, "--normalize")


def run_evaluate(args):
    started = time.perf_counter()
    _check_names(args)
    wanted = tasks.tasks_to_run(args.data, args.task, bool(args.model or args.runs), args.precision, args.documents)
    pairs = cli.pairs(args.compare, [*args.model, *(name for name in tasks.BASELINES if name in wanted)], "--compare")
    how = embedding_of(args)
    check_here(args.precision)
    if not args.overwrite:  # every process, before they part: the main one alone would claim the folder
        folders.refuse_finished(args.out, __file__)
    state = embedding.process_state()
    if state is not None and not state.is_main_process:
        return tasks.follow(args.model, args.data, how, wanted, args.documents)
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        metrics, counts, written, samples, embedded, embedding_seconds = tasks.evaluate(
            args.model, args.runs, args.data, how, outputs, wanted, args.seed, args.head_epochs, args.language,
            args.resplits, args.documents)
        metrics, notes = uncertainty.summarise(metrics, samples, pairs, args.resamples, args.seed)
        for a, b in uncertainty.uncompared(pairs, metrics):
            print(f"note: --compare {a}={b}: no task scores both")
        table = report.write_report(outputs, metrics, args.model, args.out, (args.resamples, args.resplits), notes,
                                    embedded, written)
        inputs = [os.path.join(args.data, n) for n in sorted(os.listdir(args.data)) if not n.endswith(".json")]
        total = time.perf_counter() - started
        outputs.finish(args, inputs=inputs, counts=counts, seed=args.seed, embedding=embedded,
                       seconds={"embedding": round(embedding_seconds, 2), "total": round(total, 2)})
    print(table + report.time_split(embedding_seconds, total), end="")
    if written:
        print(f"figures (linked from report.md): {', '.join(name for _, name in written)}")


def run_extract(args):
    cli.check_file_out(args.out, args.overwrite, "the JSONL file")
    model = keysent.KeySentenceModel(args.model, batch_size=args.batch_size, query=args.query,
                                     batch_tokens=args.batch_tokens)
    articles = keysent.read_articles(args.input, args.splitter)
    directory, name = os.path.split(os.path.abspath(args.out))
    # the one file (and its manifest) in the user's folder, whole or not
    with folders.Outputs(directory, __file__, file=name) as outputs:
        with outputs.open(name) as f:
            counts = keysent.write_key_sentences(f, model, articles, args.top, args.threshold)
        outputs.finish(args, inputs=[args.input], counts=counts)
    print(f"{counts['selected']} key sentences from {counts['articles']} articles (query: {model.query_from}) "
          f"→ {args.out}")


def run_search(args):
    """Print the top documents of each query: rank, id, score (the model's similarity), title."""
    check_here(args.precision)
    queries = retrieval.search_queries(args.query, args.queries)
    args.pooling = {"model": args.pooling} if args.pooling else {}
    docs, indices, scores = retrieval.search_documents(args.model_path, args.data, queries, embedding_of(args),
                                                       args.top, args.index, args.index_type)
    for text, row, row_scores in zip(queries, indices.tolist(), scores.tolist()):
        print(f"query: {text}")
        for rank, (j, score) in enumerate(zip(row, row_scores), 1):
            print(f"{rank:3d}. {docs.ids[j]}\t{score:.4f}\t{docs.titles[j]}")


def run_mteb(args):
    """MTEB on every --model and --task; each model's result files under OUT/NAME, report.md with the table."""
    from common.eval import mteb_run
    from common.train.objectives.base import document_reader
    models = tasks.model_names(args.model)
    mteb_run.check_models(models)  # a model or task that cannot be had stops before any work
    loaded, readers = mteb_run.load_tasks(args.task), {n: document_reader(p) for n, p in models.items()}
    with folders.Outputs(args.out, __file__, "mteb", overwrite=args.overwrite) as outputs:
        scores, notes, wrappers = mteb_run.run_models(models, readers, loaded, outputs.tmp_path, args.batch_size,
                                                      args.resamples, args.seed)
        table = mteb_run.write_report(outputs, scores, loaded, wrappers, notes)
        outputs.finish(args, inputs=mteb_run.beir_inputs(args.task), seed=args.seed, scores=scores, wrapper=wrappers)
    print(table, end="")


COMMANDS = {
    "evaluate": ("embed a data directory's documents with each --model and score every task the data supports "
                 "(the default command)", add_evaluate_arguments, run_evaluate),
    "extract": ("key sentences of new articles, each sentence scored by its cosine similarity to the model's "
                "query (the thesis's confidence)", add_extract_arguments, run_extract),
    "mteb": ("MTEB (hub task names or local BEIR folders) on each model, read as it was trained: MTEB's result "
             "files and a table of each task's main score", add_mteb_arguments, run_mteb),
    "search": ("the top documents of a data directory for free-text queries, by the model's similarity (paper "
               "search; related articles for a new text)", add_search_arguments, run_search),
}


def main(argv):
    return cli.dispatch(__doc__, COMMANDS, argv, default="evaluate")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
