"""How a command embeds on a CPU: float32, bfloat16 autocast, or an int8 copy of the model (``quantize.py``).

| precision | what runs                                                          | where                              |
|-----------|--------------------------------------------------------------------|------------------------------------|
| float32   | the model as loaded                                                | anywhere (on a GPU ``embed``       |
|           |                                                                    | always autocasts to bfloat16)      |
| bf16      | the same weights under ``torch.autocast("cpu", torch.bfloat16)``:  | CPUs with native bfloat16 products |
|           | matrix products in bfloat16 (autocast's list), the operations      | (avx512_bf16 or AMX); refused      |
|           | between them in the dtype of their inputs, the pooled vectors cast | elsewhere, where it is slower, and |
|           | to float32                                                         | on a GPU, where it is the default  |
| int8      | a copy with dynamically quantised Linear layers                    | a CPU                              |

``encoder_for`` gives the encoder that embeds in a precision: the float32 one itself, a view of it that ``embed`` runs
under bf16 autocast (``Encoder.bf16``: a shallow copy sharing every weight), or an int8 copy. Any precision but
float32 prints, and where the command writes a manifest records, the mean cosine of its vectors to float32's over
the first ``AGREEMENT_SAMPLE`` texts (``agreement``). A training run's precision is Accelerate's; ``training_line``
says it at the run's start, and its losses compute in float32 under it (``in_fp32``).
"""

import copy
import functools

from common.io import InputError

AGREEMENT_SAMPLE = 256  # texts embedded again in float32 to say how far int8 or bf16 vectors are from float32's

PRECISIONS = ("float32", "bf16", "int8")


def native_bf16():
    """Whether this CPU multiplies bfloat16 natively (avx512_bf16 or AMX tiles), as oneDNN's bfloat16 kernels
    need to run faster than float32."""
    import torch
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def check(precision, device_type):
    """Refuses, in one line naming the precision's flag, a precision this device cannot run well; called before any
    slow work (and again by ``encoder_for``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    if precision == "bf16" and device_type == "cuda":
        raise InputError("--bf16: on a GPU every embedding already runs in bfloat16; leave the flag out")
    if precision == "bf16" and device_type == "cpu" and not native_bf16():
        raise InputError("--bf16: this CPU has no native bfloat16 (avx512_bf16 or AMX), where bfloat16 runs slower "
                         "than float32; embed in float32 or --int8")


def check_here(precision):
    """``check`` for the device a command embeds on (a GPU where there is one); float32 needs no look at it."""
    if precision == "float32":
        return
    import torch
    check(precision, "cuda" if torch.cuda.is_available() else "cpu")


def encoder_for(encoder, precision):
    """The encoder that embeds in ``precision``: the float32 one given, its bf16 view, or its int8 copy
    (``quantize.quantize_int8``, whose refusals, a GPU among them, become one line). The one given is unchanged."""
    check(precision, next(encoder.parameters()).device.type)
    if precision == "bf16":
        view = copy.copy(encoder)
        view.bf16 = True
        return view
    if precision == "int8":
        from common.models.quantize import quantize_int8
        try:
            return quantize_int8(encoder)
        except ValueError as e:
            raise InputError(f"--int8: {e}") from None
    return encoder


def agreement(encoder, vectors, store, batch_size=64, batch_tokens=None, sample=AGREEMENT_SAMPLE):
    """The mean cosine between ``vectors`` (of ``store``'s texts in order, made in a lower precision) and the
    float32 ``encoder``'s vectors of the same texts, over the first ``sample`` texts."""
    from common.models.inference import embed
    from common.models.quantize import mean_cosine
    rows = range(min(len(store), sample))
    return mean_cosine(vectors[:len(rows)], embed(encoder, store, batch_size, batch_tokens, rows=rows))


def in_fp32(loss):
    """Compute ``loss`` in float32 under bf16/fp16 autocast: autocast off, floating-point tensor arguments cast up.
    Every training loss is wrapped: a difference of two distances (triplet margin), a softmax over a batch or a
    cosine near 1 loses its signal in half precision (bf16 keeps 8 significant bits), while the cast is free in
    float32 (``.float()`` of a float32 tensor is the tensor itself), so CPU float32 training is unchanged."""
    import torch

    @functools.wraps(loss)
    def wrapper(*args, **kwargs):
        device = next((a.device.type for a in args if torch.is_tensor(a)), "cpu")
        with torch.autocast(device_type=device, enabled=False):
            return loss(*[a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args], **kwargs)
    return wrapper


def add_precision_arguments(p, what):
    """--bf16 and --int8 (``args.precision``: float32 where neither is given) of a command that embeds with
    ``what``."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--bf16", dest="precision", action="store_const", const="bf16", default="float32",
                       help=f"embed with {what} under bfloat16 autocast, on a CPU with native bfloat16 (avx512_bf16 "
                            "or AMX; refused elsewhere, and on a GPU, where embedding is always bfloat16); the mean "
                            "cosine of the documents' vectors to float32's is printed (and kept in the manifest "
                            "where the command writes one)")
    group.add_argument("--int8", dest="precision", action="store_const", const="int8",
                       help=f"embed with an int8 copy of {what} (dynamic quantisation of its Linear layers, CPU "
                            "only); the mean cosine of the documents' vectors to float32's (about 0.99) is printed "
                            "(and kept in the manifest where the command writes one); docs/benchmarks.md gives the "
                            "metric change")


def training_line(accelerator):
    """The precision a run trains under, as Accelerate resolved it (``accelerate launch --mixed_precision``,
    ``accelerate config`` or ACCELERATE_MIXED_PRECISION), and the device: one line for the log's start."""
    import torch
    device = accelerator.device
    where = f"{device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    mode = accelerator.mixed_precision
    if mode == "no":
        return f"precision: fp32 on {where}"
    scaling = ", dynamic loss scaling" if mode == "fp16" else ""
    return (f"precision: {mode} mixed precision on {where} (autocast{scaling}; weights, optimizer state, pooled "
            "vectors and losses in float32)")
