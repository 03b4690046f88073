"""Text from outside (a flag's value, a path, a manifest's field, another model's card) as it enters a page this
project writes in Markdown: a model card, report.md. One function makes it literal text; the pages put it nowhere
else (never inside a code span, where no escape works)."""

import re
import urllib.parse

# ASCII punctuation with a meaning in CommonMark, GitHub's tables and the hub's renderer where it may stand: code
# spans, emphasis, links and images, raw HTML and autolinks, entities, table cells, strikethrough, math, the
# heading's closing hashes. CommonMark reads a backslash before any ASCII punctuation as the character itself.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&$#!])")
# what str.splitlines() breaks a line at, and the other C0/C1 control characters (as io.InputError shows them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

LIMIT = 200  # characters of one value shown, the rest cut with "…": a page stays a page whatever a field holds


def escape(value, limit=LIMIT):
    """``value`` (any object: its ``str``) as Markdown that renders as exactly its text, on one line, inside a table
    cell, a paragraph or a heading: a control character is shown as Python writes it in a string (``\\n``), and
    text beyond ``limit`` characters is cut and ends in "…"."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    text = _SPECIAL.sub(r"\\\1", text)
    return _CONTROL.sub(lambda m: "\\" + repr(m.group())[1:-1], text)


def link(text, target, base=""):
    """A Markdown link to ``base + target``: ``text`` escaped, ``target`` (a relative path, or a URL's path after
    ``base``) percent-encoded, so that any character a path may hold (spaces, ``<``, ``>``, ``|``, ``)``, ``:``, a
    backtick) keeps the link whole and points where it names."""
    return f"[{escape(text)}]({base}{urllib.parse.quote(target, safe='/')})"
