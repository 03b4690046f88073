"""05's evaluation of document embeddings (the WikiSpecter and distillation tasks): which tasks a data directory
supports, each model's vectors of every document, and their scores on cross-references, topics, classification
and similarity."""

import os

from tqdm import tqdm

from common import io
from common.eval import retrieval, wikispecter


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


def embed_documents(args, outputs, name, path, docs):
    """NAME.npy and NAME.ids.txt: the model's vectors of every document, written row by row into a memory-mapped
    NPY (under ``accelerate launch``, each process embeds one shard: ``retrieval.embed_corpus``); returns the
    vectors (that memory map), the tokenizer and the token length (None, None for a Paragraph Vector)."""
    from common.distill.paragraph_vector import ParagraphVector, is_paragraph_vector
    from common.distill.teachers import pv_texts
    if is_paragraph_vector(path):
        pv = ParagraphVector.load(path)
        emb = io.open_rows(outputs, name, docs.ids, pv.dim)
        with tqdm(total=len(docs.ids), desc=f"embed {name}", unit=" docs", mininterval=1.0) as bar:
            pv.embed(pv_texts(docs), bar, out=emb)
        io.check_finite_rows(emb, f"{path}: its vectors", docs.ids)
        print(f"{name}: {emb.shape[0]} documents, {emb.shape[1]} dimensions (Paragraph Vector, inferred)")
        return emb, None, {"pooling": "paragraph vector", "normalize": False, "max_length": None}
    _, tokenizer, settings, emb = retrieval.embed_corpus(args, name, path, docs, outputs)
    io.check_finite_rows(emb, f"{path}: its vectors", docs.ids)
    print(f"{name}: {emb.shape[0]} documents, {emb.shape[1]} dimensions ({settings['pooling']} pooling"
          f"{', normalised' if settings['normalize'] else ''}, {settings['max_length']} tokens)")
    return emb, tokenizer, settings


def evaluate_documents(args, outputs, wanted):
    """Embed the documents with every model and score the WikiSpecter tasks; returns the metrics, the counts and
    the figures written, as ``(caption, file name)``."""
    from common.data.documents import Documents
    from common.eval import classify, figures, similarity
    docs = Documents(args.data)
    index = docs.index
    qrels = {}
    if {"crossref", "lexical"} & wanted:
        qrels = wikispecter.read_qrels(os.path.join(args.data, "crossref.qrels"), index)
    levels = wikispecter.topic_levels(args.data) if "topics" in wanted else []
    topic_rows = {level: wikispecter.read_topics(args.data, level, index) for level in levels}
    classify_splits = {task: classify.read_task(*paths, index)
                       for task, paths in classify.splits(args.data).items()} if "classify" in wanted else {}
    for task, (train, test) in classify_splits.items():
        unseen = sorted(set(test[1]) - set(train[1]))
        if unseen:
            print(f"note: {task}: {len(unseen)} test label(s) never seen in training ({', '.join(unseen[:5])}); "
                  "their documents can only be misclassified")
    similar = similarity.read(args.data, index) if "similarity" in wanted else (None, None)
    counts = {"documents": len(docs.ids), "crossref_queries": len(qrels)}
    metrics, embeddings, predictions, written = {}, {}, {}, []
    for name, path in args.model.items():
        emb, tokenizer, settings = embed_documents(args, outputs, name, path, docs)
        counts.setdefault("embedding", {})[name] = {"pooling": settings["pooling"],
                                                    "normalize": settings["normalize"],
                                                    "max_length": settings["max_length"]}
        max_length = settings["max_length"]
        if tokenizer is not None and not written:  # the thesis's Fig. 4.1, under the first model's tokenizer
            lengths = wikispecter.token_lengths(tokenizer, docs.inputs(tokenizer.sep_token or ""))
            figures.token_lengths(outputs.tmp_path("token_lengths.png"), lengths, max_length, name)
            written.append((f"Token counts of the documents under {name}'s tokenizer, the cut at {max_length} "
                            "marked", "token_lengths.png"))
        embeddings[name] = (emb, index)
        result = metrics.setdefault(name, {})
        if "crossref" in wanted and qrels:
            result["crossref"] = wikispecter.crossref(emb, index, qrels)
        for level in levels:
            result[f"topics.{level}"], predicted = wikispecter.topics(emb, index, topic_rows[level], args.seed)
            if level == "top":
                predictions[name] = predicted
        for task, (train, test) in classify_splits.items():
            result[task] = classify.classify(emb, train, test, args.seed, args.head_epochs)
        if "similarity" in wanted:
            result["similarity"] = similarity.evaluate(emb, index, *similar)
    if "lexical" in wanted and qrels:
        language = args.language or wikispecter.SNOWBALL.get(io.read_manifest(args.data).get("language") or "",
                                                              "english")
        metrics["lexical"] = {"crossref": wikispecter.lexical(docs.titles, docs.texts, index, qrels, language)}
    if predictions:
        figures.confusion(outputs.tmp_path("confusion_top.png"), predictions, "top")
        written.append(("Confusion matrix of the top-level topic classification (test documents)",
                        "confusion_top.png"))
    if topic_rows:
        figures.label_distribution(outputs.tmp_path("labels.png"), topic_rows)
        written.append(("Topic documents per label, training and test", "labels.png"))
    for level in levels:
        if embeddings:
            figures.topic_tsne(outputs.tmp_path(f"tsne_{level}.png"), embeddings, topic_rows[level], level, args.seed)
            written.append((f"t-SNE of the topic documents (topics.{level})", f"tsne_{level}.png"))
    return metrics, counts, written
