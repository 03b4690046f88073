"""The CPU's speed work, chosen where the model is built: ``install(model)`` puts its kernels into a loaded model, and
03 calls it on a CPU only (a GPU runs the model as transformers wrote it), then packs its batches' texts where
``packs_rows`` says the model reads them so. Every kernel computes what the model computes (tests/test_cpu.py holds
each to PyTorch's or transformers' own), faster on a CPU, one mechanism a module:

- dropout (``cpu_dropout.py``): each ``nn.Dropout`` module is replaced by ``Dropout``, the same Bernoulli(p) mask
  drawn from NumPy's SFC64 in blocks over torch's threads, not PyTorch's ``bernoulli_``;
- attention dropout (``cpu_attention.py``): where SDPA would leave its fused kernel for the composite one,
  ``DroppedAttention`` (softmax, mask and backward written out), through the attention function ``ATTENTION``; a
  Longformer's too (``dropped_attention``);
- packed rows (``cpu_packing.py``): a batch's texts laid end to end in one row (``tokens.Packed``, made by
  ``collate``), which ``Encoder.embed_row`` runs with the attention plan ``Packing`` and one word lookup
  (``WordLookup``);
- the masked LM's last layer (``cpu_masked_lm.py``): ``MaskedLM.masked_positions``, the last layer's queries,
  feed-forward block and vocabulary projection at the masked positions only.

Why each is faster, with its figures: docs/benchmarks.md ("CPU dropout", "Packed rows", "One word lookup a step",
"Masked-LM training"). Embedding's thread count on a CPU is ``common/models/threads.py``.

The attention, the packed rows and the masked LM's last layer rely on transformers' internals: its attention
interface, the keywords a model hands down to its attention function, BERT's ``encoder.layer`` and the parts of its
last layer. Each mechanism's module names what it relies on (``differences``); where a release of transformers
differs, ``install`` leaves the whole model as transformers wrote it, with one note.
"""

from torch import nn

from common.models import cpu_attention, cpu_masked_lm, cpu_packing
from common.models.cpu_attention import ATTENTION, dropped_attention, register_attention
from common.models.cpu_dropout import Dropout
from common.models.cpu_masked_lm import bert_last_layer
from common.models.cpu_packing import packs
from common.models.encoder import Encoder
from common.models.masked_lm import MaskedLM


def _encoders(model):
    return [model] if isinstance(model, Encoder) else [m for m in model.modules() if isinstance(m, Encoder)]


def differences(model):
    """What the mechanisms would rely on, for ``model``, that this release of transformers lacks or has changed, one
    phrase each (none: an empty list): the attention interface (``cpu_attention.differences``), each packable
    encoder's way to its attention (``cpu_packing.differences``) and a BERT masked LM's layers
    (``cpu_masked_lm.differences``)."""
    found = cpu_attention.differences()
    for encoder in _encoders(model):
        if type(encoder) is Encoder and cpu_packing.packable(encoder.transformer):
            found += cpu_packing.differences(encoder.transformer)
    if type(model) is MaskedLM and model.mlm.base_model.config.model_type == "bert":
        found += cpu_masked_lm.differences(model.mlm.base_model)
    return list(dict.fromkeys(found))


def install(model, say=print):
    """Put the CPU's kernels into ``model`` (an ``Encoder``, a ``MaskedLM`` or any module holding them), in place:
    its dropout modules, its attention function, a BERT masked LM's ``masked_positions``; returns it. Saved folders
    stay what transformers saves: plain SDPA attention, ``nn.Dropout``'s configuration.

    Where transformers' internals that it relies on differ (``differences``: a release after or before the one it
    was written against), it leaves the model as transformers wrote it, slower but computing what transformers
    computes (its dropout masks drawn by PyTorch), and ``say`` receives one note naming what differs."""
    found = differences(model)
    if found:
        import transformers
        say(f"note: the CPU's speed layer is left out, the model runs as transformers wrote it (slower; PyTorch's "
            f"dropout masks): transformers {transformers.__version__} differs in what the layer relies on: "
            f"{'; '.join(found)}")
        return model
    register_attention()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, child.inplace).train(child.training))
    for module in model.modules():  # outermost first: setting a model sets the models inside it
        if getattr(module, "_supports_attention_backend", False) and \
                getattr(getattr(module, "config", None), "_attn_implementation", None) == "sdpa":
            module.set_attn_implementation(ATTENTION)
        if type(module).__name__ == "LongformerSelfAttention":
            module.dropped_attention = dropped_attention  # common/models/sliding_window.py calls it
    if type(model) is MaskedLM:
        model.masked_positions = bert_last_layer(model.mlm.base_model)
    return model


def packs_rows(model):
    """Whether every encoder of ``model`` reads its batches' texts packed in one row (``Encoder.embed_row``): of an
    architecture ``cpu_packing`` packs, with the attention ``install`` put in."""
    encoders = _encoders(model)
    return bool(encoders) and all(type(e) is Encoder and packs(e.transformer) for e in encoders)
