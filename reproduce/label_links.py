"""How often a link joins two documents of the same topic label: over every link of the corpus, and over the
links the triplets are drawn from (02's training graph, ``graph.npz``). Where most links cross labels, a model
trained to put linked documents together is pulled away from the label's documents.

    python reproduce/label_links.py work/foldoc/articles.jsonl work/foldoc-data [--level top]
"""

import argparse
import os
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import cli  # noqa: E402
from common.io import InputError, read_jsonl, verify_input  # noqa: E402


def read_graph(data_dir):
    """02's training graph (``graph.npz``): ids, and the CSR rows of its links with their counts."""
    path = os.path.join(data_dir, "graph.npz")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    verify_input(path)
    if not zipfile.is_zipfile(path):  # np.load would try it as a pickle
        raise InputError(f"{path}: not 02's graph.npz (not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as graph:
            found = {key: graph[key] for key in ("ids", "indptr", "indices", "counts")}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: not 02's graph.npz ({type(e).__name__}: {e})") from None
    ids, indptr, indices = found["ids"], found["indptr"], found["indices"]
    if (ids.ndim != 1 or indptr.shape != (len(ids) + 1,) or indices.shape != found["counts"].shape
            or (len(indptr) and (indptr[0] != 0 or indptr[-1] != len(indices) or (np.diff(indptr) < 0).any()))
            or (len(indices) and (indices.min() < 0 or indices.max() >= len(ids)))):
        raise InputError(f"{path}: its arrays do not make a graph of {len(ids)} documents")
    return [i.decode("utf-8", "replace") if isinstance(i, bytes) else str(i) for i in ids], indptr, indices, \
        found["counts"]


def shares(pairs, label):
    """(links with both ends labelled, of those the share whose ends share the label)."""
    both = [(a, b) for a, b in pairs if label.get(a) is not None and label.get(b) is not None]
    same = sum(label[a] == label[b] for a, b in both)
    return len(both), same / len(both) if both else float("nan")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("articles")
    p.add_argument("data")
    p.add_argument("--level", default="top")
    args = p.parse_args(argv)
    label, links = {}, []
    for _, obj in read_jsonl(args.articles, required=("id", "links")):
        label[obj["id"]] = (obj.get("labels") or {}).get(args.level)
        links += [(obj["id"], target) for target in obj["links"]]
    ids, indptr, indices, counts = read_graph(args.data)
    training = [(ids[row], ids[indices[k]]) for row in range(len(ids))
                for k in range(indptr[row], indptr[row + 1]) if counts[k] == 5]
    labels = {v for v in label.values() if v is not None}
    task = set()
    for part in ("train", "test"):
        path = os.path.join(args.data, f"topics.{args.level}.{part}.jsonl")
        if os.path.exists(path):
            task.update(obj["label"] for _, obj in read_jsonl(path, required=("id", "label")))
    in_task = {doc: value for doc, value in label.items() if value in task}
    print(f"\nLinks whose two ends share a {args.level} label ({len(labels)} labels; the topic task keeps "
          f"{len(task)}):\n")
    print("| links | labels counted | with both ends labelled | same label |\n|---|---|---:|---:|")
    for name, pairs in (("every link of the corpus", links), ("the training graph's links", training)):
        for which, labelling in (("all", label), ("the task's", in_task)):
            n, share = shares(pairs, labelling)
            print(f"| {name} | {which} | {n} | {100 * share:.1f} % |")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
