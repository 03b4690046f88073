"""An output folder (``common/folders.py``): what --overwrite removes and when, what a manifest may name for removal,
and the names a file output puts beside itself."""

import argparse
import json
import os

import pytest

from common import folders
from common.folders import Outputs
from common.io import InputError
from conftest import linked_articles, script_error, script_main

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
    assert folders.written_name(name) is removable


def test_the_previous_files_are_what_a_manifest_lists_of_its_own(tmp_path):
    manifest = {"files": ["a.txt", "pv", ".", "x/y", 3], "sha256": {"a.txt": "0", "pv/m.bin": "0", "other/m.bin": "0",
                                                                    "pv/../../x": "0"},
                "state": "committing", "replacing": ["old.txt", "old/f.bin", "..", "gone/f.bin"]}
    assert folders.previous_files(manifest) == {"a.txt", "pv", "pv/m.bin", "old.txt"}
    assert folders.previous_files([1]) == set() and folders.previous_files({"files": "a.txt"}) == set()


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
