"""Wikitext markup → plain text, wikilink targets and categories.

Only what a lead paragraph needs is rendered: templates, tables, references, comments, files, categories and
interlanguage links are removed; links become their label; bold/italic quotes are dropped; HTML entities are
unescaped. Titles are normalised as MediaWiki does, so that a link and the page it names meet.
"""

import html
import re
from array import array

# Namespace names MediaWiki accepts in every language besides the localised ones a dump's siteinfo lists.
CANONICAL_NAMESPACES = {"media": -2, "special": -1, "talk": 1, "user": 2, "project": 4, "file": 6, "image": 6,
                        "mediawiki": 8, "template": 10, "help": 12, "category": 14}
# Common aliases that siteinfo does not list (Finnish "Kuva" = File).
NAMESPACE_ALIASES = {"kuva": 6}
# Prefixes that make [[prefix:Title]] an interwiki rather than an article link.
INTERWIKI_PREFIXES = {"wikt", "wiktionary", "w", "wikipedia", "s", "wikisource", "q", "wikiquote", "b", "wikibooks",
                      "n", "wikinews", "v", "wikiversity", "voy", "wikivoyage", "commons", "c", "meta", "m", "d",
                      "wikidata", "species", "wikispecies", "mw", "mediawikiwiki", "phab", "simple"}
_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]{2,8}){0,2}$")

FILE_NS, CATEGORY_NS = 6, 14
# Pseudo-namespaces for targets on other wikis: [[fi:Title]] (interlanguage) and [[wikt:word]] (interwiki).
LANGUAGE_LINK, INTERWIKI_LINK = -100, -101


class Namespaces:
    """Namespace names of one wiki (from its dump's ``<siteinfo>``) and its title-case rule."""

    def __init__(self, names, first_letter=True):
        self.name_of = {0: ""}
        self.key_of = dict(CANONICAL_NAMESPACES)
        self.key_of.update(NAMESPACE_ALIASES)
        for key, name in names.items():
            key = int(key)
            if name:
                self.name_of[key] = name
                self.key_of[name.lower()] = key
        for name, key in CANONICAL_NAMESPACES.items():
            self.name_of.setdefault(key, name.capitalize())
        self.first_letter = first_letter

    @classmethod
    def english(cls):
        return cls({6: "File", 10: "Template", 14: "Category"})

    def category_prefixes(self):
        return sorted(n for n, k in self.key_of.items() if k == CATEGORY_NS)


def _upper_first(s):
    if not s:
        return s
    up = s[0].upper()
    # MediaWiki keeps a character whose upper case is longer (ß → SS) as it is.
    return (up if len(up) == 1 else s[0]) + s[1:]


_WS = re.compile(r"[\s_\u00a0]+")


def normalize_title(raw, namespaces):
    """A link target or page title → ``(namespace, title-without-prefix)``, or None for an empty/section link.

    ``_`` → space, whitespace collapsed, ``#fragment`` cut, leading ``:`` dropped, the namespace prefix
    recognised case-insensitively, the first letter upper-cased (on first-letter wikis), the rest kept.
    Interlanguage and interwiki targets give ``LANGUAGE_LINK`` and ``INTERWIKI_LINK`` as namespace.
    """
    title = html.unescape(raw)
    title = title.split("#", 1)[0]
    title = _WS.sub(" ", title).strip()
    if title.startswith(":"):
        title = title[1:].strip()
    if not title:
        return None
    ns = 0
    if ":" in title:
        prefix, rest = title.split(":", 1)
        low = prefix.strip().lower()
        if low in namespaces.key_of:
            ns = namespaces.key_of[low]
            title = rest.strip()
        elif low in INTERWIKI_PREFIXES:
            return INTERWIKI_LINK, title
        elif _LANGUAGE_CODE.match(prefix.strip()):
            return LANGUAGE_LINK, title
    if not title:
        return None
    if namespaces.first_letter:
        title = _upper_first(title)
    return ns, title


def title_key(ns, title):
    """The string that identifies a page: its namespace number and normalised title."""
    return f"{ns}:{title}"


# --- balanced constructs -------------------------------------------------------------------------------------

_BRACES = re.compile(r"\{{2,}|\}{2,}")


class Spans:
    """Disjoint spans of a text to cut out, in text order, in two integer arrays (a page of millions of constructs
    stays small). Spans are added in the order they close: a span swallows those added before it that start inside
    it (they are nested in it), and joins one that ends where it starts."""

    def __init__(self):
        self.starts, self.ends = array("q"), array("q")

    def add(self, start, end):
        starts, ends = self.starts, self.ends
        while starts and starts[-1] >= start:
            starts.pop()
            ends.pop()
        if ends and ends[-1] == start:
            ends[-1] = end
        else:
            starts.append(start)
            ends.append(end)

    def cut(self, text):
        """``text`` without the spans, joined a few thousand pieces at a time (a list of millions of small strings
        would take many times the text's size)."""
        if not self.starts:
            return text
        chunks, pieces, pos = [], [], 0
        for start, end in zip(self.starts, self.ends):
            pieces.append(text[pos:start])
            pos = end
            if len(pieces) >= 4096:
                chunks.append("".join(pieces))
                pieces.clear()
        pieces.append(text[pos:])
        chunks.append("".join(pieces))
        return "".join(chunks)


def strip_templates(text):
    """Remove ``{{templates}}`` and ``{{{parameters}}}``, nested, as MediaWiki's preprocessor pairs braces.

    A run of opening braces is matched by closing runs three at a time (parameter) while both sides have three,
    else two (template). Unclosed braces stay as text; what closed inside them is still removed.
    """
    if "{{" not in text:
        return text
    starts, left_open = array("q"), array("q")  # the stack of opening runs not yet closed
    spans = Spans()
    for m in _BRACES.finditer(text):
        run = m.group()
        if run[0] == "{":
            starts.append(m.start())
            left_open.append(len(run))
            continue
        left = len(run)
        while left >= 2 and starts:
            take = 3 if (left_open[-1] >= 3 and left >= 3) else 2
            left_open[-1] -= take
            left -= take
            if left_open[-1] < 2:
                left_open.pop()
                spans.add(starts.pop(), m.end() - left)
    return spans.cut(text)


_TABLE = re.compile(r"^[ \t:]*+\{\||^[ \t]*+\|\}", re.M)


def strip_tables(text):
    """Remove ``{| … |}`` tables, nested; an unclosed table runs to the end, as MediaWiki renders it."""
    if "{|" not in text:
        return text
    stack, spans = array("q"), Spans()
    for m in _TABLE.finditer(text):
        if m.group().rstrip().endswith("{|"):
            stack.append(m.start())
        elif stack:
            start = stack.pop()
            if not stack:
                spans.add(start, m.end())
    if stack:
        spans.add(stack[0], len(text))
    return spans.cut(text)


_BRACKETS = re.compile(r"\[\[|\]\]")


def outer_links(text):
    """Spans ``(start, end)`` of the outermost ``[[…]]`` constructs (file captions nest links), in text order."""
    stack = array("q")
    for m in _BRACKETS.finditer(text):
        if m.group() == "[[":
            stack.append(m.start())
        elif stack:
            start = stack.pop()
            if not stack:
                yield start, m.end()


# --- tags, comments, references ------------------------------------------------------------------------------

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_REF_SELF = re.compile(r"<ref(?:\s[^<>]*)?/\s*+>", re.I)
_REF = re.compile(r"<ref(?:\s[^<>]*?)?(?<!/)>.*?(?:</ref\s*>|\Z)", re.I | re.S)
_DROPPED_TAGS = ("references", "gallery", "timeline", "math", "chem", "score", "graph", "mapframe", "maplink",
                 "syntaxhighlight", "source", "pre", "imagemap", "categorytree", "hiero", "inputbox", "poem")
_DROPPED = re.compile(r"<(%s)\b[^<>]*?(?:/>|>.*?(?:</\1\s*>|\Z))" % "|".join(_DROPPED_TAGS), re.I | re.S)
_NOWIKI = re.compile(r"<nowiki\s*+/>|</?nowiki\s*+>", re.I)
_BR = re.compile(r"<br\s*+/?>", re.I)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*+(?:\s[^<>]*)?/?>")
_MAGIC = re.compile(r"__[A-ZÄÖ]++__")


def strip_noise(text):
    """Remove comments, references, dropped tags and magic words (what never reaches rendered prose)."""
    if "<" in text:
        text = _COMMENT.sub("", text)
        text = _REF_SELF.sub("", text)
        text = _REF.sub("", text)
        text = _DROPPED.sub("", text)
    if "__" in text:
        text = _MAGIC.sub("", text)
    return text


# --- links ---------------------------------------------------------------------------------------------------

_SIMPLE_LINK = re.compile(r"\[\[([^\[\]|]*+)(?:\|([^\[\]]*+))?\]\]")
# [url label], the label on the url's line (as MediaWiki has it). Without a closing bracket the match still takes
# the rest of the line and gives it back unchanged: every later "[url" on that line would fail the same way, and
# trying each of them again would take time quadratic in the line's length.
_EXTERNAL = re.compile(r"\[(?:https?:|ftp:|//)[^\s\]]*+(?:[^\S\n]++([^\]\n]*+))?(\]?)")
_PARENTHETICAL = re.compile(r"(?<!\s)\s*+\([^()]*+\)\s*+$")


def _link_kind(target, namespaces):
    """How a link target renders: ``("drop", None)`` (file, category, interlanguage: removed with its text),
    ``("article", title)``, ``("other", None)`` (visible link to another namespace or wiki) or ``("text", None)``
    (a section link)."""
    visible = target.lstrip().startswith(":")
    norm = normalize_title(target, namespaces)
    if norm is None:
        return "text", None
    ns, title = norm
    if ns in (FILE_NS, CATEGORY_NS, LANGUAGE_LINK) and not visible:
        return "drop", None
    if ns != 0:
        return "other", None
    return "article", title


def strip_nontext_links(text, namespaces):
    """Remove file, category and interlanguage links, nested captions included."""
    if "[[" not in text:
        return text
    spans = Spans()
    for start, end in outer_links(text):
        inner = text[start + 2:end - 2]
        target = inner.split("|", 1)[0]
        if "[[" in target:  # a link inside a link target: not a link at all
            continue
        kind, _ = _link_kind(target, namespaces)
        if kind == "drop":
            spans.add(start, end)
    return spans.cut(text)


def render_links(text, namespaces, links=None):
    """Replace ``[[T|label]]`` by label and ``[[T]]`` by T. Article targets (normalised titles) are appended to
    ``links``, links to other namespaces or wikis as None (so that they can be counted)."""
    def repl(m):
        target, label = m.group(1), m.group(2)
        kind, title = _link_kind(target, namespaces)
        if kind == "drop":
            return ""
        if links is not None and kind in ("article", "other"):
            links.append(title)
        if label is None:
            return target.lstrip(":").replace("_", " ")
        if label == "":  # the pipe trick: [[Foo (bar)|]] shows "Foo"
            return _PARENTHETICAL.sub("", target.split(":", 1)[-1])
        return label

    if "[[" in text:
        text = _SIMPLE_LINK.sub(repl, text)
    if "[" in text:
        text = _EXTERNAL.sub(lambda m: (m.group(1) or "") if m.group(2) else m.group(), text)
    return text


# --- prose ---------------------------------------------------------------------------------------------------

_QUOTES = re.compile(r"'''''|'''|''")
# A pattern that opens with a repeated class starts only where a run of that class starts ((?<!...)), or a long
# run without the rest of the pattern after it would be scanned again from each of its characters.
_EMPTY_PARENS = re.compile(r"\(\s*+[,;:]?\s*+\)")
_OPEN_PAREN_SEP = re.compile(r"\(\s*+(?:[,;]\s*+)++")
_CLOSE_PAREN_SEP = re.compile(r"(?<![\s,;])\s*+(?:[,;]\s*+)++\)")
_SPACE_BEFORE_PUNCT = re.compile(r"(?<!\s)\s++([,.;:!?)])")
_SPACE_AFTER_PAREN = re.compile(r"\(\s++")
_SPACES = re.compile(r"\s+")


def finish_prose(text):
    """Quotes, remaining tags, entities and whitespace of already link-rendered text."""
    if "''" in text:
        text = _QUOTES.sub("", text)
    if "<" in text:
        text = _BR.sub(" ", text)
        text = _NOWIKI.sub("", text)
        text = _TAG.sub("", text)
    if "&" in text:
        text = html.unescape(text)
    text = _SPACES.sub(" ", text)
    if "(" in text:
        text = _OPEN_PAREN_SEP.sub("(", text)
        text = _CLOSE_PAREN_SEP.sub(")", text)
        text = _EMPTY_PARENS.sub("", text)
        text = _SPACE_AFTER_PAREN.sub("(", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _SPACES.sub(" ", text).strip()


# Templates that only print a character; rendering them keeps "1775–1783" from becoming "17751783".
_CHARACTER_TEMPLATES = {"ndash": "–", "mdash": "—", "snd": " – ", "spaced ndash": " – ", "nbsp": " ", "'": "'",
                        "!": "|", "=": "=", "en dash": "–", "em dash": "—"}
_CHARACTER_TEMPLATE = re.compile(r"\{\{\s*+(%s)\s*+\}\}" % "|".join(re.escape(k) for k in _CHARACTER_TEMPLATES), re.I)


def strip_structure(text, namespaces):
    """Everything that is not prose or an article link: noise, templates, tables, files, categories."""
    text = strip_noise(text)
    if "{{" in text:
        text = _CHARACTER_TEMPLATE.sub(lambda m: _CHARACTER_TEMPLATES[m.group(1).lower()], text)
    text = strip_templates(text)
    text = strip_tables(text)
    return strip_nontext_links(text, namespaces)


def clean(text, namespaces, links=None):
    """Wikitext → one line of plain text; article link targets go to ``links`` if given."""
    return finish_prose(render_links(strip_structure(text, namespaces), namespaces, links))


# --- leads ---------------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^=[^\n]*=[ \t]*+$", re.M)  # one '=' each side: "=+...=+" backtracks cubically on "===...x"
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*+\n")
_NON_PROSE_LINE = re.compile(r"^[ \t]*+(?:[*#:;]|----)")


def _prose_lines(paragraph):
    return "\n".join(line for line in paragraph.split("\n") if not _NON_PROSE_LINE.match(line))


def lead(text, namespaces, mode="first-paragraph", links=None):
    """The cleaned lead of an article.

    ``first-paragraph``: the first paragraph before the first heading that has prose left after cleaning;
    ``section``: all prose before the first heading. Lists, indented lines and rules are not prose.
    Link targets of the returned text are appended to ``links``.
    """
    m = _HEADING.search(text)
    section = text[:m.start()] if m else text
    section = strip_structure(section, namespaces)
    paragraphs = [_prose_lines(p) for p in _PARAGRAPH_BREAK.split(section)]
    if mode == "section":
        return clean("\n".join(paragraphs), namespaces, links)
    for paragraph in paragraphs:
        found = []
        cleaned = finish_prose(render_links(paragraph, namespaces, found))
        if cleaned:
            if links is not None:
                links.extend(found)
            return cleaned
    return ""


def full_text(text, namespaces, links=None):
    """The whole cleaned article: the prose of every section, headings dropped, paragraphs joined by spaces.
    Link targets of the returned text are appended to ``links``."""
    body = strip_structure(_HEADING.sub("\n\n", text), namespaces)
    paragraphs = [_prose_lines(p) for p in _PARAGRAPH_BREAK.split(body)]
    return clean("\n".join(paragraphs), namespaces, links)


def all_links(text, namespaces):
    """Link targets of the whole article body (not inside templates, references or captions), as ``lead``
    reports them: article titles, and None for links to other namespaces or wikis."""
    links = []
    render_links(strip_structure(text, namespaces), namespaces, links)
    return links


def category_pattern(namespaces):
    prefixes = "|".join(re.escape(p) for p in namespaces.category_prefixes())
    # the name keeps its surrounding blanks (normalize_name strips them): a lazy name followed by "[ \t]*" would
    # rescan a run of blanks once per character of the name
    return re.compile(r"\[\[[ \t]*+(?:%s)[ \t]*+:([^\]|\[]*+)(?:\|[^\]\[]*+)?\]\]" % prefixes, re.I)


def normalize_name(raw, namespaces):
    """A title already known to lie in some namespace (a category name): whitespace and first letter only."""
    name = _WS.sub(" ", html.unescape(raw)).strip()
    return _upper_first(name) if namespaces.first_letter else name


def categories(text, namespaces, pattern=None):
    """Category names (normalised, without prefix) in page order, first occurrence kept."""
    pattern = pattern or category_pattern(namespaces)
    seen, out = set(), []
    for m in pattern.finditer(text):
        name = normalize_name(m.group(1), namespaces)
        if name and name not in seen:
            seen.add(name)
            out.append(name)
    return out
