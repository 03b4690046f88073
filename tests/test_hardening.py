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
from common.markdown import escape
from conftest import linked_articles, script_error, script_main, script_module, unfinish

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
    build(articles, data, "--overwrite")
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
    build(articles, data, "--overwrite")
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
        build(articles, data, "--seed", "2", "--overwrite")
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
    unfinish(run)  # resumes from its last checkpoint
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
    unfinish(run)
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
    ("03_train.py", ["--max-length", "100000000"], "argument --max-length: 100000000: must be between 1 and 131,072"),
    ("03_train.py", ["--batch-size", "10000000000"],
     "argument --batch-size: 10000000000: must be between 1 and 1,073,741,824"),
    ("04_distill.py", ["teachers", "--pv-vector-size", "100000000"],
     "argument --pv-vector-size: 100000000: must be between 1 and 65,536"),
    ("04_distill.py", ["teachers", "--teacher-dim", "100000000"],
     "argument --teacher-dim: 100000000: must be between 1 and 65,536"),
    ("05_evaluate.py", ["--max-length", "100000000"],
     "argument --max-length: 100000000: must be between 1 and 131,072"),
    ("02_build_graph.py", ["--crossref-negatives", "10000000000"],
     "argument --crossref-negatives: 10000000000: must be between 0 and 1,073,741,824"),
    ("01_extract.py", ["--workers", "100000000"], "argument --workers: 100000000: must be between 0 and "
                                                  f"{max(64, os.cpu_count()):,}"),
])
def test_absurd_sizes_are_refused_before_anything_is_allocated(tmp_path, tiny_data, tiny_model, script, args,
                                                               expected):
    articles = write_articles(tmp_path / "articles.jsonl")
    common = {"01_extract.py": ["wiki", "--dump", articles, "--out", tmp_path / "o"],
              "02_build_graph.py": ["--articles", articles, "--out", tmp_path / "o"],
              "03_train.py": ["--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "o"],
              "04_distill.py": ["--data", tiny_data, "--out", tmp_path / "o"]
              + (["--teachers", tmp_path / "teach", "--model", tiny_model] if "train" in args
                 else ["--teacher", tiny_model]),
              "05_evaluate.py": ["--data", tiny_data, "--model", f"base={tiny_model}", "--out", tmp_path / "o"]}
    if script == "04_distill.py":
        args, common[script] = args[1:], args[:1] + common[script]
    assert script_error(script, *common[script], *args) == f"error: {expected}"
    assert not (tmp_path / "o").exists()


def test_a_projection_larger_than_the_machine_is_refused_before_it_is_allocated():
    from common.distill.softcca import projection
    with pytest.raises(InputError) as e:
        projection("65536x65536x65536", 768)
    assert re.fullmatch(r"projection '65536x65536x65536': needs about [\d,.]+ GiB, more than this machine's "
                        r"[\d,.]+ GiB", str(e.value)), str(e.value)


# -- resume: every setting that changes the result must match ------------------------------------------------------

# a value other than the default for every shared flag that the resume identity leaves out (run_folder.py's
# SPEED_ARGS); a new such flag must be added here, and training with it must end in the same weights
SPEED_PROBES = {"checkpoint_every": ["--checkpoint-every", "1"], "keep": ["--keep", "1", "--checkpoint-every", "1"],
                "log_every": ["--log-every", "2"], "length_groups": ["--length-groups", "1"],
                "gradient_checkpointing": ["--gradient-checkpointing"], "save_epochs": ["--save-epochs"],
                "report_to": None,  # needs a tracker installed; it only copies log.jsonl's records
                "loader_workers": None}  # a GPU's: tests/test_loop.py collates with workers and without


def test_every_setting_left_out_of_the_resume_identity_leaves_the_trained_weights_unchanged(tmp_path, tiny_data,
                                                                                           tiny_model, capsys):
    from common.train import run_folder
    assert set(SPEED_PROBES) == set(run_folder.SPEED_ARGS)
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
    assert "chunk_tokens" in run_folder.RESULT_ARGS


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

    from common.train import objectives, run_folder
    training = script_module("03_train.py")
    place = {"data", "out", "overwrite", "seeds"}  # the identity holds the data's path and content; --out is where
    # it runs, --overwrite whether it starts afresh there
    for name in objectives.REGISTRY:
        cls = objectives.get(name)
        parser = argparse.ArgumentParser()
        training.add_training_arguments(parser, cls, [])
        flags = {action.dest for action in parser._actions} - {"help"}
        result = set(run_folder.RESULT_ARGS) | set(cls.result_args)
        speed = set(run_folder.SPEED_ARGS) | set(cls.speed_args)
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
    unfinish(tmp_path / "whole")  # resumes from its checkpoints
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


# -- an --out among the inputs: refused before any work ------------------------------------------------------------

def _tree(folder):
    """Every file under ``folder`` with its SHA-256."""
    return {str(p.relative_to(folder)): io.sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case, how", [("is", "is"), ("inside", "lies inside"), ("holds", "holds"),
                                       ("a link to", "is"), ("inside a link to", "lies inside")])
def test_an_out_that_is_holds_or_lies_inside_an_input_is_refused_before_any_work(case, how, tmp_path, tiny_data,
                                                                                 tiny_model):
    import shutil
    model = tmp_path / "models" / "bert"
    shutil.copytree(tiny_model, model)
    (tmp_path / "corpus").mkdir()
    articles = write_articles(tmp_path / "corpus" / "articles.jsonl")
    link = tmp_path / "link"
    link.symlink_to(model)
    before = _tree(tmp_path)
    commands = [("04_distill.py", ["convert-long", "--model", model], "--model", model),
                ("03_train.py", ["--data", tiny_data, "--model", model, *TRAIN], "--model", model),
                ("05_evaluate.py", ["--data", tiny_data, "--model", f"base={model}"], "--model", model),
                ("05_evaluate.py", ["extract", "--model", model, "--input", articles], "--model", model),
                ("02_build_graph.py", ["--articles", articles], "--articles", articles)]
    for script, args, flag, read in commands:
        if "link" in case and read != model:
            continue
        out = {"is": read, "inside": read / "out", "holds": read.parent, "a link to": link,
               "inside a link to": link / "out"}[case]
        assert script_error(script, *args, "--out", out, "--overwrite") == (
            f"error: --out {out}: {how} {flag} {read}, which this command reads; give an --out apart from its "
            "inputs"), script
    assert _tree(tmp_path) == before


def test_an_out_among_the_files_a_dictionary_stem_names_is_refused(tmp_path):
    """01 dictd's --input is the stem of INPUT.index and INPUT.dict.dz: an --out that is one of them is refused."""
    for name in ("foldoc.index", "foldoc.dict.dz"):
        (tmp_path / name).write_bytes(b"keep")
    assert script_error("01_extract.py", "dictd", "--input", tmp_path / "foldoc", "--out",
                        tmp_path / "foldoc.index") == (
        f"error: --out {tmp_path / 'foldoc.index'}: is --input {tmp_path / 'foldoc.index'}, which this command "
        "reads; give an --out apart from its inputs")
    assert (tmp_path / "foldoc.index").read_bytes() == b"keep"


def test_every_flag_of_every_command_that_names_a_path_is_declared_read_or_out():
    """``cli.check_out`` finds a command's inputs by their argparse type (``cli.reads``): a flag whose value is
    free text must be one of these, named here, or be declared as read."""
    from common import cli
    from common.train import objectives
    training = script_module("03_train.py")
    text = {"topic_root", "disambiguation_markers", "disambiguation_templates", "categories", "id_column",
            "title_column", "text_column", "label_column", "topic_cap", "report_to", "student_projection",
            "teacher_projection", "model_type", "config_overrides", "cache_dir", "query", "query_token",
            "pv_preprocess", "pooling", "normalize", "language", "argv", "warmup", "compare"}
    parsers = []
    for script in ("01_extract.py", "02_build_graph.py", "04_distill.py", "05_evaluate.py"):
        import importlib.util
        spec = importlib.util.spec_from_file_location(f"check_{script[:2]}", os.path.join(os.path.dirname(
            __file__), "..", script))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, (_, add_arguments, *_) in (module.commands([]) if script == "04_distill.py" else
                                             module.COMMANDS).items():
            parser = cli.parser("")
            add_arguments(parser)
            parsers.append((f"{script} {name}", parser))
    for name in objectives.REGISTRY:
        parser = cli.parser("")
        training.add_training_arguments(parser, objectives.get(name), [])
        parsers.append((f"train {name}", parser))
    for where, parser in parsers:
        for action in parser._actions:
            free_text = action.type is None and action.const is None and not action.choices and action.nargs != 0
            if action.dest in ("help", "out") or not free_text:
                continue
            assert action.dest in text, f"{where}: {action.dest} names a path? type it cli.reads, or list it here"
        read = {action.dest for action in parser._actions if action.type in (cli.reads, cli.reads_named)}
        assert read & {"model", "model_path", "data", "articles", "input", "dump", "sentences"} or \
            where.endswith("testsets"), where


# -- a finished output is replaced only when --overwrite says so ---------------------------------------------------

@pytest.mark.parametrize("checkpoint_every", ["0", "1"])
def test_a_finished_run_is_refused_with_other_settings_done_with_the_same_and_trained_again_with_overwrite(
        checkpoint_every, tmp_path, tiny_data, tiny_model, capsys):
    """Whether a finished model survives does not depend on whether checkpoints exist."""
    run = tmp_path / "run"
    args = ["--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN, "--max-steps", "2",
            "--checkpoint-every", checkpoint_every]
    train = script_main("03_train.py")
    train([str(a) for a in args])
    finished = _tree(run)
    assert script_error("03_train.py", *args, "--lr", "1e-3") == (
        f"error: {run}: holds a finished 03_train.py run with other settings (lr); give --overwrite to train it "
        "again (only what the run wrote is removed), or another --out")
    capsys.readouterr()
    counts = train([str(a) for a in args])
    assert counts["steps"] == 2 and _tree(run) == finished
    assert capsys.readouterr().out == (f"{run}: finished with these settings already ({run / 'manifest.json'}); "
                                       "nothing to do (--overwrite trains it again)\n")
    (run / "notes.txt").write_text("mine")
    train([str(a) for a in args] + ["--lr", "1e-3", "--overwrite"])
    assert (run / "notes.txt").read_text() == "mine"
    assert _tree(run / "model")["model.safetensors"] != finished["model/model.safetensors"]
    assert [r["step"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "loss" in r] == [1, 2]
    assert json.loads((run / "manifest.json").read_text())["identity"]["lr"] == 1e-3


@pytest.mark.parametrize("manifest, what", [
    ('{"script": "04_distill.py", "counts": {}}', "04_distill.py run whose settings its manifest.json does not "
                                                   "record"),
    ('{"script": "03_train.py", "identity": [1]}', "03_train.py run whose settings its manifest.json does not "
                                                    "record"),
    ("[1, 2", "03_train.py run whose manifest.json cannot be read")])
def test_a_finished_run_whose_manifest_records_no_settings_is_refused_without_overwrite(manifest, what, tmp_path,
                                                                                      tiny_data):
    from common.train import run_folder
    parse = script_module("03_train.py").parse_args
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"identity": {}}')
    (out / "manifest.json").write_text(manifest)
    argv = ["--data", str(tiny_data), "--model", "m", "--out", str(out)]
    with pytest.raises(InputError) as e:
        run_folder.finished(parse(argv), "03_train.py")
    assert str(e.value) == (f"{out}: holds a finished {what}; give --overwrite to replace it (only what that run "
                            "wrote is removed), or another --out")
    assert run_folder.finished(parse(argv + ["--overwrite"]), "03_train.py") is None


def test_a_run_of_several_seeds_killed_in_its_second_goes_on_there_and_keeps_the_first(tmp_path, tiny_data,
                                                                                      tiny_model, capsys):
    out = tmp_path / "seeds"
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(out), *TRAIN, "--max-steps", "1",
            "--seeds", "1", "2"]
    script_main("03_train.py")(args)
    first = _tree(out / "seed_1")
    for name in ("manifest.json", "model"):  # the second seed killed before its end
        folders.remove_entry(out / "seed_2" / name)
    capsys.readouterr()
    counts = script_main("03_train.py")(args)
    assert [c["steps"] for c in counts] == [1, 1] and _tree(out / "seed_1") == first
    assert (out / "seed_2" / "model" / "model.safetensors").is_file()
    assert f"{out / 'seed_1'}: finished with these settings already" in capsys.readouterr().out


def _teachers(data, teacher):
    """04 teachers on tiny sizes."""
    return ["teachers", "--data", data, "--teacher", teacher, "--teacher-max-length", "32", "--pv-vector-size", "8",
            "--pv-epochs", "1", "--pv-min-count", "1"]


@pytest.mark.parametrize("command", ["01 sentences", "02 links", "04 teachers", "04 convert-long", "05 evaluate",
                                     "05 extract"])
def test_a_finished_output_is_refused_and_replaced_with_overwrite_keeping_files_it_did_not_write(
        command, tmp_path, tiny_data, tiny_model, capsys):
    articles = write_articles(tmp_path / "articles.jsonl")
    keysent = tmp_path / "keysent.jsonl"
    keysent.write_text(json.dumps({"id": "a", "text": "One gene. Two genes here.", "key_sentences": ["One gene."]})
                       + "\n", encoding="utf-8")
    out = tmp_path / "out"
    script, args, what = {
        "01 sentences": ("01_extract.py", ["sentences", "--input", keysent], "01_extract.py"),
        "02 links": ("02_build_graph.py", ["--articles", articles, "--crossref-min-links", "2", "--topic-min", "2",
                                           "--eval-docs", "shared"], "02_build_graph.py links"),
        "04 teachers": ("04_distill.py", _teachers(tiny_data, tiny_model), "04_distill.py teachers"),
        "04 convert-long": ("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64",
                                              "--window", "16"], "04_distill.py convert-long"),
        "05 evaluate": ("05_evaluate.py", ["--data", tiny_data, "--model", f"base={tiny_model}", "--max-length",
                                           "32", "--task", "crossref"], "05_evaluate.py"),
        "05 extract": ("05_evaluate.py", ["extract", "--model", tiny_model, "--input", articles, "--query", "gene"],
                       None)}[command]
    if command == "05 extract":
        out = tmp_path / "keys.jsonl"
    if "--out" not in map(str, args):
        args = [*args, "--out", out]
    main = script_main(script)
    main([str(a) for a in args])
    finished = _tree(tmp_path)
    expected = (f"error: {out}: exists; give --overwrite to replace it, or another --out" if what is None else
                f"error: {out}: holds a finished output of {what}; give --overwrite to replace it (only what that "
                "run wrote is removed), or another --out")
    assert script_error(script, *args) == expected
    assert _tree(tmp_path) == finished
    mine = (out.parent if what is None else out) / "notes.txt"
    mine.write_text("mine")
    main([str(a) for a in args] + ["--overwrite"])
    assert mine.read_text() == "mine"
    assert not [p for p in tmp_path.rglob(".staging-*")] and not [p for p in tmp_path.rglob("*.lock")]


# -- private folders inside --out, and what a killed run left there removed ------------------------------------------

def test_every_private_folder_lies_inside_the_out_it_is_made_for(tmp_path, tiny_data, tiny_model, monkeypatch,
                                                                 capsys):
    import tempfile
    made, mkdtemp = [], tempfile.mkdtemp

    def recorded(suffix=None, prefix=None, dir=None):
        made.append((os.path.realpath(dir), prefix))
        return mkdtemp(suffix, prefix, dir)
    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    articles = write_articles(tmp_path / "articles.jsonl")
    runs = [("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64", "--window", "16"],
             tmp_path / "long"),
            ("03_train.py", ["--data", tiny_data, "--model", tiny_model, *TRAIN, "--checkpoint-every", "1",
                             "--save-epochs"], tmp_path / "run"),
            ("05_evaluate.py", ["--data", tiny_data, "--model", f"base={tiny_model}", "--max-length", "32", "--task",
                                "crossref"], tmp_path / "eval"),
            ("05_evaluate.py", ["extract", "--model", tiny_model, "--input", articles, "--query", "gene"],
             tmp_path / "keys" / "keys.jsonl")]
    for script, args, out in runs:
        made.clear()
        script_main(script)([str(a) for a in args] + ["--out", str(out)])
        assert made, script
        folder = out.parent if out.suffix == ".jsonl" else out
        for parent, prefix in made:
            assert parent == os.path.realpath(folder) or parent.startswith(os.path.realpath(folder) + os.sep), \
                (script, parent)
            if out.suffix == ".jsonl":  # another file's run in the same folder keeps its own
                assert prefix == ".staging-keys.jsonl-"
    assert not list(tmp_path.rglob(".staging-*"))


@pytest.mark.parametrize("command", ["04 convert-long", "03", "02", "05 extract"])
def test_what_a_killed_run_left_in_its_out_is_removed_by_the_next_run_and_nothing_else(command, tmp_path, tiny_data,
                                                                                      tiny_model, capsys):
    articles = write_articles(tmp_path / "articles.jsonl")
    script, args, out = {
        "04 convert-long": ("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64",
                                              "--window", "16"], tmp_path / "long"),
        "03": ("03_train.py", ["--data", tiny_data, "--model", tiny_model, *TRAIN], tmp_path / "run"),
        "02": ("02_build_graph.py", ["--articles", articles, "--crossref-min-links", "2", "--topic-min", "2",
                                     "--eval-docs", "shared"], tmp_path / "data"),
        "05 extract": ("05_evaluate.py", ["extract", "--model", tiny_model, "--input", articles, "--query", "gene"],
                       tmp_path / "keys" / "keys.jsonl")}[command]
    folder = out.parent if out.suffix == ".jsonl" else out
    folder.mkdir()
    prefix = ".staging-keys.jsonl-" if out.suffix == ".jsonl" else ".staging-"
    (folder / f"{prefix}k1llEd").mkdir()  # as mkdtemp names them, with what a SIGKILL left inside
    (folder / f"{prefix}k1llEd" / "model.safetensors").write_bytes(b"\0" * 1000)
    lock = folder / (".keys.jsonl.lock" if out.suffix == ".jsonl" else ".lock")
    lock.write_text("12345\n")  # a killed run's lock file: its lock died with it
    others = [tmp_path / ".staging-n0tM1ne", folder / ".staging-other.jsonl-x" if out.suffix == ".jsonl" else None]
    for path in filter(None, others):
        path.mkdir()
    script_main(script)([str(a) for a in args] + ["--out", str(out)])
    assert not (folder / f"{prefix}k1llEd").exists() and not lock.exists()
    assert all(path.is_dir() for path in filter(None, others))


# -- what a run's end needs is read at its start; a damaged card of the start model is a note ----------------------

DAMAGED_CARDS = {
    "YAML that does not parse": b"---\nbase_model: [unclosed\n---\n# A model\n",
    "a list": b"---\n- bert-base-uncased\n---\n",
    "a key that is not a string": b"---\n? [a, b]\n: c\nbase_model: bert-base-uncased\n---\n",
    "a number as key": b"---\n1: a\nbase_model: bert-base-uncased\n---\n",
    "bytes that are not UTF-8": b"---\nbase_model: bert\xff\xfe\n---\n",
    "a base_model of 10 MB": b"---\nbase_model: " + b"a" * (10 << 20) + b"\n---\n",
    "a base_model that is no hub name": b"---\nbase_model: <img src=x onerror=alert(1)>\n---\n",
    "a base_model that is a mapping": b"---\nbase_model: {a: 1}\n---\n",
}


@pytest.mark.parametrize("name", list(DAMAGED_CARDS))
def test_a_damaged_card_of_the_start_model_gives_no_base_model_and_one_note(name, tmp_path):
    from common.models import card
    (tmp_path / "README.md").write_bytes(DAMAGED_CARDS[name])
    notes = []
    assert card.base_model(str(tmp_path), notes.append) is None
    assert len(notes) == 1 and notes[0].startswith(f"note: {tmp_path / 'README.md'}: ") and "\n" not in notes[0]
    assert len(notes[0]) < 300


def test_a_run_and_a_conversion_from_a_model_whose_card_is_damaged_save_their_model_with_a_card(tmp_path, tiny_data,
                                                                                              tiny_model, capsys):
    import shutil

    from huggingface_hub import ModelCard
    model = tmp_path / "start"
    shutil.copytree(tiny_model, model)
    (model / "README.md").write_bytes(DAMAGED_CARDS["a key that is not a string"] + b"\xff")
    script_main("03_train.py")(["--data", str(tiny_data), "--model", str(model), "--out", str(tmp_path / "run"),
                                *TRAIN, "--max-steps", "1"])
    script_main("04_distill.py")(["convert-long", "--model", str(model), "--out", str(tmp_path / "long"),
                                  "--max-length", "64", "--window", "16"])
    printed = capsys.readouterr().out
    assert printed.count(f"note: {model / 'README.md'}: its model card cannot be read (UnicodeDecodeError") == 2
    for saved in (tmp_path / "run" / "model", tmp_path / "long"):
        loaded = ModelCard.load(saved / "README.md")
        assert loaded.data.base_model is None and escape(f"{tmp_path.name}/start") in loaded.text


def test_everything_the_final_save_quotes_is_read_before_the_first_step(tmp_path, tiny_data, tiny_model,
                                                                        monkeypatch):
    from common.train.objectives.base import Objective

    def unreadable(self):
        raise InputError("what the card quotes cannot be read")
    monkeypatch.setattr(Objective, "card_facts", unreadable)
    run = tmp_path / "run"
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN) == \
        "error: what the card quotes cannot be read"
    assert not run.exists() or not [p for p in run.iterdir() if p.name != "run.json"]


# -- loading: damaged weights and tokenizers, weights that are not floats -------------------------------------------

def _damaged(tmp_path, tiny_model, damage):
    import shutil
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    damage(folder)
    return folder


def _int8(folder):
    from safetensors.torch import load_file, save_file
    import torch
    weights = load_file(folder / "model.safetensors")
    save_file({k: (v * 100).to(torch.int8) for k, v in weights.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})


def _sentence_transformers(folder):
    """The modules.json a sentence-transformers model has, so that its other files are read."""
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))


def _without(key):
    def damage(folder):
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
        (folder / "tokenizer.json").write_text(json.dumps({k: v for k, v in tokenizer.items() if k != key}))
    return damage


LOADING = {
    "an empty model.safetensors": (lambda f: (f / "model.safetensors").write_bytes(b""), "model.safetensors",
                                   "not a complete safetensors file (Error while deserializing header: header too "
                                   "small); save the model again"),
    "a truncated model.safetensors": (lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:-100]), "model.safetensors",
        "not a complete safetensors file (Error while deserializing header: incomplete metadata, file not fully "
        "covered); save the model again"),
    "a header that is not JSON": (lambda f: (f / "model.safetensors").write_bytes(b"\x04" + b"\0" * 7 + b"{{{{"),
                                  "model.safetensors", "not a complete safetensors file (Error while deserializing "
                                  "header: invalid JSON in header: key must be a string at line 1 column 2); save "
                                  "the model again"),
    "weights stored as int8": (_int8, "model.safetensors",
                               "weight embeddings.LayerNorm.bias is stored as I8, not as floats (a quantised "
                               "checkpoint this project does not load); give the model's float weights"),
    "a tokenizer.json of {}": (lambda f: (f / "tokenizer.json").write_text("{}"), "tokenizer.json",
                               "not a complete tokenizer (no \"added_tokens\" list); save the tokenizer again"),
    "a tokenizer.json without added_tokens": (_without("added_tokens"), "tokenizer.json",
                                              "not a complete tokenizer (no \"added_tokens\" list); save the "
                                              "tokenizer again"),
    "a tokenizer.json without its model": (_without("model"), "tokenizer.json",
                                           "not a complete tokenizer (Model missing. at line 1 column"),
    "a tokenizer.json that is a list": (lambda f: (f / "tokenizer.json").write_text("[]"), "tokenizer.json",
                                        "not a JSON object"),
    "a modules.json of numbers": (lambda f: (f / "modules.json").write_text("[1, 2]"), "modules.json",
                                  "a module without a \"type\" or \"path\" string; save the model again"),
    "a config.json that is a list": (lambda f: (f / "config.json").write_text("[]"), "config.json",
                                     "not a JSON object"),
    "a tokenizer_config.json that is a list": (lambda f: (f / "tokenizer_config.json").write_text("[]"),
                                               "tokenizer_config.json", "not a JSON object"),
    "a model_max_length of text": (lambda f: (f / "tokenizer_config.json").write_text(json.dumps(
        {**json.loads((f / "tokenizer_config.json").read_text()), "model_max_length": "long"})),
        "tokenizer_config.json", "model_max_length 'long' is not a number; save the tokenizer again"),
    "a sentence_bert_config.json of text": (lambda f: (_sentence_transformers(f), (f / "sentence_bert_config.json")
                                                        .write_text('{"max_seq_length": "long"}')),
                                            "sentence_bert_config.json",
        "max_seq_length 'long' is not a positive whole number; save the model again"),
}


def test_a_configuration_value_of_the_wrong_type_is_one_line(tmp_path, tiny_model):
    from common.models.loading import load_encoder
    folder = _damaged(tmp_path, tiny_model, lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "hidden_size": "wide"})))
    with pytest.raises(InputError) as e:
        load_encoder(str(folder), say=lambda text: None)
    assert str(e.value).startswith(f"{folder}: cannot be loaded: Validation error for field 'hidden_size'")


@pytest.mark.parametrize("name", list(LOADING))
def test_a_damaged_model_is_one_line_naming_its_file(name, tmp_path, tiny_model):
    from common.models.loading import load_encoder
    damage, file, message = LOADING[name]
    folder = _damaged(tmp_path, tiny_model, damage)
    with pytest.raises(InputError) as e:
        load_encoder(str(folder), say=lambda text: None)
    assert str(e.value).startswith(f"{folder / file}: {message}"), str(e.value)


@pytest.mark.parametrize("script", ["03 --model", "04 convert-long --model", "04 teachers --teacher",
                                    "05 --model", "03 mlm --model"])
def test_every_loader_refuses_truncated_weights_and_an_incomplete_tokenizer_in_one_line(script, tmp_path, tiny_data,
                                                                                       tiny_model):
    for damage, file in ((LOADING["a truncated model.safetensors"][0], "model.safetensors"),
                         (_without("added_tokens"), "tokenizer.json")):
        import shutil
        shutil.rmtree(tmp_path / "model", ignore_errors=True)
        folder = _damaged(tmp_path, tiny_model, damage)
        command = {"03 --model": ("03_train.py", ["--data", tiny_data, "--model", folder, *TRAIN]),
                   "03 mlm --model": ("03_train.py", ["--objective", "mlm", "--data", tiny_data, "--model", folder,
                                                      "--max-steps", "1", "--cache-dir", tmp_path / "cache"]),
                   "04 convert-long --model": ("04_distill.py", ["convert-long", "--model", folder]),
                   "04 teachers --teacher": ("04_distill.py", _teachers(tiny_data, folder)),
                   "05 --model": ("05_evaluate.py", ["--data", tiny_data, "--model", f"m={folder}"])}[script]
        error = script_error(command[0], *command[1], "--out", tmp_path / f"out-{file}")
        assert error.startswith(f"error: {folder / file}: not a complete "), error


def test_integer_buffers_load_and_integer_weights_are_refused(tmp_path, tiny_model):
    """BERT's position_ids are integers in the model too (older checkpoints store them): they pass; a weight the
    model computes with as a float, stored as an integer, does not."""
    import torch
    from safetensors.torch import load_file, save_file

    from common.models.loading import load_encoder
    folder = _damaged(tmp_path, tiny_model, lambda f: None)
    weights = load_file(folder / "model.safetensors")
    save_file({**weights, "embeddings.position_ids": torch.arange(64)[None]}, folder / "model.safetensors",
              metadata={"format": "pt"})
    encoder, _, _ = load_encoder(str(folder), say=lambda text: None)
    assert torch.equal(encoder.transformer.embeddings.word_embeddings.weight,
                       weights["embeddings.word_embeddings.weight"])
    save_file({**weights, "pooler.dense.weight": weights["pooler.dense.weight"].to(torch.int32)},
              folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputError, match=r"weight pooler\.dense\.weight is stored as I32, not as floats"):
        load_encoder(str(folder), say=lambda text: None)


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "pv.json").write_text("[]"), "pv.json: not a Paragraph Vector's settings"),
    (lambda f: (f / "pv.json").write_text('{"models": ["dm"], "preprocess": {"dm": "none"}}'),
     "pv.json: not a Paragraph Vector's settings"),
    (lambda f: (f / "dm.model").write_bytes(b"\x80\x04garbage"), "dm.model: cannot be loaded as a gensim Doc2Vec "
                                                                  "model"),
    (lambda f: (f / "dm.model").write_bytes(b""), "dm.model: cannot be loaded as a gensim Doc2Vec model"),
])
def test_a_damaged_paragraph_vector_folder_is_one_line_naming_its_file(damage, message, tmp_path):
    from common.distill.paragraph_vector import ParagraphVector
    folder = tmp_path / "pv"
    ParagraphVector.train(["a b c d e f"] * 5, vector_size=4, min_count=1, epochs=1).save(str(folder))
    damage(folder)
    with pytest.raises(InputError) as e:
        ParagraphVector.load(str(folder))
    assert str(e.value).startswith(f"{folder}/{message}")


# -- text from outside in a card and a report: one escaping, one front-matter check ----------------------------------

HOSTILE_TEXT = ["a | b", "`code` and ``more``", "two\nlines\r\n# a heading", "<img src=x onerror=alert(1)>",
                "**bold** _it_ [link](https://x) ![i](y) <https://z> &amp; \\ $x$ ~~s~~", "| --- |", "ok"]


def _rendered(markdown):
    """CommonMark with GitHub's tables (markdown-it, the reference implementation's port): the tokens of the body
    after the front matter."""
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(markdown.split("\n---\n", 1)[-1])


def _cells(tokens):
    """Each table row's cells, as the text a reader sees (the inline tokens' children joined)."""
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append("".join(c.content if c.type != "softbreak" else "\n" for c in t.children))
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    return rows


def test_text_from_outside_is_itself_in_every_part_of_a_card_and_breaks_nothing():
    from common.models import card
    settings = [(f"flag{i}", text) for i, text in enumerate(HOSTILE_TEXT)]
    huge = "x" * (10 << 20)
    data = {"path": HOSTILE_TEXT[3], "script": HOSTILE_TEXT[0], "command": HOSTILE_TEXT[2], "commit": huge,
            "inputs": {text: text for text in HOSTILE_TEXT}, "counts": {HOSTILE_TEXT[2]: 3},
            "source": {"script": HOSTILE_TEXT[1], "inputs": {huge: huge}, "language": HOSTILE_TEXT[4]}}
    made = str(card.model_card("triplet", HOSTILE_TEXT[3], dict(CARD_FACTS), settings=settings,
                               training={"script": "03_train.py", "steps": 1, "epoch": 1, "processes": 1,
                                         "precision": "no"}, data=data, base=huge, start=huge + "|",
                               language=HOSTILE_TEXT[2]))
    assert len(made) < 32 << 10
    tokens = _rendered(made)
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h1", "h2", "h2", "h3", "h2", "h2"]
    assert not any(t.type == "html_block" or any(c.type == "html_inline" for c in t.children or ()) for t in tokens)
    rows = _cells(tokens)
    shown = [text.replace("\r", "\\r").replace("\n", "\\n") for text in HOSTILE_TEXT]
    assert [r for r in rows if r[0].startswith("--flag")] == [[f"--flag{i}", s] for i, s in enumerate(shown)]
    files = [os.path.basename(s) for s in shown]  # an input by its file name
    assert [r for r in rows if r[0] in files] == [[f, s if len(s) <= 64 else s[:64] + "…"]
                                                  for f, s in zip(files, shown)]
    assert ["x" * 200 + "…", "x" * 64 + "…"] in rows  # a 10 MB input, cut
    from huggingface_hub import ModelCard
    assert ModelCard(made).data.to_dict().get("base_model") is None and "language" not in ModelCard(made).data.to_dict()
    assert escape("a\u2028b\x85") == "a\\\\u2028b\\\\x85"


@pytest.mark.parametrize("value, kept", [("sentence-transformers/all-MiniLM-L6-v2", True), ("bert-base-uncased", True),
                                         ("a" * 97, False), ("a b", False), ("../x", False), ("a/b/c", False),
                                         ("<img src=x>", False), (["a/b"], False), ({"a": 1}, False), (7, False)])
def test_a_base_model_enters_the_front_matter_only_as_a_hub_name(value, kept):
    from huggingface_hub import ModelCard

    from common.models import card
    made = card.model_card("triplet", "m", dict(CARD_FACTS), base=value)
    assert ModelCard(str(made)).data.base_model == (value if kept else None)


CARD_FACTS = {"architecture": "BertModel", "model_type": "bert", "layers": 2, "dimensions": 8, "parameters": 100,
              "pooling": "mean", "normalize": False, "max_length": 32}


@pytest.mark.parametrize("name", ["a<b>", "c|d", "e]f", "g`h", "i j(k)", "l:m", "n%20o", "p#q"])
def test_a_report_links_the_card_of_a_model_at_any_path_and_keeps_its_table(name, tmp_path):
    import urllib.parse

    from common.eval import report
    model = tmp_path / "runs" / name / "model"
    model.mkdir(parents=True)
    (model / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n")
    cards = report.cards({"trained": str(model)}, tmp_path / "eval")
    table = report.markdown({"trained": {"crossref": {"map": 0.5}}}, cards=cards)
    tokens = _rendered(table)
    assert _cells(tokens) == [["model", "crossref map", "card"], ["trained", "50.00", f"{name}/model"]]
    href, = [c.attrs["href"] for t in tokens for c in t.children or () if c.type == "link_open"]
    assert os.path.normpath(tmp_path / "eval" / urllib.parse.unquote(href)) == str(model / "README.md")


def test_the_query_of_a_key_sentence_model_enters_its_cards_note_as_itself():
    """--query of the key-sentence objectives enters its card's settings table and a note."""
    from types import SimpleNamespace

    from common.train.objectives.keysent import ContrastiveObjective
    objective = ContrastiveObjective(SimpleNamespace(query_token=None), None)
    objective.query = HOSTILE_TEXT[3] + HOSTILE_TEXT[0]
    from common.models import run_card
    note, = run_card.details(objective)["notes"]
    tokens = _rendered(note)
    assert not any(c.type == "html_inline" for t in tokens for c in t.children or ())
    assert "".join(c.content for t in tokens for c in t.children or ()) == (
        f"The query it was trained with: {objective.query}. An article's sentences are ranked by their cosine "
        "similarity to the query's embedding.")


# -- the reproduction scripts: a missing or damaged input is one line -----------------------------------------------

def _reproduce(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"reproduce_{name}", os.path.join(os.path.dirname(__file__), "..",
                                                                                      "reproduce", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _eval_folder(folder, metrics, embedding, ids=("d0", "d1"), rows=2):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "manifest.json").write_text(json.dumps({"script": "05_evaluate.py", "embedding": embedding}))
    (folder / "base-cls.ids.txt").write_text("".join(f"{i}\n" for i in ids))
    np.save(folder / "base-cls.npy", np.ones((rows, 3), np.float32))
    return folder


@pytest.mark.parametrize("script, args, expected", [
    ("compare", ["wikispecter", "{root}/nowhere.json"], "{root}/nowhere.json: no such file"),
    ("compare", ["wikispecter", "{root}/list.json"], "{root}/list.json: not a JSON object"),
    ("compare", ["wikispecter", "{root}/text.json"], "the metrics of m: crossref map is 'high', not a number"),
    ("manifests", ["{root}/nowhere"], "{root}/nowhere: no such folder"),
    ("manifests", ["{root}/badargv"], "{root}/badargv/manifest.json: argv is not a list of strings or versions not an "
                                      "object; re-run the step that wrote it"),
    ("label_links", ["{root}/articles.jsonl", "{root}"], "{root}/graph.npz: no such file"),
    ("label_links", ["{root}/articles.jsonl", "{root}/badgraph"], "{root}/badgraph/graph.npz: not 02's graph.npz "
                                                                  "(not a zip archive)"),
    ("ablation", ["--data", "{data}", "--base", "{root}/nowhere", "--out", "{root}", "--rows", "default"],
     "{root}/nowhere/base-cls.ids.txt: no such file"),
    ("ablation", ["--data", "{data}", "--base", "{root}/noscores", "--out", "{root}", "--rows", "default"],
     "{root}/noscores/metrics.json: no base-cls"),
    ("ablation", ["--data", "{data}", "--base", "{root}/nopooling", "--out", "{root}", "--rows", "default"],
     "{root}/nopooling/manifest.json: no base-cls → pooling"),
    ("distill_probe", ["--data", "{data}", "--teach", "{root}/nowhere", "--eval", "{root}", "--raw", "{root}"],
     "{root}/sbert.npy: no such file"),
])
def test_a_reproduction_script_answers_a_missing_or_damaged_input_in_one_line(script, args, expected, tmp_path,
                                                                              tiny_data, capsys):
    root = tmp_path
    (root / "list.json").write_text("[]")
    (root / "text.json").write_text(json.dumps({"m": {"crossref": {"map": "high"}}}))
    (root / "badargv").mkdir()
    (root / "badargv" / "manifest.json").write_text(json.dumps({"script": "x", "argv": "python x.py"}))
    (root / "badgraph").mkdir()
    (root / "badgraph" / "graph.npz").write_bytes(b"not a zip")
    write_articles(root / "articles.jsonl")
    ids = [obj["id"] for _, obj in io.read_jsonl(tiny_data / "docs.jsonl")]
    _eval_folder(root / "noscores", {}, {"base-cls": {"pooling": "cls"}}, ids, len(ids))
    _eval_folder(root / "nopooling", {"base-cls": {}}, {"base-cls": {}}, ids, len(ids))
    fill = {"root": str(root), "data": str(tiny_data)}
    with pytest.raises(InputError) as e:
        _reproduce(script)([a.format(**fill) for a in args])
    assert str(e.value).startswith(expected.format(**fill)), str(e.value)


@pytest.mark.parametrize("script", ["ablation", "distill_probe", "compare", "label_links", "manifests"])
def test_each_reproduction_script_exits_2_with_one_line_for_a_missing_input(script, tmp_path):
    args = {"ablation": ["--data", tmp_path, "--base", tmp_path, "--out", tmp_path, "--rows", "x"],
            "distill_probe": ["--data", tmp_path, "--teach", tmp_path, "--eval", tmp_path, "--raw", tmp_path],
            "compare": ["wikispecter", tmp_path / "metrics.json"], "label_links": [tmp_path / "a.jsonl", tmp_path],
            "manifests": [tmp_path / "nowhere"]}[script]
    line = script_error(os.path.join("reproduce", f"{script}.py"), *args, in_subprocess=True)
    assert line.startswith(f"error: {tmp_path}") and "no such" in line
