"""A training run's folder (common/train/rundir/run_folder.py, what it holds by name: run_entries.py, finished or
resumable: run_status.py, a replacement moved into place: replacement.py): the resume identity (every flag in it or
among the flags that change only speed, which train the same weights), a finished run done, refused with other
settings or trained again with --overwrite, a resume from the newest readable checkpoint, the log (damaged,
half-written, sent to the trackers), several seeds, and a full disk while saving. Under --overwrite, the finished run
stays whole until the new one is committed, a killed replacement resumes, and only what a run wrote is ever
removed."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from common import io
from common.outdir import folders, written
from common.io import InputError
from common.train.rundir import run_entries, run_identity, run_log, run_status
from conftest import (SHORT_TRAIN, file_tree, full_disk, read_jsonl, script_error, script_main, script_module,
                      unfinish)


# -- the resume identity: every flag in it, or among the flags that change only speed ------------------------------

def test_every_flag_of_every_objective_is_in_the_resume_identity_or_among_the_speed_flags():
    import argparse

    from common.train import objectives
    training = script_module("03_train.py")
    place = {"data", "out", "overwrite", "seeds"}  # the identity holds the data's content; --out is where
    # it runs, --overwrite whether it starts afresh there
    for name in objectives.REGISTRY:
        cls = objectives.get(name)
        parser = argparse.ArgumentParser()
        training.add_training_arguments(parser, cls, [])
        flags = {action.dest for action in parser._actions} - {"help"}
        result = set(run_identity.RESULT_ARGS) | set(cls.result_args)
        speed = set(run_identity.SPEED_ARGS) | set(cls.speed_args)
        assert not result & speed, name
        assert flags == (result | speed | place) - {"objective"}, (name, flags ^ (result | speed | place))
        assert set(cls.speed_args) == set(OWN_SPEED_PROBES.get(name, {})), name
    assert "cache_chunk" in run_identity.RESULT_ARGS


# a value other than the default for every shared flag that the resume identity leaves out (run_identity.py's
# SPEED_ARGS); a new such flag must be added here, and training with it must end in the same weights.
#
# One run with every probe at once stands for one run with each alone. Each acts on a part of the run of its own:
# what is saved and when (checkpoint_every, keep, save_epochs), when the loss is read back (log_every), whether
# activations are recomputed in the backward pass (gradient_checkpointing); none of them undoes what another does.
# A flag that changed the training would change it at the step it acts on, and the change would reach the weights
# through the optimizer steps after it; for the combined run still to end in the reference's weights bit for bit,
# two flags would have to make changes that are exact inverses of each other, in every weight. The combined run also
# shows that each probe was in effect: its manifest records every speed flag at a value other than the reference
# run's (none overridden by another).
SPEED_PROBES = {"checkpoint_every": ["--checkpoint-every", "1"], "keep": ["--keep", "1", "--checkpoint-every", "1"],
                "log_every": ["--log-every", "2"],
                "gradient_checkpointing": ["--gradient-checkpointing"], "save_epochs": ["--save-epochs"],
                "report_to": None,  # needs a tracker installed; it only copies log.jsonl's records
                "loader_workers": ["--loader-workers", "0"]}  # read on a GPU only; tests/test_train.py collates with
# worker processes and without


# an objective's own flags that change only speed or logging, with a value other than the default
OWN_SPEED_PROBES = {"mnrl": {"eval_batch_size": ["--eval-batch-size", "3"]},
                    "mlm": {"cache_dir": ["--cache-dir", "{root}/other-cache"]}}


SHORT_RUN = {"mnrl": ["--query-max-length", "16", "--batch-size", "8", "--eval-every", "1"],
             "mlm": ["--batch-size", "8", "--cache-dir", "{root}/cache"],
             "contrastive": ["--batch-size", "8", "--eval-every", "1"],
             "distill": ["--batch-size", "4", "--grad-accum", "1", "--warmup", "1", "--max-structural-length", "0",
                         "--student-projection", "8", "--teacher-projection", "8"]}


def objective_data(objective, request):
    """--data (and the objective's own required flags) for a short run of ``objective`` on the shared tiny inputs."""
    if objective in ("mlm", "mnrl"):
        return ["--data", str(request.getfixturevalue("paper_data"))]
    if objective == "contrastive":
        return ["--data", str(request.getfixturevalue("keysent_data") / "data")]
    return ["--data", str(request.getfixturevalue("tiny_data")), "--teachers", str(request.getfixturevalue("teach"))]


def speed_probes(objective, root):
    """Every speed flag of ``objective`` at its probe's value, the shared ones and its own, as one command line."""
    probes = [*SPEED_PROBES.values(), *OWN_SPEED_PROBES.get(objective, {}).values()]
    return [a.format(root=root) for extra in probes for a in extra or ()]


def same_weights_with_every_speed_flag(main, base, objective, root):
    """``main(base)`` trained into ROOT/reference and with every speed flag changed into ROOT/changed: the same
    weights bit for bit, and each flag in effect in the second run (its manifest records another value than the
    first's). Returns the reference's weights."""
    def run(name, extra):
        main(base + ["--out", str(root / name), *extra])
        return (load_file(root / name / "model" / "model.safetensors"),
                json.loads((root / name / "manifest.json").read_text())["args"])
    (reference, before), (got, after) = run("reference", []), run("changed", speed_probes(objective, root))
    flags = (set(run_identity.SPEED_ARGS) | set(OWN_SPEED_PROBES.get(objective, {}))) - {"report_to"}
    assert [flag for flag in sorted(flags) if after[flag] == before[flag]] == []
    assert set(got) == set(reference)
    assert [k for k in reference if not np.array_equal(got[k].numpy(), reference[k].numpy())] == []
    return reference


def test_every_setting_left_out_of_the_resume_identity_leaves_the_trained_weights_unchanged(tmp_path, tiny_data,
                                                                                           tiny_model, capsys):
    assert set(SPEED_PROBES) == set(run_identity.SPEED_ARGS)
    train = script_main("03_train.py")
    base = ["--data", str(tiny_data), "--model", str(tiny_model), *SHORT_TRAIN]
    reference = same_weights_with_every_speed_flag(train, base, "triplet", tmp_path)
    # and the converse: --chunk-tokens runs parts of a batch with other dropout draws, so it changes the weights
    # and must match on resume
    train(base + ["--out", str(tmp_path / "chunked"), "--chunk-tokens", "40"])
    chunked = load_file(tmp_path / "chunked" / "model" / "model.safetensors")
    assert not all(np.array_equal(chunked[k].numpy(), reference[k].numpy()) for k in reference)
    assert "chunk_tokens" in run_identity.RESULT_ARGS


def test_length_groups_change_the_weights_where_the_cpu_layer_does_not_pack_and_are_in_the_resume_identity(
        tmp_path, tiny_data, tiny_model, monkeypatch, capsys):
    """Where a batch's length groups are forward calls of their own (on a GPU, or a model the CPU layer does not
    pack; here the layer left out), each draws its own dropout masks, so the number of groups changes the trained
    weights and must match on resume. The CPU layer packs the tiny BERT's groups into one row, where it changes
    nothing."""
    from common.models import cpu
    monkeypatch.setattr(cpu, "install", lambda model, say: model)
    train = script_main("03_train.py")
    base = ["--data", str(tiny_data), "--model", str(tiny_model), *SHORT_TRAIN]  # --length-groups 2
    train(base + ["--out", str(tmp_path / "two")])
    train(base + ["--out", str(tmp_path / "one"), "--length-groups", "1"])
    two, one = (load_file(tmp_path / name / "model" / "model.safetensors") for name in ("two", "one"))
    assert not all(np.array_equal(one[k].numpy(), two[k].numpy()) for k in two)
    assert "length_groups" in run_identity.RESULT_ARGS


@pytest.mark.parametrize("objective", ["mnrl", "mlm", "contrastive", "distill"])
def test_every_speed_flag_of_an_objective_leaves_its_trained_weights_unchanged(objective, tmp_path, tiny_model,
                                                                              request, capsys):
    data = objective_data(objective, request)
    script = "04_distill.py" if objective == "distill" else "03_train.py"
    base = [*data, "--model", str(tiny_model), "--max-length", "32", "--max-steps", "3", "--epochs", "1",
            "--log-every", "1", "--checkpoint-every", "0", "--length-groups", "2",
            *[a.format(root=tmp_path) for a in SHORT_RUN[objective]]]
    base = (["train"] if objective == "distill" else ["--objective", objective]) + base
    same_weights_with_every_speed_flag(script_main(script), base, objective, tmp_path)


def test_gradcache_chunks_change_the_weights_and_a_resume_with_other_chunks_is_refused(tmp_path, tiny_model, request,
                                                                                    capsys):
    data = objective_data("mnrl", request)
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


def test_a_rebuilt_data_directory_does_not_resume_an_old_run(toy, tiny_model, tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    out = tmp_path / "run"
    toy(data, tiny_model, out, "--max-steps", "5")
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["args"]["seed"] += 1  # as if 02 had been run again with another seed
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"other settings \(data_content\)"):
        toy(data, tiny_model, out, "--max-steps", "5")


def test_the_same_data_and_model_staged_at_other_paths_resume_their_checkpoints_and_are_found_finished(
        toy, toy_run, tiny_model, tiny_data, tmp_path, capsys):
    """A job that copies its data and model to node-local scratch (a new path each job) resumes the checkpoints an
    earlier job wrote, to the weights of a run not stopped, and a finished run is found finished there."""
    ref, counts = toy_run
    out, data, model = tmp_path / "run", tmp_path / "scratch" / "data", tmp_path / "scratch" / "model"
    shutil.copytree(ref, out)
    shutil.copytree(tiny_data, data)
    shutil.copytree(tiny_model, model)
    unfinish(out)
    shutil.rmtree(out / "checkpoints" / "step_20")
    capsys.readouterr()
    toy(data, model, out)
    assert f"resuming from {out / 'checkpoints' / 'step_15'} (step 15 of 20)" in capsys.readouterr().out
    for a, b in zip(_weights(ref), _weights(out)):
        assert all(torch.equal(a[k], b[k]) for k in a)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["paths"] == {"data": str(data), "model": str(model)}
    assert "data" not in manifest["identity"] and "model" not in manifest["identity"]
    finished = file_tree(out)
    data, model = tmp_path / "next-job" / "data", tmp_path / "next-job" / "model"
    shutil.copytree(tiny_data, data)
    shutil.copytree(tiny_model, model)
    assert toy(data, model, out) == counts
    assert "finished with these settings already" in capsys.readouterr().out and file_tree(out) == finished


def test_a_run_recorded_before_cache_chunk_entered_every_objectives_identity_is_found_finished(
        toy, toy_run, tiny_model, tiny_data, tmp_path, capsys):
    """--cache-chunk off is left out of the identity: a run recorded without it (an objective other than mnrl) or
    with it off (mnrl's, as its own flag) is the run the same command finds finished."""
    ref, counts = toy_run
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "cache_chunk" not in manifest["identity"]
    for recorded in (None, 0):
        (out / "manifest.json").write_text(json.dumps({**manifest,
                                                       "identity": {**manifest["identity"], "cache_chunk": recorded}}))
        finished = file_tree(out)
        capsys.readouterr()
        assert toy(tiny_data, tiny_model, out) == counts
        assert "finished with these settings already" in capsys.readouterr().out and file_tree(out) == finished


def test_a_model_folder_holding_other_files_does_not_resume_and_the_refusal_names_where_the_model_was(
        toy, toy_run, tiny_model, tiny_data, tmp_path):
    ref, _ = toy_run
    out, model = tmp_path / "run", tmp_path / "model"
    shutil.copytree(ref, out)
    shutil.copytree(tiny_model, model)
    unfinish(out)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "attention_probs_dropout_prob": 0.0}))
    with pytest.raises(InputError) as refused:
        toy(tiny_data, model, out)
    assert str(refused.value) == (f"{out}: its checkpoints come from a run with other settings (model_content: "
                                  f"--model {tiny_model} then); use another --out or remove "
                                  f"{out / 'checkpoints' / 'step_20'}")


def test_a_checkpoint_of_another_number_of_processes_is_one_line_naming_both(toy_run):
    ref, _ = toy_run
    checkpoint = ref / "checkpoints" / "step_20"
    identity = json.loads((checkpoint / run_entries.STATE).read_text())["identity"]
    assert identity["processes"] == 1
    with pytest.raises(InputError) as refused:
        run_status.resumable_state(str(ref), str(checkpoint), {**identity, "processes": 4})
    assert str(refused.value) == (f"{ref}: its checkpoints come from a run on 1 processes, and this launch starts 4; "
                                  "launch 1 to resume it, or use another --out")
    with pytest.raises(InputError) as refused:
        run_status.resumable_state(str(ref), str(checkpoint), {**identity, "processes": 4, "lr": 1.0})
    assert str(refused.value) == (f"{ref}: its checkpoints come from a run with other settings (lr; processes: 1 "
                                  f"then, 4 now); use another --out or remove {checkpoint}")


# -- finished, or resumed from its newest readable checkpoint ------------------------------------------------------

def test_a_run_folder_is_owned_foreign_folders_refused_and_a_run_killed_before_its_first_checkpoint_restarts_clean(
        toy, tiny_model, tiny_data, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty and not a run folder of this project"):
        toy(tiny_data, tiny_model, foreign, "--max-steps", "3")
    assert (foreign / "notes.txt").read_text() == "mine"
    ref, out = tmp_path / "ref", tmp_path / "run"
    toy(tiny_data, tiny_model, ref, "--max-steps", "3", "--checkpoint-every", "0")
    shutil.copytree(ref, out)  # a finished run without checkpoints stands for one killed before its first
    toy(tiny_data, tiny_model, out, "--max-steps", "3", "--checkpoint-every", "0")
    steps = [r["step"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert steps == [1, 2, 3]


@pytest.mark.parametrize("checkpoint_every", ["0", "1"])
def test_a_finished_run_is_refused_with_other_settings_done_with_the_same_and_trained_again_with_overwrite(
        checkpoint_every, tmp_path, tiny_data, tiny_model, capsys):
    """Whether a finished model survives does not depend on whether checkpoints exist."""
    run = tmp_path / "run"
    args = ["--data", tiny_data, "--model", tiny_model, "--out", run, *SHORT_TRAIN, "--max-steps", "2",
            "--checkpoint-every", checkpoint_every]
    train = script_main("03_train.py")
    train([str(a) for a in args])
    finished = file_tree(run)
    assert script_error("03_train.py", *args, "--lr", "1e-3") == (
        f"error: {run}: holds a finished 03_train.py run with other settings (lr); give --overwrite to train it "
        "again (only what the run wrote is removed), or another --out")
    capsys.readouterr()
    counts = train([str(a) for a in args])
    assert counts["steps"] == 2 and file_tree(run) == finished
    assert capsys.readouterr().out == (f"{run}: finished with these settings already ({run / 'manifest.json'}); "
                                       "nothing to do (--overwrite trains it again)\n")
    (run / "notes.txt").write_text("mine")
    train([str(a) for a in args] + ["--lr", "1e-3", "--overwrite"])
    assert (run / "notes.txt").read_text() == "mine"
    assert file_tree(run / "model")["model.safetensors"] != finished["model/model.safetensors"]
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
    parse = script_module("03_train.py").parse_args
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"identity": {}}')
    (out / "manifest.json").write_text(manifest)
    argv = ["--data", str(tiny_data), "--model", "m", "--out", str(out)]
    with pytest.raises(InputError) as e:
        run_status.finished(parse(argv), "03_train.py")
    assert str(e.value) == (f"{out}: holds a finished {what}; give --overwrite to replace it (only what that run "
                            "wrote is removed), or another --out")
    assert run_status.finished(parse(argv + ["--overwrite"]), "03_train.py") is None


def test_a_finished_run_is_done_only_to_a_launch_of_as_many_processes(tmp_path, tiny_data, tiny_model, monkeypatch,
                                                                       capsys):
    """The number of processes is in a finished run's identity as in its checkpoints' (each process sees other
    data): a run finished on one process is one of other settings to the same command launched on two, and one
    finished on two (a manifest of an earlier version records them in its counts) to the same command on one."""
    run = tmp_path / "run"
    argv = [str(a) for a in ("--data", tiny_data, "--model", tiny_model, "--out", run, *SHORT_TRAIN, "--max-steps",
                             "1")]
    script_main("03_train.py")(argv)
    parse = script_module("03_train.py").parse_args
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["identity"]["processes"] == 1
    other = (f"{run}: holds a 03_train.py run finished on 1 processes, and this launch starts 2; launch 1 to find it "
             "finished, or give --overwrite to train it again on these, or another --out")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(InputError) as e:
        run_status.finished(parse(argv), "03_train.py")
    assert str(e.value) == other
    monkeypatch.delenv("WORLD_SIZE")
    assert run_status.finished(parse(argv), "03_train.py")["steps"] == 1
    del manifest["identity"]["processes"]
    (run / "manifest.json").write_text(json.dumps({**manifest, "counts": {**manifest["counts"], "processes": 2}}))
    with pytest.raises(InputError) as e:
        run_status.finished(parse(argv), "03_train.py")
    assert str(e.value) == other.replace("on 1", "on 2").replace("starts 2; launch 1", "starts 1; launch 2")


def test_a_run_of_several_seeds_killed_in_its_second_goes_on_there_and_keeps_the_first(tmp_path, tiny_data,
                                                                                      tiny_model, capsys):
    out = tmp_path / "seeds"
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(out), *SHORT_TRAIN, "--max-steps", "1",
            "--seeds", "1", "2"]
    script_main("03_train.py")(args)
    first = file_tree(out / "seed_1")
    for name in ("manifest.json", "model"):  # the second seed killed before its end
        written.remove_entry(out / "seed_2" / name)
    capsys.readouterr()
    counts = script_main("03_train.py")(args)
    assert [c["steps"] for c in counts] == [1, 1] and file_tree(out / "seed_1") == first
    assert (out / "seed_2" / "model" / "model.safetensors").is_file()
    assert f"{out / 'seed_1'}: finished with these settings already" in capsys.readouterr().out


def _weights(run_dir):
    return [load_file(str(run_dir / "model" / name)) for name in ("model.safetensors", "heads.safetensors")]


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(toy, toy_run, tiny_model, tiny_data, tmp_path,
                                                                   capsys):
    ref, _ = toy_run
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    unfinish(out)
    shutil.rmtree(out / "checkpoints" / "step_20")
    (out / "checkpoints" / "step_15" / "model.safetensors").write_bytes(b"")  # e.g. a full disk
    toy(tiny_data, tiny_model, out)
    printed = capsys.readouterr().out
    assert "checkpoints/step_15 cannot be read" in printed and "resuming from" in printed and "step_10" in printed
    for a, b in zip(_weights(ref), _weights(out)):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_holding_another_step_than_its_folder_names_falls_back_to_the_one_before(
        toy, toy_run, tiny_model, tiny_data, tmp_path, capsys):
    ref, _ = toy_run
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    unfinish(out)
    shutil.copy(out / "checkpoints" / "step_20" / "trainer_state.json", out / "checkpoints" / "step_15")
    shutil.rmtree(out / "checkpoints" / "step_20")
    toy(tiny_data, tiny_model, out)
    printed = capsys.readouterr().out
    assert (f"note: checkpoint {out / 'checkpoints' / 'step_15'} cannot be read (trainer_state.json: step 20, where "
            "its folder names step 15); trying the one before") in printed
    assert f"resuming from {out / 'checkpoints' / 'step_10'} (step 10 of 20)" in printed
    for a, b in zip(_weights(ref), _weights(out)):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in read_jsonl(out / "log.jsonl")] == [r["step"] for r in read_jsonl(ref / "log.jsonl")]


# -- the log and the trackers --------------------------------------------------------------------------------------

def test_a_damaged_log_is_refused_on_resume_before_any_step(tmp_path, tiny_data, tiny_model, capsys):
    run = tmp_path / "run"
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(run), *SHORT_TRAIN,
            "--checkpoint-every", "1"]
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
    args = ["--data", str(tiny_data), "--model", str(tiny_model), "--out", str(run), *SHORT_TRAIN,
            "--checkpoint-every", "2"]
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


def test_report_to_sends_every_log_record_to_the_trackers_and_the_run_draws_its_curves(
        toy, tiny_model, tiny_data, tmp_path, monkeypatch):
    from accelerate.tracking import GeneralTracker
    seen = []

    class Recording(GeneralTracker):
        name, requires_logging_directory, tracker = "recording", False, None

        def store_init_configuration(self, values):
            seen.append(("config", values))

        def log(self, values, step=None, **kwargs):
            seen.append((step, values))

    monkeypatch.setattr(run_log, "trackers", lambda report_to: [Recording()] if report_to == "recording" else [])
    out = tmp_path / "run"
    toy(tiny_data, tiny_model, out, "--report-to", "recording", "--max-steps", "3", "--checkpoint-every", "0")
    log = read_jsonl(out / "log.jsonl")
    assert seen[0][0] == "config" and seen[0][1]["objective"] == "toy" and seen[0][1]["lr"] == 1e-3
    assert seen[1:] == [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in log]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_to_names_installed_trackers_only():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    assert run_log.trackers("none") == [] and run_log.trackers("all") == ["all"]
    with pytest.raises(InputError) as e:
        run_log.trackers("nonesuch")
    assert str(e.value).startswith("--report-to nonesuch: not a tracker Accelerate knows (one of ")
    missing = sorted(set(LOGGER_TYPE_TO_CLASS) - {t.value for t in get_available_trackers()})
    if missing:
        with pytest.raises(InputError) as e:
            run_log.trackers(missing[0])
        assert str(e.value) == f"--report-to {missing[0]}: not installed (pip install {missing[0].replace('_', '-')})"


# -- a full disk while saving --------------------------------------------------------------------------------------

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
    error = script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *SHORT_TRAIN,
                         "--checkpoint-every", "1", "--keep", "3")
    assert re.fullmatch(rf"error: {re.escape(str(run))}: no space left on the device \([\d,]+ bytes free\); "
                        "checkpoint step_3 was not saved, the earlier ones are kept", error), error
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1", "step_2"]
    assert not list(run.rglob(".staging-*")) and not (run / ".lock").exists()


def test_a_full_disk_while_saving_the_final_model_is_one_line_and_leaves_no_model(tmp_path, tiny_data, tiny_model,
                                                                                 monkeypatch, capsys):
    from safetensors import SafetensorError

    def full(*args, **kwargs):  # what safetensors raises when the disk fills under it
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", full)
    run = tmp_path / "run"
    error = script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *SHORT_TRAIN)
    assert re.fullmatch(rf"error: {re.escape(str(run))}: no space left on the device \([\d,]+ bytes free\); "
                        "RUN/model was not saved", error), error
    assert not (run / "model").exists() and not list(run.rglob(".staging-*")) and not (run / ".lock").exists()


# -- --overwrite of a training run: the finished run whole until the new one is in place ----------

TRAIN = ["--objective", "triplet", "--pooling", "mean", "--max-length", "32", "--batch-size", "4", "--epochs", "1",
         "--log-every", "1", "--eval-every", "0", "--checkpoint-every", "1", "--length-groups", "2",
         "--max-steps", "2"]


def _tree(folder, skip=(run_entries.NEXT,)):
    """Every file under ``folder`` with its SHA-256, but those under ``skip``."""
    return {str(p.relative_to(folder)): io.sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] not in skip}


def _train(argv):
    return script_module("03_train.py").main([str(a) for a in argv])


def _killed_at_step(monkeypatch, step):
    """03's loop stops at the backward pass of optimizer step ``step`` (as a kill there would)."""
    from accelerate import Accelerator
    backward, calls = Accelerator.backward, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == step:
            raise KeyboardInterrupt
        return backward(*args, **kwargs)
    monkeypatch.setattr(Accelerator, "backward", stopping)


def _model_weights(run):
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
    assert _tree(run) == before and (run / run_entries.NEXT / "run.json").is_file()
    capsys.readouterr()
    assert _train(args)["steps"] == 2 and _tree(run) == before  # the same settings: done
    assert f"{run}: finished with these settings already" in capsys.readouterr().out
    assert script_error("03_train.py", *args, "--lr", "1e-3") == (
        f"error: {run}: holds a finished 03_train.py run with other settings (lr); give --overwrite to train it "
        "again (only what the run wrote is removed), or another --out")


def test_overwrite_killed_after_a_checkpoint_resumes_there_to_the_weights_of_a_run_not_stopped(
        finished, tmp_path, tiny_data, tiny_model, monkeypatch, capsys):
    run, args = finished
    old = _model_weights(run)
    _killed_at_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _train(args + ["--lr", "1e-3", "--overwrite"])
    monkeypatch.undo()
    assert (run / run_entries.NEXT / "checkpoints" / "step_1").is_dir() and _model_weights(run).keys() == old.keys()
    capsys.readouterr()
    _train(args + ["--lr", "1e-3", "--overwrite"])
    assert "resuming from" in capsys.readouterr().out
    _train(["--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "straight", *TRAIN, "--lr", "1e-3"])
    resumed, straight = _model_weights(run), load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
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
    assert not (run / run_entries.NEXT).exists() and not list(run.rglob(".staging-*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["identity"]["lr"] == 1e-3 and not [n for n in manifest["files"] if n.startswith("checkpoints")]
    assert manifest["files"] == [n for n in run_entries.run_files(run) if n != "model/notes.txt"]
    card = (run / "model" / "README.md").read_text()  # written in .next-run, it names where the model is
    assert run_entries.NEXT not in card and repr(str(run / "model")) in card and "# run/model:" in card


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
    assert (run / run_entries.NEXT / "manifest.json").is_file()
    capsys.readouterr()
    assert _train(new)["steps"] == 2  # without --overwrite: the replacement is finished, and done
    assert f"{run}: finished with these settings already" in capsys.readouterr().out
    assert not (run / run_entries.NEXT).exists() and (run / "model" / "notes.txt").read_text() == "mine"
    assert json.loads((run / "manifest.json").read_text())["identity"]["lr"] == 1e-3
    assert json.loads((run / "manifest.json").read_text())["files"] == [n for n in run_entries.run_files(run)
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


def _everything(folder):
    """Every file under ``folder`` with its SHA-256 and every link with its target, links not followed."""
    found = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                found[rel] = io.sha256(path)
    return found


@pytest.mark.parametrize("link", [".next-run", "cache", "epoch_1", "model/1_Pooling", "checkpoints/step_2",
                                  ".next-run/checkpoints"])
def test_a_link_where_a_run_moves_writes_or_deletes_is_refused_before_anything_is(link, finished, tmp_path,
                                                                                  capsys):
    """A symbolic link at any path a command on the run folder moves, writes or deletes (``.next-run`` to another
    finished run, whose files a replacement would move in; ``cache``, where the masked LM would write; a model, a
    checkpoint, or an entry of a replacement) is refused in one line, by every command, and nothing anywhere is
    moved, written or deleted."""
    run, args = finished
    other = tmp_path / "other"
    shutil.copytree(run, other)  # another finished run: the target .next-run would be moved in from
    path = run / link
    if link.startswith(".next-run/"):
        path.parent.mkdir()
        (path.parent / "run.json").write_text((run / "run.json").read_text())
    elif path.exists():
        shutil.rmtree(path)
    path.symlink_to(other if link == ".next-run" else other / "checkpoints")
    before = _everything(tmp_path)
    expected = (f"error: {path}: a symbolic link in the run folder; remove it (a run never moves, writes or "
                "deletes through one)")
    for extra in ([], ["--lr", "1e-3"], ["--lr", "1e-3", "--overwrite"]):
        assert script_error("03_train.py", *args, *extra) == expected
        assert _everything(tmp_path) == before


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
    assert "resuming from" not in capsys.readouterr().out and not (run / run_entries.NEXT).exists()


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
    assert run_entries.run_files(run) == [
        "checkpoints/step_3/trainer_state.json", "curves.png", "epoch_2/config.json", "log.jsonl",
        "model/1_Pooling/c.json", "model/2_Normalize", "model/config.json", "run.json", "trackers/docembed/events"]
    (run / "manifest.json").write_text(json.dumps({"files": ["log.jsonl", "notes.txt", "cache/mlm-tokens.arrow",
                                                             "../x", "model/config.json", ".next-run/run.json"]}))
    assert run_entries.recorded_files(run) == ["log.jsonl", "model/config.json"]
    (run / "manifest.json").write_text("[1]")
    assert run_entries.recorded_files(run) == run_entries.run_files(run)
