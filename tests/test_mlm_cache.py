"""The masked LM's cache (``common/train/objectives/mlm.py``): the documents, the tokenised training and validation
parts (made once, mapped by every process), next-sentence pairs and a learnt vocabulary are kept inside the run's
--out unless --cache-dir names another place, which is checked as --out is."""

import os
import sys
import socket

import numpy as np
import pytest

from conftest import script_error, script_module, train_in_process

MLM = ["--objective", "mlm", "--max-length", "16", "--batch-size", "8", "--max-steps", "1", "--eval-every", "0",
       "--checkpoint-every", "0", "--log-every", "1"]
NEW_MODEL = ["--model-type", "bert", "--config-overrides", "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,"
             "intermediate_size=32", "--vocab-size", "120"]

_seen = {"root": None, "written": []}


def _audit(event, args):
    """Every file opened for writing, folder made or name moved to while a test watches (``_seen``)."""
    if _seen["root"] is None:
        return
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            _seen["written"].append(os.fsdecode(args[0]))
    elif event == "os.mkdir" and isinstance(args[0], (str, bytes, os.PathLike)) and not os.path.isdir(args[0]):
        _seen["written"].append(os.fsdecode(args[0]))  # a folder made (makedirs of one that is there makes none)
    elif event in ("os.rename", "os.replace") and isinstance(args[1], (str, bytes, os.PathLike)):
        _seen["written"].append(os.fsdecode(args[1]))


def _written_outside(root, argv):
    """Train ``argv`` in this process; the paths written outside ``root`` meanwhile."""
    if not getattr(_audit, "installed", False):
        sys.addaudithook(_audit)
        _audit.installed = True
    _seen.update(root=os.path.realpath(root), written=[])
    try:
        train_in_process(argv)
    finally:
        _seen["root"] = None
    root = os.path.realpath(root)
    return sorted({p for p in _seen["written"] if p != os.devnull and os.path.realpath(os.path.abspath(p)) != root
                   and not os.path.realpath(os.path.abspath(p)).startswith(root + os.sep)})


@pytest.mark.parametrize("extra", [[], ["--nsp"], NEW_MODEL], ids=["blocks", "nsp", "new-vocabulary"])
def test_a_masked_lm_run_writes_its_caches_inside_its_out_and_nothing_outside(extra, tmp_path, tiny_data, tiny_model,
                                                                             capsys):
    run = tmp_path / "run"
    model = [] if extra is NEW_MODEL else ["--model", tiny_model]
    argv = ["--data", tiny_data, *model, "--out", run, *MLM, *extra]
    assert _written_outside(run, argv) == []
    cached = sorted(os.listdir(run / "cache"))
    prefix = {0: "mlm-parts-", 1: "nsp-sentences-"}.get(len(extra), "wordpiece-")
    assert any(name.startswith(prefix) for name in cached), cached
    assert not [n for n in __import__("json").loads((run / "manifest.json").read_text())["files"]
                if n.startswith("cache")]


def test_the_cache_stays_for_the_next_run_and_is_no_result_of_a_run(tmp_path, tiny_data, tiny_model, capsys):
    run = tmp_path / "run"
    argv = ["--data", tiny_data, "--model", tiny_model, "--out", run, *MLM]
    train_in_process(argv)
    cached = sorted(os.listdir(run / "cache"))
    train_in_process(argv + ["--lr", "1e-3", "--overwrite"])
    assert sorted(os.listdir(run / "cache")) == cached  # read again, not made again


def test_a_cache_dir_named_elsewhere_is_where_the_cache_goes(tmp_path, tiny_data, tiny_model, capsys):
    run, cache = tmp_path / "run", tmp_path / "elsewhere"
    train_in_process(["--data", tiny_data, "--model", tiny_model, "--out", run, *MLM, "--cache-dir", cache])
    assert os.listdir(cache) and not (run / "cache").exists()


@pytest.mark.parametrize("where, how, flag", [("data", "is", "--data"), ("data/cache", "lies inside", "--data"),
                                              ("model", "is", "--model"), ("model/sub", "lies inside", "--model"),
                                              ("", "holds", "--data")])
def test_a_cache_dir_among_the_inputs_is_refused_before_any_work(where, how, flag, tmp_path, tiny_data, tiny_model):
    import shutil
    shutil.copytree(tiny_data, tmp_path / "data")
    shutil.copytree(tiny_model, tmp_path / "model")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    cache = tmp_path / where if where else tmp_path
    read = {"--data": tmp_path / "data", "--model": tmp_path / "model"}[flag]
    assert script_error("03_train.py", "--data", tmp_path / "data", "--model", tmp_path / "model", "--out",
                        tmp_path / "run", *MLM, "--cache-dir", cache) == (
        f"error: --cache-dir {cache}: {how} {flag} {read}, which this command reads; give an --cache-dir apart from "
        "its inputs")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_an_out_that_is_no_run_folder_is_refused_before_the_cache_is_written(tmp_path, tiny_data, tiny_model):
    out = tmp_path / "documents"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", out, *MLM) == (
        f"error: {out}: not empty and not a run folder of this project (no run.json); use another --out")
    assert sorted(os.listdir(out)) == ["mine.txt"]


def test_the_cache_dir_flag_says_where_the_cache_goes_by_default():
    module = script_module("03_train.py")
    from common import cli
    from common.train import objectives
    parser = cli.parser("")
    module.add_training_arguments(parser, objectives.get("mlm"), [])
    action = next(a for a in parser._actions if a.dest == "cache_dir")
    assert action.type is cli.writes and "RUN/cache, inside --out" in action.help


@pytest.mark.parametrize("case", ["cache-dir-is-a-file", "cache-dir-under-a-file", "out-under-a-file"])
def test_a_file_where_the_cache_folder_should_be_is_one_line(case, tmp_path, tiny_data, tiny_model):
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    out, extra = tmp_path / "run", []
    if case == "cache-dir-is-a-file":
        extra = ["--cache-dir", a_file]
        expected = f"{a_file}: a file, not a folder for the masked LM's cache; give --cache-dir a folder (or remove " \
                   "the file)"
    elif case == "cache-dir-under-a-file":
        extra = ["--cache-dir", a_file / "cache"]
        expected = f"{a_file / 'cache'}: cannot be made as the masked LM's cache folder: a file stands where a " \
                   "folder above it should be"
    else:  # refused as the run folder is claimed, before any cache
        out = a_file / "run"
        expected = f"{out}: cannot be created: Not a directory"
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", out, *MLM, *extra) == \
        f"error: {expected}"
    assert a_file.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["a-file"]


def parts_folder(run):
    [folder] = (run / "cache").glob("mlm-parts-*")
    return folder


def mapped_file(array):
    """The file ``array``'s pages are mapped from (None: it is in the process's own memory)."""
    while array is not None and not isinstance(array, np.memmap):
        array = array.base
    return None if array is None else array.filename


def expected_parts(data, tokenizer, mlm_docs, line_by_line, seed=42, validation_split=0.05):
    """The training and validation parts' ids, word starts and offsets as they are made in one process's memory:
    docs.jsonl's texts (``--mlm-docs train``: the training split's) in its order, held out by a permutation seeded by
    ``seed``, each text tokenised by the tokenizer with a word start where its word id changes."""
    from common.data.docs_jsonl import Documents
    from common.data.retrieval import read_split_ids
    docs = Documents(data)
    train_ids = read_split_ids(os.path.join(data, "splits.json"), "train") if mlm_docs == "train" else None
    texts = [t for d, t in zip(docs.ids, docs.texts) if train_ids is None or d in train_ids]
    order = np.random.default_rng(seed).permutation(len(texts))
    n_val = int(round(validation_split * len(texts)))
    parts = []
    for which in (np.sort(order[n_val:]), np.sort(order[:n_val])):
        enc = tokenizer([texts[i] for i in which], truncation=line_by_line, max_length=16 if line_by_line else None)
        starts = [[w is None or k == 0 or w != words[k - 1] for k, w in enumerate(words)]
                  for words in map(enc.word_ids, range(len(which)))]
        parts.append((sum(enc["input_ids"], []), sum(starts, []),
                      np.cumsum([0] + [len(ids) for ids in enc["input_ids"]]).tolist()))
    return parts


@pytest.mark.parametrize("extra", [[], ["--line-by-line"], ["--mlm-docs", "train"]],
                         ids=["blocks", "line-by-line", "training-split"])
def test_the_parts_are_tokenised_once_and_every_process_maps_them_read_only_from_one_set_of_files(
        extra, tmp_path, paper_data, tiny_model, monkeypatch):
    """Two objectives of one run, as two processes make them (the first under ``main_process_first``): the first
    tokenises the texts into the cache, the second calls no tokenizer; both hold, read-only and mapped from the same
    six files, the parts that tokenising the texts in one process's memory gives."""
    from transformers import PreTrainedTokenizerBase

    from common.train import objectives
    from common.train.masking import PARTS
    run = tmp_path / "run"
    args = script_module("03_train.py").parse_args([str(a) for a in [
        "--data", paper_data, "--model", tiny_model, "--out", run, *MLM, *extra]])
    calls, call = [], PreTrainedTokenizerBase.__call__
    monkeypatch.setattr(PreTrainedTokenizerBase, "__call__",
                        lambda self, *a, **k: calls.append(1) or call(self, *a, **k))
    made = []
    for _ in range(2):
        objective = objectives.get("mlm")(args, None)
        objective.build()
        objective.load_data()
        made.append((objective, len(calls)))
    (first, tokenised), (second, after) = made
    assert tokenised == after == 1  # 60 texts, one call of 1,000 at most
    monkeypatch.setattr(PreTrainedTokenizerBase, "__call__", call)
    folder = parts_folder(run)
    assert sorted(os.listdir(folder)) == sorted(f"{name}-{field}.npy" for name in PARTS
                                                for field in ("ids", "offsets", "word_start"))
    expected = expected_parts(paper_data, first.tokenizer, extra[-1] if "--mlm-docs" in extra else "all",
                              "--line-by-line" in extra)
    for objective in (first, second):
        for part, name, (ids, word_start, offsets) in zip(objective.parts, PARTS, expected):
            assert part.ids.tolist() == ids and part.word_start.tolist() == word_start
            assert part.offsets.tolist() == (offsets if extra == ["--line-by-line"] else
                                             list(range(0, len(ids) + 1, 16)))  # blocks of 16, the rest dropped
            for field in ("ids", "word_start"):
                array = getattr(part, field)
                assert mapped_file(array) == str(folder / f"{name}-{field}.npy") and not array.flags.writeable
    # 5 % of 60 papers held out, or of the training split's 36
    assert [len(offsets) - 1 for _, _, offsets in expected] == ([34, 2] if "--mlm-docs" in extra else [57, 3])


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "missing", "another's"])
def test_a_damaged_part_is_made_again_with_a_note(damage, tmp_path, tiny_data, tiny_model, capsys):
    """One file of the cached parts cut in half, emptied, overwritten, removed, or replaced by a whole array that
    does not fit the others: the next run says so, tokenises again into the same files, and trains."""
    run = tmp_path / "run"
    argv = ["--data", tiny_data, "--model", tiny_model, "--out", run, *MLM]
    train_in_process(argv)
    folder = parts_folder(run)
    arrays = {name: np.load(folder / name) for name in os.listdir(folder)}
    damaged = folder / "train-offsets.npy"
    data = damaged.read_bytes()
    if damage == "missing":
        damaged.unlink()
    elif damage == "another's":
        np.save(damaged, arrays["train-offsets.npy"][:-1])
    else:
        damaged.write_bytes({"truncated": data[:len(data) // 2], "empty": b"", "garbage": b"x" * len(data)}[damage])
    capsys.readouterr()
    train_in_process(argv + ["--lr", "1e-3", "--overwrite"])
    assert f"note: {folder} cannot be read; made again" in capsys.readouterr().out
    assert {name: np.load(folder / name).tolist() for name in os.listdir(folder)} == \
        {name: array.tolist() for name, array in arrays.items()}
    assert (run / "manifest.json").is_file()


def test_an_entry_of_the_cache_that_is_no_folder_and_a_damaged_vocabulary_are_one_line(tmp_path, tiny_data,
                                                                                       tiny_model, capsys):
    """A file at the parts' folder name is not removed; a learnt vocabulary that cannot be read is not learnt
    again (a resumed run must keep the vocabulary its checkpoints trained with)."""
    import shutil
    run = tmp_path / "run"
    argv = ["--data", tiny_data, "--model", tiny_model, "--out", run, *MLM]
    train_in_process(argv)
    folder = parts_folder(run)
    shutil.rmtree(folder)
    folder.write_text("mine")
    assert script_error("03_train.py", *argv, "--lr", "1e-3", "--overwrite") == \
        f"error: {folder}: not a folder of the cache (a file or a link); remove it"
    assert folder.read_text() == "mine"
    fresh = tmp_path / "fresh"
    argv = ["--data", tiny_data, "--out", fresh, *MLM, *NEW_MODEL]
    train_in_process(argv)
    [vocabulary] = (fresh / "cache").glob("wordpiece-*")
    (vocabulary / "tokenizer.json").write_text('{"model": ')
    assert script_error("03_train.py", *argv, "--lr", "1e-3", "--overwrite") == \
        f"error: {vocabulary}: a damaged vocabulary in the masked LM's cache; remove it to learn the vocabulary again"


@pytest.mark.parametrize("cache_dir", [False, True], ids=["cache-in-out", "cache-dir"])
def test_a_run_folder_another_run_takes_after_the_finished_check_is_refused_before_any_cache_is_made(
        cache_dir, tmp_path, tiny_data, tiny_model, monkeypatch):
    from common.outdir.folder_lock import FolderLock
    from common.train.rundir import run_status
    run, cache, held = tmp_path / "run", tmp_path / "cache", []
    run.mkdir()
    finished = run_status.finished

    def finished_then_another_run_starts(args, script):
        done = finished(args, script)
        held.append(FolderLock(str(run)).acquire())
        return done
    monkeypatch.setattr(run_status, "finished", finished_then_another_run_starts)
    try:
        assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *MLM,
                            *(["--cache-dir", cache] if cache_dir else [])) == \
            (f"error: {run}: in use by another run (process {os.getpid()} on {socket.gethostname()}); wait for it "
             "to end or give another folder")
        assert os.listdir(run) == [".lock"]
    finally:
        for lock in held:
            lock.release()
    assert not cache.exists() and os.listdir(run) == []
