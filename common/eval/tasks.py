"""05's evaluation tasks: which a data directory supports and which 05 runs, the rows 05 adds itself (the
baselines), and the tasks over embedded documents (cross-references, topics, classification, similarity): their
files read once, each model's vectors of the documents, and their scores."""

import os
import time

import numpy as np
from tqdm import tqdm

from common import cli, io, vectors
from common.eval import embedding, keysent, report, retrieval, trec_run, uncertainty, wikispecter
from common.pool import Background

# the rows 05 adds itself beside the models, with what they are: no --model may take their names
BASELINES = {"lexical": "the lexical baseline", "bm25": "the BM25 baseline"}
TASKS = ("crossref", "topics", "lexical", "keysent", "classify", "similarity", "retrieval", "bm25")
EMBEDDING_TASKS = {"crossref", "topics", "lexical", "classify", "similarity"}  # documents as title + text
SCORED_ONLY_TASKS = {"crossref", "topics", "lexical"}  # whose documents are named in their files (--documents scored)


def model_names(values):
    """05's ``--model NAME=MODEL`` values as {name: model}: each NAME once, and none the name of a row 05 adds itself
    (its metrics would be replaced by the baseline's, and --compare would compare the baseline)."""
    seen = {}
    for value, name, _ in cli.name_values(values, "--model", "MODEL"):
        if name in seen:
            raise io.InputError(f"--model {value!r}: NAME {name!r} is given twice (also {seen[name]!r}); give each "
                                "model a name of its own")
        if name in BASELINES:
            raise io.InputError(f"--model {value!r}: NAME {name!r} is the row of {BASELINES[name]}, which 05 adds "
                                "itself; give the model another name")
        seen[name] = value
    return cli.named(values, "--model", "MODEL")


def supported(data_dir):
    found = set()
    if os.path.exists(os.path.join(data_dir, "crossref.qrels")) and os.path.getsize(
            os.path.join(data_dir, "crossref.qrels")):
        found.update(("crossref", "lexical"))
    if wikispecter.topic_levels(data_dir):
        found.add("topics")
    if os.path.exists(os.path.join(data_dir, "keysent.test.jsonl")):
        found.add("keysent")
    from common.eval import classify, similarity
    if classify.splits(data_dir):
        found.add("classify")
    if similarity.available(data_dir):
        found.add("similarity")
    if retrieval.is_retrieval_data(data_dir):
        found.update(("retrieval", "bm25"))
    return found


def default_tasks(data_dir, available):
    """Every available task, except that topic splits alone are classified by --task classify only (the
    WikiSpecter tables score them with the topics task), and paper-search data is scored by retrieval and BM25."""
    from common.eval import classify
    if "retrieval" in available:
        return available & {"retrieval", "bm25"}
    if "classify" in available and not classify.own_splits(data_dir):
        return available - {"classify"}
    return available


def tasks_to_run(data_dir, asked, has_model, precision, documents="all"):
    """The tasks 05 runs on ``data_dir``: those ``asked`` (--task), else its default ones (``default_tasks``). A
    task the directory has no data for, no task at all, no model (``has_model``: a --model or --runs) where a task
    needs one, retrieval beside the tasks that embed title + text, key sentences below float32, or ``documents``
    "scored" (--documents) beside a task that reads other documents than its files name, is one line, as is a
    ``data_dir`` that is no directory."""
    if not os.path.isdir(data_dir):
        raise io.InputError(f"{data_dir}: no such data directory")
    available = supported(data_dir)
    wanted = set(asked) if asked else default_tasks(data_dir, available)
    missing = wanted - available
    if missing:
        raise io.InputError(f"{data_dir}: has no data for task(s) {', '.join(sorted(missing))}")
    if not wanted:
        raise io.InputError(f"{data_dir}: no evaluation data (crossref.qrels, topics.*.jsonl, classify.*.jsonl, "
                            f"similarity.*, keysent.*.jsonl or retrieval.test.qrels)")
    if not has_model and wanted - {"lexical", "bm25"}:
        raise io.InputError("give at least one --model NAME=MODEL (or --runs)")
    if "retrieval" in wanted and wanted & EMBEDDING_TASKS:
        raise io.InputError("--task retrieval embeds abstracts alone, the other tasks title + text: evaluate them "
                            "into separate --out directories")
    if documents == "scored" and wanted - SCORED_ONLY_TASKS:
        raise io.InputError(f"--documents scored: only for --task {' '.join(sorted(SCORED_ONLY_TASKS))}, whose "
                            f"documents their files name; {', '.join(sorted(wanted - SCORED_ONLY_TASKS))} "
                            "reads others")
    if "keysent" in wanted and precision != "float32":
        raise io.InputError(f"--{precision}: the key-sentence task embeds its sentences in float32 only; evaluate "
                            "it without the flag")
    return wanted


def to_embed(data_dir, wanted, which):
    """The documents 05 embeds (``which``, --documents): every one of docs.jsonl ("all"), or those the
    cross-reference and topic tasks in ``wanted`` read ("scored": queries, their candidates and the topic
    documents), in docs.jsonl's order."""
    from common.data.docs_jsonl import Documents
    docs = Documents(data_dir)
    if which == "scored":
        docs = Tasks(data_dir, wanted, docs.index, say=lambda _: None).scored(docs)
    return docs


def follow(models, data_dir, how, wanted, which):
    """A process other than the main one under ``accelerate launch``: embed its shard of the documents the main
    process embeds for ``wanted`` (``which``, --documents), and write nothing."""
    if wanted & EMBEDDING_TASKS:
        return embedding.follow(models, data_dir, how, to_embed(data_dir, wanted, which))
    if "retrieval" in wanted:
        return embedding.follow(models, data_dir, how)


def embed_documents(path, name, data_dir, docs, how, outputs, say=print, first=None, ready=None):
    """NAME.npy and NAME.ids.txt: the model's vectors of every document, written row by row into a memory-mapped
    NPY (under ``accelerate launch``, each process embeds one shard: ``embedding.embed_corpus``); returns the
    vectors (that memory map), the tokenizer and each document's tokens as embedded (None for a Paragraph Vector)
    and how the model embedded. With ``first`` (rows) and ``ready``, a transformer on one process embeds those
    documents first and calls ``ready(vectors)`` once they are in, while the rest is embedded."""
    from common.distill.paragraph_vector import ParagraphVector, is_paragraph_vector
    from common.distill.teachers import pv_texts
    if is_paragraph_vector(path):
        pv = ParagraphVector.load(path)
        emb = vectors.open_rows(outputs, name, docs.ids, pv.dim)
        with tqdm(total=len(docs.ids), desc=f"embed {name}", unit=" docs", mininterval=1.0) as bar:
            pv.embed(pv_texts(docs), bar, out=emb)
        vectors.check_finite_rows(emb, f"{path}: its vectors", docs.ids)
        say(f"{name}: {emb.shape[0]} documents, {emb.shape[1]} dimensions (Paragraph Vector, inferred)")
        return emb, None, {"pooling": "paragraph vector", "normalize": False, "max_length": None}
    _, tokenizer, settings, emb = embedding.embed_corpus(path, name, data_dir, docs, how, outputs, say=say,
                                                         first=first, ready=ready)
    say(f"{name}: {emb.shape[0]} documents, {emb.shape[1]} dimensions ({settings['pooling']} pooling"
        f"{', normalised' if settings['normalize'] else ''}, {settings['max_length']} tokens"
        f"{', ' + settings['precision'] if settings.get('precision', 'float32') != 'float32' else ''})")
    return emb, (tokenizer, settings["token_counts"]), embedding.embedding_settings(settings)


class Tasks:
    """The evaluation data of the WikiSpecter and distillation tasks in ``wanted``, read once from ``data_dir``
    (every id checked against docs.jsonl), and each task's score of a model's vectors: {task: (metrics,
    [uncertainty.Sample])}."""

    def __init__(self, data_dir, wanted, index, resplits=0, say=print):
        from common.eval import classify, similarity
        self.wanted, self.index = wanted, index
        self.qrels = wikispecter.read_qrels(os.path.join(data_dir, "crossref.qrels"), index) \
            if {"crossref", "lexical"} & wanted else {}
        self.levels = wikispecter.topic_levels(data_dir) if "topics" in wanted else []
        self.topic_rows = {level: wikispecter.read_topics(data_dir, level, index) for level in self.levels}
        for level in self.levels:
            wikispecter.check_classifiable(data_dir, level, self.topic_rows[level])
        self.resplits = resplits
        self.resplit = [level for level in self.levels if wikispecter.stratifiable(self.topic_rows[level])]
        for level in self.levels:
            if resplits and level not in self.resplit:
                say(f"note: topics.{level}: a label with one document, or fewer documents on a side than labels: "
                    "no stratified re-splits, and no interval on its F1 and accuracy")
        self.classify = {task: classify.read_task(*paths, index)
                         for task, paths in classify.splits(data_dir).items()} if "classify" in wanted else {}
        for task, (train, test) in self.classify.items():
            unseen = sorted(set(test[1]) - set(train[1]))
            if unseen:
                say(f"note: {task}: {len(unseen)} test label(s) never seen in training ({', '.join(unseen[:5])}); "
                    "their documents can only be misclassified")
        self.similar = similarity.read(data_dir, index) if "similarity" in wanted else None

    def scored(self, docs):
        """The documents the cross-reference and topic tasks read (queries, their candidates and the topic
        documents), a subset of ``docs`` in its order; the tasks then look their ids up in the subset's rows."""
        keep = {doc for qid, judged in self.qrels.items() for doc in (qid, *judged)}
        keep.update(doc for rows in self.topic_rows.values() for part in rows.values() for doc, _ in part)
        docs = docs.subset(keep)
        self.index = docs.index
        return docs

    def crossref(self, emb, similarity=None):
        """The cross-reference task's scores, and its ranking ({qid: [(candidate, score)]}, for its run file), the
        candidates ranked by the model's ``similarity`` (``wikispecter.crossref_run``)."""
        if "crossref" not in self.wanted or not self.qrels:
            return {}, {}
        run = wikispecter.crossref_run(emb, self.index, self.qrels, similarity)
        found, sample = wikispecter.scored(self.qrels, run)
        return {"crossref": (found, [sample])}, {qid: trec_run.ranked(scores) for qid, scores in run.items()}

    def start_topics(self, emb, seed):
        """The topics task per label level, started: every level's splits (the protocol's, then the re-splits)
        classified in forked processes while the caller scores the other tasks (``wikispecter.start_topics``).
        Returns a function that waits for them and returns what ``topics`` does."""
        splits = {level: wikispecter.splits_of(self.topic_rows[level], self.resplits if level in self.resplit else 0,
                                               seed) for level in self.levels}
        running = wikispecter.start_topics(emb, self.index, [split for level in self.levels
                                                              for split in splits[level]], seed)

        def results():
            found, scores, predicted = iter(running()), {}, None
            for level in self.levels:
                (metrics, labels), *again = [next(found) for _ in splits[level]]
                scores[f"topics.{level}"] = (metrics, [uncertainty.splits(
                    [[m["f1"], m["accuracy"]] for m, _ in ((metrics, labels), *again)], ("f1", "accuracy"))])
                predicted = labels if level == "top" else predicted
            return scores, predicted
        return results

    def topic_documents(self):
        """The rows of every topic document, of every level (None without the topics task)."""
        rows = {self.index[doc] for rows in self.topic_rows.values() for part in rows.values() for doc, _ in part}
        return np.array(sorted(rows), dtype=np.int64) if rows else None

    def topics(self, emb, seed):
        """The topics task per label level, its figures on the protocol's split then on each re-split as its
        Sample, and the top level's predictions (for the confusion matrix)."""
        return self.start_topics(emb, seed)()

    def classification(self, emb, seed, head_epochs):
        """Each classification task's scores, and a note for each task whose heads have not converged."""
        from common.eval import classify
        scores, notes = {}, []
        for task, (train, test) in self.classify.items():
            found, sample, moving = classify.classify(emb, train, test, seed, head_epochs)
            scores[task] = (found, [sample])
            if moving:
                figure, (start, half, end) = list(moving.items())[-1]
                notes.append(f"{task}: the head{'s' * (len(moving) > 1)} of {', '.join(moving)} "
                             f"{'have' if len(moving) > 1 else 'has'} not converged (training loss {start:.3f}, "
                             f"{half:.3f}, {end:.3f} at the first, middle and last of {head_epochs} epochs"
                             f"{f' for {figure}' if len(moving) > 1 else ''}: still falling); its accuracy may stand "
                             "far below what the vectors allow, and more --head-epochs train it further")
        return scores, notes

    def similarity(self, emb):
        from common.eval import similarity
        return {"similarity": similarity.evaluate(emb, self.index, *self.similar)} if self.similar else {}

    def lexical(self, docs, language):
        """The lexical baseline's scores on the cross-reference task, and its ranking (as ``crossref``'s)."""
        run = wikispecter.lexical_run(docs.titles, docs.texts, self.index, self.qrels, language)
        found, sample = wikispecter.scored(self.qrels, run)
        return {"crossref": (found, [sample])}, {qid: trec_run.ranked(scores) for qid, scores in run.items()}


def split_scores(scores):
    """{task: (metrics, samples)} → ({task: metrics}, {task: samples}), tasks without samples left out of the
    second."""
    return ({task: found for task, (found, _) in scores.items()},
            {task: samples for task, (_, samples) in scores.items() if samples})


def evaluate_documents(models, data_dir, how, outputs, wanted, seed, head_epochs, language=None, resplits=0,
                       say=print, which="all"):
    """Embed the documents (``which``: ``to_embed``'s) with every model (``models``: name → path) and score the
    WikiSpecter and distillation tasks in ``wanted`` (topics also on ``resplits`` stratified re-splits); the
    thesis's figures go into ``outputs``. Returns the metrics, the counts, the figures written, as ``(caption,
    file name)``, and the samples the intervals come from, {model: {task: [uncertainty.Sample]}}."""
    from common.data.docs_jsonl import Documents
    from common.eval import figures
    docs = Documents(data_dir)
    tasks = Tasks(data_dir, wanted, docs.index, resplits, say)
    if which == "scored":
        docs = tasks.scored(docs)
    counts = {"documents": len(docs.ids), "crossref_queries": len(tasks.qrels)}
    metrics, samples, predictions, written = {}, {}, {}, []
    shown = {}  # per level, the topic documents its t-SNE draws, and each model's coordinates of them
    for level, rows in tasks.topic_rows.items():
        pairs = rows["train"] + rows["test"]
        shown[level] = ([pairs[i] for i in figures.tsne_sample([label for _, label in pairs], seed)], {})
    scoring = []  # per model, in order: what it scored at once, and its topic classifiers and t-SNE still running
    first = tasks.topic_documents()  # embedded first, so that the topic work can start on them
    for name, path in models.items():
        started = time.perf_counter()
        running = {}

        def topic_vectors_in(emb):
            """The topic classifiers and each level's t-SNE, in processes of their own, as soon as the topic
            documents' vectors are in: they run while the rest of the corpus (and the next model) is embedded
            and the other tasks are scored."""
            import sklearn.manifold  # noqa: F401  once here, not in each t-SNE's process
            running["topics"] = tasks.start_topics(emb, seed)
            running["tsne"] = {level: Background(figures.tsne, emb[[docs.index[doc] for doc, _ in chosen]], seed,
                                                 what=f"the t-SNE of topics.{level}")
                               for level, (chosen, _) in shown.items()}
        emb, tokens, settings = embed_documents(path, name, data_dir, docs, how, outputs, say,
                                                first=first, ready=topic_vectors_in)
        counts.setdefault("embedding_seconds", {})[name] = time.perf_counter() - started
        counts.setdefault("embedding", {})[name] = settings
        if not running:  # a Paragraph Vector, or embedded in shards: the topic documents were not first
            topic_vectors_in(emb)
        if tokens is not None and not written:  # the thesis's Fig. 4.1, under the first model's tokenizer
            tokenizer, counts_cut = tokens
            lengths = wikispecter.token_lengths(tokenizer, docs.inputs(tokenizer.sep_token or ""),
                                                cut=settings["max_length"], known=counts_cut)
            figures.token_lengths(outputs.tmp_path("token_lengths.png"), lengths, settings["max_length"], name)
            written.append((f"Token counts of the documents under {name}'s tokenizer, the cut at "
                            f"{settings['max_length']} marked", "token_lengths.png"))
        crossref, ranking = tasks.crossref(emb, settings.get("similarity"))
        if ranking:
            trec_run.write_run(outputs, name, "crossref", ranking)
        classified, notes = tasks.classification(emb, seed, head_epochs)
        for note in notes:
            say(f"note: {name}: {note}")
        others = {**classified, **tasks.similarity(emb)}
        scoring.append((name, crossref, others, running))
    for name, crossref, others, running in scoring:
        for level, coordinates in running["tsne"].items():
            shown[level][1][name] = coordinates.result()
        topics, predicted = running["topics"]()
        for task, (found, _) in topics.items():
            fragile = [what for what, off in (("the C chosen sits at the end of the grid", found["C_at_edge"]),
                                              ("liblinear did not converge", not found["converged"]),
                                              ("the next best C scores within one training document of it",
                                               found["C_tied"])) if off]
            if fragile:
                say(f"note: {name}: {task}: {' and '.join(fragile)} (C {found['C']:g}); its F1 may move by points "
                    "on changes of the vectors too small to show in their cosines")
        if predicted is not None:
            predictions[name] = predicted
        metrics[name], samples[name] = split_scores({**crossref, **topics, **others})
    if "lexical" in wanted and tasks.qrels:
        language = language or wikispecter.SNOWBALL.get(io.read_manifest(data_dir).get("language") or "", "english")
        scores, ranking = tasks.lexical(docs, language)
        metrics["lexical"], samples["lexical"] = split_scores(scores)
        trec_run.write_run(outputs, "lexical", "crossref", ranking)
    if predictions:
        figures.confusion(outputs.tmp_path("confusion_top.png"), predictions, "top")
        written.append(("Confusion matrix of the top-level topic classification (test documents)",
                        "confusion_top.png"))
    if tasks.topic_rows:
        figures.label_distribution(outputs.tmp_path("labels.png"), tasks.topic_rows)
        written.append(("Topic documents per label, training and test", "labels.png"))
    for level, (chosen, points) in shown.items():
        if points:
            figures.topic_tsne(outputs.tmp_path(f"tsne_{level}.png"), points, [label for _, label in chosen], level)
            total = sum(map(len, tasks.topic_rows[level].values()))
            written.append((f"t-SNE of the topic documents (topics.{level})" if len(chosen) == total else
                            f"t-SNE of {len(chosen):,} of the {total:,} topic documents (topics.{level}; a sample "
                            "drawn from --seed that keeps each label's share)", f"tsne_{level}.png"))
    return metrics, counts, written, samples


def evaluate(models, runs, data_dir, how, outputs, wanted, seed, head_epochs, language, resplits, which):
    """Every task in ``wanted`` scored (retrieval and BM25, the tasks over embedded documents, key sentences), each
    model's vectors and figures written into ``outputs``; returns their results as one, as ``report.combine``."""
    parts = []
    if wanted & {"retrieval", "bm25"}:
        parts.append(retrieval.evaluate_retrieval(models, data_dir, how, outputs, wanted))
    if wanted & EMBEDDING_TASKS:
        parts.append(evaluate_documents(models, data_dir, how, outputs, wanted, seed, head_epochs, language, resplits,
                                        which=which))
    if "keysent" in wanted:
        parts.append(keysent.evaluate_keysent(models, runs, data_dir, how, outputs, seed))
    return report.combine(parts)
