"""05 mteb: the field's benchmark, MTEB (Muennighoff et al. 2023, the ``mteb`` package), run on each model as it was
trained, and a table of every task's main score.

Each model is loaded as sentence-transformers loads its folder (``SentenceTransformer(path)``: its pooling, length,
normalisation, the modules after its pooling and its prompts) and wrapped (``ProjectEncoder``) so that MTEB reads it
as the project does: a document (a corpus entry's title and text) joined as the model's objective read documents in
training (``Objective.document_input``, which the command gives: ``title + tokenizer.sep_token + text``, SPECTER's
input, also for a model not trained here; a paper-search model's ``title text``, as ``02_build_graph.py beir``
writes a BEIR corpus), a query as it is, and every pair compared by the model's ``similarity_fn_name``
(sentence-transformers' ``similarity``, as 05 ranks). What the wrapper did is kept in MTEB's results
(``model_meta.json``'s ``loader_kwargs``).

A task is an MTEB task name (its data from the Hugging Face hub, or its cache offline) or a local BEIR folder (what
``02_build_graph.py beir`` reads), evaluated offline as an MTEB retrieval task on its test qrels (``beir_task``).
For a local folder, the ranking MTEB saves is scored again by 05's metrics (``retrieval.retrieval_scores``), so that
the table gives 05's 95 % interval beside MTEB's nDCG@10 (``uncertainty.summarise``: a percentile bootstrap over
the queries).
"""

import json
import os

import mteb
import numpy as np
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction
from mteb.types import PromptType
from tqdm import tqdm

from common.data import beir
from common.eval import retrieval, uncertainty
from common.io import InputError, safe_name, sha256
from common.markdown import escape

FIGURE = "ndcg@10"  # 05's name of a local BEIR task's main score, MTEB's ndcg_at_10


def is_beir_folder(task):
    """Whether a --task value names a folder (a local BEIR dataset) rather than an MTEB task."""
    return os.path.isdir(task)


def beir_files(folder):
    """A BEIR folder's corpus, queries and test qrels (the files ``read_beir`` reads); a folder that lacks one is
    no BEIR dataset, one line."""
    found = (beir.find(folder, "corpus.jsonl"), beir.find(folder, "queries.jsonl"),
             os.path.join(folder, "qrels", "test.tsv"))
    if None in found or not os.path.isfile(found[2]):
        raise InputError(f"{folder}: not a BEIR dataset (a BEIR folder holds corpus.jsonl, queries.jsonl and "
                         "qrels/test.tsv)")
    return found


def beir_inputs(tasks):
    """The files of the local BEIR folders among ``tasks`` (--task values), for the manifest's inputs."""
    return [path for task in tasks if is_beir_folder(task) for path in beir_files(task)]


def read_beir(folder):
    """A BEIR folder's test split as ``02_build_graph.py beir`` reads it: ``(corpus {id: {"title", "text"}}, queries
    {id: text}, qrels {query id: {doc id: score}})``, the queries its test qrels judge, those without a judgement
    above 0 and judgements of a query or a document the folder lacks left out, as 02 leaves them out."""
    corpus_path, queries_path, qrels_path = beir_files(folder)
    corpus = {doc: {"title": title, "text": text} for doc, title, text in beir.corpus_rows(corpus_path)}
    queries = beir.read_queries(queries_path)
    qrels = {}
    for _, qid, doc, score in beir.read_qrels_tsv(qrels_path):
        if qid in queries and doc in corpus:
            qrels.setdefault(qid, {})[doc] = score
    qrels = {qid: judged for qid, judged in qrels.items() if any(score > 0 for score in judged.values())}
    if not qrels:
        raise InputError(f"{qrels_path}: judges no query of queries.jsonl relevant to a document of the corpus")
    return corpus, {qid: queries[qid] for qid in qrels}, qrels


class BeirFolder(AbsTaskRetrieval):
    """A local BEIR folder's test split as an MTEB retrieval task: ``beir_task`` makes a subclass for each folder,
    whose ``metadata`` is a class attribute as MTEB's tasks declare it (MTEB drops an instance's own on unloading)."""

    def __init__(self, data):
        super().__init__()
        self.data = data

    def load_data(self, num_proc=None, **kwargs):
        corpus, queries, qrels = self.data
        self.corpus, self.queries, self.relevant_docs = {"test": corpus}, {"test": queries}, {"test": qrels}
        self.data_loaded = True


def beir_task(folder):
    """The BEIR folder ``folder`` as an MTEB retrieval task named after the folder, offline; its revision is the
    start of its test qrels' SHA-256."""
    name = safe_name(os.path.basename(os.path.abspath(folder)), f"--task {folder}: its name, the task's,")
    data = read_beir(folder)
    metadata = TaskMetadata(
        name=name, description=f"The local BEIR folder {name}: its test qrels.", reference=None,
        dataset={"path": name, "revision": sha256(os.path.join(folder, "qrels", "test.tsv"))[:12]},
        type="Retrieval", category="t2t", modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"],
        main_score="ndcg_at_10", date=None, domains=None, task_subtypes=None, license=None, annotations_creators=None,
        dialect=None, sample_creation=None, bibtex_citation="")
    return type(f"BeirFolder_{name}", (BeirFolder,), {"metadata": metadata})(data)


def hub_task(name):
    """The MTEB task ``name`` with its data loaded (from the hub, or offline from the local cache); an unknown name,
    or data that cannot be had, is one line."""
    try:
        task = mteb.get_task(name)
    except KeyError:
        raise InputError(f"--task {name}: no such MTEB task and no such folder (mteb.get_tasks() lists the "
                         "tasks)") from None
    try:
        task.load_data()
    except Exception as e:  # noqa: BLE001 (datasets and huggingface_hub raise many types for data not to be had)
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = " offline (HF_HUB_OFFLINE is set)" if offline else ""
        raise InputError(f"--task {name}: its data cannot be loaded{where}: {first}") from None
    return task


def load_tasks(values):
    """The --task values as MTEB tasks, their data loaded: a local BEIR folder, else an MTEB task name. Two that are
    one task by name (MTEB names a task's result file after it) are one line."""
    tasks, seen = [], {}
    for value in values:
        task = beir_task(value) if is_beir_folder(value) else hub_task(value)
        name = task.metadata.name
        if name in seen:
            raise InputError(f"--task {value}: the task {name!r}, as --task {seen[name]} is (MTEB names its results "
                             "after the task); give each task once, a BEIR folder under a name of its own")
        seen[name] = value
        tasks.append(task)
    return tasks


def sentence_transformer(path, say=print):
    """``SentenceTransformer(path)``, its files checked first (``loading.check_model_files``; a model that cannot be
    loaded is one line); a model without sentence-transformers files is built as 05 reads it (``[CLS]`` pooling,
    128 tokens or fewer where the model takes fewer: ``loading.load_encoder``'s defaults), where sentence-transformers
    would pool by the mean, and a note says so."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from common.models.loading import DEFAULT_MAX_LENGTH, check_model_files, load_errors, st_config
    check_model_files(path)
    try:
        if st_config(path):
            return SentenceTransformer(path)
        transformer = Transformer(path)
    except load_errors() as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: cannot be loaded by sentence-transformers: {first}") from None
    transformer.max_seq_length = min(DEFAULT_MAX_LENGTH, transformer.max_seq_length or DEFAULT_MAX_LENGTH)
    say(f"note: {path}: no sentence-transformers files; read as 05 reads it, with cls pooling and "
        f"{transformer.max_seq_length} tokens")
    return SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "cls")])


class ProjectEncoder(AbsEncoder):
    """A model folder (or hub name) as MTEB's encoder: loaded whole by sentence-transformers, reading an MTEB
    corpus's documents as its objective read documents (``reader``: ``objectives.base.document_reader``'s
    ``(document_input, documents)``), queries as they are (with the model's ``query`` and ``document`` prompts where
    it has them, as sentence-transformers applies them), and comparing vectors by its ``similarity_fn_name``.
    ``says`` is what it does, kept in MTEB's results."""

    def __init__(self, name, path, reader, batch_size, say=print):
        self.name, self.batch_size = name, batch_size
        self.model = sentence_transformer(str(path), say)
        self.sep = self.model.tokenizer.sep_token or ""
        self.join, documents = reader
        self.says = {"documents": documents.replace("sep_token", repr(self.sep)), "queries": "as they are",
                     "similarity": self.model.similarity_fn_name, "max_seq_length": self.model.max_seq_length,
                     "prompts": {k: v for k, v in self.model.prompts.items() if v}}
        self.mteb_model_meta = ModelMeta.create_empty().model_copy(update={
            "name": f"docembed/{name}", "revision": "local", "loader_kwargs": {"docembed_wrapper": self.says},
            "max_tokens": self.model.max_seq_length, "framework": ["Sentence Transformers"],
            "similarity_fn_name": ScoringFunction(self.model.similarity_fn_name),
            "embed_dim": self.model.get_embedding_dimension()})

    def texts(self, batch, prompt_type):
        """A batch's texts: a document joined from its title and body (MTEB's ``title`` and ``body`` columns),
        anything else as MTEB gives it."""
        if prompt_type == PromptType.document and "body" in batch:
            titles = batch.get("title") or [""] * len(batch["body"])
            return [self.join(title or "", body, self.sep) for title, body in zip(titles, batch["body"])]
        return list(batch["text"])

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
        prompt = prompt_type.value if prompt_type is not None else None
        what = {"query": "queries", "document": "documents"}.get(prompt, "texts")
        parts = [self.model.encode(self.texts(batch, prompt_type), batch_size=self.batch_size,
                                   prompt_name=prompt if self.model.prompts.get(prompt) else None,
                                   convert_to_numpy=True, show_progress_bar=False)
                 for batch in tqdm(inputs, desc=f"embed {self.name}: {task_metadata.name} {what}", unit=" batches",
                                   mininterval=1.0, leave=False)]
        dimension = self.model.get_embedding_dimension()
        return np.concatenate(parts) if parts else np.zeros((0, dimension), dtype=np.float32)

    def similarity(self, embeddings1, embeddings2):
        return self.model.similarity(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2):
        return self.model.similarity_pairwise(embeddings1, embeddings2)


def ranked_predictions(task, folder):
    """{query id: ranked document ids} from the predictions MTEB saved of ``task`` in ``folder`` (``mteb.evaluate``'s
    ``prediction_folder/{task_name}_predictions.json``), best first, equal scores by document id descending, as
    trec_eval and 05 break ties."""
    with open(os.path.join(folder, f"{task.metadata.name}_predictions.json"), encoding="utf-8") as f:
        saved = json.load(f)["default"]["test"]
    return {qid: sorted(docs, key=lambda d: (docs[d], d), reverse=True) for qid, docs in saved.items()}


def check_models(models):
    """Every --model's files, before any work (``loading.check_model_files``)."""
    from common.models.loading import check_model_files
    for path in models.values():
        check_model_files(str(path))


def run_models(models, readers, tasks, folder_of, batch_size, resamples, seed):
    """MTEB on every model ({name: path}, read as ``readers[name]`` says) and task (``load_tasks``'), each model's
    result files (and the predictions of local BEIR tasks) in ``folder_of(name)``. Returns ``(scores {model: {task:
    {"main_score", and for a local BEIR task 05's figures of MTEB's ranking with their intervals
    (``with_intervals``)}}}, notes, wrappers {model: what the wrapper did})``."""
    scores, samples, wrappers = {}, {}, {}
    for name, path in models.items():
        model = ProjectEncoder(name, path, readers[name], batch_size)
        wrappers[name] = model.says
        folder = folder_of(name)
        result = mteb.evaluate(model, list(tasks), cache=mteb.ResultCache(cache_path=folder),
                               overwrite_strategy="always", encode_kwargs={"batch_size": batch_size},
                               prediction_folder=os.path.join(folder, "predictions"), show_progress_bar=True)
        for task, found in zip(tasks, result.task_results):
            label = task.metadata.name
            scores.setdefault(name, {})[label] = {"main_score": float(found.get_score())}
            if isinstance(task, BeirFolder):
                ranked = ranked_predictions(task, os.path.join(folder, "predictions"))
                figures, sample = retrieval.retrieval_scores(ranked, task.data[2])
                scores[name][label].update(figures)
                samples.setdefault(name, {})[label] = [sample]
    return (*with_intervals(scores, samples, resamples, seed), wrappers)


def with_intervals(scores, samples, resamples, seed):
    """``scores`` with 05's 95 % interval of each of 05's figures of a local BEIR task (``<figure>_ci``: a
    percentile bootstrap over its queries, ``uncertainty.summarise``), and the notes of intervals that cannot be
    given."""
    figures = {name: {task: {k: v for k, v in found.items() if k != "main_score"} for task, found in row.items()}
               for name, row in scores.items()}
    found, notes = uncertainty.summarise(figures, samples, [], resamples, seed)
    return {name: {task: {**values, **found.get(name, {}).get(task, {})} for task, values in row.items()}
            for name, row in scores.items()}, notes


def write_report(outputs, scores, tasks, wrappers, notes=()):
    """report.md written into ``outputs`` and returned: one row a model, one column a task's main score (×100, as
    MTEB's leaderboard shows them), with 05's 95 % interval where the task is a local BEIR folder, the notes, and how
    each model was read."""
    def cell(found):
        ci = found.get(f"{FIGURE}_ci")
        return f"{found['main_score'] * 100:.2f}" + (f" [{ci[0] * 100:.2f}, {ci[1] * 100:.2f}]" if ci else "")
    names = [task.metadata.name for task in tasks]
    bracket = any(found.get(f"{FIGURE}_ci") for row in scores.values() for found in row.values())
    lines = ["# MTEB", "", "Each task's main score ×100" + (", with 05's 95 % interval over the queries in brackets"
                                                          if bracket else "") + ":", "",
             "| model | " + " | ".join(f"{task.metadata.name} ({task.metadata.main_score})" for task in tasks) + " |",
             "|---|" + "---:|" * len(tasks)]
    lines += [f"| {name} | " + " | ".join(cell(row[task]) for task in names) + " |" for name, row in scores.items()]
    lines += [f"\nnote: {note}" for note in notes]
    lines += ["", "How each model read the tasks (MTEB's own wrapper joins a document's title and text by a space "
              "and compares by the model's stated similarity, else cosine):", "",
              "| model | documents | queries | similarity | tokens | prompts |", "|---|---|---|---|---:|---|"]
    lines += [f"| {name} | {w['documents']} | {w['queries']} | {w['similarity']} | {w['max_seq_length']} | "
              f"{escape(', '.join(f'{k}: {v!r}' for k, v in w['prompts'].items())) or '–'} |"
              for name, w in wrappers.items()]
    table = "\n".join(lines) + "\n"
    with outputs.open("report.md") as f:
        f.write(table)
    return table
