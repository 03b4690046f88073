"""Step 1: raw corpora → documents in the contract format (docs/contract.md); each command's --help says more.

  python 01_extract.py wiki --dump fiwiki-latest-pages-articles.xml.bz2 --out work/fi
  python 01_extract.py sentences --input articles.jsonl --out work/keysent
  python 01_extract.py arxiv --input arxiv-metadata-oai-snapshot.json.gz --out work/arxiv [--categories cs.,stat.ML]
  python 01_extract.py dictd --input /usr/share/dictd/foldoc --out work/foldoc
  python 01_extract.py rst --input /usr/share/doc/python3.11/html/_sources --out work/pydoc
  python 01_extract.py folder --input bbcnews/data --out work/bbc
  python 01_extract.py csv --input NewsArticles.zip --out work/news --id-column article_id
  python 01_extract.py hf --dataset imdb --split test --label-field label --out work/imdb-test
"""

import collections
import os
from dataclasses import fields
import sys

from common import cli
from common.outdir import folders
from common.extract import sources, topic_labels
from common.extract.wiki import DISAMBIGUATION_MARKERS, DISAMBIGUATION_TEMPLATES, WikiSettings, extract_wiki


def add_wiki_arguments(p):
    p.add_argument("--dump", required=True, type=cli.reads, help="pages-articles dump (.xml, .xml.bz2 or .xml.gz)")
    p.add_argument("--out", required=True, help="output directory (articles.jsonl, manifest.json)")
    p.add_argument("--lead", choices=("first-paragraph", "section"), default="first-paragraph",
                   help="document text: the first paragraph (WikiSpecter thesis) or all prose before the "
                        "first heading")
    p.add_argument("--text", choices=("lead", "full"), default="lead",
                   help="document text: the lead as --lead says (WikiSpecter thesis), or the whole cleaned "
                        "article, the prose of every section (for long-document students, Burian 2023)")
    p.add_argument("--links", choices=("lead", "all"), default="lead",
                   help="cross-references: links in the lead text (thesis) or in the whole article")
    p.add_argument("--min-chars", type=cli.number(int, cli.COUNT_0), default=90,
                   help="drop articles whose cleaned text is shorter (thesis code)")
    p.add_argument("--topic-root", default=topic_labels.FINNISH_ROOT,
                   help="category whose sub-categories are the 'top' labels and theirs the 'second' labels; "
                        "the default is the Finnish general classification the thesis used")
    p.add_argument("--topic-depth", type=cli.number(int, cli.between(0, 1000)), default=None, metavar="N",
                   help="an article takes a topic's label only if one of its categories is the topic's category "
                        "or at most N levels below it (default: no limit). The thesis labels 3,555 articles "
                        "under 10 top-level and 76 second-level topics, about 47 per second-level topic: far "
                        "fewer than an unlimited walk labels on a full dump, which suggests articles filed "
                        "directly in a topic category or close below it (0 or 1); compare the per-label counts "
                        "01 prints (topic_labels.tsv) with the thesis's Table 3.1")
    p.add_argument("--topic-map", default=None, type=cli.reads,
                   help="TSV 'category<TAB>top<TAB>second' to label articles instead of --topic-root "
                        "(for dumps without category pages)")
    p.add_argument("--disambiguation-markers", default=",".join(DISAMBIGUATION_MARKERS),
                   help="comma-separated title endings that mark disambiguation pages")
    p.add_argument("--disambiguation-templates", default=",".join(DISAMBIGUATION_TEMPLATES),
                   help="comma-separated template names that mark disambiguation pages")
    p.add_argument("--workers", type=cli.number(int, cli.WORKERS), default=max(1, (os.cpu_count() or 2) - 1),
                   help="parser processes besides the reading one (0: parse in the reading process); "
                        "the default is the number of CPUs less one")


def add_sentences_arguments(p):
    p.add_argument("--input", required=True, type=cli.reads, help="JSONL of {id, text, key_sentences: [str]}")
    p.add_argument("--out", required=True, help="output directory (sentences.jsonl, manifest.json)")
    p.add_argument("--splitter", choices=("punkt", "punkt-english"), default="punkt",
                   help="untrained Punkt (needs no data) or NLTK's pretrained English Punkt (needs punkt_tab "
                        "data installed)")
    cli.add_max_line(p)


def add_arxiv_arguments(p):
    p.add_argument("--input", required=True, type=cli.reads, help="the snapshot (.json or .json.gz)")
    p.add_argument("--out", required=True, help="output directory (articles.jsonl, manifest.json)")
    p.add_argument("--categories", default="",
                   help="comma-separated category prefixes to keep, e.g. 'cs.,stat.ML' (empty: all papers)")
    cli.add_max_line(p)


def add_source_arguments(p, input_help):
    """The flags dictd, rst, folder and csv share."""
    p.add_argument("--input", required=True, type=cli.reads, help=input_help)
    p.add_argument("--out", required=True, help="output directory (articles.jsonl, manifest.json)")
    p.add_argument("--min-chars", type=cli.number(int, cli.COUNT_0), default=90,
                   help="drop documents whose cleaned text is shorter (as 01 wiki drops short leads)")


def add_csv_arguments(p):
    add_source_arguments(p, "the table (.csv, .csv.gz or .zip)")
    p.add_argument("--id-column", default=None, help="column of document ids (default: row numbers from 1)")
    p.add_argument("--title-column", default="title", help="column of titles")
    p.add_argument("--text-column", default="text", help="column of texts")
    p.add_argument("--label-column", default=None, help="column of topic labels (default: none)")


def add_hf_arguments(p):
    p.add_argument("--dataset", required=True, type=cli.reads,
                   help="a hub dataset's name (read from the hub), or a local save_to_disk folder, .parquet, "
                        ".jsonl/.json or .csv file (plain or .gz), or a folder laid out as a hub dataset's repository")
    p.add_argument("--config", default=None, help="the hub dataset's configuration (e.g. no_ref)")
    p.add_argument("--split", default="train",
                   help="the split to read; a local file is one split, named so (it names rows without an id)")
    p.add_argument("--revision", default="main", help="the hub dataset's branch, tag or commit")
    p.add_argument("--csv-columns", nargs="+", default=None, metavar="NAME",
                   help="the column names of a CSV file without a header row, whose first line is then a row (Zhou et "
                        "al. 2020's pair sets: label text_0 text_1)")
    p.add_argument("--out", required=True, help="output directory (articles.jsonl or pairs.jsonl, manifest.json)")
    p.add_argument("--text-field", nargs="+", default=["text"], metavar="FIELD",
                   help="the field of each document's text; two fields: each row is a pair of documents")
    p.add_argument("--title-field", nargs="+", default=None, metavar="FIELD",
                   help="the field of each document's title, one per --text-field (default: empty titles)")
    p.add_argument("--id-field", nargs="+", default=None, metavar="FIELD",
                   help="the field of each document's id, one per --text-field (default: SPLIT-ROW for a "
                        "document, the start of its text's SHA-256 for a pair's documents)")
    p.add_argument("--label-field", default=None,
                   help="the field of the row's label (a class-label column is written as its class's name)")


def run_wiki(args):
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        settings = WikiSettings(**{f.name: getattr(args, f.name) for f in fields(WikiSettings)})
        reader, labelled, counts = extract_wiki(settings, outputs)
        rows = topic_labels.write_label_counts(outputs, labelled)
        outputs.finish(args, inputs=[args.dump], counts=dict(counts), language=reader.language,
                       topic_labels=[{"top": top, "second": second or None, "articles": n} for top, second, n in rows])
    print(f"{counts['articles']} articles ({counts['pages']} pages, {counts['redirects']} redirects, "
          f"{counts['disambiguation']} disambiguation, {counts['too_short']} too short); "
          f"{counts['links_resolved']} links kept ({counts['links_via_redirect']} through redirects), "
          f"{counts['links_missing']} to missing pages → {os.path.join(args.out, 'articles.jsonl')}")
    if rows:
        print("\n".join(topic_labels.format_label_counts(rows, counts["labelled_top"])))


def run_sentences(args):
    from common.extract.sentences import extract_sentences
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        with outputs.open("sentences.jsonl") as out:
            extract_sentences(args.input, out, args.splitter, counts)
        outputs.finish(args, inputs=[args.input], counts=dict(counts))
    print(f"{counts['articles']} articles, {counts['sentences']} sentences ({counts['key_sentences']} key); "
          f"{counts['dropped_articles']} articles dropped → {os.path.join(args.out, 'sentences.jsonl')}")


def run_arxiv(args):
    from common.extract.arxiv import extract_arxiv
    counts = collections.Counter()
    prefixes = tuple(p.strip() for p in args.categories.split(",") if p.strip())
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        with outputs.open("articles.jsonl") as out:
            extract_arxiv(args.input, out, prefixes, counts)
        outputs.finish(args, inputs=[args.input], counts=dict(counts), language="en")
    print(f"{counts['articles']} articles of {counts['records']} records ({counts['other_categories']} in other "
          f"categories, {counts['empty_abstract']} empty, {counts['withdrawn']} withdrawn, "
          f"{counts['duplicate_abstract']} duplicate abstracts) → {os.path.join(args.out, 'articles.jsonl')}")


def run_source(args):
    """dictd, rst, folder, csv: one reader each, the same output and summary."""
    columns = (args.id_column, args.title_column, args.text_column, args.label_column) if args.command == "csv" \
        else None
    inputs, read = sources.reader(args.command, args.input, args.min_chars, columns)
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        with outputs.open("articles.jsonl") as out:
            read(out, counts)
        outputs.finish(args, inputs=inputs, counts=dict(counts), language="en")
    details = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(counts.items()) if k != "articles")
    print(f"{counts['articles']} articles ({details}) → {os.path.join(args.out, 'articles.jsonl')}")


def run_hf(args):
    from common.extract import hf_source
    fields = hf_source.Fields(args.id_field, args.title_field, args.text_field, args.label_field)
    name = "pairs.jsonl" if fields.pairs else "articles.jsonl"
    counts = collections.Counter()
    with folders.Outputs(args.out, __file__, overwrite=args.overwrite) as outputs:
        split = hf_source.open_split(args.dataset, args.config, args.split, args.revision,
                                     outputs.scratch("datasets-cache"), args.csv_columns)
        with outputs.open(name) as out:
            hf_source.write_rows(split, fields, args.split, out, counts, f"{args.dataset} [{args.split}]")
        outputs.finish(args, inputs=split.files, counts=dict(counts),
                       dataset={**split.record, "rows": counts["rows"]})
    labels = sum(1 for k in counts if k.startswith("label_"))
    print(f"{counts['rows']} rows of {args.dataset} [{args.split}]"
          f"{f', {labels} labels' if labels else ''} → {os.path.join(args.out, name)}")


COMMANDS = {
    "wiki": ("Wikipedia XML dump → articles.jsonl", add_wiki_arguments, run_wiki,
             "Wikipedia XML dump (.xml, .xml.bz2, multistream too) → articles.jsonl."),
    "sentences": ("articles with key sentences → sentences.jsonl", add_sentences_arguments, run_sentences,
                  "Articles {id, text, key_sentences} → sentences.jsonl, split and labelled for key-sentence "
                  "extraction."),
    "arxiv": ("arXiv metadata snapshot → articles.jsonl", add_arxiv_arguments, run_arxiv,
              "arXiv metadata (Kaggle arxiv-metadata-oai-snapshot.json, JSON lines, plain or gzip) → articles.jsonl, "
              "streamed."),
    "dictd": ("a DICT-format dictionary (FOLDOC, the Jargon File) → articles.jsonl",
              lambda p: add_source_arguments(p, "the dictionary's path without suffix (reads INPUT.index and "
                                                "INPUT.dict.dz or INPUT.dict)"), run_source,
              "A dictionary in the DICT server's format (NAME.index + NAME.dict or NAME.dict.dz) → articles.jsonl: "
              "entries, cross-references, categories."),
    "rst": ("reStructuredText sources → articles.jsonl",
            lambda p: add_source_arguments(p, "the folder of sources (read recursively)"), run_source,
            "reStructuredText sources (.rst, or the .rst.txt copies built Sphinx documentation ships) under a folder "
            "→ articles.jsonl, one document a file."),
    "folder": ("label folders of text files → articles.jsonl",
               lambda p: add_source_arguments(p, "the folder of label folders"), run_source,
               "A folder whose sub-folders are labels, each holding *.txt documents (first non-empty line the title) "
               "→ articles.jsonl."),
    "csv": ("a CSV table → articles.jsonl", add_csv_arguments, run_source,
            "A CSV table with a header row (plain, gzip, or the one .csv inside a .zip) → articles.jsonl, one "
            "document a row."),
    "hf": ("a Hugging Face dataset (hub, save_to_disk, parquet, JSON lines, CSV) → articles.jsonl or pairs.jsonl",
           add_hf_arguments, run_hf,
           "One split of a dataset as Hugging Face datasets reads it, streamed → articles.jsonl (one document a "
           "row) or pairs.jsonl (two --text-field names: two documents and a label a row)."),
}


def main(argv=None):
    return cli.dispatch(__doc__, COMMANDS, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
