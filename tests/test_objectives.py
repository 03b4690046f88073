"""An objective is one file and one registry line (common/train/objectives/): tests/toy_objective.py, registered by
tests/conftest.py's one line, trains through 03 and its own declarations reach the run's identity and its model
card, with nothing outside its file naming it."""

import json

import pytest
from huggingface_hub import ModelCard

from conftest import read_jsonl, script_error


def test_the_toy_objectives_card_and_identity_come_from_its_own_file(toy, tiny_model, tiny_data, tmp_path):
    out = tmp_path / "run"
    toy(tiny_data, tiny_model, out, "--label-smoothing", "0.25", "--max-steps", "2", "--checkpoint-every", "0")
    identity = json.loads((out / "manifest.json").read_text())["identity"]
    assert identity["objective"] == "toy" and identity["label_smoothing"] == 0.25
    card = ModelCard.load(str(out / "model" / "README.md"))
    assert card.data.tags[-2:] == ["toy", "loss:CrossEntropyLoss"]
    assert card.text.startswith("\n# run/model: toy classification objective\n\nA [sentence-transformers]")
    assert ("fine-tuned with a test's toy objective: a linear head on the mean-pooled, running-mean-centred embedding "
            "learns three classes by cross-entropy.\n\n## Model details") in card.text
    assert ("\n\nTargets were smoothed by 0.25; `heads.safetensors` beside the model holds the head and the running "
            "mean.\n\n## Training") in card.text
    assert "| `--label-smoothing` | 0.25 |" in card.text
    assert "\n\n## Citation\n\n```bibtex\n@inproceedings{reimers-2019-sentence-bert,\n" in card.text

    assert script_error("03_train.py", "--objective", "toy", "--data", tiny_data, "--model", tiny_model, "--out", out,
                        "--max-steps", "2", "--checkpoint-every", "0", "--log-every", "1", "--eval-every", "0") == (
        f"error: {out}: holds a finished 03_train.py run with other settings (label_smoothing); give --overwrite to "
        "train it again (only what the run wrote is removed), or another --out")



def test_the_loop_averages_the_log_values_losses_returns_into_each_record(toy, tiny_model, tiny_data, tmp_path):
    """The toy returns its batch accuracy beside its losses: a record every 2 steps of 4 documents holds the mean of
    the two batches' accuracies, a multiple of 1/8."""
    out = tmp_path / "run"
    toy(tiny_data, tiny_model, out, "--max-steps", "4", "--log-every", "2", "--checkpoint-every", "0")
    records = [r for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert [r["step"] for r in records] == [2, 4]
    assert [list(r)[:4] for r in records] == [["step", "epoch", "loss", "accuracy"]] * 2
    assert all(0 <= r["accuracy"] <= 1 and (r["accuracy"] * 8).is_integer() for r in records)


def test_a_citation_key_that_card_py_lacks_fails_where_it_is_named_not_at_the_first_save(toy, tiny_model, tiny_data,
                                                                                          tmp_path, monkeypatch):
    from common.models.card import Method
    from toy_objective import ToyObjective
    with pytest.raises(ValueError) as e:
        Method("a method", "what it does.", (), ("sbert", "nobody2024"))
    assert str(e.value) == "method 'a method': no citation 'nobody2024' in common/models/card.py's CITATIONS"
    monkeypatch.setattr(ToyObjective, "card_details", lambda self: {"citations": ["nobody2024"]})
    out = tmp_path / "run"
    with pytest.raises(ValueError) as e:
        toy(tiny_data, tiny_model, out, "--max-steps", "2")
    assert str(e.value) == ("the toy objective's card_details: no citation 'nobody2024' in common/models/card.py's "
                            "CITATIONS")
    assert not (out / "log.jsonl").exists()  # refused before the first step


@pytest.mark.parametrize("objective, data, flag, error", [
    ("triplet", "tiny_data", "--cache-chunk", "--cache-chunk 4: the triplet objective's loss is not computed from the batch's "
     "embeddings together, so GradCache does not apply (--chunk-tokens runs a batch in parts)"),
    ("mnrl", "paper_data", "--chunk-tokens", "--chunk-tokens 4: the mnrl objective's loss is not a mean of independent "
     "per-example losses, so a batch cannot be run in parts (--cache-chunk runs it in GradCache chunks)")])
def test_a_backward_strategy_the_objectives_loss_cannot_take_is_refused_in_one_line(objective, data, flag, error,
                                                                                     tiny_model, tmp_path, request):
    data = request.getfixturevalue(data)
    assert script_error("03_train.py", "--objective", objective, "--data", data, "--model", tiny_model,
                        "--out", tmp_path / "run", flag, "4") == f"error: {error}"
