"""Reading what the numbered scripts pass each other: input files (JSONL, plain or gzip; TREC qrels; JSON) with
errors that name the file and line, the SHA-256 of a file, a folder's manifest and the check of an input against it,
and the errors a user can fix (``InputError``). Writing is ``common.outdir.folders``'s (an output folder), with
``common.outdir.provenance`` (a manifest's record) and ``common.jsontext`` (JSON text)."""

import gzip
import hashlib
import json
import math
import os
import re
import zlib

import orjson


class Preempted(Exception):
    """Training stopped on SIGTERM after saving a checkpoint; the scripts exit with status 143 (128 + SIGTERM)."""


class InputError(Exception):
    """Bad input a user can fix; the scripts print it as one line and exit non-zero. A line break or other control
    character in the message (from a file name, a CSV header, a value quoted from the input) is shown escaped, as
    Python writes it in a string, so that the message stays one line."""

    def __init__(self, message):
        super().__init__(_CONTROL.sub(lambda m: repr(m.group())[1:-1], message))


# what str.splitlines() breaks a line at, and the other C0/C1 control characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


_SAFE_NAME = re.compile(r"\w[\w.-]{0,99}")


def safe_name(name, what):
    """``name``, checked to be usable as (part of) a file name in an output folder: letters, digits, '_', '-' and
    '.', not first, at most 100 characters, so that it can neither leave the folder nor name a hidden file. A name
    from data or the command line goes through here before it becomes a path; ``what`` says where it came from in
    the one-line error (e.g. ``"articles.jsonl:3: label level"``)."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise InputError(f"{what} {name!r} cannot be a file name: use at most 100 letters, digits, '_', '-' and "
                         f"'.' (not first)")
    return name


class TextInput:
    """An input file's text, decoded a line at a time from its bytes, so that bytes that are not UTF-8 are an
    InputError naming the file and the line (a text wrapper decodes ahead and would name neither). Lines end in
    "\n" ("\r\n" is read as "\n"), and a byte-order mark that starts the file is no text (a headerless qrels
    file's first judgement kept whole); iteration, ``readline`` and ``read`` as a text file's."""

    def __init__(self, binary, path):
        self._f, self._path, self._line, self._start = binary, path, 0, True

    def _decode(self, raw, first_line):
        start, self._start = self._start, self._start and not raw
        try:
            text = raw.decode("utf-8").replace("\r\n", "\n")
            return text.removeprefix("\ufeff") if start else text
        except UnicodeDecodeError as e:
            line = first_line + raw.count(b"\n", 0, e.start)
            raise InputError(f"{self._path}:{line}: not UTF-8 text (bytes {raw[e.start:e.start + 4]!r}); give the "
                             "file in UTF-8") from None

    def readline(self, size=-1):
        raw = self._f.readline(size)
        if raw:
            self._line += 1
        return self._decode(raw, self._line)

    def read(self, size=-1):
        raw = self._f.read(size)
        text = self._decode(raw, self._line + 1)
        self._line += raw.count(b"\n")
        return text

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_input(path, mode="r"):
    """An input file opened for reading (text as UTF-8, ``TextInput``); a missing or unreadable file, or a
    directory, is an InputError. In binary mode a gzip file (known by its magic bytes, not its name) is read
    decompressed."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a file")
    verify_input(path)
    try:
        if "b" in mode:
            with open(path, "rb") as f:
                if f.read(2) == b"\x1f\x8b":
                    return gzip.open(path, "rb")
            return open(path, "rb")
        return TextInput(open(path, "rb"), path)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def read_input_bytes(path):
    """The whole of an input file as bytes, a gzip file decompressed (``open_input``); a truncated or corrupt
    compressed file is an InputError naming it."""
    with open_input(path, "rb") as f:
        try:
            return f.read()
        except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise InputError(f"{path}: truncated or corrupt compressed file ({e})") from None


# the longest JSONL line read (``--max-line-mb``): a line is held whole while parsed, and a file without newlines
# (a wrong file, /dev/zero) would otherwise be read into memory entire
MAX_LINE_BYTES = 64 << 20


def read_jsonl(path, required=()):
    """Yield ``(line_number, object)`` for each non-empty line of a plain or gzip file; any defect, a truncated
    compressed file or a line longer than ``MAX_LINE_BYTES`` included, names ``path:line``."""
    loads = orjson.loads
    limit = MAX_LINE_BYTES
    lineno = 0
    with open_input(path, "rb") as f:
        try:
            for lineno, raw in enumerate(iter(lambda: f.readline(limit + 1), b""), 1):
                if len(raw) > limit and raw[-1:] != b"\n":
                    raise InputError(f"{path}:{lineno}: line longer than {limit >> 20} MB (--max-line-mb)")
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError as e:
                    if not raw.strip():
                        continue
                    raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
                if type(obj) is not dict:
                    raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                for field in required:
                    if field not in obj:
                        raise InputError(f"{path}:{lineno}: missing field {field!r}")
                yield lineno, obj
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise InputError(f"{path}:{lineno + 1}: truncated or corrupt compressed file ({e})") from None


# a relevance as trec_eval and pytrec_eval read it: a whole number in a C int
RELEVANCE = re.compile(r"-?[0-9]{1,10}")
RELEVANCE_RANGE = (-2 ** 31, 2 ** 31 - 1)


def read_trec_qrels(path):
    """TREC qrels ``qid 0 docid rel`` → {qid: {docid: rel}}; a malformed line, or a relevance that is not a whole
    number within a C int (``RELEVANCE_RANGE``), names ``path:line``."""
    qrels = {}
    with open_input(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise InputError(f"{path}:{lineno}: expected 'qid 0 docid rel'")
            rel = parts[3]
            if not RELEVANCE.fullmatch(rel) or not RELEVANCE_RANGE[0] <= int(rel) <= RELEVANCE_RANGE[1]:
                raise InputError(f"{path}:{lineno}: relevance {shown(rel)} is not a whole number between "
                                 f"{RELEVANCE_RANGE[0]:,} and {RELEVANCE_RANGE[1]:,} (trec_eval's)")
            qrels.setdefault(parts[0], {})[parts[2]] = int(rel)
    return qrels


def shown(value, limit=40):
    """A value read from a file as an error message shows it: as JSON, on one line, cut after ``limit``
    characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


_ID_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def plain_id(value):
    """``value`` as an id that the qrels, split and run files carry among whitespace-separated fields: a string, or
    a whole number written as one, that is not empty and holds no whitespace or control character; None where it
    cannot be one (the caller names the row)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.split() == [value] and not _ID_CONTROL.search(value):
        return value
    return None


def number_field(value, where, name, low=-math.inf, high=math.inf, integer=False):
    """``value``, the field ``name`` of what was read at ``where`` (``path:line``), as a number: a JSON number (a bool
    is none: JSON's ``true`` is not 1), a whole one where ``integer``, finite and within [``low``, ``high``]; else one
    line naming the place, the field and what it holds."""
    kinds = int if integer else (int, float)
    if (isinstance(value, kinds) and not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(value))
            and low <= value <= high):
        return value
    kind = "a whole number" if integer else "a number"
    span = (f" between {low:,} and {high:,}" if math.isfinite(low) and math.isfinite(high) else
            f" of at least {low:,}" if math.isfinite(low) else f" of at most {high:,}" if math.isfinite(high) else "")
    raise InputError(f"{where}: field {name!r} must be {kind}{span}, not {shown(value)}")


_HASHED = {}  # (path, inode, size, mtime, ctime) → SHA-256: a file is read once a process unless it is written


def sha256(path):
    """A file's SHA-256, remembered for as long as the file is not written (ctime moves on any write, even one
    that keeps the size and sets the old mtime back), so that checking an input (``verify_input``), a faiss
    index's record and a manifest's ``inputs`` read a large file once."""
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


# the most digits a JSON integer of a file the project reads may have: enough for transformers' "no limit"
# (10^30, 31 digits), never the hundreds a damaged or hostile file may hold
MAX_DIGITS = 64


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is not finite")
    return value


def _short_int(text):
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"a number of {len(text.lstrip('-')):,} digits")
    return int(text)


def loads(text):
    """JSON text as the project reads every JSON file: a number must be finite and at most ``MAX_DIGITS`` digits
    long (Python's json module would take ``NaN``, ``Infinity``, ``1e400`` as infinity, and integers of thousands
    of digits, as orjson, which reads the JSONL files, does not); a ValueError otherwise."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_short_int)


def number(value, where, kind=int, low=None, high=None):
    """``value``, a number read from a file, checked before use: a JSON integer (``kind=int``: ``true`` is none, nor
    ``1.0``) or any JSON number (``kind=float``), finite, between ``low`` and ``high`` where given; anything else
    (a string, a list, ``null``) is one line naming ``where`` (the file, its line and the field)."""
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    if not (type(value) is int or (kind is float and type(value) is float)):
        raise InputError(f"{where}: {shown} is not a JSON {'integer' if kind is int else 'number'}")
    if not math.isfinite(value):
        raise InputError(f"{where}: {shown} is not finite")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low:,} and {high:,}" if low is not None and high is not None else \
            f"at least {low:,}" if low is not None else f"at most {high:,}"
        raise InputError(f"{where}: {shown} is not {bounds}")
    return value


def read_json_or_empty(path):
    """A JSON file's value, or {} where there is no file; a file that is not JSON text (``loads``: numbers finite
    and of a sane length) is an InputError."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return loads(f.read())
    except ValueError as e:  # UnicodeDecodeError is one
        raise InputError(f"{path}: not JSON text ({e})") from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def read_json(path, kind=dict):
    """A JSON file that must be there, its value a ``kind`` (an object, a list); anything else is one line naming
    it."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: {'is a directory, not a file' if os.path.isdir(path) else 'no such file'}")
    value = read_json_or_empty(path)
    if not isinstance(value, kind):
        raise InputError(f"{path}: not a JSON {'object' if kind is dict else kind.__name__}")
    return value


def field(value, path, *keys, kind=None):
    """``value[keys[0]][keys[1]]...``, a value read from the file ``path``, each level a JSON object that holds the
    key, and the last of type ``kind`` where given; a missing key or a wrong type is one line naming the file and
    the keys."""
    for depth, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            raise InputError(f"{path}: no {' → '.join(map(str, keys[:depth + 1]))}")
        value = value[key]
    if kind is not None and (not isinstance(value, kind) or (isinstance(value, bool) and bool not in
                                                              (kind if isinstance(kind, tuple) else (kind,)))):
        raise InputError(f"{path}: {' → '.join(map(str, keys))} is not a JSON "
                         f"{'number' if kind in ((int, float), int, float) else getattr(kind, '__name__', kind)}")
    return value


# the manifest fields that readers use, with their types (docs/contract.md)
MANIFEST_FIELDS = {"script": str, "state": str, "language": str, "args": dict, "inputs": dict, "counts": dict,
                   "sha256": dict, "files": list}


def read_manifest(directory):
    """A folder's manifest.json ({} where there is none), its fields that readers use of their types."""
    path = os.path.join(directory, "manifest.json")
    manifest = read_json_or_empty(path)
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: not a manifest (a JSON object); re-run the step that wrote {directory}")
    for field, kind in MANIFEST_FIELDS.items():
        if manifest.get(field) is not None and not isinstance(manifest[field], kind):
            raise InputError(f"{path}: field {field!r} is not a JSON {'string' if kind is str else kind.__name__}; "
                             f"re-run the step that wrote {directory}")
    return manifest


def source_language(path):
    """The language 01 recorded in the manifest beside an input file (a dump's), or None."""
    return read_manifest(os.path.dirname(os.path.abspath(path))).get("language")


def verify_input(path):
    """Refuse an input file that is not what the run that wrote its folder committed: its folder's manifest.json
    is still marked ``committing`` (the run was killed while moving its files into place, so old and new files may
    lie side by side), or the file's SHA-256 differs from the one the manifest names. A folder without a manifest,
    or a file the manifest does not name, was made by hand and is read as it is."""
    folder, name = os.path.split(os.path.abspath(path))
    manifest_path = os.path.join(folder, "manifest.json")
    if name == "manifest.json" or not os.path.isfile(manifest_path):
        return
    try:
        manifest = read_manifest(folder)
    except InputError:
        raise InputError(f"{manifest_path}: not a readable JSON manifest; re-run the step that wrote {folder}") \
            from None
    if manifest.get("state") == "committing":
        raise InputError(f"{folder}: its run stopped while committing its files (manifest.json is marked "
                         f"'committing'); run {manifest.get('script') or 'it'} again")
    expected = manifest.get("sha256")
    if not isinstance(expected, dict) or name not in expected:
        return
    if sha256(path) != expected[name]:
        raise InputError(f"{path}: differs from what {manifest.get('script') or 'its run'} wrote (SHA-256 in "
                         f"{manifest_path}); it changed afterwards, or its run did not finish: run it again")
