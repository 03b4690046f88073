"""What a hostile or unlucky user meets: links planted in an output folder, runs killed while committing, a full
disk, damaged inputs, absurd sizes, and resuming with settings that change the result."""

import errno
import json
import os
import re

import numpy as np
import pytest
from safetensors.torch import load_file

from common import folders, io
from common.io import InputError
from conftest import linked_articles, script_error, script_main

TRAIN = ["--objective", "triplet", "--pooling", "mean", "--max-length", "32", "--batch-size", "4", "--epochs", "1",
         "--log-every", "1", "--eval-every", "0", "--checkpoint-every", "0", "--length-groups", "2",
         "--max-steps", "3"]


def write_articles(path, n=24):
    path.write_text("".join(json.dumps(a) + "\n" for a in linked_articles(n)), encoding="utf-8")
    return path


def build(articles, out, *extra):
    script_main("02_build_graph.py")(["--articles", str(articles), "--out", str(out), "--crossref-min-links", "2",
                                      "--topic-min", "2", "--eval-docs", "shared", *map(str, extra)])


# -- one safe way to write: nothing planted in an output folder is written through ---------------------------------

TEMPORARY_NAMES = ["docs.jsonl.tmp", "graph.npz.tmp", "graph.npz.tmp.indices.tmp", "graph.npz.indices.tmp",
                   "manifest.json.tmp", "splits.json.tmp", "triplets.train.jsonl.tmp", "curves.png.tmp",
                   "log.jsonl.tmp", "run.json.tmp", "articles.pass1.jsonl.tmp", "base.flat.faiss.tmp",
                   "tmp", ".tmp", "docs.jsonl.old"]


def test_links_planted_at_any_temporary_name_are_never_written_through(tmp_path, tiny_model, capsys):
    articles = write_articles(tmp_path / "articles.jsonl")
    target = tmp_path / "precious"
    target.write_text("keep")
    data, run = tmp_path / "data", tmp_path / "run"
    for folder in (data, run, run / "checkpoints"):
        folder.mkdir()
        for name in TEMPORARY_NAMES:
            (folder / name).symlink_to(target)
    (data / "manifest.json").write_text(json.dumps({"script": "02_build_graph.py", "files": []}))
    (run / "run.json").write_text(json.dumps({"identity": {}}))
    build(articles, data)
    script_main("03_train.py")(["--data", str(data), "--model", str(tiny_model), "--out", str(run), *TRAIN,
                                "--checkpoint-every", "1"])
    assert target.read_text() == "keep"
    assert all((folder / name).is_symlink() for folder in (data, run) for name in TEMPORARY_NAMES)
    assert not [p for p in tmp_path.rglob(".staging-*")]


def test_a_link_at_a_final_name_is_replaced_not_followed(tmp_path, capsys):
    articles = write_articles(tmp_path / "articles.jsonl")
    data = tmp_path / "data"
    build(articles, data)
    target = tmp_path / "precious"
    target.write_text("keep")
    (data / "docs.jsonl").unlink()
    (data / "docs.jsonl").symlink_to(target)
    build(articles, data)
    assert target.read_text() == "keep" and not (data / "docs.jsonl").is_symlink()


# -- outputs appear all at once ----------------------------------------------------------------------------------

def test_a_run_killed_while_committing_is_refused_by_readers_and_repaired_by_the_next_run(tmp_path, tiny_model,
                                                                                         monkeypatch, capsys):
    articles = write_articles(tmp_path / "articles.jsonl")
    data = tmp_path / "data"
    build(articles, data, "--seed", "1")
    before = (data / "splits.json").read_text()
    moved, put = [], folders.put

    def killed(staged, final):  # the commit stops after two files are in place
        if len(moved) == 2 and not final.endswith("manifest.json"):
            raise KeyboardInterrupt
        moved.append(final)
        put(staged, final)
    monkeypatch.setattr(folders, "put", killed)
    with pytest.raises(KeyboardInterrupt):
        build(articles, data, "--seed", "2")
    monkeypatch.setattr(folders, "put", put)
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["state"] == "committing" and (data / "splits.json").read_text() == before
    assert not list(data.glob(".staging-*")) and not (data / ".lock").exists()
    for script, args in (("03_train.py", ["--model", str(tiny_model), "--out", str(tmp_path / "run"), *TRAIN]),
                         ("05_evaluate.py", ["--model", f"base={tiny_model}", "--out", str(tmp_path / "eval")])):
        assert script_error(script, "--data", data, *args) == (
            f"error: {data}: its run stopped while committing its files (manifest.json is marked 'committing'); "
            "run 02_build_graph.py again")
    build(articles, data, "--seed", "2")
    manifest = json.loads((data / "manifest.json").read_text())
    assert "state" not in manifest and manifest["args"]["seed"] == 2
    assert sorted(p.name for p in data.iterdir()) == sorted(manifest["files"] + ["manifest.json"])
    assert manifest["sha256"] == {name: io.sha256(data / name) for name in manifest["files"]}


def test_a_file_changed_after_its_run_is_refused_by_every_reader(tmp_path, tiny_data, tiny_model, capsys):
    import shutil
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    with open(data / "triplets.train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"query": "d1", "pos": "d2", "neg": "d3", "hard": False}) + "\n")
    assert script_error("03_train.py", "--data", data, "--model", tiny_model, "--out", tmp_path / "run", *TRAIN) == (
        f"error: {data / 'triplets.train.jsonl'}: differs from what 02_build_graph.py wrote (SHA-256 in "
        f"{data / 'manifest.json'}); it changed afterwards, or its run did not finish: run it again")


# -- a full disk ---------------------------------------------------------------------------------------------------

def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_vectors_that_do_not_fit_on_the_disk_are_one_line_before_anything_is_mapped(tmp_path, tiny_data, tiny_model,
                                                                                   monkeypatch, capsys):
    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    out = tmp_path / "eval"
    error = script_error("05_evaluate.py", "--data", tiny_data, "--model", f"base={tiny_model}", "--out", out,
                         "--max-length", "32")
    assert re.fullmatch(rf"error: {re.escape(str(out))}: no space left on the device \(base\.npy needs [\d,]+ "
                        r"bytes, [\d,]+ free\); nothing was written", error), error
    assert list(out.iterdir()) == []


def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_leaves_the_good_ones(tmp_path, tiny_data, tiny_model,
                                                                                  monkeypatch, capsys):
    from accelerate import Accelerator
    run = tmp_path / "run"
    saved, save_state = [], Accelerator.save_state

    def fill_on_the_third(self, output_dir=None, **kwargs):
        if len(saved) == 2:
            full_disk()
        saved.append(output_dir)
        return save_state(self, output_dir, **kwargs)
    monkeypatch.setattr(Accelerator, "save_state", fill_on_the_third)
    error = script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN,
                         "--checkpoint-every", "1", "--keep", "3")
    assert re.fullmatch(rf"error: {re.escape(str(run))}: no space left on the device \([\d,]+ bytes free\); "
                        "checkpoint step_3 was not saved, the earlier ones are kept", error), error
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1", "step_2"]
    assert not list(run.rglob(".staging-*")) and not (run / ".lock").exists()


# -- one line instead of a traceback -------------------------------------------------------------------------------

def test_an_output_folder_that_cannot_be_made_or_written_is_one_line_for_training_too(tmp_path, tiny_data,
                                                                                     tiny_model, monkeypatch):
    ok = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path).endswith("readonly") else ok(path, mode))
    (tmp_path / "readonly").mkdir()
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "readonly",
                        *TRAIN) == f"error: {tmp_path / 'readonly'}: not writable"
    made = os.makedirs

    def refuse(path, mode=0o777, exist_ok=False):
        if str(path).endswith("new"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return made(path, mode, exist_ok)
    monkeypatch.setattr(os, "makedirs", refuse)
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "new",
                        *TRAIN) == f"error: {tmp_path / 'new'}: cannot be created: Permission denied"


def test_a_damaged_log_is_refused_on_resume_before_any_step(tmp_path, tiny_data, tiny_model, capsys):
    run = tmp_path / "run"
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(run), *TRAIN, "--checkpoint-every", "1"]
    script_main("03_train.py")(args)
    (run / "model").rename(tmp_path / "model")  # an unfinished run: resumes from its last checkpoint
    lines = (run / "log.jsonl").read_text().splitlines()
    (run / "log.jsonl").write_text("\n".join(lines[:1] + ["{not json"] + lines[2:]) + "\n")
    assert script_error("03_train.py", *args) == (
        f"error: {run / 'log.jsonl'}:2: not a record of this run's log (damaged?); remove the line, or train again "
        "into another --out")
    assert not (run / "model").exists()


def test_a_half_written_last_log_line_of_a_killed_run_does_not_stop_its_resume(tmp_path, tiny_data, tiny_model,
                                                                              capsys):
    run = tmp_path / "run"
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(run), *TRAIN, "--checkpoint-every", "2"]
    script_main("03_train.py")(args)
    whole = (run / "log.jsonl").read_text()
    import shutil
    shutil.rmtree(run / "checkpoints" / "step_3")
    (run / "model").rename(tmp_path / "model")
    with open(run / "log.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 4, "lo')
    script_main("03_train.py")(args)
    assert [json.loads(line)["step"] for line in whole.splitlines()] == [1, 2, 3, 3]  # the last: validation
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "steps_per_s"} for r in log] == \
        [{k: v for k, v in json.loads(line).items() if k != "steps_per_s"} for line in whole.splitlines()]


@pytest.mark.parametrize("content, expected", [
    (b"gene\n\xff\xfe expression\n", "{path}:2: not UTF-8 text (bytes b'\\xff\\xfe e'); give the file in UTF-8"),
    (None, "{path}: is a directory, not a file"),
])
def test_queries_that_are_not_utf8_text_or_a_folder_are_one_line(tmp_path, tiny_model, content, expected, capsys):
    from test_search import paper_articles
    articles = tmp_path / "articles.jsonl"
    articles.write_text("".join(json.dumps(a) + "\n" for a in paper_articles()), encoding="utf-8")
    data = tmp_path / "data"
    script_main("02_build_graph.py")(["retrieval", "--articles", str(articles), "--out", str(data)])
    path = tmp_path / "queries.txt"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", data, "--queries", path) == \
        "error: " + expected.format(path=path)


def test_every_text_input_names_the_line_that_is_not_utf8(tmp_path):
    path = tmp_path / "map.tsv"
    path.write_bytes("ok\tTiede\t\n".encode() * 3 + b"bad \xc3\x28\tTiede\t\n")
    from common.data.topic_labels import read_topic_map
    with pytest.raises(InputError) as e:
        read_topic_map(path)
    assert str(e.value) == f"{path}:4: not UTF-8 text (bytes b'\\xc3(\\tT'); give the file in UTF-8"
    qrels = tmp_path / "x.qrels"
    qrels.write_bytes(b"q 0 d 1\r\nq 0 \xe9 1\r\n")
    with pytest.raises(InputError) as e:
        io.read_trec_qrels(qrels)
    assert str(e.value) == f"{qrels}:2: not UTF-8 text (bytes b'\\xe9 1\\r'); give the file in UTF-8"


@pytest.mark.parametrize("script, args, expected", [
    ("04_distill.py", ["train", "--student-projection", "100000000"],
     "--student-projection '100000000': block '100000000' is not SIZE or SIZE(relu) with a SIZE between 1 and "
     "65,536"),
    ("03_train.py", ["--max-length", "100000000"], "--max-length 100000000: must be between 1 and 131,072"),
    ("03_train.py", ["--batch-size", "10000000000"], "--batch-size 10000000000: must be between 1 and 1,073,741,824"),
    ("04_distill.py", ["teachers", "--pv-vector-size", "100000000"],
     "--pv-vector-size 100000000: must be between 1 and 65,536"),
    ("04_distill.py", ["teachers", "--teacher-dim", "100000000"],
     "--teacher-dim 100000000: must be between 1 and 65,536"),
    ("05_evaluate.py", ["--max-length", "100000000"], "--max-length 100000000: must be between 1 and 131,072"),
    ("02_build_graph.py", ["--crossref-negatives", "10000000000"],
     "--crossref-negatives 10000000000: must be between 0 and 1,073,741,824"),
    ("01_extract.py", ["--workers", "100000000"], "--workers 100000000: must be between 0 and 1,024"),
])
def test_absurd_sizes_are_refused_before_anything_is_allocated(tmp_path, tiny_data, tiny_model, script, args,
                                                               expected):
    articles = write_articles(tmp_path / "articles.jsonl")
    common = {"01_extract.py": ["wiki", "--dump", articles, "--out", tmp_path / "o"],
              "02_build_graph.py": ["--articles", articles, "--out", tmp_path / "o"],
              "03_train.py": ["--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "o"],
              "04_distill.py": ["--data", tiny_data, "--out", tmp_path / "o"]
              + (["--teachers", tmp_path, "--model", tiny_model] if "train" in args else ["--teacher", tiny_model]),
              "05_evaluate.py": ["--data", tiny_data, "--model", f"base={tiny_model}", "--out", tmp_path / "o"]}
    if script == "04_distill.py":
        args, common[script] = args[1:], args[:1] + common[script]
    assert script_error(script, *common[script], *args) == f"error: {expected}"
    assert not (tmp_path / "o").exists()


def test_a_projection_larger_than_the_machine_is_refused_before_it_is_allocated():
    from common.train.softcca import projection
    with pytest.raises(InputError) as e:
        projection("65536x65536x65536", 768)
    assert re.fullmatch(r"projection '65536x65536x65536': needs about [\d,.]+ GiB, more than this machine's "
                        r"[\d,.]+ GiB", str(e.value)), str(e.value)


# -- resume: every setting that changes the result must match ------------------------------------------------------

# a value other than the default for every shared flag that the resume identity leaves out (common/train/run.py's
# SPEED_ARGS); a new such flag must be added here, and training with it must end in the same weights
SPEED_PROBES = {"checkpoint_every": ["--checkpoint-every", "1"], "keep": ["--keep", "1", "--checkpoint-every", "1"],
                "log_every": ["--log-every", "2"], "length_groups": ["--length-groups", "1"],
                "gradient_checkpointing": ["--gradient-checkpointing"], "save_epochs": ["--save-epochs"],
                "report_to": None}  # needs a tracker installed; it only copies log.jsonl's records


def test_every_setting_left_out_of_the_resume_identity_leaves_the_trained_weights_unchanged(tmp_path, tiny_data,
                                                                                           tiny_model, capsys):
    from common.train import run as training
    assert set(SPEED_PROBES) == set(training.SPEED_ARGS)
    train = script_main("03_train.py")
    base = ["--data", str(tiny_data), "--model", str(tiny_model), *TRAIN]

    def weights(name, extra):
        train(base + ["--out", str(tmp_path / name), *extra])
        return load_file(tmp_path / name / "model" / "model.safetensors")
    reference = weights("reference", [])
    for flag, extra in SPEED_PROBES.items():
        if extra is None:
            continue
        got = weights(flag, extra)
        assert all(np.array_equal(got[k].numpy(), reference[k].numpy()) for k in reference), flag
    # and the converse: --chunk-tokens runs parts of a batch with other dropout draws, so it changes the weights
    # and must match on resume
    chunked = weights("chunked", ["--chunk-tokens", "40"])
    assert not all(np.array_equal(chunked[k].numpy(), reference[k].numpy()) for k in reference)
    assert "chunk_tokens" in training.RESULT_ARGS


def test_a_file_rewritten_with_its_old_size_and_date_is_refused_in_the_same_process(tmp_path):
    out = tmp_path / "out"
    with folders.Outputs(out, "02_build_graph.py") as outputs:
        with outputs.open("docs.jsonl") as f:
            f.write('{"id": "a", "title": "A", "text": "one"}\n')
        outputs.write_manifest({"script": "02_build_graph.py"})
    assert [obj["id"] for _, obj in io.read_jsonl(out / "docs.jsonl")] == ["a"]  # checked, remembered
    stat = (out / "docs.jsonl").stat()
    (out / "docs.jsonl").write_text('{"id": "b", "title": "B", "text": "two"}\n')
    os.utime(out / "docs.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(InputError, match="differs from what 02_build_graph.py wrote"):
        list(io.read_jsonl(out / "docs.jsonl"))


def objective_data(objective, root, tiny_data, tiny_model):
    """--data (and the objective's own required flags) for a short run of ``objective`` on tiny inputs."""
    if objective in ("mlm", "mnrl"):
        from test_search import paper_articles
        articles = root / "papers.jsonl"
        articles.write_text("".join(json.dumps(a) + "\n" for a in paper_articles()), encoding="utf-8")
        script_main("02_build_graph.py")(["retrieval", "--articles", str(articles), "--out", str(root / "data"),
                                          "--test", "0.2", "--val", "0.2", "--topic-min", "5"])
        return ["--data", str(root / "data")]
    if objective == "contrastive":
        script_main("01_extract.py")(["sentences", "--input", os.path.join(os.path.dirname(__file__), "..", "data",
                                                                           "keysent-demo.jsonl"), "--out", str(root)])
        script_main("02_build_graph.py")(["sentences", "--sentences", str(root / "sentences.jsonl"), "--out",
                                          str(root / "data")])
        return ["--data", str(root / "data")]
    script_main("04_distill.py")(["teachers", "--data", str(tiny_data), "--out", str(root / "teach"), "--teacher",
                                  str(tiny_model), "--teacher-max-length", "32", "--pv-vector-size", "8",
                                  "--pv-epochs", "2", "--pv-min-count", "1"])
    return ["--data", str(tiny_data), "--teachers", str(root / "teach")]


# an objective's own flags that change only speed or logging, with a value other than the default
OWN_SPEED_PROBES = {"mnrl": {"eval_batch_size": ["--eval-batch-size", "3"]},
                    "mlm": {"cache_dir": ["--cache-dir", "{root}/other-cache"]}}
SHORT_RUN = {"mnrl": ["--query-max-length", "16", "--batch-size", "8", "--eval-every", "1"],
             "mlm": ["--batch-size", "8", "--cache-dir", "{root}/cache"],
             "contrastive": ["--batch-size", "8", "--eval-every", "1"],
             "distill": ["--batch-size", "4", "--grad-accum", "1", "--warmup", "1", "--max-structural-length", "0",
                         "--student-projection", "8", "--teacher-projection", "8"]}


def test_every_flag_of_every_objective_is_in_the_resume_identity_or_among_the_speed_flags():
    import argparse

    from common.train import objectives
    from common.train import run as training
    place = {"data", "out", "seeds"}  # the identity holds the data's path and content; --out is where it runs
    for name in objectives.REGISTRY:
        cls = objectives.get(name)
        parser = argparse.ArgumentParser()
        training.add_training_arguments(parser)
        cls.add_arguments(parser)
        flags = {action.dest for action in parser._actions} - {"help"}
        result, speed = set(training.RESULT_ARGS) | set(cls.result_args), set(training.SPEED_ARGS) | set(cls.speed_args)
        assert not result & speed, name
        assert flags == (result | speed | place) - {"objective"}, (name, flags ^ (result | speed | place))
        assert set(cls.speed_args) == set(OWN_SPEED_PROBES.get(name, {})), name
    assert "cache_chunk" in objectives.get("mnrl").result_args


@pytest.mark.parametrize("objective", ["mnrl", "mlm", "contrastive", "distill"])
def test_every_speed_flag_of_an_objective_leaves_its_trained_weights_unchanged(objective, tmp_path, tiny_data,
                                                                              tiny_model, capsys):
    data = objective_data(objective, tmp_path, tiny_data, tiny_model)
    script = "04_distill.py" if objective == "distill" else "03_train.py"
    main = script_main(script)
    base = [*data, "--model", str(tiny_model), "--max-length", "32", "--max-steps", "3", "--epochs", "1",
            "--log-every", "1", "--checkpoint-every", "0", "--length-groups", "2",
            *[a.format(root=tmp_path) for a in SHORT_RUN[objective]]]
    base = (["train"] if objective == "distill" else ["--objective", objective]) + base
    # every speed flag at once, shared and the objective's own
    changed = [a.format(root=tmp_path) for extra in [*SPEED_PROBES.values(), *OWN_SPEED_PROBES.get(objective,
                                                                                                   {}).values()]
               for a in extra or ()]

    def weights(name, extra):
        main(base + ["--out", str(tmp_path / name), *extra])
        return load_file(tmp_path / name / "model" / "model.safetensors")
    reference = weights("reference", [])
    got = weights("changed", changed)
    assert set(got) == set(reference)
    assert [k for k in reference if not np.array_equal(got[k].numpy(), reference[k].numpy())] == []


def test_gradcache_chunks_change_the_weights_and_a_resume_with_other_chunks_is_refused(tmp_path, tiny_data,
                                                                                    tiny_model, capsys):
    data = objective_data("mnrl", tmp_path, tiny_data, tiny_model)
    main = script_main("03_train.py")
    base = ["--objective", "mnrl", *data, "--model", str(tiny_model), "--max-length", "32", "--query-max-length",
            "16", "--batch-size", "8", "--max-steps", "2", "--log-every", "1", "--eval-every", "0",
            "--checkpoint-every", "1"]

    def losses(name, extra):
        main(base + ["--out", str(tmp_path / name), *extra])
        return [r["loss"] for r in map(json.loads, (tmp_path / name / "log.jsonl").read_text().splitlines())
                if "loss" in r]
    # each chunk draws its own dropout masks: other losses from the first step on
    whole, chunked = losses("whole", []), losses("chunked", ["--cache-chunk", "4"])
    assert len(whole) == len(chunked) == 2 and whole[0] != chunked[0]
    (tmp_path / "whole" / "model").rename(tmp_path / "model")  # an unfinished run: resumes from its checkpoints
    assert script_error("03_train.py", *base, "--out", tmp_path / "whole", "--cache-chunk", "4") == (
        f"error: {tmp_path / 'whole'}: its checkpoints come from a run with other settings (cache_chunk); use "
        f"another --out or remove {tmp_path / 'whole' / 'checkpoints' / 'step_2'}")


def test_a_full_disk_while_saving_the_final_model_is_one_line_and_leaves_no_model(tmp_path, tiny_data, tiny_model,
                                                                                 monkeypatch, capsys):
    from safetensors import SafetensorError

    def full(*args, **kwargs):  # what safetensors raises when the disk fills under it
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", full)
    run = tmp_path / "run"
    error = script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN)
    assert re.fullmatch(rf"error: {re.escape(str(run))}: no space left on the device \([\d,]+ bytes free\); "
                        "RUN/model was not saved", error), error
    assert not (run / "model").exists() and not list(run.rglob(".staging-*")) and not (run / ".lock").exists()


def test_a_full_disk_while_saving_a_faiss_index_is_one_line_and_leaves_no_index(tmp_path, monkeypatch):
    faiss = pytest.importorskip("faiss")
    from common.eval import ann
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    np.save(tmp_path / "base.npy", vectors)

    def full(index, path):  # faiss's own words when fwrite fails on a full disk
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise RuntimeError(f"Error in void faiss::write_HNSW(const HNSW*, IOWriter*) at index_write.cpp:362: Error: "
                           f"'ret == (size)' failed: write error in {path}: 56 != 1945 (No space left on device)")
    monkeypatch.setattr(faiss, "write_index", full)
    with pytest.raises(InputError) as e:
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}: no space left on the device \(needs more than 1,000 bytes, "
                        r"[\d,]+ free\); the hnsw index was not saved", str(e.value)), str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.npy"]
    monkeypatch.setattr(faiss, "write_index", lambda index, path: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other error is not taken for a full disk
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")
