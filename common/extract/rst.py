"""reStructuredText sources (a Sphinx project's ``.rst`` files, or the ``_sources/*.rst.txt`` copies that built
documentation ships, as Debian's ``python3.11-doc`` does) → articles.jsonl, one article per file.

``id`` is the file's path under the root without its suffix (``library/json``), ``title`` its first section title,
``text`` its prose on one line, ``labels`` ``{"top": the first folder of the path}`` (``library``, ``tutorial``,
``howto`` …). What is not prose is dropped: literal blocks (after ``::``), doctest blocks (``>>>``), code and
table-like directives, comments and link targets, section adornments, table borders. The bodies of the other
directives (``note``, ``versionchanged``, ``function`` …) stay as text, their argument lines go. Inline markup keeps
its text: ``:func:`json.dumps``` → ``json.dumps``, ``:ref:`the tutorial <tut-json>``` → ``the tutorial``,
```` ``x`` ```` → ``x``, `` `text <url>`_`` → ``text``. The parser reads a line at a time and every pattern is
linear in the line.
"""

import os
import re

from common.io import read_input_bytes
from common.jsontext import dumps_line

SUFFIXES = (".rst.txt", ".rst")
# directives whose whole block is code, markup or a table, never prose
DROPPED_DIRECTIVES = {"code-block", "code", "sourcecode", "literalinclude", "doctest", "testcode", "testoutput",
                      "testsetup", "testcleanup", "productionlist", "highlight", "image", "figure", "toctree", "index",
                      "raw", "include", "tabularcolumns", "csv-table", "list-table", "table", "math", "graphviz",
                      "audit-event-table", "literal", "parsed-literal", "moduleauthor", "sectionauthor", "module",
                      "currentmodule", "program", "c:namespace", "cmdoption"}
_DIRECTIVE = re.compile(r"\.\.\s+(?:\|[^|]{0,100}\|\s+)?([\w:.+-]{1,60})::(.*)")
_ADORNMENT = re.compile(r"([=\-`:'\"~^_*+#<>.])\1{2,}\s*")
_TABLE_BORDER = re.compile(r"[+|][-=+|: ]*|=[=\s]*")
_FIELD = re.compile(r":[\w .-]{1,60}:(?:\s+(.*))?")
_ROLE = re.compile(r":([\w.+:-]{1,40}):`([^`]{0,500})`")
_HYPERLINK = re.compile(r"`([^`<]{0,300}?)\s*(?:<[^`<>]{0,500}>)?`__?")
_DEFAULT_ROLE = re.compile(r"`([^`]{1,300})`")
_LITERAL = re.compile(r"``([^`]{0,500})``")
_FOOTNOTE = re.compile(r"\s?\[(?:#[\w-]{0,40}|\d{1,4}|\*)\]_")
_STRONG = re.compile(r"\*\*([^*]{1,300})\*\*")
_SUBSTITUTION = re.compile(r"\|([\w .-]{1,60})\|_{0,2}")
_SPACES = re.compile(r"\s+")


def role_text(role, inner):
    """The text a role shows: ``title <target>`` → title; ``~a.b.c`` → ``c``; ``!x`` → ``x``; ``:rfc:`7159``` →
    ``RFC 7159`` (and PEPs alike)."""
    inner = inner.strip()
    if role in ("rfc", "pep") and inner.isdigit():
        return f"{role.upper()} {inner}"
    if inner.endswith(">") and "<" in inner:
        shown = inner[:inner.rindex("<")].strip()
        if shown:
            return shown
        inner = inner[inner.rindex("<") + 1:-1]
    if inner.startswith("~"):
        return inner[1:].rsplit(".", 1)[-1]
    return inner.lstrip("!")


def inline(text):
    """Inline markup → its text."""
    text = _ROLE.sub(lambda m: role_text(m.group(1), m.group(2)), text)
    text = _LITERAL.sub(r"\1", text)
    text = _HYPERLINK.sub(r"\1", text)
    text = _DEFAULT_ROLE.sub(r"\1", text)
    text = _FOOTNOTE.sub("", text)
    text = _STRONG.sub(r"\1", text)
    text = _SUBSTITUTION.sub(r"\1", text)
    return text.replace("\\", "")


def indent(line):
    return len(line) - len(line.lstrip(" \t"))


def prose_lines(lines):
    """The lines of a file that are prose, in order, with the section titles; a blank string marks a paragraph
    break. ``skip_deeper``: the indentation a dropped block must exceed (None: nothing is being dropped)."""
    out = []
    skip_deeper = None
    literal_next = False  # the paragraph before ended in "::": the indented block that follows is code
    continued = False  # the line before was a directive's argument ending in a backslash: this one continues it
    paragraph_indent = 0
    in_doctest = False
    for raw in lines:
        line = raw.rstrip()
        stripped = line.strip()
        depth = indent(line)
        if continued:
            continued = line.endswith("\\")
            continue
        if skip_deeper is not None:
            if not stripped or depth > skip_deeper:
                continue
            skip_deeper = None
        if not stripped:
            out.append("")
            in_doctest = False
            continue
        if literal_next:
            literal_next = False
            if depth > paragraph_indent:
                skip_deeper = paragraph_indent
                continue
        if in_doctest or stripped.startswith(">>>"):
            in_doctest = True
            continue
        m = _DIRECTIVE.fullmatch(stripped)
        if m:
            continued = line.endswith("\\")
            name = m.group(1).lower()
            if name in DROPPED_DIRECTIVES or name.startswith(("code", "c:", "cpp:")):
                skip_deeper = depth
            continue
        if stripped.startswith(".."):  # a comment or a link target, with its indented continuation
            skip_deeper = depth
            continue
        if _ADORNMENT.fullmatch(stripped) or _TABLE_BORDER.fullmatch(stripped):
            continue
        field = _FIELD.fullmatch(stripped)
        if field:
            stripped = field.group(1) or ""
            if not stripped:
                continue
        if stripped.startswith("|") and stripped.endswith("|"):  # a grid table's row
            stripped = stripped.strip("|").replace("|", " ")
        if stripped.endswith("::"):
            literal_next = True
            paragraph_indent = depth
            stripped = stripped[:-2].rstrip()
            if stripped and not stripped.endswith(":"):
                stripped += ":"
            if not stripped:
                continue
        out.append(stripped)
    return out


def title_of(lines):
    """The first section title: a text line under (or between) adornment lines at least as long as it."""
    for i in range(len(lines) - 1):
        text, under = lines[i].rstrip(), lines[i + 1].rstrip()
        if text.strip() and not text[:1].isspace() and _ADORNMENT.fullmatch(under) and len(under) >= len(text):
            return text.strip()
    return None


def read_text(path, counts):
    """A source file's text; invalid UTF-8 bytes are replaced and the file counted."""
    data = read_input_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        counts["invalid_utf8_files"] += 1
        return data.decode("utf-8", errors="replace")


def source_files(root):
    """``(id, path)`` of every source under ``root``, sorted by id."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
            if suffix:
                path = os.path.join(folder, name)
                found.append((os.path.relpath(path, root)[:-len(suffix)].replace(os.sep, "/"), path))
    return sorted(found)


def extract_rst(root, out, counts, min_chars=90):
    """Write one contract article per source file under ``root`` to ``out`` (text mode); files whose prose is
    shorter than ``min_chars`` are dropped (counted)."""
    for doc_id, path in source_files(root):
        counts["files"] += 1
        lines = read_text(path, counts).split("\n")
        paragraphs = " ".join(line or "\n" for line in prose_lines(lines)).split("\n")
        text = " ".join(p for p in (_SPACES.sub(" ", inline(p)).strip() for p in paragraphs) if p)
        title = inline(title_of(lines) or doc_id.rsplit("/", 1)[-1])
        if len(text) < min_chars:
            counts["too_short"] += 1
            continue
        article = {"id": doc_id, "title": _SPACES.sub(" ", title).strip(), "text": text, "links": []}
        if "/" in doc_id:
            article["labels"] = {"top": doc_id.split("/", 1)[0]}
        out.write(dumps_line(article))
        counts["articles"] += 1
