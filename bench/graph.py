"""02_build_graph.py on a synthetic corpus: wall time and peak memory.

    python bench/graph.py                       # 1M articles, 10M links (goal: < 60 s, < 4 GB)
    python bench/graph.py --articles 100000     # a quicker look
    python bench/graph.py --articles 7000000 --links-per-article 14.3   # enwiki-sized (goal: < 10 min, < 8 GB)

Links point to targets drawn from a Zipf-like popularity, as Wikipedia links do (a few hubs, a long tail);
every article has 0-20 links (mean --links-per-article). Peak RSS is the sum over 02's process tree (it
forks one helper), polled every 0.1 s.
"""

import argparse
import json
import os
import sys

import numpy as np
from measure import run_measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_corpus(path, n, mean_links, seed=0):
    rng = np.random.default_rng(seed)
    degree = rng.poisson(mean_links, size=n).clip(0, 20)
    weights = 1.0 / np.arange(1, n + 1) ** 0.8
    weights /= weights.sum()
    popularity = rng.permutation(n)
    targets = popularity[rng.choice(n, size=int(degree.sum()), p=weights)]
    labels = rng.integers(0, 30, size=n)
    with open(path, "w", encoding="utf-8") as f:
        pos = 0
        for i in range(n):
            links = targets[pos:pos + degree[i]].tolist()
            pos += degree[i]
            f.write(json.dumps({"id": str(i), "title": f"Article {i}",
                                "text": f"Article {i} is a synthetic document about topic {labels[i]}.",
                                "links": [str(t) for t in links],
                                "labels": {"top": f"T{labels[i] % 10}", "second": f"S{labels[i]}"}}) + "\n")
    return int(degree.sum())


def main():
    from common import cli  # every number finite and in range, as in the numbered scripts
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", type=int, default=1_000_000)
    parser.add_argument("--links-per-article", type=cli.number(float, cli.POSITIVE), default=10.0)
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "graph"))
    parser.add_argument("--graph-json", action="store_true", help="let 02 write graph.json too")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    src = os.path.join(args.work, f"articles.{args.articles}.jsonl")
    if not os.path.exists(src):
        print(f"writing {args.articles} synthetic articles ...", flush=True)
        make_corpus(src + ".tmp", args.articles, args.links_per_article)
        os.replace(src + ".tmp", src)
    out = os.path.join(args.work, "data")
    seconds, peak, rc, _ = run_measured([sys.executable, os.path.join(ROOT, "02_build_graph.py"), "--articles", src,
                                         "--out", out] + ["--graph-json"] * args.graph_json, poll=0.1)
    if rc:
        sys.exit(f"02_build_graph.py failed ({rc})")
    peak_gb = peak / 1e9
    counts = json.load(open(os.path.join(out, "manifest.json")))["counts"]
    sizes = ", ".join(f"{name} {os.path.getsize(os.path.join(out, name)) / 1e9:.2f} GB"
                      for name in ("graph.npz", "graph.json") if os.path.exists(os.path.join(out, name)))
    print(f"02_build_graph: {counts['documents']} articles, {counts['edges']} links, "
          f"{counts['two_hop_pairs']} two-hop pairs, {counts['triplets_train']} train triplets")
    # the goals: 1M articles in < 60 s and < 4 GB; enwiki-sized (7M articles, ~100M links) in < 10 min and < 8 GB
    goal_s, goal_gb = (60, 4) if args.articles <= 1_000_000 else (600, 8)
    print(f"  wall {seconds:.1f} s (goal < {goal_s} s), peak RSS {peak_gb:.2f} GB (goal < {goal_gb} GB), "
          f"{sizes}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
