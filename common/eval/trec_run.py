"""Rankings out as TREC run files, ``qid Q0 docid rank score tag`` a line, which trec_eval, pytrec_eval, ranx and
ir-measures read: 05 writes one per model and ranking task, ``EVAL/<model>.<task>.trec`` (the tag is the model's
name), so that any of those tools computes the task's figures from the same rankings 05 scored.

The scores are written as the shortest decimal that reads back as the same number (Python's ``repr``). trec_eval
holds a score as a C ``float``, and sorts by score, ties by document id descending, as 05 does: the retrieval
task's cosines and BM25 scores and the cross-reference task's distances are float32 values already, and the
lexical baseline's shares (fractions of a query's few hundred stems) lie further apart than a float32 resolves, so
the tools see the ties 05 saw and rank the documents as 05 did. The similarity task is not written: it ranks by
float64 cosines (scikit-learn's average precision), which trec_eval would round into ties 05 does not have."""

from common.eval.metrics import trec_order


def ranked(scores):
    """``[(doc id, score)]`` best first, in trec_eval's order, from {doc id: score}."""
    docs = list(scores)
    return [(docs[i], scores[docs[i]]) for i in trec_order([scores[d] for d in docs], docs)]


def run_lines(ranking, tag):
    """The run file's lines of ``ranking`` ({qid: [(doc id, score)] best first})."""
    for qid, docs in ranking.items():
        for rank, (doc, score) in enumerate(docs, 1):
            yield f"{qid} Q0 {doc} {rank} {float(score)!r} {tag}\n"


def write_run(outputs, model, task, ranking):
    """``<model>.<task>.trec`` of ``ranking`` in the output folder ``outputs``; returns its name."""
    name = f"{model}.{task}.trec"
    with outputs.open(name) as f:
        f.writelines(run_lines(ranking, model))
    return name
