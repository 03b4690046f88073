"""Whole-article text (``01_extract.py wiki --text full``): every section's prose, nothing but prose."""

from common.extract.wikitext import Namespaces, full_text

EN = Namespaces({6: "File", 10: "Template", 14: "Category"})

ARTICLE = """{{Infobox city|name=Amsterdam}}
'''Amsterdam''' is the capital of the [[Netherlands]].

It lies on the [[Amstel]].<ref>{{cite web|url=x}}</ref>

== History ==
Founded as a [[fishing village]].
* a list item with [[Listed]]

=== Later ===
It grew.
== See also ==
* [[Rotterdam]]
== References ==
{{reflist}}
[[Category:Cities]]
"""


def test_full_text_keeps_every_sections_prose_and_its_links():
    links = []
    assert full_text(ARTICLE, EN, links) == ("Amsterdam is the capital of the Netherlands. It lies on the Amstel. "
                                             "Founded as a fishing village. It grew.")
    assert links == ["Netherlands", "Amstel", "Fishing village"]
