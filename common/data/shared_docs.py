"""docs.jsonl as one Arrow file that every training process of a node maps (``SharedDocuments``), and token stores
kept beside it (``shared_store``): the processes share the pages of one copy through the page cache, where lists of
Python strings would be one copy a process. The files live in the run's cache folder, keyed by what they hold, and
are written once, by the process that goes first (``accelerator.main_process_first``); the others read them."""

import collections.abc
import os

import numpy as np

from common import io
from common.data.docs_jsonl import Documents, read_documents
from common.io import InputError
from common.models.encoder import document_text
from common.outdir import folders

BATCH = 65_536  # documents a record batch of the Arrow file holds (a reader's whole batch is read at once)
FIELDS = ("id", "title", "text")


class Column(collections.abc.Sequence):
    """One string column of the mapped file, read by row: ``column[i]`` reads one value, iterating reads a record
    batch at a time."""

    def __init__(self, chunked):
        self.chunks = chunked.chunks
        self.starts = np.cumsum([0] + [len(chunk) for chunk in self.chunks])

    def __len__(self):
        return int(self.starts[-1])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i) + (len(self) if i < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.chunks[k][i - int(self.starts[k])].as_py()

    def __iter__(self):
        for chunk in self.chunks:
            yield from chunk.to_pylist()


class SharedDocuments:
    """docs.jsonl's ids, titles and texts as columns of an Arrow file in ``cache_dir`` that every process maps
    (``Column``: read by row), made from docs.jsonl, its fields and ids checked as ``Documents`` checks them, by the
    first process to ask. The file is named after docs.jsonl's SHA-256: a changed docs.jsonl is read again, one that
    cannot be read is made again with a note (``say``)."""

    def __init__(self, data_dir, cache_dir, say=print):
        self.path = os.path.join(data_dir, "docs.jsonl")
        folders.make_folder(cache_dir)
        mapped = os.path.join(cache_dir, f"docs-{io.sha256(self.path)[:32]}.arrow")
        table = _read_table(mapped)
        if table is None:
            if os.path.lexists(mapped):
                say(f"note: {mapped} cannot be read; made again from {self.path}")
            _write_table(self.path, data_dir, cache_dir, os.path.basename(mapped))
            table = _read_table(mapped)
        self._ids = table.column("id")
        self.ids, self.titles, self.texts = (Column(table.column(name)) for name in FIELDS)

    def __len__(self):
        return len(self.ids)

    def rows(self, ids):
        """The positions of ``ids``, -1 for an id that is not in docs.jsonl: one hash table of the corpus's ids for
        the call, freed after it, where ``Documents`` keeps a dictionary in every process."""
        import pyarrow as pa
        import pyarrow.compute as pc
        found = pc.index_in(pa.array(list(ids), type=pa.large_string()), value_set=self._ids)
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    def inputs(self, sep_token, which=None):
        """Model input strings (title + sep + text) of all documents, or of the positions in ``which``, one at a
        time."""
        if which is None:
            return (document_text(t, x, sep_token) for t, x in zip(self.titles, self.texts))
        return (document_text(self.titles[i], self.texts[i], sep_token) for i in which)


def tokenising(texts, total):
    """``texts`` read through a progress bar: the first process tokenises a whole dump's documents for the others,
    minutes in which nothing else is printed."""
    from tqdm import tqdm
    return tqdm(texts, total=total, desc="tokenise", unit=" texts", mininterval=1.0)


def _read_table(path):
    """The mapped table of the Arrow file ``path``, or None where it is missing or cannot be read as one of
    ``FIELDS``."""
    import pyarrow as pa
    if not os.path.isfile(path) or os.path.islink(path):
        return None
    try:
        table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
    except (OSError, pa.ArrowException):
        return None
    return table if table.column_names == list(FIELDS) else None


def _write_table(docs_path, data_dir, cache_dir, name):
    """docs.jsonl read once into the Arrow file ``cache_dir/name``, record batch by record batch, made whole or not
    at all; a duplicate id is refused as ``Documents`` refuses it (file and line)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    schema = pa.schema([(name_, pa.large_string()) for name_ in FIELDS])
    with folders.writing(cache_dir, name) as staged:
        with pa.OSFile(staged, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            columns, batches = [[], [], []], 0
            for _, *fields in read_documents(docs_path):
                for column, value in zip(columns, fields):
                    column.append(value)
                if len(columns[0]) == BATCH:
                    writer.write_batch(pa.record_batch(columns, schema=schema))
                    columns, batches = [[], [], []], batches + 1
            if columns[0] or not batches:
                writer.write_batch(pa.record_batch(columns, schema=schema))
        ids = _read_table(staged).column("id")
        if pc.count_distinct(ids).as_py() != len(ids):
            Documents(data_dir, texts=False)  # names the file and line of the first duplicate
            raise InputError(f"{docs_path}: holds an id twice")


def store_key(docs, tokenizer, *settings):
    """The digest a token store of ``docs`` (``SharedDocuments``) is kept under: docs.jsonl's SHA-256, the
    tokenizer (its vocabulary and settings, as ``datasets`` fingerprints it) and ``settings`` (the length, which
    documents)."""
    from datasets.fingerprint import Hasher
    return Hasher.hash([io.sha256(docs.path), tokenizer, *settings])


def shared_store(cache_dir, key, build):
    """A ``TokenStore`` kept in ``cache_dir`` under ``key`` (a digest of what it is made from) and mapped by every
    process that asks: ``build()`` makes it where it is missing or cannot be read, once; its arrays are then read
    from the files, read-only, in every process."""
    from common.models.tokens import TokenStore

    def arrays():
        made = build()
        return {"ids": np.asarray(made.ids, dtype=np.int32), "offsets": np.asarray(made.offsets, dtype=np.int64),
                "pad": np.asarray([made.pad_id], dtype=np.int64)}
    def store(arrays):
        ids, offsets, pad = arrays.get("ids"), arrays.get("offsets"), arrays.get("pad")
        if ids is None or offsets is None or pad is None or ids.ndim != 1 or offsets.ndim != 1 or \
                not len(offsets) or offsets[0] != 0 or offsets[-1] != len(ids) or pad.shape != (1,):
            return None
        return TokenStore.of_arrays(ids, offsets, int(pad[0]))
    return shared_arrays(cache_dir, f"tokens-{key}", arrays, store)


def shared_arrays(cache_dir, name, build, read, say=None):
    """What ``read`` makes of arrays kept as .npy files in the folder ``cache_dir/name`` (``name`` holding a digest of
    what they are made from) and mapped read-only by every process that asks: ``read`` is given them as a
    dictionary of file name (without .npy) to array and returns what they hold, or None where they are not that.
    ``build()`` returns such a dictionary where the folder is missing, one of its files cannot be read or ``read``
    refuses them; it is then written whole or not at all, once, by the first process to ask
    (``main_process_first``), and read back. A folder that was there is made again with a note (``say``); a file or
    link at its name is refused in one line."""
    folders.make_folder(cache_dir)
    folder = os.path.join(cache_dir, name)
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        raise InputError(f"{folder}: not a folder of the cache (a file or a link); remove it")
    found = _read_arrays(folder, read)
    if found is None:
        if say is not None and os.path.lexists(folder):
            say(f"note: {folder} cannot be read; made again")
        made = build()
        with folders.writing(cache_dir, name) as staged:
            os.mkdir(staged)
            for file, array in made.items():
                np.save(os.path.join(staged, f"{file}.npy"), array, allow_pickle=False)
        found = _read_arrays(folder, read)
    return found


def _read_arrays(folder, read):
    """What ``read`` makes of ``folder``'s .npy files mapped read-only, or None where it is missing, one of them
    cannot be read, or ``read`` refuses them."""
    if not os.path.isdir(folder):
        return None
    try:
        # plain arrays over the mapped pages: a memmap's slice is a memmap, slower to make in every batch
        found = {file[:-len(".npy")]: np.load(os.path.join(folder, file), mmap_mode="r", allow_pickle=False)
                 .view(np.ndarray) for file in os.listdir(folder) if file.endswith(".npy")}
    except (OSError, ValueError, EOFError):  # EOFError: an empty file
        return None
    return read(found)
