"""One fuzz target per reader and parser that a user's file or flag reaches, and the invariant they all keep.

Each target takes the bytes of one input and a fresh work folder, writes the input there as the file (or files)
its reader reads, and calls the reader as the scripts do. ``run_one(name, data)`` checks the invariant: the
reader returns, or stops with the project's one-line error (``InputError``, a message of one line: ``cli.run``
prints it and exits 2; argparse's own usage error exits 2 as well); any other exception is a defect, and so is a
write outside the work folder (seen by an audit hook on every open for writing, rename, removal and folder made).
Time and memory per input are bounded by the runner (``fuzz/run.py``: libFuzzer's ``-timeout`` and
``-rss_limit_mb``).

This module needs no fuzzer: ``tests/test_fuzz_replay.py`` replays the crash corpus through ``run_one``.
"""

import collections
import contextlib
import io as _io
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from common.io import InputError  # noqa: E402

SEP = b"\x00\x00"  # splits one input into the several files of a multi-file reader

DOCS = [{"id": f"d{i}", "title": f"Title {i}", "text": f"text of document {i}"} for i in range(4)]
INDEX = {d["id"]: i for i, d in enumerate(DOCS)}


class Defect(AssertionError):
    """The invariant broken: what a user would meet as a traceback or a stray file."""


# -- writes outside the work folder --------------------------------------------------------------------------------

# events that remove or change the path they are given first
_PATH_EVENTS = {"os.remove", "os.rmdir", "shutil.rmtree", "os.truncate", "os.chmod", "os.chown", "os.utime",
                "os.link", "os.symlink"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# outside the work folder: files and folders made during the input (a library's scratch file is fine if it is gone
# when the input is done) and the paths of anything that existed before and was changed or removed
_guard = {"root": None, "made": set(), "strays": [], "hooked": False}


def _outside(path):
    if isinstance(path, int) or path is None:
        return None
    path = os.fsdecode(path)
    if path == os.devnull:
        return None
    real, root = os.path.realpath(path), _guard["root"]
    return None if real == root or real.startswith(root + os.sep) else real


def _made_or_changed(path):
    if path in _guard["made"] or not os.path.lexists(path):
        _guard["made"].add(path)
    else:
        _guard["strays"].append(path)


def _at(path, dir_fd):
    """``path`` as an event with ``dir_fd`` means it (shutil.rmtree walks a tree by folder descriptors)."""
    if isinstance(dir_fd, int) and dir_fd >= 0 and isinstance(path, (str, bytes)) and not os.path.isabs(path):
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
        except OSError:
            return path
    return path


def _audit(event, args):
    if _guard["root"] is None:
        return
    if event in ("os.remove", "os.rmdir", "os.mkdir") and args:
        args = (_at(args[0], args[-1]),) + tuple(args[1:])
    if event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int)
                                                                           and flags & _WRITE_FLAGS):
            path = _outside(path)
            if path:
                _made_or_changed(path)
    elif event == "os.mkdir" and (path := _outside(args[0])):
        _made_or_changed(path)
    elif event == "os.rename":
        source, target = _outside(args[0]), _outside(args[1])
        if source and source not in _guard["made"]:
            _guard["strays"].append(source)
        if target:
            _made_or_changed(target)
    elif event in _PATH_EVENTS and args and (path := _outside(args[0])):
        if path not in _guard["made"]:
            _guard["strays"].append(path)



def _write(folder, name, data):
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _jsonl(folder, name, rows):
    return _write(folder, name, "".join(json.dumps(r) + "\n" for r in rows).encode())


def _parts(data, n):
    parts = data.split(SEP, n - 1)
    return parts + [b""] * (n - len(parts))


def _text(data):
    return data.decode("utf-8", "replace")


# -- 01's readers --------------------------------------------------------------------------------------------------

def dump(data, work, name="dump.xml"):
    from common.extract.dump import DumpReader
    for page in DumpReader(_write(work, name, data)):
        pass


def dump_bz2(data, work):
    dump(data, work, "dump.xml.bz2")


def wikitext(data, work):
    """A page's wikitext as 01 wiki cleans it (``process_article``): the lead (first paragraph or section) or the
    full text, its links and categories, on English Wikipedia's namespaces."""
    from common.extract.wiki import ExtractConfig, process_article
    from common.extract.wikitext import Namespaces
    mode = data[0] if data else 0
    names = {-2: "Media", -1: "Special", 1: "Talk", 2: "User", 4: "Wikipedia", 6: "File", 10: "Template",
             14: "Category"}
    config = ExtractConfig(Namespaces(names), lead=("first-paragraph", "section")[mode & 1],
                           links=("lead", "all")[mode >> 1 & 1], text=("lead", "full")[mode >> 2 & 1], min_chars=5)
    process_article("Page", _text(data[1:]), config)


def arxiv(data, work):
    from common.extract.arxiv import extract_arxiv
    out = _io.StringIO()
    extract_arxiv(_write(work, "arxiv.json", data), out, ("cs",) if len(data) % 2 else (), collections.Counter())


def dictd(data, work):
    from common.extract.dictd import extract_dictd
    index, body = _parts(data, 2)
    extract_dictd(_write(work, "d.index", index), _write(work, "d.dict", body), _io.StringIO(),
                  collections.Counter(), min_chars=5)


def _tree(data, work, suffix, labels):
    """Files from the parts of ``data``: a part ``NAME\\x01CONTENT`` is ``NAME`` (slashes make folders), else
    ``LABEL/pN`` with ``suffix``."""
    root = os.path.join(work, "in")
    os.makedirs(root)
    for n, part in enumerate(data.split(SEP)[:16]):
        name, sep, content = part.partition(b"\x01")
        if sep:
            rel = os.path.normpath(_text(name).replace("\0", "")).lstrip("./") or f"p{n}"
            if rel.startswith("..") or os.path.isabs(rel):
                rel = f"p{n}"
            rel = rel if rel.endswith(suffix) else rel + suffix
        else:
            rel, content = os.path.join(labels[n % len(labels)], f"p{n}{suffix}"), part
        try:
            _write(root, rel, content)
        except OSError:  # a name that is a folder already, or too long: not this input's file
            pass
    return root


def rst(data, work):
    from common.extract.rst import extract_rst
    extract_rst(_tree(data, work, ".rst", ["", "guide"]), _io.StringIO(), collections.Counter(), min_chars=5)


def folder(data, work):
    from common.extract.plaintext import extract_folder
    extract_folder(_tree(data, work, ".txt", ["sport", "tiede"]), _io.StringIO(), collections.Counter(),
                   min_chars=5)


def csv(data, work):
    from common.extract.plaintext import extract_csv
    flags, body = data[:1], data[1:]
    options = {}
    if flags and flags[0] & 1:
        options["id_column"] = "id"
    if flags and flags[0] & 2:
        options["label_column"] = "label"
    extract_csv(_write(work, "table.csv", body), _io.StringIO(), collections.Counter(), min_chars=5, **options)


def sentences(data, work):
    """01 sentences' input (``{"id", "text", "key_sentences"}``) and 02 sentences' (``sentences.jsonl``)."""
    from common.data.keysent_splits import read_sentences
    from common.extract.sentences import extract_sentences
    path = _write(work, "in.jsonl", data)
    quiet = {"say": lambda text: None}
    for reader in (lambda: extract_sentences(path, _io.StringIO(), "punkt", collections.Counter(), **quiet),
                   lambda: read_sentences(path)):
        with contextlib.suppress(InputError):
            reader()


# -- 02–05's readers -----------------------------------------------------------------------------------------------

def articles(data, work):
    """02's articles.jsonl (links, labels) and docs.jsonl as 03–05 read it."""
    from common.data.docs_jsonl import Documents
    from common.data.articles import read_articles
    path = _write(work, "articles.jsonl", data)
    docs = _io.BytesIO()
    read_articles(path, docs, collections.Counter())
    _write(work, "data/docs.jsonl", data)
    Documents(os.path.join(work, "data"))


def splits(data, work):
    """splits.json, as 03 --objective mlm --mlm-docs train reads it."""
    from types import SimpleNamespace

    from common.train.objectives.mlm import MLMObjective
    _jsonl(work, "docs.jsonl", DOCS)
    _write(work, "splits.json", data)
    objective = MLMObjective.__new__(MLMObjective)
    objective.args = SimpleNamespace(data=work, mlm_docs="train", cache_dir=os.path.join(work, "cache"))
    objective.say = print
    objective._documents()


def triplets(data, work):
    from common.data.docs_jsonl import Documents, read_triplets
    _jsonl(work, "docs.jsonl", DOCS)
    read_triplets(_write(work, "triplets.train.jsonl", data), Documents(work))


def pairs(data, work):
    """02 retrieval --pairs FILE."""
    from common.data.retrieval import file_queries
    split = np.zeros(len(DOCS), dtype=np.int8)
    file_queries(_write(work, "pairs.jsonl", data), INDEX, split, _jsonl(work, "articles.jsonl", DOCS),
                 collections.Counter())


def beir(data, work):
    """02 beir: a BEIR folder's corpus.jsonl, queries.jsonl and qrels/test.tsv."""
    from common.outdir import folders
    from common.data.beir import write_beir
    corpus, queries, test = _parts(data, 3)
    folder = os.path.join(work, "beir")
    _write(folder, "corpus.jsonl", corpus)
    _write(folder, "queries.jsonl", queries)
    _write(os.path.join(folder, "qrels"), "test.tsv", test)
    with folders.Outputs(os.path.join(work, "out"), "02_build_graph.py", "beir") as outputs:
        write_beir(folder, outputs, collections.Counter())


def classify_splits(data, work):
    """02 classify: a task's training and test splits (01 hf's articles.jsonl or pairs.jsonl)."""
    from common.outdir import folders
    from common.data.classify_splits import write_tasks
    train, test = _parts(data, 2)
    with folders.Outputs(os.path.join(work, "out"), "02_build_graph.py", "classify") as outputs:
        write_tasks([("t", _write(work, "train.jsonl", train), _write(work, "test.jsonl", test))], outputs,
                    collections.Counter())


def similar_articles(data, work):
    """02 similarity: the articles table and the pickled dictionary of similar titles."""
    from common.data import similar_articles as reader
    table, targets = _parts(data, 2)
    counts = collections.Counter()
    ids = reader.write_articles(_write(work, "wines.txt", table), _io.StringIO(), counts)
    reader.write_qrels(reader.read_targets(_write(work, "gt", targets)), ids, _io.StringIO(), counts)


def _hf_rows(dataset, work, split="train", csv_columns=None, fields=("text",), label=None):
    """01 hf's reading of ``dataset`` (``open_split``, then every row as ``write_rows`` writes it), the library's
    cache in the work folder as 01 keeps it in its output folder."""
    from common.extract import hf_source
    opened = hf_source.open_split(dataset, None, split, "main", os.path.join(work, "cache"), csv_columns)
    hf_source.write_rows(opened, hf_source.Fields(None, None, fields, label), split, _io.StringIO(),
                         collections.Counter(), dataset)


def hf_repository(data, work):
    """01 hf on a folder laid out as a hub dataset's repository: its README's front matter (``configs``, which
    name the data files and may name any path) and its data files (``_tree``'s parts, CSV files)."""
    readme, files = _parts(data, 2)
    root = _tree(files, work, ".csv", ["data"])
    _write(root, "README.md", readme)
    _hf_rows(root, work)


_COLUMNS = {0: None, 1: ["label", "text"], 2: ["label", "text", "other"], 3: ["text", "text"]}


def hf_csv(data, work):
    """01 hf on a CSV file (plain, or gzip where the body starts so), with its header row or without one
    (``--csv-columns``, chosen by the first byte: none, two or three names, or one given twice)."""
    flags, body = data[:1], data[1:]
    columns = _COLUMNS[flags[0] & 3] if flags else None
    name = "table.csv.gz" if body[:2] == b"\x1f\x8b" else "table.csv"
    _hf_rows(_write(work, name, body), work, csv_columns=columns, label="label" if columns else None)


def hf_disk(data, work):
    """01 hf on a ``save_to_disk`` folder whose metadata is the input: ``state.json`` and ``dataset_info.json``
    of a dataset of two rows (its Arrow file real), and a ``dataset_dict.json`` where the input has a third part
    (the folder then one split's, ``train``, of a ``DatasetDict``); their paths may name any file."""
    import datasets
    state, info, listing = _parts(data, 3)
    root = os.path.join(work, "saved")
    folder = os.path.join(root, "train") if listing else root
    datasets.Dataset.from_dict({"text": ["one text", "another"]}).save_to_disk(folder)
    _write(folder, "state.json", state)
    _write(folder, "dataset_info.json", info)
    if listing:
        _write(root, "dataset_dict.json", listing)
    _hf_rows(root, work)


def qrels(data, work):
    from common.data.retrieval import read_qrels
    from common.eval import wikispecter
    path = _write(work, "x.qrels", data)
    read_qrels(path)
    wikispecter.read_qrels(path, INDEX)


def topics(data, work):
    """topics.<level>.{train,test}.jsonl (05 topics), a classification split (05 classify), the ratings of a
    similarity test set, and 01's --topic-map TSV."""
    from common.extract.topic_labels import read_topic_map
    from common.eval import classify, similarity, wikispecter
    train, test = _parts(data, 2)
    _write(work, "topics.top.train.jsonl", train)
    _write(work, "topics.top.test.jsonl", test)
    for reader in (lambda: wikispecter.read_topics(work, "top", INDEX),
                   lambda: classify.read_split(os.path.join(work, "topics.top.train.jsonl"), INDEX),
                   lambda: similarity.read_ratings(os.path.join(work, "topics.top.train.jsonl"), INDEX),
                   lambda: read_topic_map(_write(work, "map.tsv", data))):
        with contextlib.suppress(InputError):
            reader()


def queries(data, work):
    """queries.{val,test}.jsonl, 05 search --queries FILE, and 05's key-sentence articles."""
    from common.data.retrieval import read_queries
    from common.eval.retrieval import read_query_file
    path = _write(work, "queries.jsonl", data)
    for reader in (lambda: read_queries(path), lambda: read_query_file(path)):
        with contextlib.suppress(InputError):
            reader()


def log(data, work):
    """A run's log.jsonl as a resume trims it (its first ``keep`` records) and as curves read it."""
    from common.train.rundir.run_log import read_log
    path = _write(work, "log.jsonl", data)
    records = read_log(path)
    read_log(path, keep=len(records) // 2)


def manifest(data, work):
    """A folder's manifest.json as every reader checks it, and as 03 fingerprints a data directory."""
    from common import io
    from common.eval import wikispecter
    from common.eval.retrieval import read_manifest_args
    from common.train.rundir.run_identity import data_fingerprint
    _write(work, "manifest.json", data)
    _jsonl(work, "docs.jsonl", DOCS)
    _jsonl(work, "triplets.train.jsonl", [])
    for reader in (lambda: io.verify_input(os.path.join(work, "docs.jsonl")), lambda: io.read_manifest(work),
                   lambda: io.source_language(os.path.join(work, "docs.jsonl")),
                   lambda: data_fingerprint("triplet", work), lambda: read_manifest_args(work),
                   lambda: wikispecter.SNOWBALL.get(io.read_manifest(work).get("language") or "", "english")):
        with contextlib.suppress(InputError):
            reader()


# what a user keeps in an output folder, and a file beside it: neither may be removed unless a manifest names it;
# and what a previous run of the command wrote (its a.txt, and a folder pv as 04 teachers' is)
_USER_FILES = {"out/notes.txt": b"mine", "out/sub/mine.txt": b"mine", "out/pv/notes.txt": b"mine",
               "outside.txt": b"outside", "out/a.txt": b"old", "out/pv/old.bin": b"old"}
_NEW_FILES = {"new.txt": "new", "pv/x.bin": "new"}  # what the run writes: pv/x.bin over the previous run's


def _named(manifest):
    """Every string a manifest's ``files``, ``sha256`` and ``replacing`` name: what a rerun may remove, at most."""
    found = set()
    for key in ("files", "sha256", "replacing"):
        value = manifest.get(key)
        if isinstance(value, (list, dict)):
            found |= {n for n in value if isinstance(n, str)}
    return found


def manifest_files(data, work):
    """A manifest.json in an output folder that a run with ``--overwrite`` replaces: whatever its ``files``,
    ``sha256`` and ``replacing`` name, the run removes no file they do not name exactly (a user's file in the folder
    or in a folder a run wrote, a file outside), and its own new file is in place after it. The input is the
    manifest, or (a JSON list) its ``files``; its ``script`` is the run's, so that the run reads its names."""
    from argparse import Namespace

    from common.outdir.folders import Outputs
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        value = None
    manifest = {"files": value} if isinstance(value, list) else value if isinstance(value, dict) else None
    for name, content in _USER_FILES.items():
        _write(work, name, content)
    _write(work, "out/pv/x.bin", b"old")
    if manifest is None:
        _write(work, "out/manifest.json", data)
        manifest = {}
    else:
        manifest = {**manifest, "script": "01_extract.py"}
        _write(work, "out/manifest.json", json.dumps(manifest).encode())
    with Outputs(os.path.join(work, "out"), "01_extract.py", overwrite=True) as outputs:
        with outputs.open("new.txt") as f:
            f.write(_NEW_FILES["new.txt"])
        _write(outputs.tmp_path("pv"), "x.bin", _NEW_FILES["pv/x.bin"].encode())  # a folder, as gensim's pv/
        outputs.finish(Namespace(out="out"))
    named = _named(manifest)
    for name, content in _USER_FILES.items():
        path = os.path.join(work, name)
        if name[len("out/"):] not in named and not (os.path.isfile(path) and open(path, "rb").read() == content):
            raise Defect(f"manifest_files: {name} removed or changed, though the manifest does not name it")
    for name, content in _NEW_FILES.items():
        with open(os.path.join(work, "out", name), encoding="utf-8") as f:
            if f.read() != content:
                raise Defect(f"manifest_files: the new output {name} is not in place")


def teacher_ids(data, work):
    """TEACH/pv.ids.txt and lengths.ids.txt against docs.jsonl's ids."""
    from common.distill.teachers import read_lengths, read_vectors
    np.save(os.path.join(work, "pv.npy"), np.ones((len(DOCS), 3), np.float32))
    np.save(os.path.join(work, "lengths.npy"), np.arange(len(DOCS)))
    _write(work, "pv.ids.txt", data)
    _write(work, "lengths.ids.txt", data)
    ids = [d["id"] for d in DOCS]
    for reader in (lambda: read_vectors(work, "pv", ids), lambda: read_lengths(work, ids)):
        with contextlib.suppress(InputError):
            reader()


def npy(data, work):
    """An NPY file (header and rows) where 04 reads teacher vectors and 05 search reads saved vectors."""
    from common.distill.teachers import read_lengths, read_vectors
    from common.vectors import read_rows
    ids = [d["id"] for d in DOCS]
    for name in ("pv", "lengths", "base"):
        _write(work, f"{name}.npy", data)
        _write(work, f"{name}.ids.txt", "".join(i + "\n" for i in ids).encode())
    for reader in (lambda: read_vectors(work, "pv", ids), lambda: read_lengths(work, ids),
                   lambda: read_rows(work, "base", ids)):
        with contextlib.suppress(InputError):
            reader()


# -- model folders -------------------------------------------------------------------------------------------------

def safetensors_header(data, work):
    """A model folder's ``model.safetensors`` as every loader checks it before transformers reads it (03's and
    convert-long's start model, 04's teacher, 05's models): its header and the bytes it promises. An input that
    starts as JSON is a sharded model instead: ``model.safetensors.index.json`` up to the first ``SEP``, then the
    shard ``part.safetensors`` (a safetensors file's own bytes hold ``SEP`` in its header's length)."""
    from common.models.loading import stored_weights
    if data[:1] == b"{":
        index, shard = _parts(data, 2)
        _write(work, "model/model.safetensors.index.json", index)
        _write(work, "model/part.safetensors", shard)
    else:
        _write(work, "model/model.safetensors", data)
    found = stored_weights(os.path.join(work, "model"))
    if not all(isinstance(dtype, str) for dtype, _ in found.values()):
        raise Defect(f"safetensors_header: dtypes {found!r}")


CARD_FACTS = {"architecture": "BertModel", "model_type": "bert", "layers": 2, "dimensions": 8, "parameters": 100,
              "pooling": "mean", "normalize": False, "max_length": 32}


def _card_from(text, base):
    """A model card with ``text`` in every field that takes text from outside (the start model's path, a flag's
    value, a validation record's key, a data manifest's fields) and ``base`` as its base_model."""
    from common.models import card
    data = {"path": text, "script": text, "command": text, "commit": text, "inputs": {text: text},
            "counts": {text: 1}, "source": {"script": text, "inputs": {text: text}, "language": text}}
    return str(card.model_card("triplet", text or "m", CARD_FACTS, settings=[("query", text)],
                               training={"script": "03_train.py", "steps": 1, "epoch": 1, "processes": 1,
                                         "precision": "no"}, validation=[{"step": 1, "epoch": 1, text: 0.5}],
                               data=data, base=base, start=text, language=text))


def _blocks(card_text):
    """The headings of a card's Markdown (after its front matter), and whether it holds any HTML."""
    from markdown_it import MarkdownIt
    tokens = MarkdownIt("commonmark").enable("table").parse(card_text.split("\n---\n", 1)[1])
    html = any(t.type == "html_block" or any(c.type == "html_inline" for c in t.children or ()) for t in tokens)
    return [t.tag for t in tokens if t.type == "heading_open"], html


def card_front_matter(data, work):
    """A start model's README.md as 03 and convert-long read its front matter for the new card's base_model, and
    the new card made with it and with the input's text in every field from outside: the new card reads back with
    that base_model, and holds the headings of a card made from plain text, and no HTML."""
    from huggingface_hub import ModelCard

    from common.models import card
    folder = os.path.join(work, "model")
    _write(folder, "README.md", data)
    base = card.base_model(folder, say=lambda text: None)
    if base is not None and card.hub_name(base) != base:
        raise Defect(f"card_front_matter: base_model {base!r} is not a hub name")
    made = _card_from(_text(data), base)
    if ModelCard(made).data.base_model != base:
        raise Defect("card_front_matter: the new card does not read back its base_model")
    if _blocks(made) != _blocks(_card_from("x", None)):
        raise Defect(f"card_front_matter: the new card's headings or HTML differ: {_blocks(made)}")


# -- flags ---------------------------------------------------------------------------------------------------------

def _training_script():
    """03_train.py as a module (its command-line parser)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_script", os.path.join(ROOT, "03_train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(data):
    return _text(data).replace("\0", "").split("\x01")[:24]


def training_flags(data, work):
    """03 and 04 train's command line (every size, list and choice flag and their checks) after a valid start."""
    fixture = os.path.join(work, "data")
    for name in ("docs.jsonl", "triplets.train.jsonl", "pairs.train.jsonl"):
        _jsonl(fixture, name, DOCS if name == "docs.jsonl" else [])
    objective = ("triplet", "mnrl", "mlm")[data[0] % 3] if data else "triplet"
    fixed = ["--objective", objective, "--data", fixture, "--model", "m", "--out", os.path.join(work, "run")]
    with contextlib.redirect_stdout(_io.StringIO()), contextlib.redirect_stderr(_io.StringIO()):
        _training_script().parse_args(fixed + _argv(data[1:]))


def name_values(data, work):
    """NAME=VALUE and list flags: 05's --model/--pooling/--max-length, 02 corpus's --articles, --topic-cap."""
    from common import cli
    from common.data.splits import parse_caps
    values = _argv(data)
    text = _text(data)
    for reader in (lambda: cli.name_values(values, "--model", "MODEL"), lambda: cli.named(values, "--articles", "PATH"),
                   lambda: cli.per_name(values, ("cls", "mean"), ["base", "trained"], "--pooling"),
                   lambda: parse_caps(text)):
        with contextlib.suppress(InputError):
            reader()


def projection(data, work):
    """04 train's --student-projection / --teacher-projection, sized against a machine of 256 MB so that nothing
    large is allocated."""
    from unittest import mock

    from common import cli
    from common.distill.softcca import projection as build
    with mock.patch.object(cli, "physical_memory", lambda: 256 << 20):
        build(_text(data), 8)


TARGETS = {f.__name__: f for f in (dump, dump_bz2, wikitext, arxiv, dictd, rst, folder, csv, sentences, articles,
                                   hf_repository, hf_csv, hf_disk, splits, triplets, pairs, beir, classify_splits,
                                   similar_articles, qrels, topics, queries, log, manifest, manifest_files, teacher_ids,
                                   npy, safetensors_header, card_front_matter, training_flags, name_values,
                                   projection)}


def run_one(name, data, work_root):
    """Run target ``name`` on ``data`` in a fresh work folder under ``work_root``; raise ``Defect`` (or the reader's
    own exception) if the invariant does not hold."""
    if not _guard["hooked"]:  # installed once, at the first input (an audit hook cannot be removed)
        sys.addaudithook(_audit)
        _guard["hooked"] = True
    work = os.path.join(work_root, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    _guard.update(root=os.path.realpath(work), made=set(), strays=[])
    try:
        TARGETS[name](data, work)
    except InputError as e:
        message = str(e)
        if len(message.splitlines()) != 1:
            raise Defect(f"{name}: an error that is not one line: {message!r}") from None
    except SystemExit as e:  # argparse: 2 after its usage line, 0 after --help
        if e.code not in (0, 2):
            raise Defect(f"{name}: exit status {e.code!r}") from None
    finally:
        _guard["root"] = None
    strays = _guard["strays"] + sorted(p for p in _guard["made"] if os.path.lexists(p))
    if strays:
        raise Defect(f"{name}: wrote outside its folder: {strays[:3]}")
