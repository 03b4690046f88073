"""Wikitext cleaning and title normalisation."""

from hypothesis import given, settings
from hypothesis import strategies as st

from common.extract.wikitext import (LANGUAGE_LINK, Namespaces, all_links, categories, clean, lead, normalize_title,
                                     strip_templates)

FI = Namespaces({6: "Tiedosto", 10: "Malline", 14: "Luokka"})
EN = Namespaces({6: "File", 10: "Template", 14: "Category"})


def lead_and_links(text, ns=FI, mode="first-paragraph"):
    links = []
    return lead(text, ns, mode, links), links


def test_thesis_example_gives_text_and_links():
    text, links = lead_and_links("'''Amsterdam''' on [[Alankomaat|Alankomaiden]] [[pääkaupunki]].")
    assert text == "Amsterdam on Alankomaiden pääkaupunki."
    assert links == ["Alankomaat", "Pääkaupunki"]


def test_nested_templates_are_removed_whole():
    text = "{{Infobox|a={{lang|fi|{{{1|x}}}}}|b=[[Link]]}}X {{a|{{b|{{c}}}}}}on kaupunki."
    assert clean(text, FI) == "X on kaupunki."


def test_unclosed_template_stays_but_closed_inner_ones_go():
    assert strip_templates("a {{b {{c}} d") == "a {{b  d"


def test_references_comments_and_tables_are_removed():
    text = ("Helsinki<ref name=\"a\">{{cite web|url=x}}</ref> on<ref name=b /> Suomen<!-- huom --> "
            "pääkaupunki.<ref>Lähde [[X]].</ref>\n{| class=\"wikitable\"\n| [[Taulukko]]\n|\n{|\n|sisä\n|}\n|}")
    links = []
    assert clean(text, FI, links) == "Helsinki on Suomen pääkaupunki."
    assert links == []


def test_files_with_nested_links_categories_and_interlanguage_links_are_removed():
    text = ("[[Tiedosto:Kartta.png|thumb|Kartta, jossa [[Espoo]] ja [[Vantaa]].]] [[Kuva:X.jpg]]"
            "Turku on [[kaupunki]]. [[Luokka:Suomen kaupungit|Turku]] [[en:Turku]] [[sv:Åbo]]")
    links = []
    assert clean(text, FI, links) == "Turku on kaupunki."
    assert links == ["Kaupunki"]


def test_english_namespaces_work_the_same():
    text = "[[File:Map.png|thumb|A [[map]].]][[Image:Old.jpg]]'''Paris''' is the [[capital city|capital]]." \
           "[[Category:Capitals]][[fr:Paris]]"
    links = []
    assert clean(text, EN, links) == "Paris is the capital."
    assert links == ["Capital city"]


def test_link_targets_are_normalised_like_mediawiki():
    _, links = lead_and_links("[[Amstel_joki#Historia|joki]], [[ helsingin  yliopisto ]], [[:Luokka:X|luokka]], "
                              "[[#Osio|osio]], [[wikt:sana|sana]] ja [[ÅLAND]] ovat tässä, kaikki sata merkkiä.")
    # links to other namespaces and wikis are reported as None (counted, not kept); section links not at all
    assert links == ["Amstel joki", "Helsingin yliopisto", None, None, "ÅLAND"]


def test_visible_text_of_links_keeps_label_and_trail():
    text, _ = lead_and_links("[[Omena]]t ja [[Päärynä|päärynät]] sekä [[Luumu (hedelmä)|]] ja [[pää_kaupunki]].")
    assert text == "Omenat ja päärynät sekä Luumu ja pää kaupunki."


def test_entities_quotes_and_whitespace_are_normalised():
    text = clean("'''''Kalevala'''''&nbsp;on&#32;''runo''&ndash;kokoelma   \n  &amp; eepos.", FI)
    assert text == "Kalevala on runo–kokoelma & eepos."


def test_character_templates_print_their_character():
    assert clean("Sota (1775{{ndash}}1783) oli pitkä.", FI) == "Sota (1775–1783) oli pitkä."


def test_empty_parentheses_left_by_templates_are_dropped():
    assert clean("Albania ({{IPA|x}}; {{lang|sq|y}}) on maa.", FI) == "Albania on maa."
    assert clean("Akhilleus ({{IPA|x}}; ''Akhilleus'', {{IPA|y}}) oli sankari.", FI) == \
        "Akhilleus (Akhilleus) oli sankari."


def test_first_paragraph_skips_structure_and_lists():
    wikitext = ("{{Infobox\n|nimi = X\n}}\n[[Tiedosto:X.png|thumb]]\n\n:''Katso myös [[Y]].''\n"
                "'''X''' on [[asia]].\nJatkuu [[samassa]] kappaleessa.\n\nToinen [[kappale]].\n== Historia ==\n"
                "[[Myöhempi]] teksti.")
    text, links = lead_and_links(wikitext)
    assert text == "X on asia. Jatkuu samassa kappaleessa."
    assert links == ["Asia", "Samassa"]
    section, section_links = lead_and_links(wikitext, mode="section")
    assert section == "X on asia. Jatkuu samassa kappaleessa. Toinen kappale."
    assert section_links == ["Asia", "Samassa", "Kappale"]
    assert all_links(wikitext, FI) == ["Y", "Asia", "Samassa", "Kappale", "Myöhempi"]


def test_categories_in_page_order_with_sort_keys_and_both_prefixes():
    text = "[[Luokka:Suomen kaupungit|Turku]] [[Category:Satamakaupungit]] [[luokka:suomen_kaupungit]]"
    assert categories(text, FI) == ["Suomen kaupungit", "Satamakaupungit"]


def test_normalize_title_rules():
    assert normalize_title("luokka:foo_bar#x", FI) == (14, "Foo bar")
    assert normalize_title("Star Wars: Episode IV", FI) == (0, "Star Wars: Episode IV")
    assert normalize_title("ßtraße", FI) == (0, "ßtraße")
    assert normalize_title("fi:Helsinki", FI)[0] == LANGUAGE_LINK
    assert normalize_title("#Osio", FI) is None
    case_sensitive = Namespaces({14: "Luokka"}, first_letter=False)
    assert normalize_title("iPhone", case_sensitive) == (0, "iPhone")


markup = st.lists(st.sampled_from(["{{", "}}", "{{{", "}}}", "[[", "]]", "|", "''", "'''", "<ref>", "</ref>",
                                   "<ref name=x/>", "<!--", "-->", "{|", "|}", "\n", "\n\n", "==", "Luokka:",
                                   "File:", ":", "#", "&amp;", "&", "<", ">", "http://x", "[", "]", "a", "Ä", " ",
                                   "_", "<br/>", "<math>", "</math>", "(", ")", ";", ","]), max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.one_of(markup.map("".join), st.text(max_size=200)))
def test_random_wikitext_never_crashes_the_cleaner(text):
    links = []
    out = lead(text, FI, "first-paragraph", links)
    assert isinstance(out, str) and "\n" not in out
    assert all(t is None or isinstance(t, str) for t in links)
    lead(text, FI, "section")
    all_links(text, FI)
    categories(text, FI)
