"""Streaming reader for MediaWiki XML dumps (``.xml``, ``.xml.bz2`` including multistream, ``.xml.gz``).

Memory stays flat: each ``<page>`` is cleared once read. Any defect (truncated compression, malformed XML,
non-UTF-8 bytes) becomes an ``InputError`` naming the file, the XML position and the last good page.
"""

import bz2
import queue
import re
import threading
import xml.etree.ElementTree as ET
import zlib
from typing import NamedTuple

from common.io import InputError
from common.extract.wikitext import Namespaces

# possessive blanks: "\s*:?\s*" alone backtracks quadratically on "#REDIRECT" and a long run of spaces
_REDIRECT_TEXT = re.compile(r"^\s*+#(?:REDIRECT|OHJAUS|UUDELLEENOHJAUS)\s*+:?\s*+\[\[([^\]|]++)", re.I)


def redirect_target(text):
    """The target of a page whose text is ``#REDIRECT [[target]]``, else ""."""
    m = _REDIRECT_TEXT.match(text)
    return m.group(1) if m else ""


class Page(NamedTuple):
    id: int
    ns: int
    title: str
    redirect: str  # target title, or "" for a content page
    text: str


def _decompressed_blocks(f, new_decompressor, block=1 << 14):
    """Decompress a file a block at a time; one C call per block releases the GIL for its whole duration.
    Concatenated streams (bz2 multistream, multi-member gzip) are followed; a stream cut short raises EOFError.
    Blocks are smaller than a bz2 block (100-900 KB of text), so that what decompressed before a corrupt bz2 block
    is still handed on (a failing call returns nothing) and the error can name the last page read."""
    dec, fed = new_decompressor(), False
    while True:
        data = f.read(block)
        if not data:
            if fed and not dec.eof:
                raise EOFError("compressed stream ends early")
            return
        while data:
            fed = True
            out = dec.decompress(data)
            if out:
                yield out
            if dec.eof:
                data = dec.unused_data
                dec, fed = new_decompressor(), False
            else:
                data = b""


class PrefetchReader:
    """A file-like ``read`` over blocks produced by a thread, so decompression overlaps XML parsing.

    At most ``depth`` blocks wait in memory; an error in the thread is raised by the next ``read``.
    """

    def __init__(self, blocks, depth=8):
        self._queue = queue.Queue(maxsize=depth)
        self._block, self._pos = b"", 0
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(blocks,), daemon=True)
        self._thread.start()

    def _fill(self, blocks):
        try:
            for block in blocks:
                if self._stop.is_set():
                    return
                self._queue.put(block)
            self._queue.put(b"")
        except BaseException as e:  # handed to the reader, which raises it
            self._queue.put(e)

    def read(self, n=-1):
        parts, wanted = [], n
        while n < 0 or wanted > 0:
            if self._pos >= len(self._block):
                if self._done:
                    break
                item = self._queue.get()
                if isinstance(item, BaseException):
                    self._done = True
                    raise item
                if not item:
                    self._done = True
                self._block, self._pos = item, 0
                continue
            end = len(self._block) if n < 0 else min(len(self._block), self._pos + wanted)
            parts.append(self._block[self._pos:end])
            wanted -= end - self._pos
            self._pos = end
        return b"".join(parts)

    def close(self):
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(0.01)


def _local(tag):
    return tag.rsplit("}", 1)[-1]


class DumpReader:
    """Iterate the pages of a dump; ``namespaces`` and ``language`` are known once the first page is yielded."""

    def __init__(self, path):
        self.path = path
        self.namespaces = None
        self.language = None

    def _fail(self, what, last):
        where = f" after page {last.id} ({last.title!r})" if last else " before the first page"
        raise InputError(f"{self.path}: {what}{where}") from None

    def __iter__(self):
        self._last = None
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise InputError(f"{self.path}: {e.strerror}") from None
        with f:
            if self.path.endswith(".bz2"):
                inner = PrefetchReader(_decompressed_blocks(f, bz2.BZ2Decompressor))
            elif self.path.endswith(".gz"):
                inner = PrefetchReader(_decompressed_blocks(f, lambda: zlib.decompressobj(wbits=31)))
            else:
                inner = f
            try:
                yield from self._pages(inner)
            except ET.ParseError as e:
                line, col = e.position
                msg = str(e).split(":")[0]
                self._fail(f"malformed XML at line {line}, column {col} ({msg})", self._last)
            except EOFError:
                self._fail("compressed stream ends early (truncated file)", self._last)
            except (OSError, zlib.error) as e:
                self._fail(f"corrupt compressed data ({e})", self._last)
            finally:
                if inner is not f:
                    inner.close()

    def _pages(self, stream):
        names, first_letter = {}, True
        context = ET.iterparse(stream, events=("start", "end"))
        root = None
        depth = 0
        for event, elem in context:
            if event == "start":
                depth += 1
                if root is None:
                    root = elem
                    self.language = elem.attrib.get("{http://www.w3.org/XML/1998/namespace}lang")
                continue
            depth -= 1
            tag = _local(elem.tag)
            if tag == "namespace":
                key = elem.attrib.get("key", "")
                if not re.fullmatch(r"-?[0-9]+", key):
                    self._fail(f"<namespace key={key!r}> is not a number", self._last)
                names[int(key)] = elem.text or ""
            elif tag == "case" and depth == 2:
                first_letter = (elem.text or "").strip() != "case-sensitive"
            elif tag == "siteinfo":
                self.namespaces = Namespaces(names, first_letter)
                root.clear()
            elif tag == "page" and depth == 1:
                if self.namespaces is None:
                    self.namespaces = Namespaces(names, first_letter)
                page = self._page(elem)
                root.clear()
                self._last = page
                yield page

    def _number(self, elem, title):
        try:
            return int(elem.text)
        except (TypeError, ValueError):
            raise InputError(f"{self.path}: page {title!r} has <{_local(elem.tag)}>{elem.text or ''}</"
                             f"{_local(elem.tag)}>, not a number") from None

    def _page(self, elem):
        title, ns, page_id, redirect, text = "", 0, None, "", ""
        for child in elem:
            tag = _local(child.tag)
            if tag == "title":
                title = child.text or ""
            elif tag == "ns":
                ns = self._number(child, title)
            elif tag == "id":
                page_id = self._number(child, title)
            elif tag == "redirect":
                redirect = child.attrib.get("title", "")
            elif tag == "revision":
                for sub in child:
                    if _local(sub.tag) == "text":
                        text = sub.text or ""
        if page_id is None:
            raise InputError(f"{self.path}: page {title!r} has no <id>")
        return Page(page_id, ns, title, redirect or redirect_target(text), text)
