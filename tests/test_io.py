"""common.io: the names that may become file names, and output folders that are written whole or not at all."""

import errno
import json
import os
import re

import pytest

from common.io import InputError, safe_name
from common.folders import Outputs
from conftest import script_error, script_main


def write_articles(tmp_path):
    path = tmp_path / "articles.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": "x", "links": [f"d{(i + 1) % 9}"]})
                            + "\n" for i in range(9)), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["top", "second", "fi-2", "Äiti.1", "a_b", "x" * 100])
def test_safe_names_are_kept(name):
    assert safe_name(name, "level") == name


@pytest.mark.parametrize("name", ["", ".hidden", "..", "a/b", "x/../../../PWNED", "a\\b", "a b", "/abs", "x" * 101,
                                  None, 3])
def test_names_that_could_leave_the_folder_or_hide_are_refused(name):
    with pytest.raises(InputError) as e:
        safe_name(name, "f.jsonl:3: label level")
    assert str(e.value) == (f"f.jsonl:3: label level {name!r} cannot be a file name: use at most 100 letters, "
                            "digits, '_', '-' and '.' (not first)")


def test_outputs_never_opens_a_path_outside_its_folder(tmp_path):
    with pytest.raises(ValueError), Outputs(tmp_path / "out") as outputs:
        outputs.open("../escaped.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_output_folder_records_its_start_and_finish_writes_its_manifest_last(tmp_path, monkeypatch):
    import argparse

    from common import provenance
    times = iter(["2026-01-02T03:04:05+00:00", "2026-01-02T03:04:09+00:00"])
    monkeypatch.setattr(provenance, "now", lambda: next(times))
    src = tmp_path / "in.txt"
    src.write_text("abc")
    args = argparse.Namespace(command="links", out=str(tmp_path / "out"))
    with Outputs(tmp_path / "out", "02_build_graph.py", "links") as outputs:
        with outputs.open("a.txt") as f:
            f.write("a\n")
        outputs.finish(args, inputs=[str(src), str(tmp_path / "missing")], counts={"n": 1}, seed=7, language="en")
        assert not (tmp_path / "out" / "manifest.json").exists()  # written at the commit, the last file
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {k: manifest[k] for k in ("script", "args", "started", "finished", "seed", "inputs", "counts", "language",
                                     "files")} == {
        "script": "02_build_graph.py", "args": {"command": "links", "out": str(tmp_path / "out")},
        "started": "2026-01-02T03:04:05+00:00", "finished": "2026-01-02T03:04:09+00:00", "seed": 7,
        "inputs": {str(src): "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}, "counts": {"n": 1},
        "language": "en", "files": ["a.txt"]}

    times = iter(["2026-01-02T03:05:00+00:00", "2026-01-02T03:05:01+00:00"])
    with Outputs(tmp_path / "mine", "05_evaluate.py", file="keys.jsonl") as outputs:  # one file of a user's folder
        with outputs.open("keys.jsonl") as f:
            f.write("{}\n")
        outputs.finish(args, counts={"selected": 0})
    assert sorted(os.listdir(tmp_path / "mine")) == ["keys.jsonl", "keys.jsonl.manifest.json"]
    manifest = json.loads((tmp_path / "mine" / "keys.jsonl.manifest.json").read_text())
    assert (manifest["script"], manifest["started"], manifest["finished"], manifest["counts"]) == \
        ("05_evaluate.py", "2026-01-02T03:05:00+00:00", "2026-01-02T03:05:01+00:00", {"selected": 0})


def test_an_existing_file_as_the_output_folder_is_a_one_line_error(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "One. Two.", "key_sentences": ["Two."]}\n', encoding="utf-8")
    out = tmp_path / "out"
    out.write_text("mine\n")
    assert script_error("01_extract.py", "sentences", "--input", src, "--out", out) == \
        f"error: {out}: exists and is not a directory"
    assert out.read_text() == "mine\n"


def test_an_output_folder_that_cannot_be_made_or_written_is_a_one_line_error(tmp_path, monkeypatch):
    src = write_articles(tmp_path)
    ok = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path).endswith("readonly") else ok(path, mode))
    (tmp_path / "readonly").mkdir()
    assert script_error("02_build_graph.py", "--articles", src, "--out", tmp_path / "readonly") == \
        f"error: {tmp_path / 'readonly'}: not writable"

    def refuse(path, exist_ok=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(os, "makedirs", refuse)
    assert script_error("02_build_graph.py", "--articles", src, "--out", tmp_path / "new") == \
        f"error: {tmp_path / 'new'}: cannot be created: Permission denied"


class FullDisk:
    """A file whose writes fail as on a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    writelines = write

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_full_disk_is_a_one_line_error_and_leaves_nothing(tmp_path, monkeypatch):
    src = write_articles(tmp_path)
    out = tmp_path / "data"
    opened = Outputs.open
    monkeypatch.setattr(Outputs, "open", lambda self, name, mode="w": FullDisk(opened(self, name, mode)))
    assert re.fullmatch(rf"error: {re.escape(str(out))}: no space left on the device \([\d,]+ bytes free\); "
                        "nothing was written", script_error("02_build_graph.py", "--articles", src, "--out", out))
    assert list(out.iterdir()) == []


def test_a_directory_given_as_an_input_file_is_a_one_line_error(tmp_path):
    (tmp_path / "articles").mkdir()
    assert script_error("02_build_graph.py", "--articles", tmp_path / "articles", "--out", tmp_path / "data") == \
        f"error: {tmp_path / 'articles'}: is a directory, not a file"


def graph(tmp_path, out, levels):
    """02 on 12 articles labelled at ``levels``, replacing what ``out`` holds (--overwrite)."""
    src = tmp_path / "articles.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": "x", "links": [f"d{(i + 1) % 12}"],
                                       "labels": {level: f"{level}{i % 2}" for level in levels}}) + "\n"
                           for i in range(12)), encoding="utf-8")
    script_main("02_build_graph.py")(["--articles", str(src), "--out", str(out), "--topic-min", "2", "--overwrite"])
    return sorted(p.name for p in out.iterdir())


def test_a_rerun_removes_what_the_previous_run_wrote_and_this_one_does_not(tmp_path, capsys):
    out = tmp_path / "data"
    assert "topics.second.train.jsonl" in graph(tmp_path, out, ["top", "second"])
    (out / ".staging-killed").mkdir()  # the private folder of a run killed before its commit
    (out / ".staging-killed" / "triplets.val.jsonl").write_text("left by a killed run")
    (out / "notes.tmp").write_text("the user's")  # a name no run wrote: never removed
    files = graph(tmp_path, out, ["top"])
    assert not any(name.startswith(("topics.second", ".staging")) for name in files)
    assert (out / "notes.tmp").read_text() == "the user's"
    assert json.loads((out / "manifest.json").read_text())["files"] == \
        [n for n in files if n not in ("manifest.json", "notes.tmp")]


def test_a_previous_manifest_cannot_make_a_rerun_remove_files_outside_its_folder(tmp_path, capsys):
    out = tmp_path / "data"
    graph(tmp_path, out, ["top"])
    manifest = json.loads((out / "manifest.json").read_text())
    (tmp_path / "precious").write_text("keep")
    (out / "manifest.json").write_text(json.dumps({**manifest, "files": ["../precious", "/etc/hostname"]}))
    graph(tmp_path, out, ["top"])
    assert (tmp_path / "precious").read_text() == "keep"


def test_a_folder_that_is_not_this_scripts_own_run_is_refused(tmp_path):
    src = write_articles(tmp_path)
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    assert script_error("02_build_graph.py", "--articles", src, "--out", foreign) == (
        f"error: {foreign}: not empty and not an output folder of this project (no manifest.json); give a new or "
        "empty folder")
    other = tmp_path / "wiki"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"script": "01_extract.py", "files": ["articles.jsonl"]}))
    (other / "articles.jsonl").write_text("")
    assert script_error("02_build_graph.py", "--articles", src, "--out", other) == (
        f"error: {other}: holds the output of 01_extract.py; 02_build_graph.py writes to a folder of its own")
    assert sorted(p.name for p in other.iterdir()) == ["articles.jsonl", "manifest.json"]


def test_a_folder_in_use_by_another_run_is_refused_and_the_lock_goes_with_the_run(tmp_path, capsys):
    from common.folders import FolderLock
    src = write_articles(tmp_path)
    out = tmp_path / "data"
    out.mkdir()
    with FolderLock(out):
        assert script_error("02_build_graph.py", "--articles", src, "--out", out) == \
            f"error: {out}: in use by another run (process {os.getpid()}); wait for it to end or give another folder"
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert ".lock" not in graph(tmp_path, out, ["top"])


def test_no_link_inside_an_output_folder_is_followed_and_no_stale_name_leaves_it(tmp_path, capsys):
    out = tmp_path / "data"
    graph(tmp_path, out, ["top"])
    outside_file, outside_dir = tmp_path / "precious.txt", tmp_path / "elsewhere"
    outside_file.write_text("keep")
    outside_dir.mkdir()
    (outside_dir / "file").write_text("keep")
    (out / "docs.jsonl.tmp").symlink_to(outside_file)
    (out / "sub").symlink_to(outside_dir)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "files": manifest["files"] + ["sub/file"]}))
    graph(tmp_path, out, ["top"])
    assert outside_file.read_text() == "keep" and (outside_dir / "file").read_text() == "keep"
    assert (out / "docs.jsonl.tmp").is_symlink() and (out / "docs.jsonl").stat().st_size > 0
    with pytest.raises(InputError) as e, Outputs(out) as outputs:
        outputs.open("sub/new.txt")
    assert str(e.value) == f"{out}: sub/new.txt would be written through a symbolic link; remove the link"
    assert sorted(p.name for p in outside_dir.iterdir()) == ["file"]


def test_any_failing_output_step_is_a_one_line_error(tmp_path, monkeypatch):
    src = write_articles(tmp_path)
    out = tmp_path / "data"

    def refuse(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(os, "replace", refuse)
    assert script_error("02_build_graph.py", "--articles", src, "--out", out) == \
        f"error: {out}: cannot write: Permission denied"
    assert list(out.iterdir()) == []


def test_a_line_longer_than_the_bound_names_file_and_line_without_being_read_whole(tmp_path, monkeypatch):
    from common import io
    monkeypatch.setattr(io, "MAX_LINE_BYTES", io.MAX_LINE_BYTES)  # the flag sets it for the process
    snapshot = tmp_path / "snapshot.json"
    good = json.dumps({"id": "1", "title": "t", "abstract": "a b", "categories": "cs.CL"})
    snapshot.write_text(good + "\n" + good.replace("a b", "a" * (2 << 20)) + "\n")
    assert script_error("01_extract.py", "arxiv", "--input", snapshot, "--out", tmp_path / "out", "--max-line-mb",
                        "1") == f"error: {snapshot}:2: line longer than 1 MB (--max-line-mb)"
    assert script_error("01_extract.py", "arxiv", "--input", "/dev/zero", "--out", tmp_path / "out",
                        "--max-line-mb", "1") == "error: /dev/zero:1: line longer than 1 MB (--max-line-mb)"
    assert list((tmp_path / "out").iterdir()) == []
