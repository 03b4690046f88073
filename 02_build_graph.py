"""Step 2: documents → a data directory for training (03) and evaluation (05); its files are in docs/contract.md.

  python 02_build_graph.py [links] --articles work/fi/articles.jsonl --out work/fi/data
  python 02_build_graph.py sentences --sentences work/keysent/sentences.jsonl --out work/keysent/data
  python 02_build_graph.py retrieval --articles work/arxiv/articles.jsonl --out work/arxiv/data [--pairs FILE]
  python 02_build_graph.py corpus --articles foldoc=work/foldoc/articles.jsonl --articles pydoc=... --out work/lm
  python 02_build_graph.py testsets --out work/testsets
  python 02_build_graph.py classify --name imdb --train work/imdb-train/articles.jsonl \
      --test work/imdb-test/articles.jsonl [--name aan --train ... --test ...] --out work/classify
  python 02_build_graph.py similarity --articles wines.txt --targets gt --out work/wines
  python 02_build_graph.py beir --input scifact --out work/scifact
"""

import collections
import contextlib
import os
import sys

import numpy as np

from common import cli, io
from common.outdir import folders
from common.data import beir, classify_splits, crossref, heldout, keysent_splits, lm_corpus, retrieval, \
    similar_articles, testsets, triplets
from common.data.articles import read_articles
from common.data.splits import parse_caps, write_topics


def add_topic_arguments(p):
    """The topic-split flags links and retrieval share."""
    p.add_argument("--topic-min", type=cli.number(int, cli.COUNT), default=10,
                   help="drop topic labels with fewer documents (thesis)")
    p.add_argument("--topic-cap", type=cli.checked_by(parse_caps), default="top=300,second=200",
                   help="most documents per label, per level (thesis)")
    p.add_argument("--topic-test", type=cli.number(float, cli.OPEN_SHARE), default=0.3,
                   help="stratified test share of topic documents")


def add_links_arguments(p):
    p.add_argument("--articles", required=True, type=cli.reads,
                   help="articles.jsonl from 01_extract.py (docs/contract.md)")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed for splits and sampling")
    # the query splits and the evaluation documents kept out of training
    p.add_argument("--holdout", type=cli.number(float, cli.SHARE), default=0.2,
                   help="share of queries held out, from which the cross-reference queries are drawn (the thesis "
                        "states no share; 0.2 is this project's choice)")
    p.add_argument("--val", type=cli.number(float, cli.SHARE), default=0.1,
                   help="share of the remaining queries for validation")
    p.add_argument("--train-queries", type=cli.number(int, cli.COUNT_0), default=0,
                   help="at most this many training queries, a seeded sample of them (0 = all); the evaluation "
                        "documents and validation triplets stay as without it (for ablations on a budget)")
    p.add_argument("--eval-docs", choices=("heldout", "test", "shared"), default="heldout",
                   help="which evaluation documents no triplet may touch (as query, positive or negative): heldout = "
                        "every cross-reference query and candidate and every topic document (the thesis: evaluation "
                        "on documents not seen in fine-tuning); test = cross-reference documents and topic test "
                        "documents only; shared = none (triplets from every document)")
    # SPECTER's triplets and its format of the training graph; a chunk of 4,096 queries holds an array of each
    # query's triplets in memory, so a query takes at most 1,024 (SPECTER's is 5; a query's negatives are distinct)
    p.add_argument("--per-query", type=cli.number(int, cli.between(1, 1024)), default=5,
                   help="triplets per query (SPECTER)")
    p.add_argument("--hard", type=cli.number(int, cli.between(0, 1024)), default=2,
                   help="of those, how many take a two-hop hard negative (SPECTER); the rest are easy")
    p.add_argument("--graph-json", action="store_true",
                   help="also write graph.json, SPECTER's format of the training graph, for SPECTER's own tools (tens "
                        "of GB for a full Wikipedia; graph.npz holds the same graph)")
    # SciDocs's cross-reference protocol: its queries, candidates and their numbers
    p.add_argument("--crossref-queries", type=cli.number(int, cli.COUNT_0), default=1000,
                   help="at most this many held-out queries in crossref.qrels (SciDocs)")
    p.add_argument("--crossref-min-links", type=cli.number(int, cli.COUNT), default=5,
                   help="a crossref query needs at least this many links (SciDocs)")
    p.add_argument("--crossref-positives", type=cli.number(int, cli.COUNT), default=5,
                   help="linked candidates per query (SciDocs)")
    p.add_argument("--crossref-negatives", type=cli.number(int, cli.COUNT_0), default=25,
                   help="random unlinked candidates per query (SciDocs)")
    add_topic_arguments(p)


def add_sentences_arguments(p):
    p.add_argument("--sentences", required=True, type=cli.reads, help="sentences.jsonl from 01_extract.py sentences")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write")
    p.add_argument("--test", type=cli.number(float, cli.SHARE), default=0.2,
                   help="share of articles held out for testing (thesis)")
    p.add_argument("--val", type=cli.number(float, cli.SHARE), default=0.25,
                   help="share of the remaining articles for validation (thesis: 75/25, but by article)")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed of the split")


def add_retrieval_arguments(p):
    p.add_argument("--articles", required=True, type=cli.reads,
                   help="articles.jsonl from 01_extract.py (e.g. 01_extract.py arxiv)")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write")
    p.add_argument("--test", type=cli.number(float, cli.SHARE), default=0.1,
                   help="share of papers whose title is a test query")
    p.add_argument("--val", type=cli.number(float, cli.SHARE), default=0.1,
                   help="share of papers whose title is a validation query (model selection)")
    p.add_argument("--pairs", default=None, type=cli.reads,
                   help='JSONL of {"query": text, "doc": id} to use instead of titles (each pair goes to its '
                        "document's split)")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42,
                   help="seed of the split and the topic sampling")
    add_topic_arguments(p)


def add_lm_corpus_arguments(p):
    p.add_argument("--articles", action="extend", nargs="+", required=True, metavar="NAME=PATH", type=cli.reads_named,
                   help="an articles.jsonl and the name that prefixes its ids (NAME:id); repeatable")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write (docs.jsonl)")


def add_testsets_arguments(p):
    p.add_argument("--out", required=True, help="folder for the data directories lee/ and newsgroups/")
    p.add_argument("--lee-threshold", type=cli.number(float, cli.SHARE), default=0.5,
                   help="a Lee pair rated at least this (ratings in [0, 1]) is a similarity target for MAP/MRR")
    p.add_argument("--seed", type=cli.number(int, cli.SEED), default=42, help="seed of the newsgroups train/test split")


def add_classify_arguments(p):
    p.add_argument("--name", action="append", required=True,
                   help="a task's name (classify.NAME.*.jsonl; its documents' ids become NAME:id); repeatable, one "
                        "--train and --test each")
    p.add_argument("--train", action="append", required=True, type=cli.reads,
                   help="the task's training split: articles.jsonl or pairs.jsonl from 01_extract.py hf")
    p.add_argument("--test", action="append", required=True, type=cli.reads, help="the task's test split, the same")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write")


def add_similarity_arguments(p):
    p.add_argument("--articles", required=True, type=cli.reads,
                   help="the articles: a CSV table of title and sections (WINES' wines.txt, GAMES' video_games.txt)")
    p.add_argument("--targets", required=True, type=cli.reads,
                   help="the similar articles: the pickled dictionary of titles (SDR's gt)")
    p.add_argument("--out", required=True, help="data directory to write")


def add_beir_arguments(p):
    p.add_argument("--input", required=True, type=cli.reads,
                   help="a BEIR dataset's folder: corpus.jsonl, queries.jsonl (plain or .gz) and qrels/{train,dev,"
                        "test}.tsv")
    cli.add_max_line(p)
    p.add_argument("--out", required=True, help="data directory to write")


def run_graph(args):
    """SPECTER's data in its steps, the evaluation documents chosen first so that training can be kept off them (the
    thesis evaluates on documents not seen in fine-tuning)."""
    if args.hard > args.per_query:
        raise io.InputError(f"--hard {args.hard} exceeds --per-query {args.per_query}")
    counts = collections.Counter()
    streams = np.random.SeedSequence(args.seed).spawn(6)  # a sixth stream leaves the first five as they were
    rng_split, rng_train, rng_val, rng_qrels, rng_topics, rng_subset = (np.random.default_rng(s) for s in streams)
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        with outputs.open("docs.jsonl", "wb") as docs:
            corpus = read_articles(args.articles, docs, counts)
        splits = crossref.split_queries(corpus, args.holdout, args.val, rng_split)  # queries: documents with a link
        # evaluation: held-out queries with linked and random unlinked candidates (SciDocs), and topic splits
        candidates = crossref.candidates(corpus, splits["holdout"], args.crossref_queries, args.crossref_min_links,
                                         args.crossref_positives, args.crossref_negatives, rng_qrels, counts)
        crossref.write_qrels(corpus, candidates, outputs)
        topic_parts = write_topics(corpus, outputs, rng_topics, counts, args.topic_min, args.topic_cap,
                                   args.topic_test, args.seed)
        # training: the corpus without the evaluation documents (--eval-docs) and the queries that remain
        excluded = heldout.evaluation_documents(args.eval_docs, candidates, topic_parts)
        train_corpus, queries, kept = heldout.training_side(corpus, excluded, splits, args.train_queries, rng_subset,
                                                            counts)
        heldout.write_splits(corpus.ids, kept, outputs)
        if warning := heldout.too_few_left(args.eval_docs, corpus.n, excluded, splits, kept):
            print(warning)
        # SPECTER's training graph (links count 5, two-hop documents 1), written by a second process while this one
        # draws each query's triplets: a positive from its links, --hard negatives two hops away, the rest random
        triplets.write_training_files(outputs, train_corpus, queries, {"train": rng_train, "val": rng_val},
                                      args.per_query, args.hard, args.graph_json, counts)
        outputs.finish(args, inputs=[args.articles], counts=dict(counts), seed=args.seed,
                       language=io.source_language(args.articles))
    print(f"{counts['documents']} documents, {counts['edges']} links, {counts['two_hop_pairs']} two-hop pairs; "
          f"queries train/val/holdout {counts['queries_train']}/{counts['queries_val']}/{counts['queries_holdout']};"
          f" triplets {counts['triplets_train']}/{counts['triplets_val']}; "
          f"{counts['crossref_queries']} crossref queries; {counts['eval_documents']} evaluation documents and "
          f"{counts['eval_links_dropped']} links to or from them kept out of training (--eval-docs {args.eval_docs})"
          f" → {args.out}")


def run_sentences(args):
    counts = collections.Counter()
    articles = keysent_splits.read_sentences(args.sentences)
    splits = keysent_splits.split_articles(articles, args.test, args.val, args.seed, args.sentences)
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        keysent_splits.write_splits(splits, outputs, counts)
        outputs.finish(args, inputs=[args.sentences], counts=dict(counts), seed=args.seed)
    print(f"articles train/val/test {counts['articles_train']}/{counts['articles_val']}/{counts['articles_test']}, "
          f"sentences {counts['sentences_train']}/{counts['sentences_val']}/{counts['sentences_test']} → {args.out}")


def run_retrieval(args):
    if args.test + args.val >= 1:
        raise io.InputError(f"--test {args.test} and --val {args.val}: both are shares of all papers and must leave "
                            "some for training (sum below 1)")
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        with outputs.open("docs.jsonl", "wb") as docs:
            corpus = read_articles(args.articles, docs, counts)
        rng_split, rng_topics = (np.random.default_rng(s) for s in np.random.SeedSequence(args.seed).spawn(2))
        split = retrieval.split_papers(corpus.n, args.test, args.val, rng_split, args.articles)
        retrieval.write_split(corpus.ids, split, outputs)
        retrieval.write_queries(args.articles, args.pairs, corpus.ids, split, outputs, counts)
        write_topics(corpus, outputs, rng_topics, counts, args.topic_min, args.topic_cap, args.topic_test, args.seed)
        outputs.finish(args, inputs=[args.articles] + ([args.pairs] if args.pairs else []), counts=dict(counts),
                       seed=args.seed, language=io.source_language(args.articles))
    print(f"{counts['documents']} documents; {counts['pairs_train']} training pairs, queries val/test "
          f"{counts['queries_val']}/{counts['queries_test']} → {args.out}")


def run_lm_corpus(args):
    sources = lm_corpus.named_sources(cli.name_values(args.articles, "--articles", "PATH"))
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        with outputs.open("docs.jsonl", "wb") as docs:
            lm_corpus.write_corpus(sources, docs, counts)
        outputs.finish(args, inputs=[p for _, p in sources], counts=dict(counts))
    per_source = ", ".join(f"{name} {counts[f'documents_{name}']}" for name, _ in sources)
    print(f"{counts['documents']} documents ({per_source}; {counts['duplicate_text']} duplicate texts dropped), "
          f"{counts['words']} words → {os.path.join(args.out, 'docs.jsonl')}")


def run_testsets(args):
    """Both data directories inside --out, a folder of this command's own, committed only when both are built."""
    parts = {"lee": lambda out: testsets.lee(out, args.lee_threshold),
             "newsgroups": lambda out: testsets.newsgroups(out, args.seed)}
    with contextlib.ExitStack() as stack:
        top = stack.enter_context(folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite))
        done = []
        for name, build in parts.items():
            directory = os.path.join(args.out, name)
            outputs = stack.enter_context(folders.Outputs(directory, __file__, args.command, overwrite=args.overwrite))
            counts = build(outputs)
            outputs.finish(args, counts=counts, seed=args.seed)
            done.append(f"{name}: {', '.join(f'{k} {v}' for k, v in counts.items())} → {directory}")
        top.finish(args, seed=args.seed, parts=list(parts))
    print("\n".join(done))


def run_classify(args):
    if not len(args.name) == len(args.train) == len(args.test):
        raise io.InputError(f"{len(args.name)} --name, {len(args.train)} --train and {len(args.test)} --test: give "
                            "each task its name, training split and test split")
    counts = collections.Counter()
    tasks = list(zip(args.name, args.train, args.test))
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        classify_splits.write_tasks(tasks, outputs, counts)
        outputs.finish(args, inputs=args.train + args.test, counts=dict(counts))
    splits = ", ".join(f"{name} {counts[f'{name}_train']}/{counts[f'{name}_test']}" for name in args.name)
    print(f"{counts['documents']} documents; train/test {splits} → {args.out}")


def run_similarity(args):
    counts = collections.Counter()
    targets = similar_articles.read_targets(args.targets)
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        with outputs.open("docs.jsonl") as docs:
            ids = similar_articles.write_articles(args.articles, docs, counts)
        with outputs.open("similarity.qrels") as qrels:
            similar_articles.write_qrels(targets, ids, qrels, counts)
        outputs.finish(args, inputs=[args.articles, args.targets], counts=dict(counts))
    print(f"{counts['documents']} documents, {counts['sources']} sources with {counts['targets']} targets "
          f"({counts['sources_unknown']} sources and {counts['targets_unknown']} targets name no article) → "
          f"{args.out}")


def run_beir(args):
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, args.command, overwrite=args.overwrite) as outputs:
        inputs = beir.write_beir(args.input, outputs, counts)
        outputs.finish(args, inputs=inputs, counts=dict(counts))
    print(f"{counts['documents']} documents; queries train/val/test {counts['queries_train']}/{counts['queries_val']}/"
          f"{counts['queries_test']} ({counts['pairs_train']} training pairs) → {args.out}")


COMMANDS = {
    "links": ("articles.jsonl → the cross-reference graph, triplets, crossref qrels and topic splits "
              "(the default command)", add_links_arguments, run_graph),
    "sentences": ("key-sentence articles → article-level train/validation/test splits (keysent.*.jsonl)",
                  add_sentences_arguments, run_sentences),
    "retrieval": ("articles → paper-search data: split by paper, training pairs (title → paper), validation and "
                  "test queries with qrels, topic splits", add_retrieval_arguments, run_retrieval),
    "corpus": ("several articles files → one docs.jsonl (ids NAME:id), a corpus for masked-LM training",
               add_lm_corpus_arguments, run_lm_corpus),
    "testsets": ("gensim's installed test corpora as data directories: Lee (similarity ratings) and a 20 Newsgroups "
                 "sample (classification)", add_testsets_arguments, run_testsets),
    "classify": ("labelled splits of documents or pairs (01_extract.py hf) → classification tasks for 05",
                 add_classify_arguments, run_classify),
    "similarity": ("articles with expert lists of similar articles (WINES, GAMES) → similarity data for 05",
                   add_similarity_arguments, run_similarity),
    "beir": ("a BEIR dataset's folder → retrieval data for 05 (and training pairs for 03 --objective mnrl)",
             add_beir_arguments, run_beir),
}


def main(argv):
    return cli.dispatch(__doc__, COMMANDS, argv, default="links")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
