"""common.io: the names that may become file names, and output folders that are written whole or not at all."""

import pytest

from common.io import InputError, Outputs, safe_name


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
