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

Any precision but float32 prints, and where the command writes a manifest records, the mean cosine of its vectors
to float32's over the first ``quantize.AGREEMENT_SAMPLE`` texts.
"""

from common.io import InputError

PRECISIONS = ("float32", "bf16", "int8")


def native_bf16():
    """Whether this CPU multiplies bfloat16 natively (avx512_bf16 or AMX tiles), as oneDNN's bfloat16 kernels
    need to run faster than float32."""
    import torch
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def check(precision, flag, device_type):
    """Refuses, in one line naming ``flag``, a precision this device cannot run well; called before any slow work
    (and again by ``encoder_for``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    if precision == "bf16" and device_type == "cuda":
        raise InputError(f"{flag}: on a GPU every embedding already runs in bfloat16; leave the flag out")
    if precision == "bf16" and device_type == "cpu" and not native_bf16():
        raise InputError(f"{flag}: this CPU has no native bfloat16 (avx512_bf16 or AMX), where bfloat16 runs "
                         "slower than float32; embed in float32 or --int8")


def check_here(precision):
    """``check`` of ``--PRECISION`` for the device a command embeds on (a GPU where there is one)."""
    import torch
    check(precision, f"--{precision}", "cuda" if torch.cuda.is_available() else "cpu")


def encoder_for(encoder, precision, flag):
    """The encoder that embeds in ``precision``: the one given (float32, bf16), or its int8 copy. A precision this
    device cannot run well is refused in one line naming ``flag``."""
    check(precision, flag, next(encoder.parameters()).device.type)
    if precision == "int8":
        from common.models.quantize import int8_for
        return int8_for(encoder, flag)
    return encoder


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
