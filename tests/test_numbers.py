"""Numbers from outside, checked before use: every flag's (finite, within a bound the machine can meet, flags that
constrain each other together) and every number 02–04 read from a file (the right JSON type, finite, in range, not
hundreds of digits), each refused in one line."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from common import io
from common.io import InputError
from conftest import ROOT, build_tiny_model, every_parser, forget_hashes, script_error, script_module

# -- flags ----------------------------------------------------------------------------------------------------------


def test_every_float_flag_of_every_command_refuses_a_number_that_is_not_finite():
    import argparse
    checked = 0
    for where, parser in every_parser():
        for action in parser._actions:
            assert action.type is not float, f"{where} {action.dest}: typed float, not cli.number(float, ...)"
            if getattr(action.type, "__name__", None) != "float":
                continue
            checked += 1
            for text in ("nan", "inf", "-inf", "1e309", "-1e309", "NaN"):
                with pytest.raises(argparse.ArgumentTypeError):
                    action.type(text)
    assert checked >= 20


def test_no_script_a_user_runs_types_a_flag_as_a_bare_float():
    scripts = [os.path.join(d, f) for d in ("", "bench", "reproduce", "fuzz") for f in os.listdir(os.path.join(ROOT, d))
               if f.endswith(".py")]
    bare = [f for f in scripts if re.search(r"type=float\b", open(os.path.join(ROOT, f), encoding="utf-8").read())]
    assert bare == []


@pytest.mark.parametrize("command", [["01_extract.py", "sentences"], ["01_extract.py", "arxiv"],
                                     ["02_build_graph.py", "links"], ["02_build_graph.py", "sentences"],
                                     ["02_build_graph.py", "retrieval"], ["02_build_graph.py", "corpus"],
                                     ["05_evaluate.py", "extract"]])
@pytest.mark.parametrize("size", ["8796093022208", str(1 << 70), "0"])
def test_a_line_limit_past_the_machines_memory_is_refused_as_the_line_is_read(command, size):
    from common.cli import physical_memory
    assert script_error(*command, "--max-line-mb", size) == (
        f"error: argument --max-line-mb: {size}: must be between 1 and {physical_memory() >> 20:,}")


@pytest.mark.parametrize("argv, error", [
    (["03_train.py", "--objective", "bad", "--data", "x"], "error: argument --objective: invalid choice: 'bad' "
                                                          "(choose from 'triplet', 'contrastive', 'cosine', 'mlm', "
                                                          "'mnrl')"),
    (["04_distill.py", "train", "--data", "x", "--preset", "bad"], "error: argument --preset: invalid choice: 'bad' "
                                                                   "(choose from 'cosine-masked', 'mse-contextual', "
                                                                   "'only-mse')"),
    (["04_distill.py", "teachers", "--pv-preset", "bad"], "error: argument --pv-preset: invalid choice: 'bad' "
                                                          "(choose from 'dm-100d', 'dbow-1024d', 'pv-2048d')")])
def test_a_bad_choice_read_before_the_full_command_line_is_one_line(argv, error):
    assert script_error(*argv) == error


def test_04_teachers_reads_pv_as_itself_not_as_short_for_pv_preset(tmp_path):
    module = script_module("04_distill.py")
    from common import cli
    argv = ["teachers", "--data", str(tmp_path), "--out", str(tmp_path / "t"), "--pv", "dbow", "--pv-vector-size", "8"]
    parser = cli.parser("")
    sub = parser.add_subparsers(dest="command")
    module.commands(argv)["teachers"][1](sub.add_parser("teachers"))
    args = parser.parse_args(argv)
    assert (args.pv, args.pv_preset, args.pv_vector_size) == ("dbow", "dm-100d", 8)


@pytest.mark.parametrize("argv", [["01_extract.py", "wiki", "--workers", "1024"],
                                  ["04_distill.py", "teachers", "--pv-workers", "1024"]])
def test_workers_have_a_bound_the_machine_can_start(argv):
    low = 1 if "--pv-workers" in argv else 0
    assert script_error(*argv) == (f"error: argument {argv[-2]}: 1024: must be between {low} and "
                                   f"{max(64, os.cpu_count()):,}")


@pytest.mark.parametrize("flag, value, bound", [("--resamples", "1073741824", "between 0 and 100,000"),
                                               ("--resamples", "100001", "between 0 and 100,000"),
                                               ("--resplits", "1001", "between 0 and 1,000")])
def test_05s_resamples_and_resplits_have_a_bound_the_machine_can_meet(flag, value, bound, tiny_data, tiny_model,
                                                                    tmp_path):
    """Each resample keeps one float per figure, and each re-split trains the classifiers again: 05 refuses more
    than it can finish as the line is read, before any model loads or anything is written."""
    out = tmp_path / "eval"
    assert script_error("05_evaluate.py", "--data", tiny_data, "--model", f"m={tiny_model}", "--out", out, flag,
                        value) == f"error: argument {flag}: {value}: must be {bound}"
    assert not out.exists()


@pytest.mark.parametrize("flag, value, bound", [("--per-query", "1073741824", "between 1 and 1,024"),
                                               ("--hard", "1025", "between 0 and 1,024")])
def test_triplets_per_query_have_a_bound_a_chunk_of_queries_can_hold(flag, value, bound, tmp_path):
    assert script_error("02_build_graph.py", "--articles", tmp_path / "a.jsonl", "--out", tmp_path / "out", flag,
                        value) == f"error: argument {flag}: {value}: must be {bound}"


@pytest.mark.parametrize("objective, flag, value", [("mnrl", "--scale", "1e300"), ("mnrl", "--scale", "65505"),
                                                    ("triplet", "--margin", "1e39"), ("contrastive", "--margin", "1e6"),
                                                    ("distill", "--gamma", "1e300"), ("distill", "--delta", "70000")])
def test_a_loss_constant_past_half_precisions_range_is_refused_as_the_line_is_read(objective, flag, value, tmp_path):
    data = tmp_path / "data"  # the files each objective needs, so that the flags are what is checked
    data.mkdir()
    for name in ("docs.jsonl", "triplets.train.jsonl", "pairs.train.jsonl", "keysent.train.jsonl"):
        (data / name).write_text("")
    low = "a positive number of at most" if flag == "--scale" else "a number from 0 to"
    argv = (["04_distill.py", "train", "--teachers", tmp_path] if objective == "distill" else
            ["03_train.py", "--objective", objective])
    assert script_error(*argv, "--data", data, "--model", "m", "--out", tmp_path / "run", flag, value) == (
        f"error: argument {flag}: {value}: must be {low} 65,504 (half precision's largest)")
    if objective != "distill":
        args = script_module("03_train.py").parse_args(["--objective", objective, "--data", str(data), "--model",
                                                        "m", "--out", str(tmp_path / "run"), flag, "65504"])
        assert getattr(args, flag[2:]) == 65504


MLM = ["--objective", "mlm", "--max-steps", "1", "--eval-every", "0", "--checkpoint-every", "0"]


@pytest.mark.parametrize("flags, message", [
    (["--mask-replace-prob", "0.8", "--random-replace-prob", "0.5"],
     "--mask-replace-prob 0.8 and --random-replace-prob 0.5: shares of the same chosen tokens, they add up to at "
     "most 1 (the rest stay as they are)"),
    (["--mask-replace-prob", "1", "--random-replace-prob", "0.01"],
     "--mask-replace-prob 1.0 and --random-replace-prob 0.01: shares of the same chosen tokens, they add up to at "
     "most 1 (the rest stay as they are)"),
    (["--whole-word-mask", "--mask-replace-prob", "0.8"],
     "--whole-word-mask replaces every token of a chosen word by [MASK]: --mask-replace-prob is 1 and "
     "--random-replace-prob 0 with it"),
    (["--whole-word-mask", "--random-replace-prob", "0.1"],
     "--whole-word-mask replaces every token of a chosen word by [MASK]: --mask-replace-prob is 1 and "
     "--random-replace-prob 0 with it"),
    (["--nsp", "--max-length", "4"],
     "--max-length 4: --nsp needs at least 5 tokens ([CLS] A [SEP] B [SEP], a token in each segment)"),
    (["--nsp", "--max-length", "1"],
     "--max-length 1: --nsp needs at least 5 tokens ([CLS] A [SEP] B [SEP], a token in each segment)")])
def test_masked_lm_flags_that_constrain_each_other_are_checked_together(flags, message, tiny_data, tiny_model,
                                                                         tmp_path):
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", tmp_path / "run", *MLM,
                        *flags) == f"error: {message}"
    assert not (tmp_path / "run").exists()


def test_whole_word_masking_records_the_shares_that_run(tiny_data, tmp_path):
    parse = script_module("03_train.py").parse_args
    base = ["--data", str(tiny_data), "--model", "m", "--out", str(tmp_path / "run"), *MLM]
    whole = parse(base + ["--whole-word-mask"])
    assert (whole.mask_replace_prob, whole.random_replace_prob) == (1.0, 0.0)
    assert (parse(base).mask_replace_prob, parse(base).random_replace_prob) == (0.8, 0.1)
    assert parse(base + ["--nsp", "--max-length", "5"]).max_length == 5
    assert parse(base + ["--mask-replace-prob", "0.7", "--random-replace-prob", "0.3"]).random_replace_prob == 0.3


def test_nsp_with_a_model_too_short_for_a_pair_is_one_line_before_any_step(tmp_path, tiny_data, capsys):
    model = build_tiny_model(tmp_path / "short", max_position=4)
    run = tmp_path / "run"
    assert script_error("03_train.py", "--data", tiny_data, "--model", model, "--out", run, *MLM, "--nsp") == (
        f"error: {model}: takes at most 4 tokens; --nsp needs at least 5 ([CLS] A [SEP] B [SEP], a token in each "
        "segment)")
    assert not (run / "log.jsonl").exists()


@pytest.mark.parametrize("value", ["1e300", "1.5", "1073741825", "-0.5"])
@pytest.mark.parametrize("script", ["03_train.py", "04_distill.py"])
def test_a_warmup_that_is_neither_a_share_nor_a_count_of_steps_is_refused_as_the_line_is_read(script, value, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("docs.jsonl", "triplets.train.jsonl"):
        (data / name).write_text("")
    argv = (["04_distill.py", "train", "--teachers", tmp_path] if script == "04_distill.py" else
            ["03_train.py", "--objective", "triplet"])
    assert script_error(*argv, "--data", data, "--model", "m", "--out", tmp_path / "run", "--warmup", value) == (
        f"error: argument --warmup: {value}: must be a share below 1, or a whole number of steps from 1 to "
        "1,073,741,824")


@pytest.mark.parametrize("warmup, steps, note", [("10", 3, "--warmup 10 is 10 steps, the run's 3 or more"),
                                                 ("0.99", 3, "--warmup 0.99 is 3 steps, the run's 3 or more"),
                                                 ("2", 3, None)])
def test_a_warmup_that_spans_the_whole_run_is_a_note_and_no_step_reaches_the_rate(warmup, steps, note, tmp_path,
                                                                                 tiny_data, tiny_model, capsys):
    """Linear warm-up to --lr over ``warmup`` steps: where they are as many as the run's, every step's rate (the
    log's ``lr``, each step's) is below --lr, and the run says so; with fewer, the last warm-up step reaches it."""
    from conftest import read_jsonl, train_in_process
    run = tmp_path / "run"
    train_in_process(["--data", tiny_data, "--model", tiny_model, "--out", run, "--objective", "triplet",
                      "--max-length", "16", "--batch-size", "4", "--max-steps", steps, "--eval-every", "0",
                      "--checkpoint-every", "0", "--log-every", "1", "--lr", "1e-3", "--warmup", warmup])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: --warmup")]
    rates = [record["lr"] for record in read_jsonl(run / "log.jsonl") if "lr" in record]
    assert len(rates) == steps
    if note:
        assert lines == [f"note: {note}: no step reaches the full learning rate (0.001)"]
        assert max(rates) < 1e-3
    else:
        assert lines == [] and max(rates) == pytest.approx(1e-3)


@pytest.mark.parametrize("value", ["15", "1", "0", "131074"])
def test_a_longformer_window_that_is_not_even_and_in_range_is_refused_as_the_line_is_read(value, tmp_path):
    assert script_error("04_distill.py", "convert-long", "--model", "m", "--out", tmp_path / "long", "--window",
                        value) == f"error: argument --window: {value}: must be an even number between 2 and 131,072"


@pytest.mark.parametrize("length", [1, 2])
def test_a_length_that_holds_only_the_special_tokens_is_refused_before_anything_is_made(length, tmp_path, tiny_data,
                                                                                         tiny_model):
    """The tiny BERT's tokenizer adds [CLS] and [SEP]: convert-long to 1 or 2 tokens made a Longformer that no one
    can embed with (1: its position table cannot hold them), and 05 or 03 at that length would embed no text."""
    message = (f"error: {tiny_model}: a length of {length} token{'s' * (length != 1)} leaves no room for text "
               "beside its tokenizer's 2 special tokens; give --max-length 3 or more")
    assert script_error("04_distill.py", "convert-long", "--model", tiny_model, "--out", tmp_path / "long",
                        "--max-length", length, "--window", "2") == message
    assert script_error("05_evaluate.py", "--data", tiny_data, "--model", f"b={tiny_model}", "--out",
                        tmp_path / "eval", "--max-length", length) == message
    assert not (tmp_path / "long").exists() and not list((tmp_path / "eval").iterdir())


def test_a_longformer_converted_to_the_shortest_length_embeds_with_05(tmp_path, tiny_data, tiny_model):
    """Three tokens: [CLS], one of the text, [SEP]; 05 embeds every document with it."""
    script_module("04_distill.py").main(["convert-long", "--model", str(tiny_model), "--out", str(tmp_path / "long"),
                                         "--max-length", "3", "--window", "2"])
    script_module("05_evaluate.py").main(["--data", str(tiny_data), "--model", f"long={tmp_path / 'long'}", "--out",
                                          str(tmp_path / "eval"), "--task", "crossref"])
    vectors = np.load(tmp_path / "eval" / "long.npy")
    assert vectors.shape == (60, 32) and np.isfinite(vectors).all()


# -- numbers in files: one strict reading ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [
    ("NaN", "NaN is not a JSON number"), ("[Infinity]", "Infinity is not a JSON number"),
    ('{"a": -Infinity}', "-Infinity is not a JSON number"), ("1e400", "number 1e400 is not finite"),
    ("-2e308", "number -2e308 is not finite"), ("1" * 65, "a number of 65 digits"),
    ("-" + "9" * 300, "a number of 300 digits")])
def test_json_text_with_a_number_that_is_not_finite_or_hundreds_of_digits_long_is_refused(text, why, tmp_path):
    with pytest.raises(ValueError) as e:
        io.loads(text)
    assert str(e.value) == why
    (tmp_path / "x.json").write_text(text)
    with pytest.raises(InputError) as e:
        io.read_json_or_empty(tmp_path / "x.json")
    assert str(e.value) == f"{tmp_path / 'x.json'}: not JSON text ({why})"


def test_json_text_keeps_transformers_no_limit_length_and_ordinary_numbers():
    assert io.loads('{"model_max_length": 1000000000000000019884624838656, "eps": 1e-12, "n": -3}') == {
        "model_max_length": 1000000000000000019884624838656, "eps": 1e-12, "n": -3}


@pytest.mark.parametrize("value, kind, low, high, why", [
    (True, int, 0, 9, "True is not a JSON integer"), (1.0, int, 0, 9, "1.0 is not a JSON integer"),
    ("1", int, 0, 9, "'1' is not a JSON integer"), ([1], float, 0, 9, "[1] is not a JSON number"),
    (None, float, None, None, "None is not a JSON number"), (False, float, None, None, "False is not a JSON number"),
    (float("nan"), float, None, None, "nan is not finite"), (float("inf"), float, 0, None, "inf is not finite"),
    (-1, int, 0, 9, "-1 is not between 0 and 9"), (10 ** 30, int, 0, 1 << 53,
                                                   "1000000000000000000000000000000 is not between 0 and "
                                                   "9,007,199,254,740,992"),
    (-0.5, float, 0, None, "-0.5 is not at least 0")])
def test_a_number_from_a_file_is_of_its_json_type_finite_and_in_range(value, kind, low, high, why):
    with pytest.raises(InputError) as e:
        io.number(value, "f.json: field 'x'", kind, low, high)
    assert str(e.value) == f"f.json: field 'x': {why}"
    assert io.number(3, "f", int, 0, 9) == 3 and io.number(2.5, "f", float, 0) == 2.5


# -- numbers in 02's, 03's and 04's files ---------------------------------------------------------------------------

@pytest.mark.parametrize("labels", ["[true, 0]", "[1.0, 0]", '["1", 0]', "[2, 0]", "[null, 0]", "[[1], 0]",
                                    "[-1, 0]", "[1e400, 0]", "[" + "1" * 300 + ", 0]"])
def test_a_key_sentence_label_that_is_not_0_or_1_is_one_line_naming_its_line(labels, tmp_path):
    path = tmp_path / "sentences.jsonl"
    path.write_text('{"id": "a", "sentences": ["One.", "Two."], "labels": [0, 1]}\n'
                    f'{{"id": "b", "sentences": ["One.", "Two."], "labels": {labels}}}\n')
    error = script_error("02_build_graph.py", "sentences", "--sentences", path, "--out", tmp_path / "out")
    assert error == f"error: {path}:2: field 'labels' must hold one 0 or 1 per sentence" or \
        re.fullmatch(rf"error: {re.escape(str(path))}:2: invalid JSON: number is infinity when parsed as double "
                     r"\(column \d+\)", error)
    assert not (tmp_path / "out").exists() or not [p for p in (tmp_path / "out").iterdir() if p.name != ".lock"]


def _data(tiny_data, tmp_path, name, edit):
    """A hand-made copy of the tiny data directory, ``name`` edited by ``edit(lines)``."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
    lines = (data / name).read_text().splitlines()
    (data / name).write_text("\n".join(edit(lines)) + "\n")
    return data


@pytest.mark.parametrize("field, value", [("id", 5), ("id", [1]), ("title", None), ("text", {"a": 1}),
                                          ("id", True)])
def test_a_document_whose_id_title_or_text_is_not_a_string_is_one_line_for_training(field, value, tmp_path,
                                                                                     tiny_data, tiny_model):
    def edit(lines):
        record = json.loads(lines[1])
        return [lines[0], json.dumps({**record, field: value})] + lines[2:]
    data = _data(tiny_data, tmp_path, "docs.jsonl", edit)
    assert script_error("03_train.py", "--data", data, "--model", tiny_model, "--out", tmp_path / "run",
                        "--objective", "triplet") == f"error: {data / 'docs.jsonl'}:2: field {field!r} must be a string"


@pytest.mark.parametrize("value", [[1], {"a": 1}, 5, None])
def test_a_triplet_naming_a_document_by_anything_but_a_string_is_one_line(value, tmp_path, tiny_data, tiny_model):
    from common.data.docs_jsonl import Documents, read_triplets
    path = tmp_path / "triplets.train.jsonl"
    path.write_text(json.dumps({"query": "d1", "pos": value, "neg": "d2"}) + "\n")
    with pytest.raises(InputError) as e:
        read_triplets(str(path), Documents(tiny_data))
    assert str(e.value) == f"{path}:1: fields 'query', 'pos' and 'neg' must be ids (strings)"


@pytest.mark.parametrize("rel", ["1" * 300, "1.5", "1e3", "١", "+1", "true"])
def test_a_qrels_relevance_that_is_not_a_short_whole_number_is_one_line(rel, tmp_path):
    path = tmp_path / "retrieval.val.qrels"
    path.write_text(f"q1 0 d1 1\nq1 0 d2 {rel}\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        io.read_trec_qrels(str(path))
    assert str(e.value) == (f"{path}:2: relevance {io.shown(rel)} is not a whole number between -2,147,483,648 and "
                            "2,147,483,647 (trec_eval's)")


def test_a_query_id_that_is_not_a_string_is_one_line(tmp_path):
    from common.data.retrieval import read_queries
    path = tmp_path / "queries.val.jsonl"
    path.write_text('{"qid": "q:1", "text": "a"}\n{"qid": 7, "text": "b"}\n')
    with pytest.raises(InputError) as e:
        read_queries(str(path))
    assert str(e.value) == f"{path}:2: field 'qid' must be a string"


STATES = {"a step of true": {"step": True}, "a step of 1e30": {"step": 10 ** 30}, "a step of 2.0": {"step": 2.0},
          "a negative epoch": {"epoch": -1}, "a best that is text": {"best": "abc"}, "a best that is a list":
          {"best": [1]}, "a log count of null": {"log_lines": None}, "a micro-step of -1": {"micro": -1},
          "a window's log value that is text": {"window": [[2, 0.5, {"accuracy": "abc"}]]}}


@pytest.mark.parametrize("damage", list(STATES))
def test_a_damaged_number_in_a_checkpoints_state_falls_back_to_the_one_before(damage, tmp_path, tiny_data,
                                                                               tiny_model, capsys):
    from conftest import unfinish, train_in_process
    run = tmp_path / "run"
    argv = ["--data", tiny_data, "--model", tiny_model, "--out", run, "--objective", "triplet", "--max-length", "32",
            "--batch-size", "4", "--max-steps", "2", "--checkpoint-every", "1", "--eval-every", "0", "--log-every",
            "1", "--keep", "2"]
    train_in_process(argv)
    unfinish(run)
    state = run / "checkpoints" / "step_2" / "trainer_state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), **STATES[damage]}))
    capsys.readouterr()
    train_in_process(argv)
    out = capsys.readouterr().out
    assert f"note: checkpoint {run / 'checkpoints' / 'step_2'} cannot be read (trainer_state.json: " in out
    assert f"resuming from {run / 'checkpoints' / 'step_1'}" in out


def test_a_state_beyond_the_run_it_resumes_is_not_resumed(tmp_path, tiny_data, tiny_model, capsys):
    from conftest import unfinish, train_in_process
    run = tmp_path / "run"
    argv = ["--data", tiny_data, "--model", tiny_model, "--out", run, "--objective", "triplet", "--max-length", "32",
            "--batch-size", "4", "--max-steps", "2", "--checkpoint-every", "1", "--eval-every", "0", "--log-every",
            "1"]
    train_in_process(argv)
    unfinish(run)
    for step in (1, 2):
        state = run / "checkpoints" / f"step_{step}" / "trainer_state.json"
        state.write_text(json.dumps({**json.loads(state.read_text()), "step": 10 ** 12}))
    assert script_error("03_train.py", *argv) == (f"error: {run}: no checkpoint can be read; remove "
                                                  f"{run / 'checkpoints'} to start again")


LOG_RECORDS = {'{"step": true, "loss": 1.0}': "not a record of this run's log (damaged?); remove the line, or train "
                                              "again into another --out",
               '{"step": 2.0, "loss": 1.0}': "not a record of this run's log (damaged?); remove the line, or train "
                                             "again into another --out",
               '{"step": 1, "epoch": "abc"}': "field 'epoch': 'abc' is not a JSON number",
               '{"step": 1, "epoch": null}': "field 'epoch': None is not a JSON number",
               '{"step": 1, "epoch": -0.5}': "field 'epoch': -0.5 is not at least 0",
               '{"step": 1, "loss": [1]}': "field 'loss': [1] is not a JSON number",
               '{"step": 1, "loss": true}': "field 'loss': True is not a JSON number",
               '{"step": 1, "loss": NaN}': "not a record of this run's log (damaged?); remove the line, or train "
                                           "again into another --out",
               '{"step": 1, "loss": 1e400}': "not a record of this run's log (damaged?); remove the line, or train "
                                             "again into another --out",
               '{"step": 100000000000000000000, "loss": 1}': "field 'step': 100000000000000000000 is not between 0 "
                                                             "and 9,007,199,254,740,992",
               '{"step": -1, "loss": 1}': "field 'step': -1 is not between 0 and 9,007,199,254,740,992"}


@pytest.mark.parametrize("record", list(LOG_RECORDS))
def test_a_log_record_whose_numbers_are_damaged_is_one_line_naming_the_line_and_field(record, tmp_path):
    from common.train.rundir.run_log import read_log
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1, "epoch": 0.5, "loss": 0.9, "lr": 1e-05}\n' + record + "\n")
    with pytest.raises(InputError) as e:
        read_log(str(path))
    assert str(e.value) == f"{path}:2: {LOG_RECORDS[record]}"


def test_a_metric_past_floats_range_is_logged_as_null_and_read_back():
    from common.train.rundir.run_log import log_line
    assert log_line({"step": 1, "epoch": 0.5, "perplexity": float("inf"), "x": float("nan")}) == \
        '{"step": 1, "epoch": 0.5, "perplexity": null, "x": null}\n'


def _teachers(folder, vectors=None, lengths=None):
    ids = ["a", "b"]
    folder.mkdir(exist_ok=True)
    np.save(folder / "sbert.npy", vectors if vectors is not None else np.ones((2, 3), np.float32))
    np.save(folder / "lengths.npy", lengths if lengths is not None else np.array([3, 4]))
    for name in ("sbert", "lengths"):
        (folder / f"{name}.ids.txt").write_text("a\nb\n")
    return ids


def test_teacher_vectors_past_float32s_range_are_one_line_naming_the_row(tmp_path):
    from common.distill.teachers import read_vectors
    vectors = np.ones((2, 3))
    vectors[1, 2] = 1e300
    ids = _teachers(tmp_path, vectors=vectors)
    with pytest.raises(InputError) as e:
        read_vectors(str(tmp_path), "sbert", ids)
    assert str(e.value) == (f"{tmp_path / 'sbert.npy'}: row 1 (document 'b') holds a value beyond float32's range "
                            "(±3.403e+38), which training would read as an infinity")
    _teachers(tmp_path, vectors=np.full((2, 3), 1e30))
    assert read_vectors(str(tmp_path), "sbert", ids).dtype == np.float32


@pytest.mark.parametrize("lengths, why", [
    (np.array([3, 1 << 40]), "row 1 (document 'b') counts 1,099,511,627,776 tokens, more than 2,147,483,647"),
    (np.array([3, -1]), "expected one non-negative token count per document, got int64 [2]"),
    (np.array([True, False]), "expected one non-negative token count per document, got bool [2]"),
    (np.array([3.0, 4.0]), "expected one non-negative token count per document, got float64 [2]")])
def test_teacher_lengths_that_are_not_token_counts_are_one_line(lengths, why, tmp_path):
    from common.distill.teachers import read_lengths
    ids = _teachers(tmp_path, lengths=lengths)
    with pytest.raises(InputError) as e:
        read_lengths(str(tmp_path), ids)
    assert str(e.value) == f"{tmp_path / 'lengths.npy'}: {why}"


@pytest.mark.parametrize("counts, why", [({"documents": "60"}, "'60' is not a JSON number"),
                                         ({"documents": True}, "True is not a JSON number"),
                                         ({"documents": -3}, "-3 is not at least 0"),
                                         ({"documents": [60]}, "[60] is not a JSON number")])
def test_a_data_manifests_count_the_card_quotes_is_checked_before_the_first_step(counts, why, tmp_path, tiny_data,
                                                                                 tiny_model):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "counts": {**manifest["counts"], **counts}}))
    run = tmp_path / "run"
    assert script_error("03_train.py", "--data", data, "--model", tiny_model, "--out", run, "--objective", "triplet",
                        "--max-length", "32", "--max-steps", "1") == (
        f"error: {data / 'manifest.json'}: counts → documents: {why}")
    assert not (run / "log.jsonl").exists()


@pytest.mark.parametrize("key, value, why", [("teacher_max_length", "abc", "'abc' is not a JSON integer"),
                                             ("teacher_max_length", True, "True is not a JSON integer"),
                                             ("pv_vector_size", 1 << 20, "1048576 is not between 1 and 65,536"),
                                             ("pv_vector_size", 8.0, "8.0 is not a JSON integer")])
def test_a_teachers_manifest_number_the_card_quotes_is_one_line(key, value, why, tmp_path):
    from types import SimpleNamespace

    from common.train.objectives.distill import DistillObjective
    (tmp_path / "manifest.json").write_text(json.dumps({"script": "04_distill.py", "args": {key: value}}))
    config = SimpleNamespace(model_type="bert")
    objective = DistillObjective(SimpleNamespace(teachers=str(tmp_path), lam=1.0, max_structural_length=0,
                                                 no_weighting=False), None)
    objective.encoder = SimpleNamespace(transformer=SimpleNamespace(config=config))
    with pytest.raises(InputError) as e:
        objective.card_details()
    assert str(e.value) == f"{tmp_path / 'manifest.json'}: args → {key}: {why}"
