"""An objective is one file and one registry line (common/train/objectives/): tests/toy_objective.py, registered by
tests/conftest.py's one line, trains through 03 and its own declarations reach the run's identity and its model
card, with nothing outside its file naming it."""

import json

from huggingface_hub import ModelCard

from conftest import script_error


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

    assert script_error("03_train.py", "--objective", "toy", "--data", tiny_data, "--model", tiny_model, "--out", out,
                        "--max-steps", "2", "--checkpoint-every", "0", "--log-every", "1", "--eval-every", "0") == (
        f"error: {out}: holds a finished 03_train.py run with other settings (label_smoothing); give --overwrite to "
        "train it again (only what the run wrote is removed), or another --out")

