"""Research-article text → sentences with key-sentence labels, for the key-sentence method.

Text is cleaned of HTML and LaTeX markup, split with an *untrained* NLTK Punkt tokenizer (it needs no downloaded
data; it also splits after abbreviations such as "e.g."), cutting at the end of each span, and a sentence is a key
sentence when it equals an annotated one once all whitespace is removed. Every step takes time linear in the
text's length, whatever its markup.
"""

import html
import re
import sys

from common.io import InputError, read_jsonl
from common.jsontext import dumps_line

_HTML_HIDDEN = re.compile(r"<!--.*?(?:-->|\Z)|<[!?][^<>]*+>|<(script|style)\b[^<>]*+>.*?(?:</\1\s*+>|\Z)",
                          re.I | re.S)
_HTML_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9]*+)[^<>]*+>")
_BLOCK_TAGS = {"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td", "th", "table",
               "section", "article", "blockquote", "title"}
_LATEX_DROP = re.compile(r"\\(?:cite[pt]?|ref|eqref|label|footnote|url)\*?(?:\[[^\[\]]*+\])?\{[^{}]*+\}")
_LATEX_BRACE = re.compile(r"\\[a-zA-Z]++\*?\{|[{}]")
_GREEK = re.compile(r"\\(alpha|beta|gamma|delta|epsilon|kappa|lambda|mu|sigma|tau|omega|Delta)\b")
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]++\*?")
_SPACES = re.compile(r"\s+")
PUNKT_WINDOW = 1 << 15  # characters Punkt sees at once (NLTK stops a regular expression after 5 s)


def html_text(text):
    """The text of an HTML fragment: comments, script and style dropped, block elements a space, entities
    unescaped. Scanned with linear patterns rather than by Python 3.11's HTMLParser (which BeautifulSoup uses): that
    takes time quadratic in the length of unclosed constructs ("<!--" or "<a" repeated)."""
    text = _HTML_HIDDEN.sub("", text)
    text = _HTML_TAG.sub(lambda m: " " if m.group(1).lower() in _BLOCK_TAGS else "", text)
    return html.unescape(text)


def latex_arguments(text):
    """``\\cmd{argument}`` → ``argument`` at every depth in one pass (other braces stay)."""
    stack, cuts = [], []
    for m in _LATEX_BRACE.finditer(text):
        if m.group() != "}":
            stack.append((m.group() != "{", m.start(), m.end()))
        elif stack:
            command, start, end = stack.pop()
            if command:
                cuts += [(start, end), (m.start(), m.end())]
    if not cuts:
        return text
    out, pos = [], 0
    for start, end in sorted(cuts):
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def clean(text):
    """HTML tags and LaTeX markup → plain text on one line (block elements become spaces)."""
    if "<" in text and ">" in text:
        text = html_text(text)
    if "\\" in text or "$" in text:
        text = _LATEX_DROP.sub("", text)
        text = latex_arguments(text)
        text = _GREEK.sub(r"\1", text)
        text = text.replace("\\%", "%").replace("\\&", "&").replace("\\_", "_").replace("\\ ", " ").replace("~", " ")
        text = _LATEX_COMMAND.sub("", text).replace("$", "")
    return _SPACES.sub(" ", text).strip()


def splitter(kind="punkt"):
    """``punkt``: untrained Punkt (no downloaded data). ``punkt-english``: NLTK's pretrained English Punkt."""
    if kind == "punkt":
        from nltk.tokenize.punkt import PunktSentenceTokenizer
        return PunktSentenceTokenizer()
    try:
        from nltk.tokenize.punkt import PunktTokenizer
        return PunktTokenizer("english")
    except LookupError:
        raise InputError("--splitter punkt-english needs NLTK's punkt_tab data "
                         "(python -m nltk.downloader punkt_tab); --splitter punkt needs none") from None


def _sentence_ends(text, tokenizer):
    """Punkt's sentence ends in ``text``, read a window at a time: the last sentence of a window may be cut by its
    edge, so the next window starts at it. A sentence longer than a window is cut at the window's last space."""
    start, window = 0, PUNKT_WINDOW
    while len(text) - start > window:
        ends = [start + end for _, end in tokenizer.span_tokenize(text[start:start + window])]
        if len(ends) > 1:
            yield from ends[:-1]
            start = ends[-2]
        else:
            cut = text.rfind(" ", start + 1, start + window)
            start = cut if cut > start else start + window
            yield start
    yield from (start + end for _, end in tokenizer.span_tokenize(text[start:]))


def split(text, tokenizer, where="text"):
    """Sentences cut at the end of each Punkt span, as ``(sentence, start, end)`` offsets into ``text``; ``where``
    names the text in the error should NLTK still stop a pattern on its time limit."""
    out, prev = [], 0
    try:
        ends = list(_sentence_ends(text, tokenizer))
    except TimeoutError:
        raise InputError(f"{where}: NLTK's sentence splitter ran past its time limit") from None
    for end in ends:
        piece = text[prev:end]
        stripped = piece.strip()
        if stripped:
            start = prev + len(piece) - len(piece.lstrip())
            out.append((stripped, start, start + len(stripped)))
        prev = end
    return out


def squeeze(text):
    """The thesis's matching key: the text with every whitespace character removed."""
    return "".join(text.split())


def label(sentences, key_sentences):
    """0/1 per sentence, and the annotated key sentences that match none."""
    keys = {squeeze(clean(k)): k for k in key_sentences}
    labels = [1 if squeeze(s) in keys else 0 for s in sentences]
    found = {squeeze(s) for s in sentences}
    return labels, [k for key, k in keys.items() if key not in found]


def extract_sentences(path, out, splitter_kind, counts, say=lambda text: print(text, file=sys.stderr)):
    """``{"id", "text", "key_sentences"}`` lines → ``{"id", "sentences", "labels"}`` lines; an article with a key
    sentence that matches no sentence is reported and dropped, as the thesis did."""
    tokenizer = splitter(splitter_kind)
    counts.update({"articles": 0, "sentences": 0, "key_sentences": 0, "dropped_articles": 0})
    seen = set()
    for lineno, obj in read_jsonl(path, required=("id", "text", "key_sentences")):
        if not isinstance(obj["id"], str) or not isinstance(obj["text"], str):
            raise InputError(f"{path}:{lineno}: fields 'id' and 'text' must be strings")
        if not isinstance(obj["key_sentences"], list) or not all(isinstance(k, str) for k in obj["key_sentences"]):
            raise InputError(f"{path}:{lineno}: field 'key_sentences' must be a list of strings")
        if obj["id"] in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])
        sentences = [s for s, _, _ in split(clean(obj["text"]), tokenizer, f"{path}:{lineno}")]
        labels, missing = label(sentences, obj["key_sentences"])
        if missing:
            counts["dropped_articles"] += 1
            for sentence in missing:
                say(f"dropped article {obj['id']}: key sentence not found: {sentence!r}")
            continue
        counts["articles"] += 1
        counts["sentences"] += len(sentences)
        counts["key_sentences"] += sum(labels)
        out.write(dumps_line({"id": obj["id"], "sentences": sentences, "labels": labels}))
