"""Research-article text → sentences with key-sentence labels, for the key-sentence method.

Text is cleaned of HTML (BeautifulSoup) and LaTeX (regular expressions), split with an *untrained* NLTK Punkt
tokenizer (it needs no downloaded data; it also splits after abbreviations such as "e.g."),
cutting at the end of each span, and a sentence is a key sentence when it equals an annotated one once all
whitespace is removed.
"""

import re
import sys
import warnings

from common.io import InputError, dumps_line, read_jsonl

_BLOCK_TAG = re.compile(r"(?i)<(/?(?:p|div|br|li|ul|ol|h[1-6]|tr|td|th|table|section|article|blockquote|title)\b)")
_LATEX_DROP = re.compile(r"\\(?:cite[pt]?|ref|eqref|label|footnote|url)\*?(?:\[[^\]]*\])?\{[^{}]*\}")
_LATEX_ARG = re.compile(r"\\[a-zA-Z]+\*?\{([^{}]*)\}")
_GREEK = re.compile(r"\\(alpha|beta|gamma|delta|epsilon|kappa|lambda|mu|sigma|tau|omega|Delta)\b")
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+\*?")
_SPACES = re.compile(r"\s+")


def clean(text):
    """HTML tags and LaTeX markup → plain text on one line (block elements become spaces)."""
    if "<" in text and ">" in text:
        from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
            soup = BeautifulSoup(_BLOCK_TAG.sub(r" <\1", text), "html.parser")
        for tag in soup(["script", "style"]):
            tag.decompose()
        text = soup.get_text()
    if "\\" in text or "$" in text:
        text = _LATEX_DROP.sub("", text)
        previous = None
        while previous != text:  # nested commands, innermost first
            previous, text = text, _LATEX_ARG.sub(r"\1", text)
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


def split(text, tokenizer):
    """Sentences cut at the end of each Punkt span, as ``(sentence, start, end)`` offsets into ``text``."""
    out, prev = [], 0
    for _, end in tokenizer.span_tokenize(text):
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


def extract_sentences(path, out, splitter_kind, counts):
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
        sentences = [s for s, _, _ in split(clean(obj["text"]), tokenizer)]
        labels, missing = label(sentences, obj["key_sentences"])
        if missing:
            counts["dropped_articles"] += 1
            for sentence in missing:
                print(f"dropped article {obj['id']}: key sentence not found: {sentence!r}", file=sys.stderr)
            continue
        counts["articles"] += 1
        counts["sentences"] += len(sentences)
        counts["key_sentences"] += sum(labels)
        out.write(dumps_line({"id": obj["id"], "sentences": sentences, "labels": labels}))
