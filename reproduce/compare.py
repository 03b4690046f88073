"""A reproduction's table: our figures from 05's metrics.json beside the paper's.

    python reproduce/compare.py wikispecter work/foldoc-eval/metrics.json --row base-cls=FinBERT ...

Each ``--row OURS=PAPER`` puts the paper's row PAPER beside our model OURS (``OURS`` alone: no paper row). The
paper's figures below are the ones its text reports; a cell the paper has no figure for shows "–". Figures are
percentages (05's fractions × 100), as the papers print them, ours with 05's 95 % interval in brackets where the
metrics file has one. Without ``--row``, every model of the metrics files (not 05's ``A - B`` difference rows).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402
from common.eval.uncertainty import is_difference  # noqa: E402
from common.io import InputError  # noqa: E402

PAPERS = {
    "wikispecter": {
        "source": "WikiSpecter thesis: Table 5.1 (topic classification, macro F1) and Table 5.3 (cross-reference "
                  "ranking, MAP); Finnish Wikipedia, FinBERT base",
        "columns": [("crossref", "map", "crossref MAP"), ("crossref", "ndcg", "crossref nDCG"),
                    ("topics.top", "f1", "topic F1"), ("topics.top", "accuracy", "topic accuracy")],
        "rows": {"FinBERT": {"crossref map": 48.92, "topics.top f1": 59.86},
                 "Sentence-BERT": {"crossref map": 60.30, "topics.top f1": 56.32},
                 "WikiSpecter": {"crossref map": 75.72, "topics.top f1": 65.83}},
    },
    "keysent": {
        "source": "key-sentence thesis: Average R-precision of the untuned and the fine-tuned sentence-transformer",
        "columns": [("keysent", "arp", "ARP"), ("keysent", "arp_2sd", "ARP 2σ")],
        "rows": {"untuned": {"keysent arp": 48.0}, "fine-tuned": {"keysent arp": 80.0}},
    },
    "distill": {
        "source": "Burian 2023, Table 5.7: accuracy with 1k and all training documents (mean of six tasks) and "
                  "retrieval MAP (mean of two tasks); our columns are BBC News topics, the Lee corpus and FOLDOC's "
                  "cross-references (no paper figure)",
        "columns": [("classify.topics.top", "acc_1k", "accuracy 1k"), ("classify.topics.top", "acc_all", "accuracy all"),
                    ("similarity", "map", "similarity MAP"), ("similarity", "spearman", "Spearman"),
                    ("crossref", "map", "crossref MAP")],
        "rows": {"Longformer": {"classify.topics.top acc_1k": 58.8, "classify.topics.top acc_all": 77.5,
                                "similarity map": 12.7},
                 "SBERT": {"classify.topics.top acc_1k": 61.2, "classify.topics.top acc_all": 83.9,
                           "similarity map": 16.7},
                 "DM": {"classify.topics.top acc_1k": 52.3, "classify.topics.top acc_all": 72.8,
                        "similarity map": 12.3},
                 "MSE-contextual": {"classify.topics.top acc_1k": 68.0, "classify.topics.top acc_all": 82.9,
                                    "similarity map": 16.5},
                 "only-MSE": {"classify.topics.top acc_1k": 68.0, "classify.topics.top acc_all": 83.0,
                              "similarity map": 17.2}},
    },
    "search": {
        "source": "the paper-search course project reports no figures; its premise is that masked-LM adaptation "
                  "(stage 1) makes Multiple-Negatives-Ranking fine-tuning (stage 2) better",
        "columns": [("retrieval", "ndcg@10", "nDCG@10"), ("retrieval", "mrr@10", "MRR@10"),
                    ("retrieval", "recall@1", "R@1"), ("retrieval", "recall@10", "R@10"),
                    ("retrieval", "map@100", "MAP@100")],
        "rows": {},
    },
}


def cell(value, ci=None):
    """A percentage, and its interval in brackets where there is one."""
    if value is None:
        return "–"
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def embedded_as(settings):
    """How a model embedded the documents (05's manifest), in a few words."""
    if not settings:
        return "–"
    if settings["pooling"] == "paragraph vector":
        return "paragraph vector"
    return f"{settings['pooling']}{', norm.' if settings['normalize'] else ''}, {settings['max_length']}"


def table(method, metrics, rows, embedding=None):
    """Markdown: one line per ``(ours, paper row or None)``: how the model embedded the documents, then each column
    ours and the paper's."""
    paper = PAPERS[method]
    embedding = embedding or {}
    head = ["model", "embedded as", "paper row"] + [f"{label} ours | paper" for _, _, label in paper["columns"]]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|---:|" * len(paper["columns"])]
    for ours, theirs in rows:
        found = metrics.get(ours)
        if found is None:
            raise InputError(f"--row {ours}: no such model in the metrics (models: {', '.join(metrics)})")
        cells = []
        for task, metric, _ in paper["columns"]:
            value, ci = found.get(task, {}).get(metric), found.get(task, {}).get(f"{metric}_ci")
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise InputError(f"the metrics of {ours}: {task} {metric} is {value!r}, not a number")
            reference = paper["rows"].get(theirs, {}).get(f"{task} {metric}") if theirs else None
            cells.append(f"{cell(None if value is None else 100 * value, ci and [100 * v for v in ci])} | "
                         f"{cell(reference)}")
        lines.append(f"| {ours} | {embedded_as(embedding.get(ours))} | {theirs or '–'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nPaper: {paper['source']}.\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method", choices=sorted(PAPERS))
    p.add_argument("metrics", nargs="+", help="05's metrics.json files (their models are merged, later files win)")
    p.add_argument("--row", action="extend", nargs="+", default=[], metavar="OURS[=PAPER]",
                   help="a row: our model, and the paper's row beside it")
    args = p.parse_args(argv)
    metrics, embedding = {}, {}
    for path in args.metrics:
        for model, tasks in io.read_json(path).items():
            if not isinstance(tasks, dict) or not all(isinstance(v, dict) for v in tasks.values()):
                raise InputError(f"{path}: model {model!r} is not {{task: {{metric: value}}}}; give 05's metrics.json")
            metrics.setdefault(model, {}).update(tasks)
        found = io.read_manifest(os.path.dirname(os.path.abspath(path))).get("embedding") or {}
        if not isinstance(found, dict) or not all(isinstance(v, dict) and {"pooling", "normalize", "max_length"}
                                                  <= set(v) for v in found.values()):
            raise InputError(f"{os.path.join(os.path.dirname(path), 'manifest.json')}: its embedding is not 05's "
                             "{model: {pooling, normalize, max_length}}")
        embedding.update(found)
    rows = []
    for value in args.row or [name for name in metrics if not is_difference(name)]:
        ours, _, theirs = value.rpartition("=")  # our names may hold "=" ("runs (n=5)"), the paper's do not
        if not ours:
            ours, theirs = theirs, ""
        elif ours not in metrics and value in metrics:
            ours, theirs = value, ""
        if theirs and theirs not in PAPERS[args.method]["rows"]:
            p.error(f"--row {value}: the paper has no row {theirs!r} ({', '.join(PAPERS[args.method]['rows'])})")
        rows.append((ours, theirs or None))
    print(table(args.method, metrics, rows, embedding), end="")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
