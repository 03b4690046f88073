"""Step 1: raw corpora → documents in the contract format.

  python 01_extract.py wiki --dump fiwiki-latest-pages-articles.xml.bz2 --out work/fi
      Wikipedia dump → articles.jsonl (cleaned lead, links resolved through redirects to page ids, categories,
      topic labels). Defaults follow the WikiSpecter thesis; --text full keeps whole articles.

  python 01_extract.py sentences --input articles.jsonl --out work/keysent
      Articles with annotated key sentences → sentences.jsonl (key-sentence extraction thesis).

  python 01_extract.py arxiv --input arxiv-metadata-oai-snapshot.json.gz --out work/arxiv [--categories cs.,stat.ML]
      arXiv metadata (Kaggle snapshot, JSON lines, plain or gzip) → articles.jsonl: the abstract as text, the
      title, categories and topic labels (paper search).
"""

import collections
import os
import sys

from common import cli, io
from common.data import topic_labels
from common.data.wiki import DISAMBIGUATION_MARKERS, DISAMBIGUATION_TEMPLATES, extract_wiki


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    wiki = sub.add_parser("wiki", formatter_class=cli.HelpFormatter,
                          help="Wikipedia XML dump → articles.jsonl",
                          description="Wikipedia XML dump (.xml, .xml.bz2, multistream too) → articles.jsonl.")
    wiki.add_argument("--dump", required=True, help="pages-articles dump (.xml, .xml.bz2 or .xml.gz)")
    wiki.add_argument("--out", required=True, help="output directory (articles.jsonl, manifest.json)")
    wiki.add_argument("--lead", choices=("first-paragraph", "section"), default="first-paragraph",
                      help="document text: the first paragraph (WikiSpecter thesis) or all prose before the "
                           "first heading")
    wiki.add_argument("--text", choices=("lead", "full"), default="lead",
                      help="document text: the lead as --lead says (WikiSpecter thesis), or the whole cleaned "
                           "article, the prose of every section (for long-document students, Burian 2023)")
    wiki.add_argument("--links", choices=("lead", "all"), default="lead",
                      help="cross-references: links in the lead text (thesis) or in the whole article")
    wiki.add_argument("--min-chars", type=int, default=90,
                      help="drop articles whose cleaned text is shorter (thesis code)")
    wiki.add_argument("--topic-root", default=topic_labels.FINNISH_ROOT,
                      help="category whose sub-categories are the 'top' labels and theirs the 'second' labels; "
                           "the default is the Finnish general classification the thesis used")
    wiki.add_argument("--topic-depth", type=int, default=None, metavar="N",
                      help="an article takes a topic's label only if one of its categories is the topic's category "
                           "or at most N levels below it (default: no limit). The thesis labels 3,555 articles "
                           "under 10 top-level and 76 second-level topics, about 47 per second-level topic: far "
                           "fewer than an unlimited walk labels on a full dump, which suggests articles filed "
                           "directly in a topic category or close below it (0 or 1); compare the per-label counts "
                           "01 prints (topic_labels.tsv) with the thesis's Table 3.1")
    wiki.add_argument("--topic-map", default=None,
                      help="TSV 'category<TAB>top<TAB>second' to label articles instead of --topic-root "
                           "(for dumps without category pages)")
    wiki.add_argument("--disambiguation-markers", default=",".join(DISAMBIGUATION_MARKERS),
                      help="comma-separated title endings that mark disambiguation pages")
    wiki.add_argument("--disambiguation-templates", default=",".join(DISAMBIGUATION_TEMPLATES),
                      help="comma-separated template names that mark disambiguation pages")
    wiki.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                      help="parser processes besides the reading one (0: parse in the reading process); "
                           "the default is the number of CPUs less one")

    sentences = sub.add_parser("sentences", formatter_class=cli.HelpFormatter,
                               help="articles with key sentences → sentences.jsonl",
                               description="Articles {id, text, key_sentences} → sentences.jsonl, split and "
                                           "labelled for key-sentence extraction.")
    sentences.add_argument("--input", required=True, help="JSONL of {id, text, key_sentences: [str]}")
    sentences.add_argument("--out", required=True, help="output directory (sentences.jsonl, manifest.json)")
    sentences.add_argument("--splitter", choices=("punkt", "punkt-english"), default="punkt",
                           help="untrained Punkt (needs no data) or NLTK's pretrained English Punkt (needs punkt_tab "
                                "data installed)")
    cli.add_max_line(sentences)

    arxiv = sub.add_parser("arxiv", formatter_class=cli.HelpFormatter,
                           help="arXiv metadata snapshot → articles.jsonl",
                           description="arXiv metadata (Kaggle arxiv-metadata-oai-snapshot.json, JSON lines, plain "
                                       "or gzip) → articles.jsonl, streamed.")
    arxiv.add_argument("--input", required=True, help="the snapshot (.json or .json.gz)")
    arxiv.add_argument("--out", required=True, help="output directory (articles.jsonl, manifest.json)")
    arxiv.add_argument("--categories", default="",
                       help="comma-separated category prefixes to keep, e.g. 'cs.,stat.ML' (empty: all papers)")
    cli.add_max_line(arxiv)
    return parser.parse_args(argv)


def run_wiki(args):
    cli.check(args, {"--min-chars": cli.AT_LEAST_0, "--topic-depth": cli.AT_LEAST_0, "--workers": cli.AT_LEAST_0})
    started = io.now()
    with io.Outputs(args.out, __file__) as outputs:
        reader, labelled, counts = extract_wiki(args, outputs)
        rows = topic_labels.label_counts(labelled)
        if rows:
            with outputs.open("topic_labels.tsv") as f:
                f.write("top\tsecond\tarticles\n")
                f.writelines(f"{top}\t{second}\t{n}\n" for top, second, n in rows)
        outputs.write_manifest(io.manifest(
            __file__, args, started, inputs=[args.dump], counts=dict(counts), language=reader.language,
            topic_labels=[{"top": top, "second": second or None, "articles": n} for top, second, n in rows]))
    print(f"{counts['articles']} articles ({counts['pages']} pages, {counts['redirects']} redirects, "
          f"{counts['disambiguation']} disambiguation, {counts['too_short']} too short); "
          f"{counts['links_resolved']} links kept ({counts['links_via_redirect']} through redirects), "
          f"{counts['links_missing']} to missing pages → {os.path.join(args.out, 'articles.jsonl')}")
    if rows:
        print(f"articles per topic label ({counts['labelled_top']} labelled; a top-level label counts all its "
              "articles, its second-level labels follow; also in topic_labels.tsv):")
        print("\n".join(topic_labels.format_label_counts(rows)))


def run_sentences(args):
    from common.data.sentences import extract_sentences
    started = io.now()
    counts = collections.Counter()
    with io.Outputs(args.out, __file__) as outputs:
        with outputs.open("sentences.jsonl") as out:
            extract_sentences(args.input, out, args.splitter, counts)
        outputs.write_manifest(io.manifest(__file__, args, started, inputs=[args.input], counts=dict(counts)))
    print(f"{counts['articles']} articles, {counts['sentences']} sentences ({counts['key_sentences']} key); "
          f"{counts['dropped_articles']} articles dropped → {os.path.join(args.out, 'sentences.jsonl')}")


def run_arxiv(args):
    from common.data.arxiv import extract_arxiv
    started = io.now()
    counts = collections.Counter()
    prefixes = tuple(p.strip() for p in args.categories.split(",") if p.strip())
    with io.Outputs(args.out, __file__) as outputs:
        with outputs.open("articles.jsonl") as out:
            extract_arxiv(args.input, out, prefixes, counts)
        outputs.write_manifest(io.manifest(__file__, args, started, inputs=[args.input], counts=dict(counts),
                                           language="en"))
    print(f"{counts['articles']} articles of {counts['records']} records ({counts['other_categories']} in other "
          f"categories, {counts['empty_abstract']} empty, {counts['withdrawn']} withdrawn, "
          f"{counts['duplicate_abstract']} duplicate abstracts) → {os.path.join(args.out, 'articles.jsonl')}")


def main(argv=None):
    args = parse_args(argv)
    if hasattr(args, "max_line_mb"):
        cli.set_max_line(args)
    {"wiki": run_wiki, "sentences": run_sentences, "arxiv": run_arxiv}[args.command](args)


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
