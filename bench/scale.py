"""Every step that needs no GPU, at three sizes each: wall time, peak RSS of the process tree, bytes written, and
the log-log slope between the two largest sizes (1.0 = linear; time or memory that grows faster shows above 1).

    python bench/scale.py                                  # every step at its default sizes, prints the table
    python bench/scale.py --steps 02-links 05-evaluate     # some steps
    python bench/scale.py --scale 10                       # every size ×10 (the full sizes, on a machine with time)

Each step runs the numbered script as a subprocess, so the table measures whatever code is checked out. Inputs
are synthetic and shaped like the real ones; building them is not measured:

- 01-wiki: the gensim enwiki sample repeated under fresh page ids and titles (bench/extract.py), size in copies;
- 01-arxiv / 02-retrieval: the shipped arXiv sample's records under new ids, each copy's abstracts made distinct
  (01 drops repeated abstracts), size in records;
- 02-links: Zipf-distributed links as bench/graph.py, size in articles;
- 03-mlm-start / 03-mlm-resume: 03 --objective mlm to its first step on the arXiv data (tokenising and grouping
  through `datasets`), then the same command again, which must find the tokenised texts cached;
- 04-teachers: SBERT (MiniLM, 256 tokens) and Doc2Vec (DM 100d) teacher vectors of long documents (four abstracts
  each);
- 05-evaluate: embedding (MiniLM, 64 tokens) and the retrieval and topic metrics on the arXiv data;
- 05-search: one query against 05-evaluate's saved vectors.

Peak RSS is summed over the process tree (a forked helper's shared pages count twice), polled every 0.1 s.
"""

import argparse
import gzip
import json
import math
import os
import shutil
import sys

import numpy as np

from extract import build_dump
from graph import make_corpus
from measure import run_measured
from train import minilm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
ARXIV_SAMPLE = os.path.join(ROOT, "data", "arxiv-sample-1000.json.gz")


def cached(path, build):
    """``path``, built by ``build(tmp)`` unless it exists (inputs are kept between runs)."""
    if not os.path.exists(path):
        tmp = path + ".building"
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp)
        os.replace(tmp, path)
    return path


def arxiv_snapshot(path, records):
    """The sample's records repeated under new ids; copy k appends " [k]" to title and abstract."""
    with gzip.open(ARXIV_SAMPLE, "rt", encoding="utf-8") as f:
        sample = [json.loads(line) for line in f]
    with open(path, "w", encoding="utf-8") as out:
        for i in range(records):
            k, rec = divmod(i, len(sample))
            rec = dict(sample[rec], id=f"{k:05d}.{i:07d}")
            if k:
                rec["title"] = f"{rec['title']} [{k}]"
                rec["abstract"] = f"{rec['abstract']} [{k}]"
            out.write(json.dumps(rec) + "\n")


def script(name, *args):
    return [PY, os.path.join(ROOT, name), *map(str, args)]


def arxiv_articles(work, n):
    def build(tmp):
        os.makedirs(tmp)
        arxiv_snapshot(os.path.join(tmp, "snapshot.json"), n)
        run_checked(script("01_extract.py", "arxiv", "--input", os.path.join(tmp, "snapshot.json"),
                           "--out", os.path.join(tmp, "arxiv")))
    return os.path.join(cached(os.path.join(work, f"arxiv-{n}"), build), "arxiv", "articles.jsonl")


def arxiv_data(work, n):
    def build(tmp):
        run_checked(script("02_build_graph.py", "retrieval", "--articles", arxiv_articles(work, n),
                           "--out", tmp))
    return cached(os.path.join(work, f"arxiv-data-{n}"), build)


def long_data(work, n):
    """A links data directory whose documents are four abstracts long (04's teachers read long documents)."""
    def build(tmp):
        os.makedirs(tmp)
        with gzip.open(ARXIV_SAMPLE, "rt", encoding="utf-8") as f:
            abstracts = [" ".join(json.loads(line)["abstract"].split()) for line in f]
        rng = np.random.default_rng(0)
        src = os.path.join(tmp, "articles.jsonl")
        with open(src, "w", encoding="utf-8") as out:
            for i in range(n):
                text = " ".join(abstracts[j] for j in rng.integers(0, len(abstracts), 4))
                links = [str(j) for j in rng.integers(0, n, 5) if j != i]
                out.write(json.dumps({"id": str(i), "title": f"Document {i}", "text": text, "links": links,
                                      "labels": {"top": f"T{i % 5}"}}) + "\n")
        run_checked(script("02_build_graph.py", "--articles", src, "--out", os.path.join(tmp, "data"),
                           "--eval-docs", "shared", "--crossref-min-links", "1"))
    return os.path.join(cached(os.path.join(work, f"long-{n}"), build), "data")


def run_checked(cmd):
    seconds, peak, rc, stderr = run_measured(cmd, cwd=ROOT, poll=0.1)
    if rc:
        sys.exit(f"{' '.join(cmd[1:3])} failed ({rc}):\n{stderr[-3000:]}")
    return seconds, peak


# step → (unit, sizes, command(work, size, out) run in a fresh output folder)
def step_01_wiki(work, copies, out):
    dump = os.path.join(work, f"enwiki-x{copies}.xml.bz2")
    if not os.path.exists(dump):
        build_dump(dump + ".tmp.bz2", copies)
        os.replace(dump + ".tmp.bz2", dump)
    return script("01_extract.py", "wiki", "--dump", dump, "--out", out, "--links", "all", "--workers", 1,
                  "--topic-map", os.path.join(ROOT, "data", "enwiki-sample-topics.tsv"))


def step_01_arxiv(work, n, out):
    snapshot = os.path.join(work, f"snapshot-{n}.json")
    if not os.path.exists(snapshot):
        arxiv_snapshot(snapshot + ".tmp", n)
        os.replace(snapshot + ".tmp", snapshot)
    return script("01_extract.py", "arxiv", "--input", snapshot, "--out", out)


def step_02_links(work, n, out):
    src = os.path.join(work, f"links-{n}.jsonl")
    if not os.path.exists(src):
        make_corpus(src + ".tmp", n, 10.0)
        os.replace(src + ".tmp", src)
    return script("02_build_graph.py", "--articles", src, "--out", out)


def step_02_retrieval(work, n, out):
    return script("02_build_graph.py", "retrieval", "--articles", arxiv_articles(work, n), "--out", out)


def step_03_mlm(work, n, out):
    return script("03_train.py", "--objective", "mlm", "--data", arxiv_data(work, n), "--model", minilm(),
                  "--out", out, "--max-length", 128, "--max-steps", 1, "--eval-every", 0, "--checkpoint-every", 0,
                  "--cache-dir", os.path.join(work, f"mlm-cache-{n}"))


def step_04_teachers(work, n, out):
    return script("04_distill.py", "teachers", "--data", long_data(work, n), "--out", out, "--teacher",
                  minilm(), "--teacher-max-length", 256, "--pv-preset", "dm-100d")


def step_05_evaluate(work, n, out):
    return script("05_evaluate.py", "--data", arxiv_data(work, n), "--model", f"minilm={minilm()}",
                  "--out", out, "--max-length", 64)


def step_05_search(work, n, out):
    index = os.path.join(work, f"05-evaluate-{n}")
    if not os.path.exists(os.path.join(index, "manifest.json")):
        run_checked(step_05_evaluate(work, n, index))
    return script("05_evaluate.py", "search", "--model", minilm(), "--data", arxiv_data(work, n),
                  "--index", index, "--top", 10, "--max-length", 64, "pebble game algorithms for sparse graphs")


STEPS = {
    "01-wiki": ("dump copies", (1, 2, 4), step_01_wiki),
    "01-arxiv": ("records", (10_000, 100_000, 300_000), step_01_arxiv),
    "02-links": ("articles", (10_000, 100_000, 1_000_000), step_02_links),
    "02-retrieval": ("papers", (10_000, 100_000, 300_000), step_02_retrieval),
    "03-mlm-start": ("abstracts", (3_000, 10_000, 30_000), step_03_mlm),
    "03-mlm-resume": ("abstracts", (3_000, 10_000, 30_000), step_03_mlm),
    "04-teachers": ("documents", (250, 500, 1_000), step_04_teachers),
    "05-evaluate": ("documents", (1_000, 3_000, 10_000), step_05_evaluate),
    "05-search": ("documents", (1_000, 3_000, 10_000), step_05_search),
}


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def slope(a, b, size_a, size_b):
    return math.log(b / a) / math.log(size_b / size_a) if a > 0 and b > 0 and size_b > size_a else float("nan")


def main():
    from common import cli  # every number finite and in range, as in the numbered scripts
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="+", choices=tuple(STEPS), default=tuple(STEPS))
    parser.add_argument("--scale", type=cli.number(float, cli.POSITIVE), default=1.0,
                        help="multiply every size (01-wiki: copies) by this")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "scale"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    rows = []
    for name in args.steps:
        unit, sizes, command = STEPS[name]
        sizes = [max(1, int(round(s * args.scale))) for s in sizes]
        results = []
        for size in sizes:
            out = os.path.join(args.work, f"{name}-{size}")
            if name == "03-mlm-start":  # 03-mlm-resume then runs on this cache, in a fresh folder
                shutil.rmtree(os.path.join(args.work, f"mlm-cache-{size}"), ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            cmd = command(args.work, size, out)
            seconds, peak = run_checked(cmd)
            written = folder_bytes(out)
            results.append((size, seconds, peak, written))
            print(f"{name} {size} {unit}: {seconds:.1f} s, peak RSS {peak / 1e6:.0f} MB, "
                  f"{written / 1e6:.1f} MB written", flush=True)
        (s1, t1, m1, _), (s2, t2, m2, _) = results[-2:]
        rows.append((name, unit, results, slope(t1, t2, s1, s2), slope(m1, m2, s1, s2)))
    print("\n| step | sizes | wall s | peak RSS MB | MB written | slope time | slope RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, unit, results, t_slope, m_slope in rows:
        sizes, seconds, peaks, written = zip(*results)
        print(f"| {name} | {' / '.join(f'{s:,}' for s in sizes)} {unit} | {' / '.join(f'{t:.1f}' for t in seconds)} | "
              f"{' / '.join(f'{m / 1e6:.0f}' for m in peaks)} | {' / '.join(f'{b / 1e6:.1f}' for b in written)} | "
              f"{t_slope:.2f} | {m_slope:.2f} |")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
