"""A dataset as Hugging Face ``datasets`` reads it → articles.jsonl (one document a row) or pairs.jsonl (two
documents and a label a row, as the document-pair sets of Zhou et al. 2020 are).

Where the rows come from (``open_split``): a hub name with its config and split, pinned to the commit the hub
names for ``revision`` (``huggingface_hub``'s ``dataset_info``), or a local ``save_to_disk`` folder, parquet, JSON
lines or CSV file, or a folder laid out as a hub dataset's repository (a clone of one). Every source is read as a
stream (``streaming=True``; a ``save_to_disk`` folder is memory-mapped Arrow), so memory stays nearly flat in the
dataset's size, and ``datasets``' cache goes into a folder the caller gives (inside its output folder), so nothing
is written elsewhere. A local dataset is read only from inside the folder or file given: every path ``datasets``
would open (a ``save_to_disk`` folder's ``state.json`` and ``dataset_dict.json``, a repository's README
``configs``) is resolved, links included, and checked first, and the manifest hashes exactly the files read. Every
error of the libraries while a source is opened and its rows stream is one line (``library_errors``); a CSV file's
rows are checked against its header first (``check_csv``), where pandas would shift or pad them in silence.

What a row becomes (``write_rows``): the fields the caller names give each document's id, title and text and the
row's label. A class-label column is written as its class's name (``ClassLabel.int2str``), any other label as its
string or digits. Texts are whitespace-collapsed, control characters (the pair sets' ``\\001``) read as spaces.
Without an id field a document is named by its split and row number (``train-17``); a pair's two documents by
their texts (the first 16 hex digits of their SHA-256, as the thesis gives each distinct text an id by its
content, shared across pairs and splits). A missing field, an empty text or label (a class's name included), a
non-string text or title, an id that is repeated (or, for a pair's documents, repeated with another title or text)
or holds whitespace (a split's name that would give one included) is one line naming the row.
"""

import contextlib
import csv
import gzip
import hashlib
import os
import re
import sys
import zlib

from tqdm import tqdm

from common.io import InputError, TextInput, field, open_input, plain_id, read_json, shown
from common.jsontext import dumps_line

FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def local_format(path):
    """The ``datasets`` builder that reads a local file (by its suffix, a ``.gz`` after it allowed); None for a
    ``save_to_disk`` folder; ``"repository"`` for another folder, which datasets reads as it reads a hub dataset's
    repository (its data files, their splits by their names, or as its README's configs say)."""
    if os.path.isdir(path):
        if any(os.path.exists(os.path.join(path, n)) for n in ("state.json", "dataset_dict.json")):
            return None
        return "repository"
    stem = path[:-3] if path.endswith(".gz") else path
    kind = FORMATS.get(os.path.splitext(stem)[1].lower())
    if kind is None:
        raise InputError(f"{path}: not a dataset file datasets reads here (.parquet, .jsonl, .json or .csv, "
                         "plain or .gz) nor a folder")
    return kind


class Split:
    """One split of a dataset, streamed: its ``rows`` (library errors while they stream are one line, ``guarded``),
    their ``features`` (None where the format does not say, as for CSV), the number of rows where known
    (``total``), what the manifest records of it (``record``) and the local files read (``files``, none for a hub
    dataset, whose commit the record names)."""

    def __init__(self, rows, features, total, record, files=()):
        self.rows, self.features, self.total, self.record, self.files = rows, features, total, record, list(files)


@contextlib.contextmanager
def library_errors(where):
    """Whatever ``datasets``, pyarrow, pandas or gzip raise while a source is opened or its rows stream (a damaged
    page or archive, bytes that are not UTF-8, JSON that does not parse, a row larger than memory) as one line
    naming ``where``, the library's own words after it (which name the line where it says one)."""
    try:
        yield
    except InputError:
        raise
    except MemoryError:
        raise _out_of_memory(where) from None
    except Exception as e:
        raise InputError(f"{where}: datasets cannot read it ({type(e).__name__}: {_first_line(e)})") from None


def _out_of_memory(where):
    """A row past memory (a compressed file's that expands past it) as one line naming the dataset; cli's advice
    of smaller sizes names flags 01 hf has none of."""
    return InputError(f"{where}: out of memory reading its rows (a row, or a compressed file, that expands past "
                      "this machine's memory)")


def guarded(rows, where):
    """``rows`` (an iterable of a library's), each step taken under ``library_errors``, naming the last row read
    whole (a library reads ahead, in batches, so the row it was at is its own message's)."""
    with library_errors(where):
        iterator = iter(rows)
    number = 0
    while True:
        with library_errors(f"{where} after row {number}" if number else where):
            try:
                row = next(iterator)
            except StopIteration:
                return
        number += 1
        yield row


def inside(root, path, dataset):
    """``path``, a file or folder ``datasets`` would open for ``dataset``, checked to lie inside ``root`` (the
    dataset's own folder or file, links resolved), as it does wherever a path comes from (``state.json``,
    ``dataset_dict.json``, a README's ``configs``)."""
    real = os.path.realpath(path)
    if os.path.commonpath([real, root]) != root:
        raise InputError(f"{os.path.normpath(path)}: outside {dataset}, which names it (links resolved: {real}); "
                         "a dataset is read only from the folder or file given")
    return path


def disk_files(dataset, split):
    """The folder ``load_from_disk`` reads ``split`` of the ``save_to_disk`` folder ``dataset`` from (the folder
    itself, or a ``DatasetDict``'s split folder) and the files it opens there: ``dataset_dict.json``,
    ``state.json``, ``dataset_info.json`` and the Arrow files ``state.json`` names, each checked ``inside``."""
    root, files, folder = os.path.realpath(dataset), [], dataset
    listing = os.path.join(dataset, "dataset_dict.json")
    if os.path.exists(listing):
        splits = field(read_json(listing), listing, "splits", kind=list)
        if split not in splits:
            raise InputError(f"{dataset}: no split {split!r} (its splits: {', '.join(map(str, splits))})")
        folder = inside(root, os.path.join(dataset, split), dataset)
        files.append(listing)
    state_path = inside(root, os.path.join(folder, "state.json"), dataset)
    info_path = inside(root, os.path.join(folder, "dataset_info.json"), dataset)
    files += [state_path, info_path]
    for k, entry in enumerate(field(read_json(state_path), state_path, "_data_files", kind=list)):
        if not isinstance(entry, dict):
            raise InputError(f"{state_path}: _data_files → {k} is not a JSON object")
        name = field(entry, state_path, "filename", kind=str)
        files.append(inside(root, os.path.join(folder, name), dataset))
    return folder, files


def repository_files(builder, dataset, split):
    """The data files a repository-like folder's ``builder`` streams ``split`` from (as its README's ``configs``
    or its files' names say), each checked ``inside``, and its README, which ``datasets`` read for them."""
    root = os.path.realpath(dataset)
    data_files = builder.config.data_files or {}
    if split not in data_files:
        raise InputError(f"{dataset}: no split {split!r} (its splits: {', '.join(map(str, data_files)) or 'none'})")
    files = [os.path.join(dataset, "README.md")] if os.path.isfile(os.path.join(dataset, "README.md")) else []
    for path in data_files[split]:
        local = str(path).rsplit("::", 1)[-1]
        if "://" in local:
            raise InputError(f"{local}: not a local file, which {dataset}'s README names; a dataset is read only "
                             "from the folder given")
        files.append(inside(root, local, dataset))
    return [_named(dataset, path) for path in files]


def _named(dataset, path):
    """``path`` as under ``dataset`` as the user named it (``datasets`` gives absolute paths)."""
    return os.path.normpath(os.path.join(dataset, os.path.relpath(os.path.abspath(path), os.path.abspath(dataset))))


def check_csv(path, columns=None):
    """Every row of a CSV file holds as many fields as its header (or ``columns``, for a file without one) names,
    and no column is named twice; otherwise one line naming ``path:line``. pandas would make the first of one
    field too many the index (every column shifted) and fill a row of too few with nulls, both silently, and
    rename a repeated column."""
    expected = len(columns) if columns else None
    if columns:
        _once(columns, "--csv-columns")
    limit = csv.field_size_limit(sys.maxsize)  # a text of any length is a field; memory is the limit
    try:
        with open_input(path, "rb") as binary:
            rows = csv.reader(TextInput(binary, path))
            try:
                for row in rows:
                    if not row:  # pandas skips blank lines
                        continue
                    if expected is None:
                        _once(row, f"{path}:{rows.line_num}: its header")
                        expected = len(row)
                    elif len(row) != expected:
                        raise InputError(f"{path}:{rows.line_num}: {len(row)} fields, where "
                                         f"{'--csv-columns names' if columns else 'its header has'} {expected}")
            except csv.Error as e:
                raise InputError(f"{path}:{rows.line_num}: not a CSV row ({e})") from None
            except (EOFError, zlib.error, gzip.BadGzipFile) as e:
                raise InputError(f"{path}:{rows.line_num + 1}: truncated or corrupt compressed file ({e})") from None
    finally:
        csv.field_size_limit(limit)


def _once(names, what):
    seen = set()
    for name in names:
        if name in seen:
            raise InputError(f"{what}: column {name!r} named twice")
        seen.add(name)


def open_split(dataset, config, split, revision, cache_dir, csv_columns=None):
    """The split ``split`` of ``dataset``: a local path (``local_format``) or a hub name. ``csv_columns`` names the
    columns of a CSV file without a header row (its first line is then a row). A local dataset is read only
    from inside the folder or file named (``inside``), and ``files`` lists what is read."""
    import datasets
    record = {"name": dataset, "config": config, "split": split, "datasets": datasets.__version__}
    local = os.path.exists(dataset)
    kind = local_format(dataset) if local else None
    if csv_columns and kind != "csv":
        raise InputError(f"--csv-columns: {dataset} is not a CSV file; only a CSV file without a header row needs "
                         "its columns named")
    if local:
        record["name"] = os.path.basename(os.path.normpath(dataset))
        where = f"{dataset} [{split}]"
        if kind is None:
            folder, files = disk_files(dataset, split)
            with library_errors(where):
                loaded = datasets.Dataset.load_from_disk(folder)
            return Split(guarded(loaded, where), loaded.features, len(loaded), record, files)
        if kind == "repository":
            script = os.path.join(dataset, os.path.basename(os.path.abspath(dataset)) + ".py")
            if os.path.isfile(script):
                raise InputError(f"{script}: a dataset script, which datasets no longer runs and this project "
                                 "never does; give the dataset's data files (parquet, JSON lines, CSV)")
            with library_errors(where):
                builder = datasets.load_dataset_builder(dataset, config, cache_dir=cache_dir)
            files = repository_files(builder, dataset, split)
            with library_errors(where):
                for path in files:
                    if path.endswith((".csv", ".csv.gz")):
                        check_csv(path)
                rows = builder.as_streaming_dataset(split=split)
            return Split(guarded(rows, where), rows.features, None, record, files)
        if kind == "csv":
            with library_errors(where):
                check_csv(dataset, csv_columns)
        # datasets reads a parquet file a row group at a time unless told a batch size, and its memory then grows
        # with the file; in batches of 1,000 rows it stays nearly flat
        options = {"column_names": list(csv_columns)} if csv_columns else {"batch_size": 1000} if kind == "parquet" \
            else {}
        with library_errors(where):
            rows = datasets.load_dataset(kind, data_files={split: dataset}, split=split, streaming=True,
                                         cache_dir=cache_dir, **options)
        return Split(guarded(rows, where), rows.features, None, record, [dataset])
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    try:
        # the commit the revision names now: the rows read are that commit's, and a later run can ask for it
        record["revision"] = HfApi().dataset_info(dataset, revision=revision).sha
        rows = datasets.load_dataset(dataset, config, split=split, revision=record["revision"], streaming=True,
                                     cache_dir=cache_dir)
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise InputError(f"{dataset}: not a local file or folder, and the hub gives no such dataset, config or "
                         f"split ({type(e).__name__}: {_first_line(e)})") from None
    splits = rows.info.splits or {}
    total = splits[split].num_examples if split in splits and splits[split].num_examples else None
    return Split(guarded(rows, f"{dataset} [{split}]"), rows.features, total, record)


def _first_line(error):
    return (str(error).splitlines() or [""])[0]


class Fields:
    """The columns that become each document's id, title and text (one name each, or two for a pair) and the
    row's label (or None)."""

    def __init__(self, ids, titles, texts, label):
        self.ids, self.titles, self.texts, self.label = list(ids or []), list(titles or []), list(texts), label
        for flag, names in (("--id-field", self.ids), ("--title-field", self.titles)):
            if names and len(names) != len(self.texts):
                raise InputError(f"{flag} {' '.join(names)}: give one name for each --text-field "
                                 f"({len(self.texts)})")
        if len(self.texts) not in (1, 2):
            raise InputError(f"--text-field {' '.join(self.texts)}: give one field (documents) or two (pairs)")

    @property
    def pairs(self):
        return len(self.texts) == 2

    def names(self):
        return [(flag, name) for flag, names in (("--id-field", self.ids), ("--title-field", self.titles),
                                                 ("--text-field", self.texts), ("--label-field", [self.label]))
                for name in names if name is not None]

    def check(self, columns, where):
        """Every named field is a column of the dataset (``columns``, where the format says them)."""
        for flag, name in self.names():
            if name not in columns:
                raise InputError(f"{where}: no field {name!r} ({flag}); its fields are {', '.join(columns)}")


def one_line(text):
    return " ".join(_CONTROL.sub(" ", text).split())


def write_rows(split, fields, split_name, out, counts, where):
    """Write ``split``'s rows to ``out`` (text mode): articles (``{"id", "title", "text", "links": []}``, with
    ``categories`` and ``labels`` ``{"top": label}`` where there is a label) or, for two text fields, pairs
    (``{"id", "docs": [{"id", "title", "text"}, ...], "label"}``). ``where`` names the dataset in errors."""
    label_names = None
    if (not fields.ids or fields.pairs) and plain_id(split_name) != split_name:
        raise InputError(f"--split {split_name!r}: rows without an id are named SPLIT-ROW, and this split's name is "
                         "empty or holds whitespace or a control character, which the qrels and split files cannot "
                         "carry")
    if split.features is not None:
        fields.check(list(split.features), where)
        feature = split.features.get(fields.label) if fields.label else None
        label_names = list(feature.names) if hasattr(feature, "int2str") else None
    seen = {}  # a document id → the start of its text's SHA-256 (pairs) or its row
    try:
        _write_rows(split, fields, split_name, out, counts, where, label_names, seen)
    except MemoryError:
        raise _out_of_memory(where) from None
    if not counts["rows"]:
        raise InputError(f"{where}: no rows")
    if fields.pairs:
        counts["documents"] = len(seen)


def _write_rows(split, fields, split_name, out, counts, where, label_names, seen):
    """``write_rows``'s loop: each row checked and written, ``seen`` the ids so far."""
    checked = split.features is not None
    for row_number, row in enumerate(tqdm(split.rows, total=split.total, desc=split_name, unit=" rows",
                                          mininterval=1.0), 1):
        at = f"{where} row {row_number}"
        if not checked:
            fields.check(list(row), where)
            checked = True
        counts["rows"] += 1
        docs = [_document(row, fields, k, split_name, row_number, at) for k in range(len(fields.texts))]
        if fields.ids or fields.pairs:  # a row's own name (SPLIT-ROW) never repeats
            for doc in docs:
                _check_id(doc, seen, fields.pairs, row_number, at)
        label = _label(row, fields.label, label_names, at) if fields.label else None
        if fields.pairs:
            obj = {"id": f"{split_name}-{row_number}", "docs": docs}
            if label is not None:
                obj["label"] = label
            counts["pairs"] += 1
        else:
            obj = {**docs[0], "links": []}
            if label is not None:
                obj["categories"], obj["labels"] = [label], {"top": label}
            counts["articles"] += 1
        if label is not None:
            counts[f"label_{label}"] += 1
        out.write(dumps_line(obj))


def _text(row, name, at, flag, empty=False):
    value = row.get(name)
    if value is None and empty:  # a CSV's empty cell reads as None
        return ""
    if value is None:
        raise InputError(f"{at}: field {name!r} ({flag}) is missing")
    if not isinstance(value, str):
        raise InputError(f"{at}: field {name!r} ({flag}) is not a string: {shown(value)}")
    text = one_line(value)
    if not text and not empty:
        raise InputError(f"{at}: field {name!r} ({flag}) is empty")
    return text


def _document(row, fields, k, split_name, row_number, at):
    text = _text(row, fields.texts[k], at, "--text-field")
    title = _text(row, fields.titles[k], at, "--title-field", empty=True) if fields.titles else ""
    if fields.ids:
        value = row.get(fields.ids[k])
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise InputError(f"{at}: field {fields.ids[k]!r} (--id-field) is "
                             f"{'missing' if value is None else 'not a string: ' + shown(value)}")
        doc_id = plain_id(value)
        if doc_id is None:
            raise InputError(f"{at}: id {shown(value)} is empty or holds whitespace or a control character, "
                             "which the qrels and split files cannot carry")
    elif fields.pairs:
        doc_id = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    else:
        doc_id = f"{split_name}-{row_number}"
    return {"id": doc_id, "title": title, "text": text}


def _check_id(doc, seen, pairs, row_number, at):
    """A document's id once, or, in pairs, again only with the same title and text (a pair set's document is
    named by its text, and 02 classify refuses one id of two titles)."""
    if not pairs:
        if doc["id"] in seen:
            raise InputError(f"{at}: duplicate id {shown(doc['id'])} (first in row {seen[doc['id']]})")
        seen[doc["id"]] = row_number
        return
    digest = hashlib.sha256(f"{doc['title']}\n{doc['text']}".encode("utf-8")).digest()[:8]
    if seen.setdefault(doc["id"], digest) != digest:
        raise InputError(f"{at}: id {shown(doc['id'])} names another title or text than in an earlier row (a "
                         "document is one title and one text)")


def _label(row, name, names, at):
    value = row.get(name)
    if value is None:
        raise InputError(f"{at}: field {name!r} (--label-field) is missing")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{at}: field {name!r} (--label-field) is not a string or a whole number: {shown(value)}")
    if names is not None and isinstance(value, int):
        if not 0 <= value < len(names):  # datasets' ClassLabel -1: the row has no label (a hidden test split)
            raise InputError(f"{at}: field {name!r} (--label-field) is {value}, none of its {len(names)} classes "
                             "(an unlabelled split?)")
        value = names[value]
    label = one_line(str(value))
    if not label:
        raise InputError(f"{at}: field {name!r} (--label-field) is empty"
                         f"{f' (its class {shown(value)})' if names is not None else ''}")
    return label
