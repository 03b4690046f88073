"""Step 2: documents → a data directory for training (03) and evaluation (05).

  python 02_build_graph.py --articles work/fi/articles.jsonl --out work/fi/data
      The cross-reference graph (SPECTER's graph.json), query splits, training triplets, cross-reference qrels
      and topic classification splits. Defaults are the WikiSpecter thesis / SPECTER settings.

  python 02_build_graph.py sentences --sentences work/keysent/sentences.jsonl --out work/keysent/data
      Article-level train/validation/test splits for key-sentence extraction.
"""

import collections
import json
import os
import sys

import numpy as np

from common import cli, graph, io


def parse_args(argv):
    parser = cli.parser(__doc__)
    parser.add_argument("--articles", required=True, help="articles.jsonl from 01_extract.py (CONTRACT.md)")
    parser.add_argument("--out", required=True, help="data directory to write")
    parser.add_argument("--seed", type=int, default=42, help="seed for splits and sampling")
    parser.add_argument("--holdout", type=float, default=0.2,
                        help="share of queries held out for evaluation (thesis)")
    parser.add_argument("--val", type=float, default=0.1, help="share of the remaining queries for validation")
    parser.add_argument("--per-query", type=int, default=5, help="triplets per query (SPECTER)")
    parser.add_argument("--hard", type=int, default=2,
                        help="of those, how many take a two-hop hard negative (SPECTER); the rest are easy")
    parser.add_argument("--crossref-queries", type=int, default=1000,
                        help="at most this many held-out queries in crossref.qrels (SciDocs)")
    parser.add_argument("--crossref-min-links", type=int, default=5,
                        help="a crossref query needs at least this many links (SciDocs)")
    parser.add_argument("--crossref-positives", type=int, default=5, help="linked candidates per query (SciDocs)")
    parser.add_argument("--crossref-negatives", type=int, default=25,
                        help="random unlinked candidates per query (SciDocs)")
    parser.add_argument("--topic-min", type=int, default=10, help="drop topic labels with fewer documents (thesis)")
    parser.add_argument("--topic-cap", default="top=300,second=200",
                        help="most documents per label, per level (thesis)")
    parser.add_argument("--topic-test", type=float, default=0.3, help="stratified test share of topic documents")
    return parser.parse_args(argv)


def _caps(text):
    caps = {}
    for part in filter(None, text.split(",")):
        level, _, value = part.partition("=")
        caps[level.strip()] = int(value)
    return caps


def _graph_row(ids, q, direct, hop):
    entries = [f"{json.dumps(ids[d])}: {{\"count\": 5}}" for d in direct.tolist()]
    entries += [f"{json.dumps(ids[d])}: {{\"count\": 1}}" for d in hop.tolist()]
    return f"{json.dumps(ids[q])}: {{{', '.join(entries)}}}"


def build_graph(args, corpus, outputs, counts):
    streams = np.random.SeedSequence(args.seed).spawn(5)
    rng_split, rng_train, rng_val, rng_qrels, rng_topics = (np.random.default_rng(s) for s in streams)
    splits = graph.split_queries(corpus, args.holdout, args.val, rng_split)
    for name, members in splits.items():
        counts[f"queries_{name}"] = int(len(members))
    with outputs.open("splits.json") as f:
        json.dump({name: [corpus.ids[i] for i in members.tolist()] for name, members in splits.items()}, f)
        f.write("\n")

    role = np.zeros(corpus.n, dtype=np.int8)  # 1 = train query, 2 = val query
    role[splits["train"]] = 1
    role[splits["val"]] = 2
    queries = np.flatnonzero(np.diff(corpus.links.indptr) > 0)
    from tqdm import tqdm
    with outputs.open("graph.json") as g, outputs.open("triplets.train.jsonl") as t_train, \
            outputs.open("triplets.val.jsonl") as t_val:
        g.write("{")
        first = True
        for start in tqdm(range(0, len(queries), graph.CHUNK_ROWS), desc="graph", unit=" chunks",
                          mininterval=1.0):
            chunk = queries[start:start + graph.CHUNK_ROWS]
            hop_indptr, hop_indices = graph.two_hop(corpus.links, chunk)
            counts["two_hop_pairs"] += int(len(hop_indices))
            rows = []
            for i, q in enumerate(chunk.tolist()):
                rows.append(_graph_row(corpus.ids, q, corpus.neighbours(q),
                                       hop_indices[hop_indptr[i]:hop_indptr[i + 1]]))
            g.write(("" if first else ", ") + ", ".join(rows))
            first = False
            for code, out, rng, name in ((1, t_train, rng_train, "train"), (2, t_val, rng_val, "val")):
                sel = np.flatnonzero(role[chunk] == code)
                if not len(sel):
                    continue
                sub_indptr = np.concatenate([[0], np.cumsum(np.diff(hop_indptr)[sel])])
                sub_indices = np.concatenate([hop_indices[hop_indptr[i]:hop_indptr[i + 1]] for i in sel])
                triplets = graph.sample_triplets(corpus, chunk[sel], sub_indptr, sub_indices, args.per_query,
                                                 args.hard, rng, counts)
                counts[f"triplets_{name}"] += len(triplets)
                out.writelines(io.dumps_line({"query": corpus.ids[q], "pos": corpus.ids[p],
                                              "neg": corpus.ids[n], "hard": h}) for q, p, n, h in triplets)
        g.write("}\n")

    with outputs.open("crossref.qrels") as f:
        f.writelines(graph.crossref_qrels(corpus, splits["holdout"], args.crossref_queries, args.crossref_min_links,
                                          args.crossref_positives, args.crossref_negatives, rng_qrels, counts))

    caps = _caps(args.topic_cap)
    for level in sorted(corpus.labels):
        result = graph.topic_splits(corpus, level, args.topic_min, caps.get(level, caps.get("second", 200)),
                                    args.topic_test, rng_topics, args.seed)
        if result is None:
            counts[f"topics_{level}_skipped"] = 1
            print(f"note: topic level {level!r} has fewer than two labels with >= {args.topic_min} documents; "
                  "no topic task for it")
            continue
        names = corpus.label_names[level]
        for part, members in zip(("train", "test"), result):
            counts[f"topics_{level}_{part}"] = int(len(members))
            with outputs.open(f"topics.{level}.{part}.jsonl") as f:
                f.writelines(io.dumps_line({"id": corpus.ids[i], "label": names[corpus.labels[level][i]]})
                             for i in members.tolist())


def run_graph(args):
    if args.hard > args.per_query:
        raise io.InputError(f"--hard {args.hard} exceeds --per-query {args.per_query}")
    started = io.now()
    counts = collections.Counter()
    with io.Outputs(args.out) as outputs:
        with outputs.open("docs.jsonl") as docs:
            corpus = graph.read_articles(args.articles, docs, counts)
        build_graph(args, corpus, outputs, counts)
        source = io.read_manifest(os.path.dirname(os.path.abspath(args.articles)))
        with outputs.open("manifest.json") as f:
            f.write(io.dumps_line(io.manifest(__file__, args, started, inputs=[args.articles], counts=dict(counts),
                                              seed=args.seed, language=source.get("language"))))
    print(f"{counts['documents']} documents, {counts['edges']} links, {counts['two_hop_pairs']} two-hop pairs; "
          f"queries train/val/holdout {counts['queries_train']}/{counts['queries_val']}/{counts['queries_holdout']};"
          f" triplets {counts['triplets_train']}/{counts['triplets_val']}; "
          f"{counts['crossref_queries']} crossref queries → {args.out}")


def main(argv):
    if argv and argv[0] == "sentences":
        from common.keysent_data import main as sentences_main
        return sentences_main(argv[1:])
    return run_graph(parse_args(argv))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
