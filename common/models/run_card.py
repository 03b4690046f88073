"""What the model card of a trained model says of its run: the card's assembly from the objective's method and notes
(``Objective.card_method``, ``Objective.card_details``, each objective's own), the run's identity, log and manifests
(``model_card``). ``card.py`` renders it.
"""

import os

from common.io import InputError
from common.models import card

# what a run's identity holds besides the flags its cards list: what the data holds, the model it started from (the
# card names it on its own), what a local model and teachers hold, and the number of processes (the card's training
# line says it)
NOT_SETTINGS = ("objective", "data_content", "model", "model_content", "teachers_content", "processes")


def run_facts(objective, script):
    """What every card of a run shares (versions, commit, the data's and the corpus's manifests, the base model):
    only the log grows between saves. The start model's own card only adds to it: one that cannot be read is a
    note (``card.base_model``)."""
    from common import io
    from common.outdir import provenance
    args, notes = objective.args, objective.card_details()
    card.check_citations(notes.get("citations", ()), f"the {objective.name} objective's card_details")
    run = provenance.manifest(script, args, None)
    accelerator = objective.accelerator
    training = {"script": script, "processes": accelerator.num_processes if accelerator else 1,
                "precision": accelerator.mixed_precision if accelerator else "no", "commit": run["git_commit"],
                "versions": {k: v for k, v in run["versions"].items()
                             if k in ("torch", "transformers", "sentence-transformers")}}
    manifest = io.read_manifest(args.data)
    for key, value in (manifest.get("counts") or {}).items():  # the card lists them
        io.number(value, f"{os.path.join(args.data, 'manifest.json')}: counts → {key}", float, 0)
    first = next(iter(manifest.get("inputs") or {}), None)
    try:  # the corpus's own manifest only adds to the card: one moved or damaged since is left out
        source = io.read_manifest(os.path.dirname(os.path.abspath(first))) if first else {}
    except (InputError, OSError, ValueError):
        source = {}
    data = card.data_summary(args.data, manifest, source if source.get("script") else None)
    if notes.get("teachers"):
        data["teachers"] = notes["teachers"]
    return {
        "training": training,
        "card": {"data": data, "base": card.base_model(args.model, objective.say), "start": args.model,
                 "language": card.hub_language(manifest.get("language") or source.get("language")),
                 "tags": notes.get("tags", ()), "citations": notes.get("citations", ()),
                 "notes": notes.get("notes", ())}}


def model_card(objective, path, identity, log, facts):
    """The model card of ``path`` (RUN/model, RUN/epoch_K): the method, the run's settings (``identity``, as the
    run folder records it), the steps and validations of ``log`` (the run's records up to this model: the last is
    this model's step), and ``facts`` (``run_facts``). A model of a run that replaces a finished one is named where
    it will be (``folders.final_path``), not in ``RUN/.next-run`` where it is written."""
    from common.outdir import folders
    path = folders.final_path(path)
    last = log[-1] if log else {"step": 0, "epoch": 0}
    validation = [r for r in log if "lr" not in r]
    chosen = next((r for r in validation if r["step"] == last["step"]), None)
    settings = [("objective", objective.name)] + [(k, v) for k, v in identity.items() if k not in NOT_SETTINGS]
    training = {**facts["training"], "steps": last["step"], "epoch": last["epoch"]}
    return card.model_card(objective.card_method(), path,
                           card.model_facts(objective.encoder, objective.max_length, objective.similarity),
                           settings, training, validation, chosen, **facts["card"])
