"""int8 embedding on a CPU: a copy of an encoder whose ``nn.Linear`` layers are dynamically quantised, and how far
its vectors are from the float32 model's.

``quantize_int8(encoder)`` (an ``Encoder`` from ``loading.load_encoder``) returns a new encoder; the one given is
left as it was, so nothing is quantised unless a command asks for it. Every ``nn.Linear`` (attention projections,
feed-forward layers, BERT's unused pooler) becomes PyTorch's ``DynamicQuantizedLinear``: int8 weights with one
symmetric scale per output row, activations quantised to uint8 per tensor at run time, int8 matrix products,
float32 out; the settings of ONNX Runtime's dynamic int8 export for AVX-512 VNNI (optimum's
``AutoQuantizationConfig.avx512_vnni``, which sentence-transformers' ``export_dynamic_quantized_onnx_model``
uses). Word, position and token-type embeddings, LayerNorm, attention scores and softmax stay float32.

Activations keep their full 8 bits where the CPU has VNNI (``vpdpbusd`` adds uint8 × int8 products into int32).
PyTorch's own x86 default quantises them to 7 bits (``reduce_range``), because without VNNI the AVX2 product
instruction (``vpmaddubsw``) saturates its 16-bit pair sums; here the 7 bits are kept only on such CPUs. On
all-MiniLM-L6-v2 (300 arXiv abstracts at 256 tokens, mean cosine to float32): one scale per tensor and 7-bit
activations (``quantize_dynamic``'s defaults) 0.917; one scale per row, 7 bits 0.980; one scale per row, 8 bits
0.994. Most of the loss is in the feed-forward output layer, whose input (GELU's output) has a long tail.

The copy runs through ``inference.embed`` unchanged: on a CPU ``embed`` takes the padded path (``Encoder.embed``,
transformers' SDPA attention), which calls each Linear as a module and reads no weight of it, and
``next(encoder.parameters())``, which ``embed`` uses to find the device, is the word embedding's float32 weight.
The packed path CPU training takes (``Encoder.embed_row``) also calls the Linear layers only as modules; an int8 copy
is for inference (it has no gradient).

``mean_cosine(a, b)``: the mean cosine similarity of row-aligned vector arrays (for instance int8 and float32
embeddings of the same texts), a block of rows at a time, so a memory-mapped NPY of any size can be compared.

PyTorch 2.10+ marks ``torch.ao.quantization`` as deprecated in favour of torchao (not a dependency of this project);
its deprecation warnings are silenced here, and the function still runs on the installed version
(``tests/test_quantize.py``).
"""

import copy
import warnings

import numpy as np
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

# quantised engines that run dynamic int8 Linear layers on a CPU (x86: fbgemm / x86; ARM: qnnpack)
_ENGINES = ("fbgemm", "x86", "qnnpack")


def full_range_ok():
    """Whether activations can be quantised to the full 8 bits on this CPU: x86 with VNNI (AVX-512 VNNI or
    AVX-VNNI), where int8 products add into int32 without saturating. False elsewhere on x86 and wherever PyTorch
    cannot tell."""
    check = getattr(torch.cpu, "_is_vnni_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def quantize_int8(encoder, per_channel=True, full_range=None):
    """A copy of ``encoder`` (an ``Encoder``, or any ``nn.Module``) in evaluation mode whose ``nn.Linear`` layers
    are dynamically quantised to int8 (``torch.ao.quantization.quantize_dynamic``); ``encoder`` is not changed.

    ``per_channel``: one weight scale per output row (True) or per tensor. ``full_range``: activations at 8 bits
    (True) or 7 (False); None: 8 where ``full_range_ok()``. CPU only: an encoder with a parameter or buffer on
    another device is a ValueError (PyTorch's dynamic int8 kernels exist for the CPU alone), as is a model without
    a Linear layer, or a PyTorch build without a quantised CPU engine."""
    devices = {p.device.type for p in encoder.parameters()} | {b.device.type for b in encoder.buffers()}
    if devices - {"cpu"}:
        raise ValueError(f"int8 quantisation runs on the CPU only; this encoder is on {', '.join(sorted(devices))} "
                         "(move it with .cpu() first, or embed in float32 / bfloat16 on the GPU)")
    if not any(isinstance(m, nn.Linear) for m in encoder.modules()):
        raise ValueError("int8 quantisation: the model has no nn.Linear layer to quantise")
    engines = torch.backends.quantized.supported_engines
    if not any(e in engines for e in _ENGINES):
        raise ValueError(f"int8 quantisation: this PyTorch build has no quantised CPU engine (it has {engines})")
    model = copy.deepcopy(encoder).eval()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"(?s).*torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"(?s).*quantized tensor creation functions .* are deprecated")
        from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic
        qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
        # the int8 Linear each nn.Linear becomes: activations at 8 bits, or PyTorch's own at 7
        linear = FullRangeLinear if (full_range_ok() if full_range is None else full_range) else DynamicLinear
        model = quantize_dynamic(model, {nn.Linear: qconfig}, dtype=torch.qint8, mapping={nn.Linear: linear},
                                 inplace=True)
    return model


class FullRangeLinear(DynamicLinear):
    """PyTorch's dynamic int8 Linear with activations quantised to 8 bits (its own forward asks for 7:
    ``reduce_range=True``)."""

    def forward(self, x):
        if self._packed_params.dtype != torch.qint8:
            return super().forward(x)
        return torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params,
                                                  reduce_range=False).to(x.dtype)


def is_quantized_linear(module):
    """Whether ``module`` is a dynamically quantised Linear layer (what ``quantize_int8`` puts in place of each
    ``nn.Linear``)."""
    return isinstance(module, DynamicLinear)


def mean_cosine(a, b, block=65536):
    """The mean over rows of cos(a[i], b[i]) for two arrays of the same shape ``[N, d]`` (NumPy arrays, memory-
    mapped NPYs, or anything ``np.asarray`` reads), computed in float64 ``block`` rows at a time so that memory
    stays flat. A row of zeros has cosine 0 with any row. Arrays of different shapes, or with no rows, are a
    ValueError."""
    if a.shape != b.shape or len(a.shape) != 2:
        raise ValueError(f"mean_cosine: row-aligned [N, d] arrays needed, got shapes {a.shape} and {b.shape}")
    n = a.shape[0]
    if n == 0:
        raise ValueError("mean_cosine: no rows")
    total = 0.0
    for start in range(0, n, block):
        x = np.asarray(a[start:start + block], dtype=np.float64)
        y = np.asarray(b[start:start + block], dtype=np.float64)
        norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
        dots = np.einsum("ij,ij->i", x, y)
        total += float(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0).sum())
    return total / n
