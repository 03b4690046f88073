"""Dictionaries in the DICT server's format (``NAME.index`` + ``NAME.dict`` or ``NAME.dict.dz``) → articles.jsonl.

FOLDOC (the Free On-line Dictionary of Computing, Debian's ``dict-foldoc``) and the Jargon File (``dict-jargon``)
ship this way. An entry starts with its headwords, one a line at column 0 (a term and its synonyms), then the
indented definition. In the definition ``{term}`` is a cross-reference to the entry of that term and, in FOLDOC,
``<category, category>`` opens each sense. Those are what WikiSpecter needs of a linked, categorised corpus:

- ``title`` is the first headword line as written, ``id`` the same as the index spells it (lower-cased by
  dictfmt), spaces as ``_`` (ids are whitespace-free); a second entry of one headword is ``term#2``;
- ``text`` the definition on one line: braces dropped (the term stays), the category tags and FOLDOC's closing
  ``(YYYY-MM-DD)`` date removed;
- ``links`` the ids of the entries its cross-references name, looked up among every headword in lower case, then
  as a plural of a headword (FOLDOC links ``{mailers}`` to "mailer"); a cross-reference with a URL in parentheses
  (``{Language List (http://...)}``) links outside the dictionary and is no link. An entry whose definition is only
  a cross-reference (``{big iron}``, "See {big iron}.") is a redirect: links to it go to its target, as Wikipedia
  links are resolved through redirects;
- ``categories`` the sense tags in order of first appearance, ``labels`` ``{"top": the first of them}``.

The index's offsets and lengths are numbers in the DICT base-64 alphabet. Every pattern here is linear in the text.
"""

import re

from common.io import InputError, open_input, read_input_bytes
from common.jsontext import dumps_line

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(B64)}
_META = "00-database"  # dictfmt's own entries (00-database-info, -short, -url ...) and 00databasealphabet
_LINK = re.compile(r"\{([^{}]{1,300})\}")
_EXTERNAL = re.compile(r"\((?:[a-z]+:|[^()\s]*\.html?\b)[^()]*\)\s*$")
_SENSE_TAG = re.compile(r"(?m)^[ \t]*(?:\d{1,3}\.[ \t]*)?<([^<>\n@]{1,100})>")
_DATE = re.compile(r"\(\d{4}-\d{2}-\d{2}\)\s*$")
_REDIRECT = re.compile(r"(?:(?:see|see also|compare)\s+)?\{([^{}]{1,300})\}\s*\.?", re.I)
_SPACES = re.compile(r"\s+")


def b64_number(text, where):
    """A DICT index number (``"B6qe"``) → int."""
    value = 0
    for c in text:
        digit = _B64_VALUE.get(c)
        if digit is None:
            raise InputError(f"{where}: {text!r} is not a DICT base-64 number")
        value = value * 64 + digit
    return value


def read_index(path):
    """``[(headword, offset, length)]`` in the index's order; a malformed line names ``path:line``."""
    rows = []
    with open_input(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line:
                    continue
                parts = line.split("\t")
                if len(parts) != 3:
                    raise InputError(f"{path}:{lineno}: expected 'headword<TAB>offset<TAB>length'")
                where = f"{path}:{lineno}"
                rows.append((parts[0], b64_number(parts[1], where), b64_number(parts[2], where)))
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return rows


def one_line(text):
    return _SPACES.sub(" ", text).strip()


def link_target(inner):
    """The term a ``{...}`` cross-reference names, or None for a reference outside the dictionary."""
    inner = one_line(inner)
    if not inner or _EXTERNAL.search(inner):
        return None
    return inner.lower()


def split_entry(raw):
    """``(headword lines, definition)`` of one entry's text: the lines at column 0 before the first blank or
    indented line are its headwords."""
    lines = raw.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    heads = []
    while lines and lines[0].strip() and not lines[0][:1].isspace():
        heads.append(lines.pop(0).strip())
    return heads, "\n".join(lines)


def categories(definition):
    """The sense tags of a definition in order of first appearance (``<data, architecture>`` → two)."""
    found = []
    for m in _SENSE_TAG.finditer(definition):
        for name in m.group(1).split(","):
            name = one_line(name)
            if name and name not in found:
                found.append(name)
    return found


def clean(definition):
    """The definition as text on one line: sense tags and the closing date removed, braces dropped."""
    text = _SENSE_TAG.sub(lambda m: m.group(0)[:m.group(0).index("<")], definition)
    text = _DATE.sub("", text.rstrip())
    text = _LINK.sub(lambda m: _EXTERNAL.sub("", m.group(1)).rstrip(), text)
    return one_line(text)


def plural_forms(term):
    """Singulars a plural cross-reference may name: "mailers" → "mailer", "boxes" → "box", "libraries" →
    "library"."""
    forms = []
    if term.endswith("ies") and len(term) > 4:
        forms.append(term[:-3] + "y")
    if term.endswith("es") and len(term) > 3:
        forms.append(term[:-2])
    if term.endswith("s") and len(term) > 2:
        forms.append(term[:-1])
    return forms


def extract_dictd(index_path, dict_path, out, counts, min_chars=90):
    """Write one contract article per entry to ``out`` (text mode); entries whose text is shorter than
    ``min_chars`` after cleaning are dropped, and links to them too (both counted)."""
    body = read_input_bytes(dict_path)  # a .dict.dz is gzip-compatible: dictzip adds a random-access table
    by_place, headword_of = {}, {}
    for headword, offset, length in read_index(index_path):
        if offset + length > len(body):
            raise InputError(f"{index_path}: entry {headword!r} lies past the end of {dict_path} "
                             f"({offset + length} > {len(body)} bytes)")
        if headword.startswith(_META) or headword.startswith("00database"):
            continue
        by_place.setdefault((offset, length), []).append(headword)
    entries, used = [], {}  # (id, title, definition); times an id was taken
    for (offset, length), heads in sorted(by_place.items()):
        raw = body[offset:offset + length].decode("utf-8", errors="replace")
        lines, definition = split_entry(raw)
        title = lines[0] if lines else heads[0]
        entry_id = "_".join((title.lower() if title.lower() in heads else heads[0]).split())
        if entry_id in used:  # one headword with two entries (homographs): the second is "term#2"
            used[entry_id] += 1
            entry_id = f"{entry_id}#{used[entry_id]}"
        used.setdefault(entry_id, 1)
        entries.append((entry_id, title, definition))
        for head in heads:
            headword_of.setdefault(head.lower(), entry_id)
    counts["entries"] = len(entries)

    # an entry that is only a cross-reference redirects links to its target
    redirect = {}
    for entry_id, _, definition in entries:
        m = _REDIRECT.fullmatch(_SENSE_TAG.sub("", _DATE.sub("", definition.strip())).strip())
        target = link_target(m.group(1)) if m else None
        if target is not None:
            redirect[entry_id] = target
    counts["redirects"] = len(redirect)

    def resolve(term, seen=()):
        entry_id = headword_of.get(term)
        via = "direct"
        if entry_id is None:
            entry_id = next((headword_of[f] for f in plural_forms(term) if f in headword_of), None)
            via = "plural"
        if entry_id is not None and entry_id in redirect and entry_id not in seen and len(seen) < 10:
            found, _ = resolve(redirect[entry_id], (*seen, entry_id))
            return found, "redirect"
        return entry_id, via

    kept = {}
    for entry_id, title, definition in entries:
        if entry_id in redirect:
            continue
        text = clean(definition)
        if len(text) < min_chars:
            counts["too_short"] += 1
            continue
        kept[entry_id] = (title, text, definition)
    for entry_id, (title, text, definition) in kept.items():
        links = []
        for m in _LINK.finditer(definition):
            term = link_target(m.group(1))
            if term is None:
                counts["links_external"] += 1
                continue
            target, via = resolve(term)
            if target is None:
                counts["links_missing"] += 1
            elif target == entry_id or target in links:
                counts["links_repeated_or_self"] += 1
            elif target not in kept:
                counts["links_to_dropped"] += 1
            else:
                links.append(target)
                counts["links_resolved"] += 1
                counts[f"links_via_{via}"] += 1
        found = categories(definition)
        article = {"id": entry_id, "title": title, "text": text, "links": links, "categories": found}
        if found:
            article["labels"] = {"top": found[0]}
            counts["labelled_top"] += 1
        out.write(dumps_line(article))
        counts["articles"] += 1
