"""The model card (``README.md``) of every model folder this project saves: the Hugging Face hub's YAML front matter
(``huggingface_hub.ModelCardData``) and what a reader needs to know of the model: what it is (method and paper,
pooling, normalisation, length, dimensions, parameters), how it was trained (settings, steps, the data and its
provenance), its validation figures, how to use it, and the papers to cite.

A card is read on other machines (the hub's page of the model): it names a model by its hub name or its folder's
name, the data directory by its name and input files by file name and SHA-256, never by a path of the machine that
made it. What it says of a training method is the objective's ``Method`` (``Objective.method``); of a Longformer
conversion, ``LONGFORMER``.

Everything here takes values and returns them: the facts come from the caller (``run_card.model_card``, from the run's
identity, log and manifests; ``04_distill.py convert-long``).
"""

import os
import re
from dataclasses import dataclass

import yaml
from huggingface_hub import ModelCard, ModelCardData

from common.markdown import escape

CITATIONS = {
    "specter": """@inproceedings{cohan-etal-2020-specter,
    title = "{SPECTER}: Document-level Representation Learning using Citation-informed Transformers",
    author = "Cohan, Arman and Feldman, Sergey and Beltagy, Iz and Downey, Doug and Weld, Daniel",
    booktitle = "Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics",
    year = "2020",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/2020.acl-main.207",
    doi = "10.18653/v1/2020.acl-main.207",
    pages = "2270--2282",
}""",
    "sbert": """@inproceedings{reimers-2019-sentence-bert,
    title = "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
    author = "Reimers, Nils and Gurevych, Iryna",
    booktitle = "Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing",
    month = "11",
    year = "2019",
    publisher = "Association for Computational Linguistics",
    url = "https://arxiv.org/abs/1908.10084",
}""",
    "henderson": """@misc{henderson2017efficient,
    title = {Efficient Natural Language Response Suggestion for Smart Reply},
    author = {Matthew Henderson and Rami Al-Rfou and Brian Strope and Yun-hsuan Sung and Laszlo Lukacs and
              Ruiqi Guo and Sanjiv Kumar and Balint Miklos and Ray Kurzweil},
    year = {2017},
    eprint = {1705.00652},
    archivePrefix = {arXiv},
    primaryClass = {cs.CL},
}""",
    "gradcache": """@misc{gao2021scaling,
    title={Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup},
    author={Luyu Gao and Yunyi Zhang and Jiawei Han and Jamie Callan},
    year={2021},
    eprint={2101.06983},
    archivePrefix={arXiv},
    primaryClass={cs.LG}
}""",
    "bert": """@inproceedings{devlin-etal-2019-bert,
    title = "{BERT}: Pre-training of Deep Bidirectional Transformers for Language Understanding",
    author = "Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, Kristina",
    booktitle = "Proceedings of the 2019 Conference of the North {A}merican Chapter of the Association for
                 Computational Linguistics: Human Language Technologies, Volume 1 (Long and Short Papers)",
    year = "2019",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/N19-1423",
    doi = "10.18653/v1/N19-1423",
    pages = "4171--4186",
}""",
    "hadsell": """@inproceedings{hadsell2006dimensionality,
    author={Hadsell, R. and Chopra, S. and LeCun, Y.},
    booktitle={2006 IEEE Computer Society Conference on Computer Vision and Pattern Recognition (CVPR'06)},
    title={Dimensionality Reduction by Learning an Invariant Mapping},
    year={2006},
    volume={2},
    number={},
    pages={1735-1742},
    doi={10.1109/CVPR.2006.100}
}""",
    "burian": """@mastersthesis{burian2023document,
    author = {Burian, David},
    title = {Document embedding using Transformers},
    school = {Charles University, Faculty of Mathematics and Physics},
    year = {2023},
    url = {https://github.com/dburian/transformer_document_embedding},
}""",
    "longformer": """@article{beltagy2020longformer,
    title = {Longformer: The Long-Document Transformer},
    author = {Beltagy, Iz and Peters, Matthew E. and Cohan, Arman},
    journal = {arXiv preprint arXiv:2004.05150},
    year = {2020},
}""",
}


def check_citations(keys, where):
    """Each of ``keys`` names an entry of ``CITATIONS`` (a ValueError names ``where`` and the key otherwise)."""
    unknown = [key for key in keys if key not in CITATIONS]
    if unknown:
        raise ValueError(f"{where}: no citation {unknown[0]!r} in common/models/card.py's CITATIONS")


@dataclass(frozen=True)
class Method:
    """What a card says about a method: an objective declares its own (``Objective.method``). Its citation keys are
    checked as it is made, so that an objective naming an unknown one fails as it is defined."""

    title: str
    what: str  # one paragraph: the objective and its paper
    tags: tuple  # hub tags naming the method
    citations: tuple  # keys of CITATIONS
    similarity: bool = True  # trained for similarity (pipeline sentence-similarity), else feature-extraction
    inputs: str = "documents as `title + tokenizer.sep_token + text` (SPECTER's input)"

    def __post_init__(self):
        check_citations(self.citations, f"method {self.title!r}")


LONGFORMER = Method(  # 04_distill.py convert-long's models
    "Longformer conversion",
    "made into a Longformer by the Longformer paper's recipe (Beltagy et al. 2020): its position embeddings "
    "copied over and over up to the new length (§5), sliding-window attention in every layer, and the "
    "global-attention projections initialised as copies of the local ones (§3.1). It is not trained after the "
    "conversion: pretrain or distil it before use (`04_distill.py train`).",
    ("longformer", "long-documents"), ("longformer",), similarity=False)


# what the card says of each similarity_fn_name a model is saved with (config_sentence_transformers.json)
SIMILARITY = {
    "cosine": "cosine (`model.similarity`, as its loss compares vectors and 05 ranks them)",
    "dot": "dot product (`model.similarity`, as its loss compares vectors and 05 ranks them)",
    "euclidean": "negative L2 distance (`model.similarity`, as its loss compares vectors and 05 ranks them; "
                 "cosine would rank otherwise)",
    None: "not stated: not trained for similarity (sentence-transformers compares by cosine)",
}


def hub_name(name):
    """``name`` where it is a valid hub repository name (``owner/model`` or ``model``, at most 96 characters of
    letters, digits, ``-``, ``_`` and ``.``), else None: the one check of a value that enters a card's front matter
    or a link to the hub from outside (another card's ``base_model``, a ``--model`` name)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id
    if not isinstance(name, str):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


# what reading another model's card may raise: YAML that does not parse (or holds a key that is a list), front
# matter that is not a mapping or whose keys are not strings, bytes that are not UTF-8
CARD_ERRORS = (OSError, ValueError, TypeError, yaml.YAMLError)


def declared_base_model(path, say=print):
    """The ``base_model`` a model card (a folder's README.md) declares, where it is a hub name; else None. A card
    that cannot be read is a note through ``say``, not a failure: the card is only read to name the hub model a
    new card starts from."""
    try:
        with open(path, "rb") as f:
            text = f.read(CARD_BYTES + 1)
        if len(text) > CARD_BYTES:
            raise ValueError(f"longer than {CARD_BYTES >> 20} MB")
        from huggingface_hub.utils import logging as hub_logging
        verbosity = hub_logging.get_verbosity()
        hub_logging.set_verbosity_error()  # its warning that a card has no front matter: that is no fault
        try:
            found = ModelCard(text.decode("utf-8"), ignore_metadata_errors=True).data.base_model
        finally:
            hub_logging.set_verbosity(verbosity)
    except CARD_ERRORS as e:
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        say(f"note: {path}: its model card cannot be read ({type(e).__name__}{': ' + reason if reason else ''}); "
            "the new card names no base_model")
        return None
    if found is not None and hub_name(found) is None:
        say(f"note: {path}: its base_model is not a hub name ({repr(found)[:60]}); the new card names none")
    return hub_name(found)


CARD_BYTES = 1 << 20  # a card read for its base_model: the hub's own cards are a few KB


def base_model(name_or_path, say=print):
    """The hub model a model starts from, for the card's ``base_model``: ``name_or_path`` itself where it is a hub
    name, the ``base_model`` the folder's own card declares where it is a folder (``declared_base_model``), else
    None."""
    if name_or_path is None:
        return None
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, "README.md")
        return declared_base_model(path, say) if os.path.isfile(path) else None
    return hub_name(name_or_path)


def hub_language(language):
    """An ISO 639 code for the card's ``language`` from what a dump's ``xml:lang`` says (``fi``, ``en``,
    ``zh-classical`` → ``zh``), or None."""
    code = str(language or "").split("-")[0].lower()
    return code if re.fullmatch(r"[a-z]{2,3}", code) else None


def _name(where):
    """A model folder's name with its parent's (``RUN/model``, ``RUN/epoch_2``: the run names the model)."""
    parent, name = os.path.split(os.path.normpath(where))
    return f"{os.path.basename(parent)}/{name}" if os.path.basename(parent) else name


def _shown(name_or_path):
    """A model, folder or file as a card names it, never by a path of the machine that made the card: a folder by
    its name with its parent's (as a model folder's own card titles it), a file by its name, anything else (a hub
    name, a flag's value) as it is."""
    if os.path.isdir(name_or_path):
        return _name(name_or_path)
    return os.path.basename(name_or_path) if os.path.isfile(name_or_path) else name_or_path


def _table(rows, head=("", "")):
    """A Markdown table of cells that are Markdown already: text from outside is ``escape``d by the caller."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _value(value, shown=False):
    """A setting's or a metric's value as a table cell (``shown``: a path in it as ``_shown`` names it)."""
    if shown and isinstance(value, str):
        value = _shown(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "–"
    return escape(value)


def model_card(method, where, model, settings=(), training=None, validation=(), chosen=None, data=None,
               base=None, start=None, language=None, tags=(), citations=(), notes=()):
    """The ``huggingface_hub.ModelCard`` of a model folder.

    ``method``: a ``Method``, or an objective's name (a card without a paper); ``where``: the folder as
    a user names it (the usage examples load it); ``model``: {architecture, model_type, layers, dimensions,
    parameters, pooling, normalize, max_length};
    ``settings``: (flag, value) pairs of the training command; ``training``: {script, steps, epoch, processes,
    precision, commit, versions}; ``validation``: the log's validation records, ``chosen`` the one whose model this
    is (or None); ``data``: ``data_summary``'s dict; ``base``: the hub ``base_model``, ``start`` the folder or name it
    started from; ``tags``, ``citations``, ``notes``: more of each for this model."""
    if start:
        start = _shown(start)
    m = method if isinstance(method, Method) else Method(  # an objective that declares no method
        f"`{method}` objective", f"fine-tuned with the `{method}` objective registered with docembed's 03_train.py.",
        (method,), ())
    pipeline = "sentence-similarity" if m.similarity else "feature-extraction"
    card_data = ModelCardData(
        library_name="sentence-transformers", pipeline_tag=pipeline, base_model=hub_name(base),
        language=hub_language(language),
        tags=list(dict.fromkeys(["sentence-transformers", "feature-extraction", pipeline, "docembed",
                                 *m.tags, *tags])))
    pooling = {"cls": "the [CLS] token's last hidden state",
               "mean": "the mean of the last hidden states over the attention mask"}[model["pooling"]]
    sections = [
        f"# {escape(_name(where))}: {m.title}",
        f"A [sentence-transformers](https://www.sbert.net) model of {model['dimensions']} dimensions"
        f"{', from ' + escape(start) + ',' if start else ''} {m.what}",
        "## Model details\n\n" + _table([
            ("method", m.title),
            ("architecture", f"{model['architecture']} ({model['model_type']}, {model['layers']} layers)"),
            ("base model", escape(start) if start else "none (a new, randomly initialised model)"),
            ("pooling", f"{model['pooling']}: {pooling}"),
            ("normalised", "yes (unit vectors: cosine = dot product)" if model["normalize"] else "no"),
            ("maximum length", f"{model['max_length']} tokens"),
            ("similarity", SIMILARITY[model.get("similarity")]),
            ("dimensions", model["dimensions"]),
            ("parameters", f"{model['parameters']:,}"),
            ("input", m.inputs),
        ], ("", "")) + "".join(f"\n\n{note}" for note in notes),
    ]
    if training is not None:
        sections.append(_training(training, settings, data))
    if validation:
        sections.append(_validation(validation, chosen))
    sections.append(_usage(where, model))
    bibtex = [CITATIONS[key] for key in dict.fromkeys((*m.citations, *citations))]
    sections.append("## Citation\n\n" + "\n\n".join(f"```bibtex\n{entry}\n```" for entry in bibtex))
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def _training(training, settings, data):
    processes = f"{training['processes']} process" + ("es" if training["processes"] != 1 else "")
    precision = "in float32" if training["precision"] == "no" else f"under {training['precision']} mixed precision"
    versions = "".join(f", {k} {v}" for k, v in (training.get("versions") or {}).items())
    lines = [f"## Training\n\nTrained by docembed's `{training['script']}` for {training['steps']} optimizer steps "
             f"(epoch {training['epoch']:g}) on {processes} {precision}; docembed commit "
             f"`{training.get('commit') or 'unknown'}`{versions}.",
             "Settings (flags of the training command):\n\n" + _table(
                 [(f"`--{k.replace('_', '-')}`", _value(v, shown=True)) for k, v in settings], ("flag", "value"))]
    if data:
        lines.append(_data(data))
    return "\n\n".join(lines)


ROWS = 20  # files listed from a manifest's inputs; the others are counted


def _files(inputs):
    """A manifest's ``inputs`` ({path: SHA-256}, text from outside) as a table of file names and hashes, at most
    ``ROWS`` rows."""
    rows = [(escape(os.path.basename(p)), escape(h, 64)) for p, h in list(inputs.items())[:ROWS]]
    if len(inputs) > ROWS:
        rows.append((f"… and {len(inputs) - ROWS:,} more", ""))
    return _table(rows, ("file", "SHA-256"))


def _data(data):
    """The data directory's section: every value comes from its manifest (and its corpus's), text from outside."""
    text = [f"### Data\n\nThe data directory {escape(_shown(data['path']))}"
            + (f", written by {escape(data['script'])}{' ' + escape(data['command']) if data.get('command') else ''}"
               if data.get("script") else " (made by hand: no manifest)")
            + (f" at commit {escape(data['commit'], 64)}" if data.get("commit") else "") + "."]
    if data.get("inputs"):
        text.append("Its inputs:\n\n" + _files(data["inputs"]))
    if data.get("source"):
        source = data["source"]
        text.append(f"They come from {escape(source['script'])}"
                    + (f" (language {escape(source['language'], 32)})" if source.get("language") else "")
                    + (" reading:\n\n" + _files(source["inputs"]) if source.get("inputs") else "."))
    if data.get("counts"):
        counts = ", ".join(f"{escape(k.replace('_', ' '), 64)} {v:,}" for k, v in list(data["counts"].items())[:ROWS]
                           if isinstance(v, int) and not isinstance(v, bool) and v)
        if counts:
            text.append(f"Counts: {counts}.")
    if data.get("teachers"):
        text.append("Teachers (`04_distill.py teachers`): " + ", ".join(
            f"{k.replace('_', ' ')} {_value(v, shown=True)}" for k, v in data["teachers"].items()) + ".")
    return "\n\n".join(text)


def _validation(records, chosen):
    names = list(dict.fromkeys(k for r in records for k in r if k not in ("step", "epoch")))
    rows = [[r["step"], f"{r['epoch']:g}", *(_value(r.get(k)) for k in names)] + (["←" if r is chosen else ""]
                                                                                  if chosen is not None else [])
            for r in records]
    head = ["step", "epoch", *(escape(k, 64) for k in names)] + (["this model"] if chosen is not None else [])
    return "## Validation\n\nEvery validation of the run up to this model (`log.jsonl`):\n\n" + _table(rows, head)


def _usage(where, model):
    """The usage snippets, ``where`` a Python string literal in them (``repr``: one line, any character it holds
    escaped, so that no path ends the code block)."""
    mask = 'batch["attention_mask"]'
    imports = "from transformers import AutoModel, AutoTokenizer"
    pool = ("embeddings = hidden[:, 0]" if model["pooling"] == "cls" else
            f"embeddings = (hidden * {mask}[..., None]).sum(1) / {mask}.sum(1)[:, None]")
    if model["normalize"]:
        imports = "import torch\n" + imports
        pool += "\nembeddings = torch.nn.functional.normalize(embeddings, dim=-1)"
    return (f"## Usage\n\nFor `texts`, a list of strings; with sentence-transformers (the pooling, normalisation "
            f"and length saved with it):\n\n"
            f"```python\nfrom sentence_transformers import SentenceTransformer\n"
            f"model = SentenceTransformer({where!r})\nembeddings = model.encode(texts)\n```\n\n"
            f"With transformers:\n\n```python\n{imports}\n"
            f"tokenizer, model = AutoTokenizer.from_pretrained({where!r}), AutoModel.from_pretrained({where!r})\n"
            f"batch = tokenizer(texts, padding=True, truncation=True, max_length={model['max_length']}, "
            f"return_tensors=\"pt\")\nhidden = model(**batch).last_hidden_state\n{pool}\n```")


def model_facts(encoder, max_length, similarity=None):
    """The card's ``model`` dict of an ``Encoder``: its transformer's parameters only (a head saved beside it is
    not counted), and the ``similarity`` its vectors are compared by (its ``similarity_fn_name``)."""
    config = encoder.transformer.config
    return {"architecture": type(encoder.transformer).__name__, "model_type": config.model_type,
            "layers": getattr(config, "num_hidden_layers", "?"), "dimensions": encoder.dimension,
            "parameters": sum(p.numel() for p in encoder.transformer.parameters()), "pooling": encoder.pooling,
            "normalize": bool(encoder.normalize), "max_length": int(max_length), "similarity": similarity}


def data_summary(path, manifest, source=None):
    """The card's ``data`` dict from a data directory's manifest (and, where there is one, the manifest beside its
    first input: 01's, naming the corpus it read)."""
    summary = {"path": path, "script": manifest.get("script"), "command": (manifest.get("args") or {}).get("command"),
               "commit": manifest.get("git_commit"), "inputs": manifest.get("inputs") or {},
               "counts": manifest.get("counts") or {}}
    if source:
        summary["source"] = {"script": source.get("script"), "inputs": source.get("inputs") or {},
                             "language": source.get("language")}
    return summary


def conversion_card(where, encoder, source, max_length, window, commit, base):
    """The card of a model ``04_distill.py convert-long`` made from ``source``; ``base``: the hub model it comes
    from (``base_model``, read before the conversion)."""
    return model_card(LONGFORMER, where, model_facts(encoder, max_length), base=base, start=source,
                      notes=[f"Made by docembed's `04_distill.py convert-long` from {escape(_shown(source))} "
                             f"(`--max-length {max_length} --window {window}`: a sliding window of {window} tokens in "
                             f"every layer) at commit `{commit or 'unknown'}`."])
