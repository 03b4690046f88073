"""Output folders (common/outdir/folders.py) as the scripts use them: written in a private folder and committed whole,
manifest last; a folder owned by its run, locked while in use, refused where it is not the script's own or holds a
finished output (--overwrite replaces it and keeps the user's files); nothing written through a link planted in
it; what a killed run left removed by the next; a full disk, a folder that cannot be made or any failing step is
one line, with nothing written. What --overwrite removes and when, what a manifest may name for removal, and the
names a file output puts beside itself."""

import argparse
import errno
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from common import io
from common.outdir import folders, written
from common.outdir.folders import Outputs
from common.io import InputError
from conftest import (SHORT_TRAIN, file_tree, full_disk, linked_articles, script_error, script_main,
                      short_teachers, write_linked_articles)


def write_articles(tmp_path):
    """Nine articles linked in a ring, as TMP/articles.jsonl."""
    path = tmp_path / "articles.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": "x", "links": [f"d{(i + 1) % 9}"]})
                            + "\n" for i in range(9)), encoding="utf-8")
    return path


def build(articles, out, *extra):
    """02 on ``articles`` into ``out``, evaluation documents shared with training."""
    script_main("02_build_graph.py")(["--articles", str(articles), "--out", str(out), "--crossref-min-links", "2",
                                      "--topic-min", "2", "--eval-docs", "shared", *map(str, extra)])


def graph(tmp_path, out, levels):
    """02 on 12 articles labelled at ``levels``, replacing what ``out`` holds (--overwrite)."""
    src = tmp_path / "articles.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": "x", "links": [f"d{(i + 1) % 12}"],
                                       "labels": {level: f"{level}{i % 2}" for level in levels}}) + "\n"
                           for i in range(12)), encoding="utf-8")
    script_main("02_build_graph.py")(["--articles", str(src), "--out", str(out), "--topic-min", "2", "--overwrite"])
    return sorted(p.name for p in out.iterdir())


# -- written whole, the manifest last ------------------------------------------------------------------------------

def test_outputs_never_opens_a_path_outside_its_folder(tmp_path):
    with pytest.raises(ValueError), Outputs(tmp_path / "out") as outputs:
        outputs.open("../escaped.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_output_folder_records_its_start_and_finish_writes_its_manifest_last(tmp_path, monkeypatch):
    import argparse

    from common.outdir import provenance
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


def test_a_run_killed_while_committing_is_refused_by_readers_and_repaired_by_the_next_run(tmp_path, tiny_model,
                                                                                         monkeypatch, capsys):
    articles = write_linked_articles(tmp_path / "articles.jsonl")
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
    for script, args in (("03_train.py", ["--model", str(tiny_model), "--out", str(tmp_path / "run"), *SHORT_TRAIN]),
                         ("05_evaluate.py", ["--model", f"base={tiny_model}", "--out", str(tmp_path / "eval")])):
        assert script_error(script, "--data", data, *args) == (
            f"error: {data}: its run stopped while committing its files (manifest.json is marked 'committing'); "
            "run 02_build_graph.py again")
    build(articles, data, "--seed", "2")
    manifest = json.loads((data / "manifest.json").read_text())
    assert "state" not in manifest and manifest["args"]["seed"] == 2
    assert sorted(p.name for p in data.iterdir()) == sorted(manifest["files"] + ["manifest.json"])
    assert manifest["sha256"] == {name: io.sha256(data / name) for name in manifest["files"]}


# -- whose folder it is: owned, locked, a finished output replaced only with --overwrite ---------------------------

def test_an_existing_file_as_the_output_folder_is_a_one_line_error(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "One. Two.", "key_sentences": ["Two."]}\n', encoding="utf-8")
    out = tmp_path / "out"
    out.write_text("mine\n")
    assert script_error("01_extract.py", "sentences", "--input", src, "--out", out) == \
        f"error: {out}: exists and is not a directory"
    assert out.read_text() == "mine\n"


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
    from common.outdir.folder_lock import FolderLock
    src = write_articles(tmp_path)
    out = tmp_path / "data"
    out.mkdir()
    with FolderLock(out):
        assert script_error("02_build_graph.py", "--articles", src, "--out", out) == \
            (f"error: {out}: in use by another run (process {os.getpid()} on {socket.gethostname()}); wait for it "
             "to end or give another folder")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert ".lock" not in graph(tmp_path, out, ["top"])


def no_flock(code):
    """A test double of ``fcntl.flock`` on a filesystem without it, as Lustre mounted without ``-o flock`` (ENOSYS)
    or NFS mounted ``nolock`` (ENOLCK) answer."""
    def flock(fd, operation):
        raise OSError(code, os.strerror(code))
    return flock


HOLD = """
import errno, fcntl, os, sys, time
sys.path.insert(0, {root!r})
if {code}:
    def flock(fd, operation):
        raise OSError({code}, os.strerror({code}))
    fcntl.flock = flock
from common.outdir.folder_lock import FolderLock
FolderLock({folder!r}).acquire()
print("held", flush=True)
time.sleep(120)
"""


def holding(folder, code=0):
    """Another process holding ``folder``'s lock (flock failing with ``code``, where not 0), once it says so."""
    from conftest import ENV, ROOT
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(root=ROOT, code=code, folder=str(folder))], env=ENV,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP])
def test_without_flock_a_folder_in_use_is_refused_by_its_lock_files_exclusive_creation(code, tmp_path, monkeypatch):
    import fcntl
    from common.outdir.folder_lock import FolderLock
    monkeypatch.setattr(fcntl, "flock", no_flock(code))
    src = write_articles(tmp_path)
    out = tmp_path / "data"
    out.mkdir()
    with FolderLock(out):
        assert (out / ".lock").read_text().split()[:2] == [socket.gethostname(), str(os.getpid())]
        assert script_error("02_build_graph.py", "--articles", src, "--out", out) == (
            f"error: {out}: in use by another run (process {os.getpid()} on {socket.gethostname()}); wait for it to "
            f"end or give another folder (a filesystem without flock: if that run is gone, remove {out / '.lock'})")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert ".lock" not in graph(tmp_path, out, ["top"])


def test_without_flock_a_second_process_is_refused_and_takes_the_lock_once_the_first_is_killed(tmp_path, monkeypatch):
    import fcntl
    from common.outdir.folder_lock import FolderLock
    monkeypatch.setattr(fcntl, "flock", no_flock(errno.ENOSYS))
    proc = holding(tmp_path, errno.ENOSYS)
    try:
        with pytest.raises(InputError, match=rf"in use by another run \(process {proc.pid} on "
                                             rf"{re.escape(socket.gethostname())}\)"):
            FolderLock(tmp_path).acquire()
    finally:
        proc.kill()
        proc.wait()
    with FolderLock(tmp_path):  # the killed process left its lock file; on its own host it is stale
        assert (tmp_path / ".lock").read_text().split()[:2] == [socket.gethostname(), str(os.getpid())]
    assert os.listdir(tmp_path) == []


def test_a_flock_held_by_another_process_names_its_host_and_process(tmp_path):
    from common.outdir.folder_lock import FolderLock
    proc = holding(tmp_path)
    try:
        with pytest.raises(InputError) as refused:
            FolderLock(tmp_path).acquire()
        assert str(refused.value) == (f"{tmp_path}: in use by another run (process {proc.pid} on "
                                      f"{socket.gethostname()}); wait for it to end or give another folder")
    finally:
        proc.kill()
        proc.wait()
    FolderLock(tmp_path).acquire().release()


def dead_pid():
    """The id of a process of this host that has ended (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


@pytest.mark.parametrize("record, taken", [
    ("{host} {dead} -", True),  # this host's process, gone
    ("{host} {me} 1", True),  # this host's process id, now another process's (started at another time)
    ("n2 {dead} -", False),  # another node's: out of sight, never taken over
    ("n2 1 -", False),
    ("", False),  # its owner made it and has not written its record yet
    ("{me}", False),  # an earlier version's bare process id
], ids=["dead", "id-reused", "other-host", "other-host-live-id", "no-record", "bare-id"])
def test_without_flock_a_lock_is_taken_over_only_from_a_process_of_this_host_that_is_gone(record, taken, tmp_path,
                                                                                           monkeypatch):
    import fcntl
    from common.outdir.folder_lock import FolderLock
    monkeypatch.setattr(fcntl, "flock", no_flock(errno.ENOLCK))
    line = record.format(host=socket.gethostname(), dead=dead_pid(), me=os.getpid())
    (tmp_path / ".lock").write_text(line + "\n")
    if taken:
        with FolderLock(tmp_path):
            assert (tmp_path / ".lock").read_text().split()[:2] == [socket.gethostname(), str(os.getpid())]
        assert not (tmp_path / ".lock").exists()
        return
    owner = f"process {line.split()[1]} on {line.split()[0]}" if line.count(" ") == 2 else "process unknown"
    with pytest.raises(InputError) as refused:
        FolderLock(tmp_path).acquire()
    assert str(refused.value) == (f"{tmp_path}: in use by another run ({owner}); wait for it to end or give another "
                                  f"folder (a filesystem without flock: if that run is gone, remove "
                                  f"{tmp_path / '.lock'})")
    assert (tmp_path / ".lock").read_text() == line + "\n"


def test_a_released_lock_removes_only_its_own_file(tmp_path, monkeypatch):
    import fcntl
    from common.outdir.folder_lock import FolderLock
    monkeypatch.setattr(fcntl, "flock", no_flock(errno.ENOSYS))
    lock = FolderLock(tmp_path).acquire()
    os.remove(tmp_path / ".lock")  # removed by hand, and another run's made since
    (tmp_path / ".lock").write_text("n2 7 -\n")
    lock.release()
    assert (tmp_path / ".lock").read_text() == "n2 7 -\n"


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


@pytest.mark.parametrize("command", ["01 sentences", "02 links", "04 teachers", "04 convert-long", "05 evaluate",
                                     "05 extract"])
def test_a_finished_output_is_refused_and_replaced_with_overwrite_keeping_files_it_did_not_write(
        command, tmp_path, tiny_data, tiny_model, capsys):
    articles = write_linked_articles(tmp_path / "articles.jsonl")
    keysent = tmp_path / "keysent.jsonl"
    keysent.write_text(json.dumps({"id": "a", "text": "One gene. Two genes here.", "key_sentences": ["One gene."]})
                       + "\n", encoding="utf-8")
    out = tmp_path / "out"
    script, args, what = {
        "01 sentences": ("01_extract.py", ["sentences", "--input", keysent], "01_extract.py"),
        "02 links": ("02_build_graph.py", ["--articles", articles, "--crossref-min-links", "2", "--topic-min", "2",
                                           "--eval-docs", "shared"], "02_build_graph.py links"),
        "04 teachers": ("04_distill.py", short_teachers(tiny_data, tiny_model), "04_distill.py teachers"),
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
    finished = file_tree(tmp_path)
    expected = (f"error: {out}: exists; give --overwrite to replace it, or another --out" if what is None else
                f"error: {out}: holds a finished output of {what}; give --overwrite to replace it (only what that "
                "run wrote is removed), or another --out")
    assert script_error(script, *args) == expected
    assert file_tree(tmp_path) == finished
    mine = (out.parent if what is None else out) / "notes.txt"
    mine.write_text("mine")
    main([str(a) for a in args] + ["--overwrite"])
    assert mine.read_text() == "mine"
    assert not [p for p in tmp_path.rglob(".staging-*")] and not [p for p in tmp_path.rglob("*.lock")]


# -- nothing planted in an output folder is written through --------------------------------------------------------

TEMPORARY_NAMES = ["docs.jsonl.tmp", "graph.npz.tmp", "graph.npz.tmp.indices.tmp", "graph.npz.indices.tmp",
                   "manifest.json.tmp", "splits.json.tmp", "triplets.train.jsonl.tmp", "curves.png.tmp",
                   "log.jsonl.tmp", "run.json.tmp", "articles.pass1.jsonl.tmp", "base.flat.faiss.tmp",
                   "tmp", ".tmp", "docs.jsonl.old"]


def test_links_planted_at_any_temporary_name_are_never_written_through(tmp_path, tiny_model, capsys):
    articles = write_linked_articles(tmp_path / "articles.jsonl")
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
    script_main("03_train.py")(["--data", str(data), "--model", str(tiny_model), "--out", str(run), *SHORT_TRAIN,
                                "--checkpoint-every", "1"])
    assert target.read_text() == "keep"
    assert all((folder / name).is_symlink() for folder in (data, run) for name in TEMPORARY_NAMES)
    assert not [p for p in tmp_path.rglob(".staging-*")]


def test_a_link_at_a_final_name_is_replaced_not_followed(tmp_path, capsys):
    articles = write_linked_articles(tmp_path / "articles.jsonl")
    data = tmp_path / "data"
    build(articles, data)
    target = tmp_path / "precious"
    target.write_text("keep")
    (data / "docs.jsonl").unlink()
    (data / "docs.jsonl").symlink_to(target)
    build(articles, data, "--overwrite")
    assert target.read_text() == "keep" and not (data / "docs.jsonl").is_symlink()


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


# -- private folders inside --out, and what a killed run left there removed ----------------------------------------

def test_every_private_folder_lies_inside_the_out_it_is_made_for(tmp_path, tiny_data, tiny_model, monkeypatch,
                                                                 capsys):
    import tempfile
    made, mkdtemp = [], tempfile.mkdtemp

    def recorded(suffix=None, prefix=None, dir=None):
        made.append((os.path.realpath(dir), prefix))
        return mkdtemp(suffix, prefix, dir)
    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    articles = write_linked_articles(tmp_path / "articles.jsonl")
    runs = [("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64", "--window", "16"],
             tmp_path / "long"),
            ("03_train.py", ["--data", tiny_data, "--model", tiny_model, *SHORT_TRAIN, "--checkpoint-every", "1",
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
    articles = write_linked_articles(tmp_path / "articles.jsonl")
    script, args, out = {
        "04 convert-long": ("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64",
                                              "--window", "16"], tmp_path / "long"),
        "03": ("03_train.py", ["--data", tiny_data, "--model", tiny_model, *SHORT_TRAIN], tmp_path / "run"),
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


# -- a full disk, a folder that cannot be made, any failing step: one line, nothing written ------------------------

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


def test_an_output_folder_that_cannot_be_made_or_written_is_one_line_for_training_too(tmp_path, tiny_data,
                                                                                     tiny_model, monkeypatch):
    ok = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path).endswith("readonly") else ok(path, mode))
    (tmp_path / "readonly").mkdir()
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "readonly",
                        *SHORT_TRAIN) == f"error: {tmp_path / 'readonly'}: not writable"
    made = os.makedirs

    def refuse(path, mode=0o777, exist_ok=False):
        if str(path).endswith("new"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return made(path, mode, exist_ok)
    monkeypatch.setattr(os, "makedirs", refuse)
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "new",
                        *SHORT_TRAIN) == f"error: {tmp_path / 'new'}: cannot be created: Permission denied"


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


def test_vectors_that_do_not_fit_on_the_disk_are_one_line_before_anything_is_mapped(tmp_path, tiny_data, tiny_model,
                                                                                   monkeypatch, capsys):
    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    out = tmp_path / "eval"
    error = script_error("05_evaluate.py", "--data", tiny_data, "--model", f"base={tiny_model}", "--out", out,
                         "--max-length", "32")
    assert re.fullmatch(rf"error: {re.escape(str(out))}: no space left on the device \(base\.npy needs [\d,]+ "
                        r"bytes, [\d,]+ free\); nothing was written", error), error
    assert list(out.iterdir()) == []


def test_any_failing_output_step_is_a_one_line_error(tmp_path, monkeypatch):
    src = write_articles(tmp_path)
    out = tmp_path / "data"

    def refuse(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(os, "replace", refuse)
    assert script_error("02_build_graph.py", "--articles", src, "--out", out) == \
        f"error: {out}: cannot write: Permission denied"
    assert list(out.iterdir()) == []


# -- --overwrite, manifests read as input, a file output's own names ----------

ARGS = argparse.Namespace(out="x")


def _tree(folder):
    """Every file under ``folder`` (hidden ones too) with its content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(outputs, files):
    """``files`` ({name: text}) into ``outputs``; ``dir/sub/name`` makes the folder ``dir`` as a library would."""
    folders_made = {}
    for name, text in files.items():
        if "/" not in name:
            with outputs.open(name) as f:
                f.write(text)
            continue
        top, rest = name.split("/", 1)
        if top not in folders_made:
            folders_made[top] = outputs.tmp_path(top)
        path = os.path.join(folders_made[top], rest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def _run(out, files, overwrite=True, fail=False):
    """A run of a made-up command writing ``files`` ({name: text}; ``dir/name`` makes a folder) into ``out``."""
    with Outputs(out, "01_extract.py", overwrite=overwrite) as outputs:
        _write(outputs, files)
        if fail:
            raise KeyboardInterrupt  # killed before its commit
        outputs.finish(ARGS)


# -- --overwrite: the previous output stays whole until the new one is committed ------------------------------------

def test_a_run_killed_before_its_commit_leaves_the_finished_output_whole(tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old", "pv/x.bin": "old"}, overwrite=False)
    before = _tree(out)
    with pytest.raises(KeyboardInterrupt):
        _run(out, {"a.txt": "new", "b.txt": "new"}, fail=True)
    assert _tree(out) == before


def test_overwrite_keeps_a_users_file_inside_a_folder_the_previous_run_wrote(tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old", "pv/x.bin": "old", "pv/stale.bin": "old"}, overwrite=False)
    (out / "pv" / "notes.txt").write_text("mine")
    (out / "pv" / "mine").mkdir()
    (out / "pv" / "mine" / "more.txt").write_text("mine too")
    _run(out, {"a.txt": "new", "pv/x.bin": "new"})
    assert (out / "pv" / "x.bin").read_text() == "new" and not (out / "pv" / "stale.bin").exists()
    assert (out / "pv" / "notes.txt").read_text() == "mine" and (out / "pv" / "mine" / "more.txt").is_file()


def test_a_folder_no_longer_written_loses_only_the_files_its_run_wrote(tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old", "pv/x.bin": "old", "pv/sub/y.bin": "old"}, overwrite=False)
    (out / "pv" / "sub" / "notes.txt").write_text("mine")
    _run(out, {"a.txt": "new"})
    assert _tree(out / "pv") == {"sub/notes.txt": b"mine"}
    _run(out, {"a.txt": "newer"})
    assert (out / "pv" / "sub" / "notes.txt").read_text() == "mine"


def test_a_folder_the_previous_run_wrote_is_replaced_whole_when_it_holds_nothing_else(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _run(out, {"pv/x.bin": "old", "pv/old.bin": "old"}, overwrite=False)
    replaced = []
    put = folders.put
    monkeypatch.setattr(folders, "put", lambda staged, final: (replaced.append(os.path.basename(final)),
                                                               put(staged, final)))
    _run(out, {"pv/x.bin": "new"})
    assert "pv" in replaced and _tree(out / "pv") == {"x.bin": b"new"}


def test_a_users_file_where_a_new_file_must_go_is_refused_in_one_line_and_kept(tmp_path):
    out = tmp_path / "out"
    _run(out, {"pv/x.bin": "old"}, overwrite=False)
    (out / "pv" / "notes.txt").write_text("mine")
    (out / "pv" / "sub").write_text("mine, where the new run makes a folder")
    with pytest.raises(InputError) as e:
        _run(out, {"pv/sub/y.bin": "new"})
    assert str(e.value) == (f"{out / 'pv' / 'sub'}: a file this project did not write is in the way of what it "
                            "writes there; move it")
    assert (out / "pv" / "sub").read_text().startswith("mine") and (out / "pv" / "notes.txt").read_text() == "mine"


def test_a_link_inside_a_folder_the_previous_run_wrote_is_replaced_not_followed(tmp_path):
    out = tmp_path / "out"
    _run(out, {"pv/x.bin": "old"}, overwrite=False)
    precious = tmp_path / "precious"
    precious.write_text("keep")
    (out / "pv" / "notes.txt").write_text("mine")
    (out / "pv" / "x.bin").unlink()
    (out / "pv" / "x.bin").symlink_to(precious)
    _run(out, {"pv/x.bin": "new"})
    assert precious.read_text() == "keep" and (out / "pv" / "x.bin").read_text() == "new"
    assert not (out / "pv" / "x.bin").is_symlink()


def test_a_run_killed_while_removing_the_previous_runs_files_leaves_them_to_the_next_run(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old", "stale.txt": "old", "pv/x.bin": "old"}, overwrite=False)
    (out / "notes.txt").write_text("mine")

    def killed(directory, names):
        raise KeyboardInterrupt
    monkeypatch.setattr(folders, "remove_written", killed)
    with pytest.raises(KeyboardInterrupt):
        _run(out, {"a.txt": "new"})
    monkeypatch.undo()
    assert json.loads((out / "manifest.json").read_text())["state"] == "committing"
    _run(out, {"a.txt": "newer"}, overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "manifest.json", "notes.txt"]


@pytest.mark.parametrize("command", ["01 sentences", "02 links", "04 teachers", "04 convert-long", "05 extract"])
def test_every_command_killed_before_its_commit_under_overwrite_keeps_its_finished_output(
        command, tmp_path, tiny_data, tiny_model, monkeypatch, capsys):
    articles = tmp_path / "articles.jsonl"
    articles.write_text("".join(json.dumps(a) + "\n" for a in linked_articles(24)), encoding="utf-8")
    keysent = tmp_path / "keysent.jsonl"
    keysent.write_text(json.dumps({"id": "a", "text": "One gene. Two genes here.", "key_sentences": ["One gene."]})
                       + "\n", encoding="utf-8")
    out = tmp_path / "out"
    script, args = {
        "01 sentences": ("01_extract.py", ["sentences", "--input", keysent]),
        "02 links": ("02_build_graph.py", ["--articles", articles, "--crossref-min-links", "2", "--topic-min", "2",
                                           "--eval-docs", "shared"]),
        "04 teachers": ("04_distill.py", ["teachers", "--data", tiny_data, "--teacher", tiny_model,
                                          "--teacher-max-length", "32", "--pv-vector-size", "8", "--pv-epochs", "1",
                                          "--pv-min-count", "1"]),
        "04 convert-long": ("04_distill.py", ["convert-long", "--model", tiny_model, "--max-length", "64",
                                              "--window", "16"]),
        "05 extract": ("05_evaluate.py", ["extract", "--model", tiny_model, "--input", articles, "--query", "gene"])
    }[command]
    if command == "05 extract":
        out = tmp_path / "keys" / "keys.jsonl"
    argv = [str(a) for a in [*args, "--out", out]]
    main = script_main(script)
    main(argv)
    folder = out.parent if command == "05 extract" else out
    (folder / "notes.txt").write_text("mine")
    before = _tree(folder)

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(Outputs, "finish", killed)
    with pytest.raises(KeyboardInterrupt):
        main(argv + ["--overwrite"])
    assert _tree(folder) == before


# -- a manifest is input: only a name the project writes is ever removed ---------------------------------------------

HOSTILE_NAMES = [".", "..", "./notes.txt", "../outside.txt", "/etc/passwd", "", "sub", "sub/mine.txt", "a.txt/..",
                 ".lock", ".staging-x", "notes.txt/", "//notes.txt", "a.txt\x00", "\\notes.txt", 7, None, ["a.txt"]]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n) for n in HOSTILE_NAMES])
def test_a_manifest_naming_what_the_command_does_not_write_removes_nothing_of_it(name, tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old"}, overwrite=False)
    (tmp_path / "outside.txt").write_text("outside")
    (out / "notes.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "mine.txt").write_text("mine")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] = ["a.txt", name]
    manifest["sha256"] = {**manifest["sha256"], str(name): "0"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    _run(out, {"b.txt": "new"})
    assert (out / "notes.txt").read_text() == "mine" and (out / "sub" / "mine.txt").read_text() == "mine"
    assert (tmp_path / "outside.txt").read_text() == "outside" and (out / "b.txt").read_text() == "new"
    assert not (out / "a.txt").exists()


def test_a_committing_manifest_replacing_the_folder_itself_removes_nothing_of_it(tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old"}, overwrite=False)
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "state": "committing",
                                                   "replacing": [".", "..", "notes.txt/..", "a.txt"]}))
    _run(out, {"b.txt": "new"}, overwrite=False)
    assert (out / "notes.txt").read_text() == "mine" and (out / "b.txt").is_file() and not (out / "a.txt").exists()


def test_a_manifest_naming_a_file_behind_a_link_removes_nothing_through_it(tmp_path):
    out = tmp_path / "out"
    _run(out, {"pv/x.bin": "old"}, overwrite=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.bin").write_text("keep")
    import shutil
    shutil.rmtree(out / "pv")
    (out / "pv").symlink_to(elsewhere)
    _run(out, {"a.txt": "new"})
    assert (elsewhere / "x.bin").read_text() == "keep"


@pytest.mark.parametrize("name, removable", [("a.txt", True), ("pv/x.bin", True), ("topics.top.train.jsonl", True),
                                             (".", False), ("..", False), ("", False), ("a/../b", False),
                                             ("/abs", False), (".hidden", False), ("a//b", False), ("a\\b", False),
                                             ("a\x00b", False), ("x" * 256, False), (3, False)])
def test_a_written_name_is_a_plain_relative_path(name, removable):
    assert written.written_name(name) is removable


def test_the_previous_files_are_what_a_manifest_lists_of_its_own(tmp_path):
    manifest = {"files": ["a.txt", "pv", ".", "x/y", 3], "sha256": {"a.txt": "0", "pv/m.bin": "0", "other/m.bin": "0",
                                                                    "pv/../../x": "0"},
                "state": "committing", "replacing": ["old.txt", "old/f.bin", "..", "gone/f.bin"]}
    assert written.previous_files(manifest) == {"a.txt", "pv", "pv/m.bin", "old.txt"}
    assert written.previous_files([1]) == set() and written.previous_files({"files": "a.txt"}) == set()


# -- a file output: every name it puts beside itself is its own -------------------------------------------------------

def _file_run(folder, name, text="x", fail=False):
    with Outputs(folder, "05_evaluate.py", file=name) as outputs:
        with outputs.open(name) as f:
            f.write(text)
        if fail:
            raise KeyboardInterrupt
        outputs.finish(argparse.Namespace(out=name))


def test_two_file_outputs_of_one_stem_keep_their_own_manifests(tmp_path):
    _file_run(tmp_path, "keys.jsonl", "jsonl")
    _file_run(tmp_path, "keys.txt", "txt")
    _file_run(tmp_path, "keys", "bare")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["keys", "keys.jsonl", "keys.jsonl.manifest.json", "keys.manifest.json", "keys.txt",
                     "keys.txt.manifest.json"]
    for name in ("keys.jsonl", "keys.txt", "keys"):
        assert json.loads((tmp_path / f"{name}.manifest.json").read_text())["args"]["out"] == name


def test_a_file_outputs_clean_up_leaves_the_private_folders_of_a_file_whose_name_extends_its_own(tmp_path):
    live = [tmp_path / ".staging-a-b.jsonl-q1w2e3r4", tmp_path / ".staging-a-b.jsonl-x", tmp_path / ".staging-x1",
            tmp_path / ".staging-a.jsonl-zz"]
    for path in live:
        path.mkdir()
        (path / "a-b.jsonl").write_text("being written")
    (tmp_path / ".staging-a-k1llEd").mkdir()  # what a killed run writing "a" left
    _file_run(tmp_path, "a")
    assert all((path / "a-b.jsonl").is_file() for path in live) and not (tmp_path / ".staging-a-k1llEd").exists()


def test_an_output_folders_clean_up_leaves_the_private_folders_of_a_file_output_beside_it(tmp_path):
    out = tmp_path / "out"
    _run(out, {"a.txt": "old"}, overwrite=False)
    live = out / ".staging-base.flat.faiss-k2j3h4g5"
    live.mkdir()
    (out / ".staging-k1llEd").mkdir()
    _run(out, {"a.txt": "new"})
    assert live.is_dir() and not (out / ".staging-k1llEd").exists()


def test_a_private_name_is_a_prefix_and_a_random_tail_and_nothing_more():
    assert folders.is_private(".staging-ab_12") and folders.is_private(".staging-a-Zq9", ".staging-a-")
    assert not folders.is_private(".staging-a-b.jsonl-zq9", ".staging-a-")
    assert not folders.is_private(".staging-keys.jsonl-zq9") and not folders.is_private(".staging-")


@pytest.mark.parametrize("name", [".a.lock", ".keys.jsonl.lock", ".staging-x", ".staging-a-b", "keys.manifest.json",
                                  "a.jsonl.manifest.json"])
def test_a_file_output_named_as_another_outputs_lock_private_folder_or_manifest_is_refused(name, tmp_path):
    with pytest.raises(InputError) as e:
        _file_run(tmp_path, name)
    assert str(e.value) == (f"{name}: a name this project keeps for what an output puts beside itself (a lock, a "
                            "private folder, a manifest); give another --out")
    assert list(tmp_path.iterdir()) == []


def test_05_extract_into_keys_txt_leaves_the_manifest_of_keys_jsonl(tmp_path, tiny_model, capsys):
    articles = tmp_path / "in.jsonl"
    articles.write_text(json.dumps({"id": "a", "text": "One gene. Two genes here."}) + "\n", encoding="utf-8")
    main = script_main("05_evaluate.py")
    for name in ("keys.jsonl", "keys.txt"):
        main(["extract", "--model", str(tiny_model), "--input", str(articles), "--query", "gene", "--out",
              str(tmp_path / "x" / name)])
    for name in ("keys.jsonl", "keys.txt"):
        manifest = json.loads((tmp_path / "x" / f"{name}.manifest.json").read_text())
        assert manifest["args"]["out"] == str(tmp_path / "x" / name)
    before = _tree(tmp_path / "x")
    assert script_error("05_evaluate.py", "extract", "--model", tiny_model, "--input", articles, "--query", "gene",
                        "--out", tmp_path / "x" / "keys.txt.manifest.json", "--overwrite") == (
        "error: keys.txt.manifest.json: a name this project keeps for what an output puts beside itself (a lock, a "
        "private folder, a manifest); give another --out")
    assert _tree(tmp_path / "x") == before


def test_a_file_written_whole_or_not_at_all_has_a_private_folder_named_after_it(tmp_path):
    with folders.writing(str(tmp_path), "base.flat.faiss") as staged:
        assert os.path.basename(os.path.dirname(staged)).startswith(".staging-base.flat.faiss-")
        with open(staged, "w") as f:
            f.write("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.flat.faiss"]


def test_without_flock_every_command_refuses_an_out_another_run_holds(tmp_path, tiny_data, tiny_model, monkeypatch):
    """01, 04 teachers and 05 take their --out through the same lock as 02 and 03 (their own tests), without flock
    too; the holder's lock file is left as it was."""
    import fcntl
    from common.outdir.folder_lock import FolderLock
    monkeypatch.setattr(fcntl, "flock", no_flock(errno.EOPNOTSUPP))
    (tmp_path / "a.csv").write_text('id,title,text\n1,T,"' + "words " * 20 + '"\n', encoding="utf-8")
    commands = {"01": ["01_extract.py", "csv", "--input", tmp_path / "a.csv"],
                "04": ["04_distill.py", "teachers", "--data", tiny_data, "--teacher", tiny_model],
                "05": ["05_evaluate.py", "--data", tiny_data, "--model", f"base={tiny_model}", "--task", "crossref"]}
    for name, command in commands.items():
        out = tmp_path / name
        out.mkdir()
        with FolderLock(out):
            record = (out / ".lock").read_text()
            assert script_error(*command, "--out", out) == (
                f"error: {out}: in use by another run (process {os.getpid()} on {socket.gethostname()}); wait for it "
                f"to end or give another folder (a filesystem without flock: if that run is gone, remove "
                f"{out / '.lock'})"), name
            assert os.listdir(out) == [".lock"] and (out / ".lock").read_text() == record, name
