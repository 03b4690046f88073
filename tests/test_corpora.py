"""The corpus readers behind the reproductions (01 dictd, rst, folder, csv; 02 corpus) on small inputs written
here, and a masked-LM model trained from a configuration with a vocabulary learnt from its corpus."""

import gzip
import json
import zipfile

import pytest

from conftest import corpus_text, read_jsonl, run_main, script_error, script_main, train_in_process

from common.extract.dictd import B64, b64_number


def b64(n):
    digits = ""
    while True:
        digits = B64[n % 64] + digits
        n //= 64
        if not n:
            return digits


def write_dictd(folder, entries, compress=True):
    """A DICT dictionary: ``entries`` is ``[(headwords, text)]``; every headword points at its entry's text, the
    index sorted by headword as dictfmt writes it."""
    body, rows = b"", []
    for heads, text in entries:
        data = text.encode("utf-8")
        rows += [(h.lower(), len(body), len(data)) for h in heads]
        body += data
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dict.index").write_text("".join(f"{h}\t{b64(o)}\t{b64(n)}\n" for h, o, n in sorted(rows)),
                                       encoding="utf-8")
    if compress:
        (folder / "dict.dict.dz").write_bytes(gzip.compress(body))
    else:
        (folder / "dict.dict").write_bytes(body)
    return folder / "dict"


LONG = "a definition long enough to be kept, which says what the term means and where it comes from"
ENTRIES = [
    (["00-database-short"], "00-database-short\n     A test dictionary\n"),
    (["Big iron", "heavy metal"], "big iron\nheavy metal\n\n   <jargon, hardware> Large {mainframes}, not {PDP-11}s;\n"
                                  f"   see {{Bigloo}} and {{the FAQ (faq.html)}}. {LONG}.\n\n   (1995-03-07)\n"),
    (["mainframe"], f"mainframe\n\n   1. <computer> A {{big iron}} machine. {LONG}.\n\n   2. <jargon> Old hat.\n"),
    (["PDP-11"], f"PDP-11\n\n   <computer> A minicomputer, unlike {{mainframes}} or {{big iron}}. {LONG}.\n"),
    (["Bigloo"], "Bigloo\n\n   {Scheme}\n"),
    (["Scheme"], f"Scheme\n\n   <language> A Lisp dialect, see {{Bigloo}}, {{lisp}} and {{Nowhere}}. {LONG}.\n"),
    (["lisp"], "lisp\n\n   <language> Too short.\n"),
]


def test_dictd_entries_become_linked_categorised_articles(tmp_path):
    source = write_dictd(tmp_path / "src", ENTRIES)
    script_main("01_extract.py")(["dictd", "--input", str(source), "--out", str(tmp_path / "out")])
    articles = read_jsonl(tmp_path / "out" / "articles.jsonl")
    assert articles == [
        {"id": "big_iron", "title": "big iron",
         "text": f"Large mainframes, not PDP-11s; see Bigloo and the FAQ. {LONG}.",
         "links": ["mainframe", "pdp-11", "scheme"], "categories": ["jargon", "hardware"],
         "labels": {"top": "jargon"}},
        {"id": "mainframe", "title": "mainframe", "text": f"1. A big iron machine. {LONG}. 2. Old hat.",
         "links": ["big_iron"], "categories": ["computer", "jargon"], "labels": {"top": "computer"}},
        {"id": "pdp-11", "title": "PDP-11", "text": f"A minicomputer, unlike mainframes or big iron. {LONG}.",
         "links": ["mainframe", "big_iron"], "categories": ["computer"], "labels": {"top": "computer"}},
        {"id": "scheme", "title": "Scheme", "text": f"A Lisp dialect, see Bigloo, lisp and Nowhere. {LONG}.",
         "links": [], "categories": ["language"], "labels": {"top": "language"}},
    ]
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    # {PDP-11}s is a plural of a headword; {Bigloo} redirects to Scheme (itself, from Scheme: dropped); {the FAQ
    # (faq.html)} is outside the dictionary; {lisp} names an entry too short to keep; {Nowhere} names none
    assert {k: counts[k] for k in ("entries", "redirects", "too_short", "links_external", "links_missing",
                                   "links_to_dropped", "links_via_plural", "links_via_redirect", "articles")} == {
        "entries": 6, "redirects": 1, "too_short": 1, "links_external": 1, "links_missing": 1,
        "links_to_dropped": 1, "links_via_plural": 2, "links_via_redirect": 1, "articles": 4}


def test_dictd_reads_an_uncompressed_body_and_refuses_a_bad_index_in_one_line(tmp_path):
    source = write_dictd(tmp_path / "src", ENTRIES[:3], compress=False)
    script_main("01_extract.py")(["dictd", "--input", str(source), "--out", str(tmp_path / "out")])
    assert [a["id"] for a in read_jsonl(tmp_path / "out" / "articles.jsonl")] == ["big_iron", "mainframe"]
    (tmp_path / "src" / "dict.index").write_text("mainframe\tA!\tB\n", encoding="utf-8")
    assert script_error("01_extract.py", "dictd", "--input", source, "--out", tmp_path / "bad") == \
        f"error: {source}.index:1: 'A!' is not a DICT base-64 number"
    (tmp_path / "src" / "dict.index").write_text(f"mainframe\tA\t{b64(10 ** 6)}\n", encoding="utf-8")
    assert "lies past the end of" in script_error("01_extract.py", "dictd", "--input", source, "--out",
                                                  tmp_path / "bad")
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
    assert b64_number("B6qe", "x") == ((1 * 64 + 58) * 64 + 42) * 64 + 30


RST = """\
:mod:`json` --- JSON encoder and decoder
========================================

.. module:: json
   :synopsis: Encode and decode the JSON format.

**Source code:** :source:`Lib/json/__init__.py`

--------------

JSON, specified by
:rfc:`7159`, is a `lightweight <https://json.org>`_ format [#errata]_.

Encoding basic objects::

    >>> import json
    >>> json.dumps([1])

.. function:: dumps(obj, *, skipkeys=False, \\
                    indent=None)

   Serialize *obj* with the :ref:`conversion table <py-to-json-table>`; see
   :func:`~json.loads` and ``dump``.

   .. versionchanged:: 3.6
      All optional parameters are keyword-only.

.. code-block:: python

   print("not prose")

.. _json-commandline:

>>> json.loads('[1]')
[1]

=====  ======
JSON   Python
=====  ======
"""


def test_rst_sources_keep_prose_titles_and_role_text_and_drop_code_and_markup(tmp_path):
    root = tmp_path / "_sources"
    (root / "library").mkdir(parents=True)
    (root / "library" / "json.rst.txt").write_text(RST, encoding="utf-8")
    (root / "library" / "empty.rst.txt").write_text("Title\n=====\n\n.. toctree::\n\n   json\n", encoding="utf-8")
    (root / "notes.txt").write_text("not a source file " * 20, encoding="utf-8")
    script_main("01_extract.py")(["rst", "--input", str(root), "--out", str(tmp_path / "out")])
    assert read_jsonl(tmp_path / "out" / "articles.jsonl") == [{
        "id": "library/json", "title": "json --- JSON encoder and decoder",
        "text": "json --- JSON encoder and decoder Source code: Lib/json/__init__.py JSON, specified by RFC 7159, is "
                "a lightweight format. Encoding basic objects: Serialize *obj* with the conversion table; see loads "
                "and dump. All optional parameters are keyword-only. JSON Python",
        "links": [], "labels": {"top": "library"}}]
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert (counts["files"], counts["too_short"], counts["articles"]) == (2, 1, 1)


def test_label_folders_become_labelled_articles_and_invalid_utf8_is_replaced_and_counted(tmp_path):
    root = tmp_path / "bbc"
    for label, name, data in (("tech", "001.txt", "Ink helps drive democracy\n\nThe Kyrgyz Republic is using ink. "
                                                  * 1 + "More text here to pass the minimum length of a text."),
                              ("sport", "002.txt", b"Title\n\nCost \xa33m, paid in cash by the club on the day of "
                                                   b"the transfer deadline."),
                              ("sport", "003.txt", "Short\n\nToo short."),
                              ("sport", "readme.md", "not a document")):
        (root / label).mkdir(parents=True, exist_ok=True)
        path = root / label / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    script_main("01_extract.py")(["folder", "--input", str(root), "--out", str(tmp_path / "out"), "--min-chars", "40"])
    assert read_jsonl(tmp_path / "out" / "articles.jsonl") == [
        {"id": "sport/002", "title": "Title",
         "text": "Cost \ufffd3m, paid in cash by the club on the day of the transfer deadline.", "links": [],
         "categories": ["sport"], "labels": {"top": "sport"}},
        {"id": "tech/001", "title": "Ink helps drive democracy",
         "text": "The Kyrgyz Republic is using ink. More text here to pass the minimum length of a text.",
         "links": [], "categories": ["tech"], "labels": {"top": "tech"}}]
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert (counts["invalid_utf8_files"], counts["too_short"], counts["files"]) == (1, 1, 3)


def test_a_csv_table_in_a_zip_becomes_articles_and_a_missing_column_is_one_line(tmp_path):
    table = ('article_id,title,text,source\n'
             '7,"Senate votes, 51-50","The Senate voted on the nomination ""this afternoon"", splitting evenly.",abc\n'
             '8,Short one,Too short,bbc\n'
             'a b,Second,"A second article, long enough to keep in the corpus.",cnn\n')
    with zipfile.ZipFile(tmp_path / "news.zip", "w") as archive:
        archive.writestr("News.csv", table)
    script_main("01_extract.py")(["csv", "--input", str(tmp_path / "news.zip"), "--out", str(tmp_path / "out"),
                                  "--id-column", "article_id", "--label-column", "source", "--min-chars", "40"])
    assert read_jsonl(tmp_path / "out" / "articles.jsonl") == [
        {"id": "7", "title": "Senate votes, 51-50",
         "text": 'The Senate voted on the nomination "this afternoon", splitting evenly.', "links": [],
         "categories": ["abc"], "labels": {"top": "abc"}},
        {"id": "a_b", "title": "Second", "text": "A second article, long enough to keep in the corpus.", "links": [],
         "categories": ["cnn"], "labels": {"top": "cnn"}}]
    (tmp_path / "plain.csv").write_text(table, encoding="utf-8")
    assert script_error("01_extract.py", "csv", "--input", tmp_path / "plain.csv", "--out", tmp_path / "bad",
                        "--text-column", "body") == \
        f"error: {tmp_path / 'plain.csv'}: no column 'body' (--text-column); the columns are article_id, title, " \
        "text, source"
    (tmp_path / "extra.csv").write_text('id,title,text\n1,T,"' + "x" * 100 + '",surplus\n', encoding="utf-8")
    assert script_error("01_extract.py", "csv", "--input", tmp_path / "extra.csv", "--out", tmp_path / "bad") == \
        f"error: {tmp_path / 'extra.csv'}:2: more fields than the header has columns"


def test_corpus_joins_sources_under_prefixed_ids_and_drops_repeated_texts(tmp_path):
    def write(name, rows):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path
    a = write("a.jsonl", [{"id": "1", "title": "One", "text": "Same  text", "links": []},
                          {"id": "2", "title": "Two", "text": "Other text", "links": []}])
    b = write("b.jsonl", [{"id": "1", "title": "Uno", "text": "same text", "links": []},
                          {"id": "3", "title": "Tres", "text": "Third text", "links": []}])
    run_main("02_build_graph.py", "corpus", "--articles", f"a={a}", "--articles", f"b={b}", "--out", tmp_path / "lm")
    assert read_jsonl(tmp_path / "lm" / "docs.jsonl") == [
        {"id": "a:1", "title": "One", "text": "Same  text"}, {"id": "a:2", "title": "Two", "text": "Other text"},
        {"id": "b:3", "title": "Tres", "text": "Third text"}]
    assert script_error("02_build_graph.py", "corpus", "--articles", f"a={a}", f"a={b}", "--out",
                        tmp_path / "x") == f"error: --articles 'a={b}': NAME must be unique, 1-40 letters, digits, " \
                                           "'_', '-', '.'"
    spaced = write("c.jsonl", [{"id": "page 4", "title": "Four", "text": "Fourth text", "links": []}])
    assert script_error("02_build_graph.py", "corpus", "--articles", f"c={spaced}", "--out", tmp_path / "y") == (
        f"error: {spaced}:1: id \"page 4\" is empty or holds whitespace or a control character (docs/contract.md)")


def test_a_wordpiece_vocabulary_is_learnt_once_and_read_from_the_cache_after(tmp_path):
    from common.models.vocabulary import train_wordpiece
    texts = corpus_text(3, 200)
    first = train_wordpiece(texts, 300, cache_dir=tmp_path)
    assert 200 < len(first) <= 300 and first.tokenize("Kaupunki MAA") == ["kaupunki", "maa"]
    assert first.all_special_tokens == ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"]
    cached = train_wordpiece(texts, 300, cache_dir=tmp_path)
    assert cached.get_vocab() == first.get_vocab() and len(list(tmp_path.iterdir())) == 1
    # learnt again (tokenizers' learner breaks ties in hash-map order): the same words, near the same pieces
    again = train_wordpiece(texts, 300, cache_dir=None)
    assert len(set(again.get_vocab()) & set(first.get_vocab())) >= 0.9 * len(first)
    other = train_wordpiece(texts[:100], 300, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 2 and other.get_vocab() != first.get_vocab()


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    (root / "docs.jsonl").write_text("".join(json.dumps({"id": str(i), "title": "", "text": t}) + "\n"
                                             for i, t in enumerate(corpus_text(5, 300))), encoding="utf-8")
    return root


def test_mlm_from_a_configuration_learns_a_vocabulary_and_saves_a_model_that_loads_as_any_model(lm_data, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer
    argv = ["--objective", "mlm", "--data", str(lm_data), "--out", str(tmp_path / "run"), "--model-type", "bert",
            "--config-overrides", "num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=64,"
            "max_position_embeddings=64", "--vocab-size", "200", "--max-length", "32", "--batch-size", "8",
            "--max-steps", "6", "--eval-every", "3", "--checkpoint-every", "0", "--lr", "1e-3", "--log-every", "2",
            "--cache-dir", str(tmp_path / "cache")]
    train_in_process(argv)
    log = read_jsonl(tmp_path / "run" / "log.jsonl")
    validations = [r for r in log if "val_loss" in r]
    assert [r["step"] for r in validations] == [3, 6]
    assert all(0 <= r["val_accuracy"] <= 1 for r in validations) and validations[1]["val_loss"] < validations[0][
        "val_loss"]
    model, tokenizer = AutoModel.from_pretrained(tmp_path / "run" / "model"), AutoTokenizer.from_pretrained(
        tmp_path / "run" / "model")
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (2, 32)
    assert model.config.vocab_size == len(tokenizer) <= 200 and tokenizer.tokenize("Kaupunki")[0] == "kaupunki"
    st = SentenceTransformer(str(tmp_path / "run" / "model"), device="cpu")
    assert st.encode(["kaupunki maa"]).shape == (1, 32)


@pytest.mark.parametrize("args, expected", [
    ([], "--model is required (or --model-type / --config-name to train a new model)"),
    (["--model", "m", "--model-type", "bert"], "--model starts from a trained model, --model-type / --config-name "
                                               "from a new one: give one of them"),
    (["--model-type", "nonsense"], "--model-type nonsense: not an architecture transformers knows (e.g. bert, "
                                   "roberta, electra)"),
    (["--model-type", "bert", "--config-overrides", "hidden_size"],
     "--config-overrides 'hidden_size': expected KEY=VALUE,... (e.g. num_hidden_layers=4,hidden_size=256)"),
    (["--model-type", "bert", "--config-overrides", "hidden=4"],
     "--config-overrides 'hidden=4': key hidden isn't in the original config dict"),
    (["--model-type", "bert", "--vocab-size", "5"], "argument --vocab-size: 5: must be between 100 and 1,000,000"),
])
def test_mlm_model_choices_that_cannot_work_are_one_line(lm_data, tmp_path, args, expected):
    message = script_error("03_train.py", "--objective", "mlm", "--data", lm_data, "--out", tmp_path / "run", *args)
    assert message.startswith(f"error: {expected}"), message


def test_a_reproduction_table_puts_the_papers_figure_beside_ours_and_says_how_each_model_embedded():
    import importlib.util
    import os
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("compare", os.path.join(ROOT, "reproduce", "compare.py"))
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    metrics = {"base": {"crossref": {"map": 0.5, "ndcg": 0.6}, "topics.top": {"f1": 0.4, "accuracy": 0.45}},
               "lexical": {"crossref": {"map": 0.25, "ndcg": 0.3}}}
    embedding = {"base": {"pooling": "cls", "normalize": False, "max_length": 128}}
    assert compare.table("wikispecter", metrics, [("base", "FinBERT"), ("lexical", None)], embedding).splitlines()[:4] \
        == ["| model | embedded as | paper row | crossref MAP ours | paper | crossref nDCG ours | paper | "
            "topic F1 ours | paper | topic accuracy ours | paper |",
            "|---|---|---|" + "---:|---:|" * 4,
            "| base | cls, 128 | FinBERT | 50.00 | 48.92 | 60.00 | – | 40.00 | 59.86 | 45.00 | – |",
            "| lexical | – | – | 25.00 | – | 30.00 | – | – | – | – | – |"]


def test_a_reproduction_row_may_name_a_model_that_holds_an_equals_sign(tmp_path, capsys):
    """05 names a set of seeds "runs (n=5)"; --row "runs (n=5)=fine-tuned" splits at the last "=" and a name alone
    stays whole."""
    import importlib.util
    import json
    import os
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("compare", os.path.join(ROOT, "reproduce", "compare.py"))
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"untuned": {"keysent": {"arp": 0.5}},
                                "runs (n=5)": {"keysent": {"arp": 0.9, "arp_2sd": 0.05}}}), encoding="utf-8")
    compare.main(["keysent", str(path), "--row", "untuned=untuned", "runs (n=5)=fine-tuned", "runs (n=5)"])
    assert capsys.readouterr().out.splitlines()[2:5] == [
        "| untuned | – | untuned | 50.00 | 48.00 | – | – |",
        "| runs (n=5) | – | fine-tuned | 90.00 | 80.00 | 5.00 | – |",
        "| runs (n=5) | – | – | 90.00 | – | 5.00 | – |"]
