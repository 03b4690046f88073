"""The fuzzer's finds, replayed: every input in fuzz/corpus/TARGET/ (each once a traceback or a broken invariant,
now fixed in its reader) and every seed in fuzz/seeds/TARGET/ keeps the invariant of fuzz/targets.py: the reader
returns or stops with a one-line InputError, and writes nothing outside its folder. No fuzzer is needed."""

import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "fuzz"))
import targets  # noqa: E402

CASES = [(target, os.path.join(kind, target, name)) for kind in ("corpus", "seeds")
         for target in sorted(os.listdir(os.path.join(ROOT, "fuzz", kind)))
         for name in sorted(os.listdir(os.path.join(ROOT, "fuzz", kind, target)))]


def test_every_target_has_seeds_and_every_replayed_input_names_a_target():
    assert {target for target, path in CASES if path.startswith("seeds")} == set(targets.TARGETS)
    assert {target for target, _ in CASES} <= set(targets.TARGETS)


@pytest.mark.parametrize("target, path", CASES, ids=[path for _, path in CASES])
def test_an_input_ends_in_a_result_or_a_one_line_error(target, path, tmp_path):
    with open(os.path.join(ROOT, "fuzz", path), "rb") as f:
        targets.run_one(target, f.read(), str(tmp_path / "work"))


def test_the_invariant_catches_a_traceback_a_line_break_and_a_stray_file(tmp_path, monkeypatch):
    from common.io import InputError

    def crash(data, work):
        raise KeyError("key")

    def two_lines(data, work):
        err = InputError("x")
        err.args = ("a\nb",)
        raise err

    def stray(data, work):
        with open(tmp_path / "outside", "w") as f:
            f.write("x")
    for reader, expected in ((crash, KeyError), (two_lines, targets.Defect), (stray, targets.Defect)):
        monkeypatch.setitem(targets.TARGETS, "probe", reader)
        with pytest.raises(expected):
            targets.run_one("probe", b"", str(tmp_path / "work"))
    assert str(InputError("line\none\r\x85")) == "line\\none\\r\\x85"
