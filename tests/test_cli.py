"""The command line (common/cli.py): a flag's value refused as argparse reads it (every number typed, every size
bounded), an --out among the command's inputs refused before any work, every flag that names a path declared read
or out, and the exit statuses of ``cli.run``."""

import os

import pytest

from common import cli
from common.io import InputError, Preempted
from common.train import objectives
from conftest import SHORT_TRAIN, every_parser, file_tree, script_error, script_module, write_linked_articles


# -- a flag refused as the command line is read --------------------------------------------------------------------

def test_a_typed_flag_is_refused_as_the_command_line_is_read_in_one_line_with_exit_status_2(capsys):
    p = cli.parser("")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=16)
    p.add_argument("--lr", type=cli.number(float, cli.POSITIVE), default=3e-5)
    assert vars(p.parse_args(["--batch-size", "8", "--lr", "1e-4"])) == {"batch_size": 8, "lr": 1e-4}
    assert vars(p.parse_args([])) == {"batch_size": 16, "lr": 3e-5}
    for argv, line in ((["--batch-size", "0"], "argument --batch-size: 0: must be between 1 and 1,073,741,824"),
                       (["--batch-size", "2.5"], "argument --batch-size: 2.5: not an integer"),
                       (["--lr", "nan"], "argument --lr: nan: must be a positive number"),
                       (["--lr", "inf"], "argument --lr: inf: must be a positive number"),
                       (["--lr", "fast"], "argument --lr: fast: not a number")):
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        assert e.value.code == 2
        assert capsys.readouterr().err == f"error: {line}\n"


@pytest.mark.parametrize("name, flag, value, line", [
    ("triplet", "--margin", "nan", "argument --margin: nan: must be a number from 0 to 65,504 (half precision's "
                                   "largest)"),
    ("contrastive", "--margin", "-1", "argument --margin: -1: must be a number from 0 to 65,504 (half precision's "
                                      "largest)"),
    ("mlm", "--mlm-probability", "1.5", "argument --mlm-probability: 1.5: must be a share between 0 and 1"),
    ("mlm", "--mask-replace-prob", "nan", "argument --mask-replace-prob: nan: must be a share between 0 and 1"),
    ("mlm", "--random-replace-prob", "-0.1",
     "argument --random-replace-prob: -0.1: must be a share between 0 and 1"),
    ("mlm", "--validation-split", "inf", "argument --validation-split: inf: must be a share between 0 and 1"),
])
def test_an_objectives_own_numbers_are_refused_as_the_command_line_is_read(name, flag, value, line, capsys):
    p = cli.parser("")
    script_module("03_train.py").add_training_arguments(p, objectives.get(name), [])
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--data", "d", "--out", "o", "--model", "m", flag, value])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: {line}\n"


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
    articles = write_linked_articles(tmp_path / "articles.jsonl")
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


# -- an --out among the inputs: refused before any work ------------------------------------------------------------

@pytest.mark.parametrize("case, how", [("is", "is"), ("inside", "lies inside"), ("holds", "holds"),
                                       ("a link to", "is"), ("inside a link to", "lies inside")])
def test_an_out_that_is_holds_or_lies_inside_an_input_is_refused_before_any_work(case, how, tmp_path, tiny_data,
                                                                                 tiny_model):
    import shutil
    model = tmp_path / "models" / "bert"
    shutil.copytree(tiny_model, model)
    (tmp_path / "corpus").mkdir()
    articles = write_linked_articles(tmp_path / "corpus" / "articles.jsonl")
    link = tmp_path / "link"
    link.symlink_to(model)
    before = file_tree(tmp_path)
    commands = [("04_distill.py", ["convert-long", "--model", model], "--model", model),
                ("03_train.py", ["--data", tiny_data, "--model", model, *SHORT_TRAIN], "--model", model),
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
    assert file_tree(tmp_path) == before


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
    text = {"topic_root", "disambiguation_markers", "disambiguation_templates", "categories", "id_column",
            "title_column", "text_column", "label_column", "topic_cap", "report_to", "student_projection",
            "teacher_projection", "model_type", "config_overrides", "cache_dir", "query", "query_token",
            "pv_preprocess", "pooling", "normalize", "language", "argv", "warmup", "compare", "config", "split",
            "revision", "csv_columns", "id_field", "title_field", "text_field", "label_field", "name"}
    parsers = every_parser()
    for where, parser in parsers:
        for action in parser._actions:
            free_text = action.type is None and action.const is None and not action.choices and action.nargs != 0
            if action.dest in ("help", "out") or not free_text:
                continue
            assert action.dest in text, f"{where}: {action.dest} names a path? type it cli.reads, or list it here"
        read = {action.dest for action in parser._actions if action.type in (cli.reads, cli.reads_named)}
        assert read & {"model", "model_path", "data", "articles", "input", "dump", "sentences", "dataset", "train"} or \
            where.endswith("testsets"), where


# -- exit statuses -------------------------------------------------------------------------------------------------

def test_preemption_exits_143_and_bad_input_2():
    def preempted():
        raise Preempted(5)

    def bad():
        raise InputError("x.jsonl:3: bad")
    for main, status in ((preempted, 143), (bad, 2)):
        with pytest.raises(SystemExit) as e:
            cli.run(main)
        assert e.value.code == status
