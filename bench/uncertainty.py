"""What 05's intervals and comparisons cost (common/eval/uncertainty.py), on synthetic per-unit figures and topic
vectors shaped as a corpus of --documents documents gives them.

    python bench/uncertainty.py                         # 100,000 documents
    python bench/uncertainty.py --documents 95 --topic-documents 95 --labels 4 --dim 384    # the demo's sizes

Per task, with 02's and the papers' defaults at that size: crossref, its 1,000 queries (02 --crossref-queries);
retrieval, a test query per tenth paper (02 retrieval --test 0.1) and 7 figures; similarity, every document a
source (the Lee corpus's layout); classify, a test document per fifth document and its 3 heads; each with
--models models, the first compared with each other. The CPU seconds of the intervals (every model's bootstrap,
``summarise`` without comparisons), then of the comparisons' permutation tests (their paired intervals come from
the bootstrap already drawn). Topics: one protocol fit (GridSearchCV
over the C grid, then the test split) against --resplits re-splits, on --topic-documents documents of --labels
labels (02 caps a label at 300 top-level documents) in --dim dimensions.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.eval import uncertainty, wikispecter  # noqa: E402


def seconds(run):
    """CPU seconds of ``run()`` in this process (every thread's), which a machine shared with other work leaves
    nearly unchanged where wall time is not."""
    started = time.process_time()
    run()
    return time.process_time() - started


def units(n, names, models, rng):
    """{model: {task: [Sample]}} of ``n`` units with figures in [0, 1], and the headline figures."""
    samples, metrics = {}, {}
    for m in range(models):
        values = rng.random((n, len(names)))
        samples[f"m{m}"] = {"task": [uncertainty.means(values, names)]}
        metrics[f"m{m}"] = {"task": dict(zip(names, values.mean(0)))}
    return samples, metrics


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--documents", type=int, default=100_000)
    p.add_argument("--models", type=int, default=3)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--resplits", type=int, default=10)
    p.add_argument("--topic-documents", type=int, default=3000)
    p.add_argument("--labels", type=int, default=10)
    p.add_argument("--dim", type=int, default=768)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    tasks = {"crossref": (min(1000, args.documents), ("map", "ndcg")),
             "retrieval": (args.documents // 10, ("mrr@10", "ndcg@10", "recall@1", "recall@5", "recall@10",
                                                  "recall@100", "map@100")),
             "similarity": (args.documents, ("map", "mrr")),
             "classify": (args.documents // 5, ("acc_1k", "acc_10k", "acc_all"))}
    print(f"{args.documents:,} documents, {args.models} models, {args.resamples:,} resamples; CPU seconds")
    print("| task | units | figures | intervals | + comparisons |\n|---|---:|---:|---:|---:|", flush=True)
    pairs = [("m0", f"m{m}") for m in range(1, args.models)]
    for task, (n, names) in tasks.items():
        samples, metrics = units(n, names, args.models, rng)
        alone = seconds(lambda: uncertainty.summarise(metrics, samples, [], args.resamples, 42))
        tests = seconds(lambda: [uncertainty.permutation_p(samples[a]["task"][0].values, samples[b]["task"][0].values,
                                                           samples[a]["task"][0].statistic, args.resamples, 42)
                                 for a, b in pairs])
        print(f"| {task} | {n:,} | {len(names)} | {alone:.2f} | {tests:.2f} |", flush=True)
    per_label = args.topic_documents // args.labels
    labels = [f"l{i % args.labels}" for i in range(per_label * args.labels)]
    centres = rng.normal(size=(args.labels, args.dim))
    x = (centres[np.arange(len(labels)) % args.labels] + 4 * rng.normal(size=(len(labels), args.dim))).astype(
        np.float32)
    index = {f"d{i}": i for i in range(len(labels))}
    cut = int(0.7 * len(labels))  # 02's --topic-test 0.3
    rows = {"train": [(f"d{i}", labels[i]) for i in range(cut)],
            "test": [(f"d{i}", labels[i]) for i in range(cut, len(labels))]}
    wikispecter.topics(x, index, rows)  # imports and first calls, outside the timing
    protocol = seconds(lambda: wikispecter.topics(x, index, rows))
    again = seconds(lambda: wikispecter.resplits(x, index, rows, args.resplits))
    print(f"\ntopics, {len(labels):,} documents of {args.labels} labels, {args.dim} dimensions: the protocol "
          f"{protocol:.2f} CPU s, {args.resplits} re-splits {again:.2f} ({again / protocol:.1f}×) per model and level")


if __name__ == "__main__":
    main()
