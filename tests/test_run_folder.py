"""A training run's folder (``common/train/run_folder.py``) under --overwrite: the finished run stays whole until the
new one is committed, a killed replacement resumes, and only what a run wrote is ever removed."""

import json

import pytest
from safetensors.torch import load_file

from common import folders, io
from common.train import run_folder
from conftest import script_error, script_module

TRAIN = ["--objective", "triplet", "--pooling", "mean", "--max-length", "32", "--batch-size", "4", "--epochs", "1",
         "--log-every", "1", "--eval-every", "0", "--checkpoint-every", "1", "--length-groups", "2",
         "--max-steps", "2"]


def _tree(folder, skip=(run_folder.NEXT,)):
    """Every file under ``folder`` with its SHA-256, but those under ``skip``."""
    return {str(p.relative_to(folder)): io.sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] not in skip}


def _train(argv):
    return script_module("03_train.py").main([str(a) for a in argv])


def _killed_at_step(monkeypatch, step):
    """03's loop stops at the backward pass of optimizer step ``step`` (as a kill there would)."""
    module = script_module("03_train.py")
    backward, calls = module.backward, []

    def stopping(*args):
        calls.append(1)
        if len(calls) == step:
            raise KeyboardInterrupt
        return backward(*args)
    monkeypatch.setattr(module, "backward", stopping)


def _weights(run):
    return load_file(str(run / "model" / "model.safetensors"))


@pytest.fixture
def finished(tmp_path, tiny_data, tiny_model, capsys):
    """A finished run with a user's notes beside it, in its model folder and in its checkpoints folder."""
    run = tmp_path / "run"
    args = ["--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN]
    _train(args)
    for path in (run / "notes.txt", run / "model" / "notes.txt", run / "checkpoints" / "notes.txt"):
        path.write_text("mine")
    return run, args


def test_overwrite_killed_at_its_first_step_leaves_the_finished_run_whole_for_a_command_without_it(
        finished, monkeypatch, capsys):
    run, args = finished
    before = _tree(run)
    _killed_at_step(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        _train(args + ["--lr", "1e-3", "--overwrite"])
    monkeypatch.undo()
    assert _tree(run) == before and (run / run_folder.NEXT / "run.json").is_file()
    capsys.readouterr()
    assert _train(args)["steps"] == 2 and _tree(run) == before  # the same settings: done
    assert f"{run}: finished with these settings already" in capsys.readouterr().out
    assert script_error("03_train.py", *args, "--lr", "1e-3") == (
        f"error: {run}: holds a finished 03_train.py run with other settings (lr); give --overwrite to train it "
        "again (only what the run wrote is removed), or another --out")


def test_overwrite_killed_after_a_checkpoint_resumes_there_to_the_weights_of_a_run_not_stopped(
        finished, tmp_path, tiny_data, tiny_model, monkeypatch, capsys):
    run, args = finished
    old = _weights(run)
    _killed_at_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _train(args + ["--lr", "1e-3", "--overwrite"])
    monkeypatch.undo()
    assert (run / run_folder.NEXT / "checkpoints" / "step_1").is_dir() and _weights(run).keys() == old.keys()
    capsys.readouterr()
    _train(args + ["--lr", "1e-3", "--overwrite"])
    assert "resuming from" in capsys.readouterr().out
    _train(["--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "straight", *TRAIN, "--lr", "1e-3"])
    resumed, straight = _weights(run), load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
    assert all((resumed[k] == straight[k]).all() for k in straight)
    assert any((resumed[k] != old[k]).any() for k in old)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2]
    assert json.loads((run / "manifest.json").read_text())["identity"]["lr"] == 1e-3


def test_overwrite_replaces_the_finished_runs_files_by_name_and_keeps_a_users(finished, monkeypatch, capsys):
    run, args = finished
    old_files = json.loads((run / "manifest.json").read_text())["files"]
    assert "checkpoints/step_2/trainer_state.json" in old_files and "model/model.safetensors" in old_files
    assert not [n for n in old_files if "notes" in n]
    _train(args + ["--checkpoint-every", "0", "--lr", "1e-3", "--overwrite"])  # the last flag's value counts
    assert all((path / "notes.txt").read_text() == "mine" for path in (run, run / "model", run / "checkpoints"))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["notes.txt"]  # the old steps: removed
    assert not (run / run_folder.NEXT).exists() and not list(run.rglob(".staging-*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["identity"]["lr"] == 1e-3 and not [n for n in manifest["files"] if n.startswith("checkpoints")]
    assert manifest["files"] == [n for n in run_folder.run_files(run) if n != "model/notes.txt"]
    card = (run / "model" / "README.md").read_text()  # written in .next-run, it names where the model is
    assert run_folder.NEXT not in card and repr(str(run / "model")) in card and "# run/model:" in card


def test_a_replacement_killed_while_moving_into_place_is_moved_by_the_next_command(finished, monkeypatch, capsys):
    run, args = finished
    new = args + ["--lr", "1e-3"]
    put_written, moved = folders.put_written, []

    def killed(*a):
        if len(moved) == 2:
            raise KeyboardInterrupt
        moved.append(a[1])
        put_written(*a)
    monkeypatch.setattr(folders, "put_written", killed)
    with pytest.raises(KeyboardInterrupt):
        _train(new + ["--overwrite"])
    monkeypatch.undo()
    assert (run / run_folder.NEXT / "manifest.json").is_file()
    capsys.readouterr()
    assert _train(new)["steps"] == 2  # without --overwrite: the replacement is finished, and done
    assert f"{run}: finished with these settings already" in capsys.readouterr().out
    assert not (run / run_folder.NEXT).exists() and (run / "model" / "notes.txt").read_text() == "mine"
    assert json.loads((run / "manifest.json").read_text())["identity"]["lr"] == 1e-3
    assert json.loads((run / "manifest.json").read_text())["files"] == [n for n in run_folder.run_files(run)
                                                                          if n != "model/notes.txt"]


@pytest.mark.parametrize("listed", [".", "..", "notes.txt", "model/../notes.txt", "/etc/hostname", "checkpoints",
                                    "model", "../outside.txt", ".next-run", "model/notes.txt/.."])
def test_a_finished_runs_manifest_naming_what_no_run_writes_removes_nothing_of_it(listed, finished, tmp_path,
                                                                                 capsys):
    run, args = finished
    (tmp_path / "outside.txt").write_text("outside")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "files": manifest["files"] + [listed]}))
    _train(args + ["--lr", "1e-3", "--overwrite"])
    assert all((path / "notes.txt").read_text() == "mine" for path in (run, run / "model", run / "checkpoints"))
    assert (tmp_path / "outside.txt").read_text() == "outside"


def test_overwrite_resumes_an_unfinished_run_from_its_own_checkpoints_and_starts_afresh_over_others(
        tmp_path, tiny_data, tiny_model, monkeypatch, capsys):
    run = tmp_path / "run"
    args = ["--data", tiny_data, "--model", tiny_model, "--out", run, *TRAIN]
    _killed_at_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _train(args)
    monkeypatch.undo()
    capsys.readouterr()
    _train(args + ["--overwrite"])
    assert "resuming from" in capsys.readouterr().out
    _killed_at_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _train(args + ["--lr", "1e-3", "--overwrite"])  # a finished run: its replacement killed after a checkpoint
    monkeypatch.undo()
    (run / "manifest.json").unlink()  # the finished run gone meanwhile: the replacement has nothing to replace
    _train(args + ["--lr", "2e-3", "--overwrite"])
    assert "resuming from" not in capsys.readouterr().out and not (run / run_folder.NEXT).exists()


def test_a_model_saved_again_keeps_a_file_the_save_does_not_write(tmp_path, tiny_model):
    from common.models.loading import load_encoder
    from common.models.saving import save_model
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean", max_length=32, say=lambda text: None)
    path = tmp_path / "run" / "model"
    path.parent.mkdir()
    save_model(encoder, tokenizer, str(path), 32)
    (path / "notes.txt").write_text("mine")
    (path / "config.json").write_text("{}")  # a name the save writes: replaced
    save_model(encoder, tokenizer, str(path), 32)
    assert (path / "notes.txt").read_text() == "mine" and json.loads((path / "config.json").read_text())
    assert sorted(p.name for p in path.parent.iterdir()) == ["model"]


def test_what_a_run_wrote_is_its_entries_and_the_files_under_them(tmp_path):
    run = tmp_path / "run"
    for name in ("run.json", "log.jsonl", "curves.png", "notes.txt", "model/config.json", "model/1_Pooling/c.json",
                 "checkpoints/step_3/trainer_state.json", "checkpoints/notes.txt", "epoch_2/config.json",
                 "trackers/docembed/events", "cache/mlm-tokens.arrow", ".next-run/run.json", "manifest.json"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    (run / "model" / "2_Normalize").mkdir()
    assert run_folder.run_files(run) == [
        "checkpoints/step_3/trainer_state.json", "curves.png", "epoch_2/config.json", "log.jsonl",
        "model/1_Pooling/c.json", "model/2_Normalize", "model/config.json", "run.json", "trackers/docembed/events"]
    (run / "manifest.json").write_text(json.dumps({"files": ["log.jsonl", "notes.txt", "cache/mlm-tokens.arrow",
                                                             "../x", "model/config.json", ".next-run/run.json"]}))
    assert run_folder.recorded_files(run) == ["log.jsonl", "model/config.json"]
    (run / "manifest.json").write_text("[1]")
    assert run_folder.recorded_files(run) == run_folder.run_files(run)
