"""01_extract.py wiki: articles.jsonl from small dumps, its main in this process; as a process of its own where its exit
status is the subject (a missing dump, SIGTERM)."""

import bz2
import json
import os

import pytest

from conftest import ENGLISH_NAMESPACES, one_error_line, read_jsonl, run_main, run_script, script_error

LONG = " Tämä lause on täytettä, jotta johdanto on tarpeeksi pitkä mukaan otettavaksi aineistoon."

FINNISH_PAGES = [
    (1, "Amsterdam", 0, "{{Kaupunki|nimi=Amsterdam}}\n'''Amsterdam''' on [[Alankomaat|Alankomaiden]] "
                        "[[pääkaupunki]] ja [[Hollanti|Hollannin]] suurin kaupunki.<ref>Lähde</ref>" + LONG +
     "\n\nToinen kappale: [[Rotterdam]].\n== Historia ==\n[[Haarlem]]\n[[Luokka:Alankomaiden kaupungit]]"),
    (2, "Alankomaat", 0, "'''Alankomaat''' on maa, jonka pääkaupunki on [[Amsterdam]] ([[amsterdam|Amsterdam]]), "
                         "ei [[Alankomaat|itse]] eikä [[Eioleolemassa]], vaan [[:Luokka:Kaupungit|kaupungit]]."
     + LONG + "\n[[Luokka:Maantiede]]"),
    (3, "Pääkaupunki", 0, "'''Pääkaupunki''' on valtion hallinnollinen keskus, kuten [[Kehä A]] tai "
                          "[[Hollanti|Hollannissa]]." + LONG +
     "\n[[Luokka:Fysiikka]] [[Luokka:Alankomaiden kaupungit]]"),
    (4, "Hollanti", 0, "#OHJAUS [[Alankomaat maa]]", "Alankomaat maa"),
    (5, "Alankomaat maa", 0, "#OHJAUS [[Alankomaat]]", "Alankomaat"),
    (6, "Kehä A", 0, "#OHJAUS [[Kehä B]]", "Kehä B"),
    (7, "Kehä B", 0, "#OHJAUS [[Kehä A]]", "Kehä A"),
    (8, "Merkurius (täsmennyssivu)", 0, "'''Merkurius''' voi tarkoittaa: [[Merkurius (planeetta)]]." + LONG),
    (9, "Mars", 0, "'''Mars''' voi tarkoittaa planeettaa tai jumalaa." + LONG + "\n{{täsmennyssivu}}"),
    (10, "Lyhyt", 0, "'''Lyhyt''' on lyhyt [[Amsterdam|artikkeli]]."),
    (11, "Luokka:Alankomaiden kaupungit", 14, "[[Luokka:Kaupungit]]"),
    (12, "Luokka:Kaupungit", 14, "[[Luokka:Maantiede]]"),
    (13, "Luokka:Maantiede", 14, "[[Luokka:Yleinen wikiluokitusjärjestelmä]]"),
    (14, "Luokka:Tiede", 14, "[[Luokka:Yleinen wikiluokitusjärjestelmä]]"),
    (15, "Luokka:Fysiikka", 14, "[[Luokka:Tiede]]"),
    (16, "Luokka:Sykli A", 14, "[[Luokka:Sykli B]] [[Luokka:Kaupungit]]"),
    (17, "Luokka:Sykli B", 14, "[[Luokka:Sykli A]]"),
    (18, "Tiedosto:Kartta.png", 6, "Kartta"),
    (20, "Punainen planeetta", 0, "#OHJAUS [[Mars]]", "Mars"),
    (19, "Rotterdam", 0, "'''Rotterdam''' on satamakaupunki, lähellä [[Amsterdam]]ia ([[Lyhyt]], "
                         "[[Punainen planeetta]])." + LONG +
     "\n[[Luokka:Sykli B]]"),
]


def extract(tmp_path, dump, *flags):
    out = tmp_path / "out"
    proc = run_main("01_extract.py", "wiki", "--dump", dump, "--out", out, *flags)
    return read_jsonl(out / "articles.jsonl"), json.loads((out / "manifest.json").read_text()), proc


def test_finnish_dump_gives_contract_articles(tmp_path, write_dump):
    articles, manifest, _ = extract(tmp_path, write_dump(FINNISH_PAGES, name="fi.xml.bz2"), "--workers", "0")
    by_title = {a["title"]: a for a in articles}
    assert list(by_title) == ["Amsterdam", "Alankomaat", "Pääkaupunki", "Rotterdam"]
    assert by_title["Amsterdam"] == {
        "id": "1", "title": "Amsterdam",
        "text": "Amsterdam on Alankomaiden pääkaupunki ja Hollannin suurin kaupunki." + LONG,
        "links": ["2", "3"],  # Hollanti → Alankomaat maa → Alankomaat: a redirect chain, deduplicated
        "categories": ["Alankomaiden kaupungit"],
        "labels": {"top": "Maantiede", "second": "Kaupungit"}}
    # duplicate, self, missing and other-namespace links are dropped
    assert by_title["Alankomaat"]["links"] == ["1"]
    assert by_title["Alankomaat"]["labels"] == {"top": "Maantiede"}
    # a redirect cycle resolves to nothing, a chain to its end; the nearest labelled category wins
    assert by_title["Pääkaupunki"]["links"] == ["2"]
    assert by_title["Pääkaupunki"]["labels"] == {"top": "Tiede", "second": "Fysiikka"}
    # a category cycle is walked safely
    assert by_title["Rotterdam"]["labels"] == {"top": "Maantiede", "second": "Kaupungit"}
    counts = manifest["counts"]
    assert counts["pages"] == 20 and counts["redirects"] == 5 and counts["other_namespace"] == 8
    assert counts["disambiguation"] == 2 and counts["too_short"] == 1 and counts["articles"] == 4
    assert counts["links_via_redirect"] == 1 and counts["links_missing"] == 1 and counts["links_self"] == 1
    assert counts["links_duplicate"] == 2 and counts["links_broken_redirect"] == 1 and counts["links_dropped"] == 2
    assert counts["links_other_namespace"] == 1
    assert manifest["language"] == "fi" and manifest["script"] == "01_extract.py"
    assert set(manifest["inputs"]) == {str(tmp_path / "fi.xml.bz2")}


def test_topic_depth_limits_labels_and_per_label_counts_are_stored(tmp_path, write_dump):
    articles, manifest, proc = extract(tmp_path, write_dump(FINNISH_PAGES), "--workers", "0", "--topic-depth", "1")
    labels = {a["title"]: a.get("labels") for a in articles}
    # Amsterdam's category is one level below Kaupungit; Rotterdam's (Sykli B) two, so it loses its label
    assert labels == {"Amsterdam": {"top": "Maantiede", "second": "Kaupungit"}, "Alankomaat": {"top": "Maantiede"},
                      "Pääkaupunki": {"top": "Tiede", "second": "Fysiikka"}, "Rotterdam": None}
    assert (tmp_path / "out" / "topic_labels.tsv").read_text() == (
        "top\tsecond\tarticles\nMaantiede\t\t2\nMaantiede\tKaupungit\t1\nTiede\t\t1\nTiede\tFysiikka\t1\n")
    assert manifest["topic_labels"][:2] == [{"top": "Maantiede", "second": None, "articles": 2},
                                            {"top": "Maantiede", "second": "Kaupungit", "articles": 1}]
    assert ("  Maantiede          2\n    Kaupungit        1\n  Tiede              1\n    Fysiikka         1\n"
            in proc.stdout)
    shallow, _, _ = extract(tmp_path / "0", write_dump(FINNISH_PAGES), "--workers", "0", "--topic-depth", "0")
    assert [a.get("labels") for a in shallow] == [None, {"top": "Maantiede"}, {"top": "Tiede", "second": "Fysiikka"},
                                                  None]


def test_links_all_and_section_lead(tmp_path, write_dump):
    articles, _, _ = extract(tmp_path, write_dump(FINNISH_PAGES), "--links", "all", "--lead", "section",
                             "--workers", "0")
    amsterdam = articles[0]
    assert amsterdam["text"].endswith(LONG.strip() + " Toinen kappale: Rotterdam.")
    assert amsterdam["links"] == ["2", "3", "19"]  # Haarlem does not exist


def test_parallel_workers_write_the_same_file(tmp_path, write_dump):
    # enough articles for several worker batches (64 pages each), so results must be put back in order
    extra = [(100 + i, f"Sivu {i}", 0, f"'''Sivu {i}''' viittaa sivuun [[Sivu {(i * 7) % 150}]]." + LONG)
             for i in range(150)]
    dump = write_dump(FINNISH_PAGES + extra)
    serial, _, _ = extract(tmp_path / "a", dump, "--workers", "0")
    parallel, _, _ = extract(tmp_path / "b", dump, "--workers", "2")
    assert serial == parallel and len(serial) == 154


def test_topic_map_replaces_the_category_tree(tmp_path, write_dump):
    tsv = tmp_path / "map.tsv"
    tsv.write_text("# comment\nMaantiede\tPaikat\t\nAlankomaiden kaupungit\tPaikat\tKaupungit\n", encoding="utf-8")
    articles, _, _ = extract(tmp_path, write_dump(FINNISH_PAGES), "--topic-map", tsv, "--workers", "0")
    labels = {a["title"]: a.get("labels") for a in articles}
    assert labels == {"Amsterdam": {"top": "Paikat", "second": "Kaupungit"}, "Alankomaat": {"top": "Paikat"},
                      "Pääkaupunki": {"top": "Paikat", "second": "Kaupungit"}, "Rotterdam": None}


def test_english_namespaces_and_disambiguation_template(tmp_path, write_dump):
    pages = [
        (1, "Paris", 0, "[[File:Paris.jpg|thumb|The [[Seine]].]]'''Paris''' is the capital of [[France]], on the "
                        "[[Seine_River#Course|Seine]]." + " It is a large city with a long history and much art." +
         "\n[[Category:Capitals]] [[fr:Paris]]"),
        (2, "France", 0, "'''France''' is a country in Western Europe whose capital and largest city is [[Paris]], "
                         "a city on a river."),
        (3, "Seine River", 0, "'''Seine River''' is a river in France that flows through [[Paris]] to the sea at "
                              "Le Havre, in Normandy."),
        (4, "Seine", 0, "#REDIRECT [[Seine River]]", "Seine River"),
        (5, "Mercury", 0, "'''Mercury''' may refer to a planet, an element or a god, among many other things in "
                          "this world.\n{{disambiguation|geo}}"),
        (6, "Category:Capitals", 14, "[[Category:Cities]]"),
    ]
    articles, manifest, _ = extract(tmp_path, write_dump(pages, namespaces=ENGLISH_NAMESPACES, lang="en"),
                                    "--workers", "0", "--topic-root", "Cities")
    assert [(a["title"], a["links"]) for a in articles] == [("Paris", ["2", "3"]), ("France", ["1"]),
                                                          ("Seine River", ["1"])]
    assert articles[0]["text"] == "Paris is the capital of France, on the Seine. It is a large city with a long " \
                                  "history and much art."
    assert articles[0]["categories"] == ["Capitals"] and articles[0]["labels"] == {"top": "Capitals"}
    assert manifest["counts"]["disambiguation"] == 1 and manifest["language"] == "en"


def _no_outputs(out):
    return not out.exists() or sorted(os.listdir(out)) == []


@pytest.mark.parametrize("case", ["truncated", "malformed", "not-utf8", "id", "ns", "repeated-id"])
def test_corrupt_dumps_fail_with_one_line_and_write_nothing(tmp_path, case):
    from conftest import make_dump
    data = make_dump(FINNISH_PAGES).encode("utf-8")
    if case in ("id", "ns", "repeated-id"):
        path = tmp_path / "dump.xml"
        old = b"<ns>0</ns>\n    <id>19</id>"
        new = {"id": b"<ns>0</ns>\n    <id>two</id>", "ns": b"<ns>x</ns>\n    <id>19</id>",
               "repeated-id": b"<ns>0</ns>\n    <id>1</id>"}[case]
        path.write_bytes(data.replace(old, new))
        expected = {"id": "page 'Rotterdam' has <id>two</id>, not a number",
                    "ns": "page 'Rotterdam' has <ns>x</ns>, not a number",
                    "repeated-id": "page id 1 is used by more than one page"}[case]
    elif case == "truncated":
        path = tmp_path / "dump.xml.bz2"
        path.write_bytes(bz2.compress(data)[:-200])
        expected = "compressed stream ends early"
    elif case == "malformed":
        path = tmp_path / "dump.xml"
        path.write_bytes(data.replace(b"<title>Rotterdam</title>", b"<title>Rotterdam</titel>"))
        expected = "malformed XML at line"
    else:
        path = tmp_path / "dump.xml"
        path.write_bytes(data.replace("Hollannin".encode(), b"Hollan\xffnin"))
        expected = "malformed XML at line"
    out = tmp_path / "out"
    error = script_error("01_extract.py", "wiki", "--dump", path, "--out", out, "--workers", "0")
    assert error.startswith(f"error: {path}: ") and expected in error
    if case == "malformed":
        assert "after page 20 ('Punainen planeetta')" in error
    assert _no_outputs(out)


def test_a_corrupt_bz2_block_is_reported_after_the_last_page_read_before_it(tmp_path):
    from conftest import corpus_text, make_dump
    # user pages (not cleaned, so quick) of random words: 2.4 MB of XML, about three 900 KB bz2 blocks
    pages = [(100 + i, f"Käyttäjä:K{i}", 2, " ".join(corpus_text(i, 600))) for i in range(60)]
    data = bytearray(bz2.compress(make_dump(pages).encode("utf-8"), 9))
    data[len(data) // 2] ^= 0xFF  # inside the second block
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bytes(data))
    before, dec = b"", bz2.BZ2Decompressor()  # what decompresses before the error, fed a kilobyte at a time
    with pytest.raises(OSError):
        for i in range(0, len(data), 1024):
            before += dec.decompress(bytes(data[i:i + 1024]))
    last = before[:before.rindex(b"</page>")].rsplit(b"<title>", 1)[1].split(b"<")[0].decode()
    assert last != pages[-1][1]
    error = script_error("01_extract.py", "wiki", "--dump", path, "--out", tmp_path / "out", "--workers", "0")
    assert error == (f"error: {path}: corrupt compressed data (Invalid data stream) after page "
                     f"{pages[[p[1] for p in pages].index(last)][0]} ({last!r})")


def test_sigterm_stops_extraction_and_leaves_no_temporary_file(tmp_path, write_dump):
    import signal
    import subprocess
    import sys
    import time
    from conftest import ENV, ROOT
    dump = write_dump(FINNISH_PAGES + [(50, "Sisäkkäinen", 0, "{{a|" * 800_000 + "x" + "}}" * 800_000)])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "01_extract.py"), "wiki", "--dump", dump, "--out", out,
                             "--workers", "0"], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not list(out.glob(".staging-*/.scratch/articles.pass1.jsonl")) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, proc.stderr.read()
    assert list(out.iterdir()) == []


def test_missing_dump_is_a_one_line_error(tmp_path):
    """01's exit status for bad input, as a user meets it: 2 and one line."""
    proc = run_script("01_extract.py", "wiki", "--dump", tmp_path / "none.xml.bz2", "--out", tmp_path / "o",
                      check=False)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == f"error: {tmp_path / 'none.xml.bz2'}: No such file or directory"


def test_gzip_and_plain_xml_give_the_same_articles(tmp_path):
    import gzip
    from conftest import make_dump
    data = make_dump(FINNISH_PAGES).encode("utf-8")
    (tmp_path / "d.xml").write_bytes(data)
    half = len(data) // 2
    (tmp_path / "d.xml.gz").write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))  # two members
    plain, _, _ = extract(tmp_path / "a", tmp_path / "d.xml", "--workers", "0")
    gz, _, _ = extract(tmp_path / "b", tmp_path / "d.xml.gz", "--workers", "0")
    assert plain == gz and len(plain) == 4


def test_multistream_bz2_is_read_to_the_end(tmp_path):
    from conftest import make_dump
    data = make_dump(FINNISH_PAGES).encode("utf-8")
    cut = data.index(b"  <page>", len(data) // 2)
    (tmp_path / "d.xml.bz2").write_bytes(bz2.compress(data[:cut]) + bz2.compress(data[cut:]))
    articles, _, _ = extract(tmp_path, tmp_path / "d.xml.bz2", "--workers", "0")
    assert [a["title"] for a in articles] == ["Amsterdam", "Alankomaat", "Pääkaupunki", "Rotterdam"]
