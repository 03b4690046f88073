"""The CPU's speed work, one layer beside the model: ``install(model)`` puts it into a loaded model, and training calls
it on a CPU only (a GPU runs the model as transformers wrote it). Every change computes what the model computes
(tests/test_cpu.py holds each to PyTorch's or transformers' own), faster on a CPU, one mechanism a module:

- dropout (``cpu_dropout.py``): ``nn.Dropout`` becomes ``Dropout``, the same Bernoulli(p) mask drawn from NumPy's
  SFC64 in blocks over torch's threads, not PyTorch's ``bernoulli_``;
- attention dropout (``cpu_attention.py``): where SDPA would leave its fused kernel for the composite one,
  ``DroppedAttention`` (softmax, mask and backward written out), through the attention function ``ATTENTION``; a
  Longformer's too (``dropped_attention``);
- packed rows (``cpu_packing.py``): ``Encoder.forward`` (each padded group through the transformer) becomes
  ``PackedEncoder``'s: every group's texts laid end to end in one row (``Packing``), their word vectors looked up
  once (``WordLookup``);
- the masked LM's last layer (``cpu_masked_lm.py``): ``MaskedLM.forward`` (logits at every position) becomes
  ``MaskedPositionsLM``'s: the last layer's queries, feed-forward block and vocabulary projection at the masked
  positions only.

Why each is faster, with its figures: docs/benchmarks.md ("CPU dropout", "Packed rows", "One word lookup a step",
"Masked-LM training"). Embedding's thread count on a CPU is ``common/models/threads.py``.
"""

from torch import nn

from common.models.cpu_attention import ATTENTION, dropped_attention, register_attention
from common.models.cpu_dropout import Dropout
from common.models.cpu_masked_lm import MaskedPositionsLM, bert_last_layer
from common.models.cpu_packing import PackedEncoder, packs
from common.models.encoder import Encoder
from common.models.masked_lm import MaskedLM


def install(model):
    """Put the CPU's speed work into ``model`` (an ``Encoder``, a ``MaskedLM`` or any module holding them), in
    place; returns it. Saved folders stay what transformers saves: plain SDPA attention, ``nn.Dropout``'s
    configuration."""
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
    encoders = [model] if isinstance(model, Encoder) else [m for m in model.modules() if isinstance(m, Encoder)]
    for encoder in encoders:
        if type(encoder) is Encoder and packs(encoder.transformer):
            encoder.__class__ = PackedEncoder
    if type(model) is MaskedLM and bert_last_layer(model.mlm.base_model):
        model.__class__ = MaskedPositionsLM
    return model
