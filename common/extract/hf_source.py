"""A dataset as Hugging Face ``datasets`` reads it → articles.jsonl (one document a row) or pairs.jsonl (two
documents and a label a row, as the document-pair sets of Zhou et al. 2020 are).

Where the rows come from (``open_split``): a hub name with its config and split, pinned to the commit the hub
names for ``revision`` (``huggingface_hub``'s ``dataset_info``), or a local ``save_to_disk`` folder, parquet, JSON
lines or CSV file, or a folder laid out as a hub dataset's repository (a clone of one). Every source is read as a
stream (``streaming=True``; a ``save_to_disk`` folder is memory-mapped Arrow), so memory stays nearly flat in the
dataset's size, and ``datasets``' cache goes into a folder the caller gives (inside its output folder), so nothing
is written elsewhere.

What a row becomes (``write_rows``): the fields the caller names give each document's id, title and text and the
row's label. A class-label column is written as its class's name (``ClassLabel.int2str``), any other label as its
string or digits. Texts are whitespace-collapsed, control characters (the pair sets' ``\\001``) read as spaces.
Without an id field a document is named by its split and row number (``train-17``); a pair's two documents by
their texts (the first 16 hex digits of their SHA-256, as the thesis gives each distinct text an id by its
content, shared across pairs and splits). A missing field, an empty text, a non-string text or title, an id that
is repeated (or, for a pair's documents, repeated with another text) or holds whitespace is one line naming the
row.
"""

import hashlib
import os
import re

from tqdm import tqdm

from common.io import InputError, plain_id, shown
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


def input_files(path):
    """The files a local dataset is read from, for the manifest's SHA-256 (a folder's hidden ones, such as a
    clone's .git, left out, as datasets leaves them); none for a hub dataset, whose commit the manifest names."""
    if not os.path.exists(path):
        return []
    if not os.path.isdir(path):
        return [path]
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        found += [os.path.join(folder, f) for f in files if not f.startswith(".")]
    return sorted(found)


class Split:
    """One split of a dataset, streamed: its ``rows``, their ``features`` (None where the format does not say, as
    for CSV), the number of rows where known (``total``), and what the manifest records of it (``record``)."""

    def __init__(self, rows, features, total, record):
        self.rows, self.features, self.total, self.record = rows, features, total, record


def open_split(dataset, config, split, revision, cache_dir, csv_columns=None):
    """The split ``split`` of ``dataset``: a local path (``local_format``) or a hub name. ``csv_columns`` names the
    columns of a CSV file without a header row (its first line is then a row)."""
    import datasets
    record = {"name": dataset, "config": config, "split": split, "datasets": datasets.__version__}
    local = os.path.exists(dataset)
    kind = local_format(dataset) if local else None
    if csv_columns and kind != "csv":
        raise InputError(f"--csv-columns: {dataset} is not a CSV file; only a CSV file without a header row needs "
                         "its columns named")
    if local:
        record["name"] = os.path.basename(os.path.normpath(dataset))
        if kind is None:
            loaded = datasets.load_from_disk(dataset)
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise InputError(f"{dataset}: no split {split!r} (its splits: {', '.join(loaded)})")
                loaded = loaded[split]
            return Split(loaded, loaded.features, len(loaded), record)
        # datasets reads a parquet file a row group at a time unless told a batch size, and its memory then grows
        # with the file; in batches of 1,000 rows it stays nearly flat
        options = {"column_names": list(csv_columns)} if csv_columns else {"batch_size": 1000} if kind == "parquet" \
            else {}
        try:
            rows = datasets.load_dataset(dataset, config, split=split, streaming=True, cache_dir=cache_dir) \
                if kind == "repository" else datasets.load_dataset(kind, data_files={split: dataset}, split=split,
                                                                   streaming=True, cache_dir=cache_dir, **options)
        except (OSError, ValueError) as e:
            raise InputError(f"{dataset}: datasets cannot read it ({type(e).__name__}: {_first_line(e)})") from None
        return Split(rows, rows.features, None, record)
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
    return Split(rows, rows.features, total, record)


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
    if split.features is not None:
        fields.check(list(split.features), where)
        feature = split.features.get(fields.label) if fields.label else None
        label_names = list(feature.names) if hasattr(feature, "int2str") else None
    seen = {}  # a document id → the start of its text's SHA-256 (pairs) or its row
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
    if not counts["rows"]:
        raise InputError(f"{where}: no rows")
    if fields.pairs:
        counts["documents"] = len(seen)


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
    """A document's id once, or, in pairs, again only with the same text."""
    if not pairs:
        if doc["id"] in seen:
            raise InputError(f"{at}: duplicate id {shown(doc['id'])} (first in row {seen[doc['id']]})")
        seen[doc["id"]] = row_number
        return
    digest = hashlib.sha256(doc["text"].encode("utf-8")).digest()[:8]
    if seen.setdefault(doc["id"], digest) != digest:
        raise InputError(f"{at}: id {shown(doc['id'])} names another text than in an earlier row")


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
        return names[value]
    label = one_line(str(value))
    if not label:
        raise InputError(f"{at}: field {name!r} (--label-field) is empty")
    return label
