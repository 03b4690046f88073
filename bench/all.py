"""Every model benchmark against the tool a user would otherwise run, in one command; writes bench/results.md.

    python bench/all.py                    # every case below; 3 interleaved rounds
    python bench/all.py --rounds 5 --only embed,embed-int8

Each measurement is a fresh process. Rounds interleave the two sides (ours first in odd rounds, theirs first in
even ones), so that load from other work on the machine falls on both alike; the table gives the median of each
side, the median of the per-round ratios and every round's ratio, with the load average around each round.

| case    | ours                                                   | theirs                                           |
|---------|--------------------------------------------------------|--------------------------------------------------|
| embed   | ``embed`` (05, 04, retrieval) on the arXiv sample's    | ``SentenceTransformer.encode``, same batch size  |
|         | abstracts, 256 tokens, --batch-size and --batch-tokens |                                                  |
| embed-small | the same, both sides at --small-batch (the batch   | the same                                         |
|         | size at which sentence-transformers is fastest on a CPU) |                                                |
| triplet | 03 --objective triplet, the demo's triplets            | SentenceTransformerTrainer + TripletLoss         |
| mnrl    | 03 --objective mnrl, arXiv title → abstract            | SentenceTransformerTrainer + MNRL (scale 20)     |
| mlm     | 03 --objective mlm, blocks of the arXiv sample's       | transformers' Trainer +                          |
|         | abstracts, 15 % masked, not whole words                | DataCollatorForLanguageModeling, same blocks     |
| embed-int8 | ``quantize_int8`` (common/models/quantize.py) +     | sentence-transformers' ONNX backend, its dynamic |
|         | ``embed``, as the embed row                            | int8 export for this CPU, at --onnx-batch        |
| long-embed | ``embed`` with the student (all-MiniLM-L6-v2 made a | ``SentenceTransformer.encode`` of the same       |
|         | Longformer by 04 convert-long: 4,096 tokens, window    | folder: transformers' ``LongformerModel``, mean  |
|         | 512) over --long-docs documents of mixed length        | pooling, same batch size                         |
| long-short | the same student on the embed row's texts (256      | its source all-MiniLM-L6-v2 through the same     |
|         | tokens, within half its window)                        | ``embed``                                        |
| long-train | 04 train (mse-contextual, --gradient-checkpointing as | the same command with ``Encoder.embed`` calling |
|         | the thesis) on documents of 4,096 tokens               | ``LongformerModel.forward`` (transformers')      |
| tiny-triplet, tiny-mnrl, tiny-mlm, tiny-embed | triplet, mnrl, mlm and embed on a tiny BERT | the same as the row |
|         | (bench/shared.py's TINY_SHAPE: 2 layers, hidden 64,    | named                                            |
|         | random weights, all-MiniLM-L6-v2's vocabulary) at      |                                                  |
|         | --tiny-batch × --tiny-length: the overhead rows, where |                                                  |
|         | what a side does around the model's arithmetic is most |                                                  |
|         | of its time; ours --log-every 10, its log's per-record |                                                  |
|         | rates (03's default; the real rows log every step)     |                                                  |

Same model (all-MiniLM-L6-v2; for mlm BertForMaskedLM from it; for the long rows the Longformer made from it),
loss, batch, token length and fp32 on both sides (int8 on both sides in embed-int8); the embeddings of the two
sides are compared (largest absolute difference; for embed-int8 each side's mean cosine to our float32 vectors of
the same texts). Training steps/s come from ``bench/train.py``'s measurement (the interval between consecutive
optimizer-step ends, data loading included, after --warm steps; long-train's after --long-warm).

The long rows' documents: document i joins 2^(i mod 6) consecutive abstracts of the arXiv sample (1 to 32, about
160 to 5,000 tokens, read up to 4,096): a sixth of them at each length, the median near 1,000 tokens
(``long_texts``; the settings give the quartiles). long-train's documents join abstracts up to at least 4,096
tokens, with random teacher vectors (bench/shared.py's ``ensure_distill``: speed does not depend on them).

How close each row comes to the machine: its model FLOP/s, 6 · N · tokens per training step and 2 · N · tokens per
embedded text, N = the encoder's parameters outside its embeddings (and outside BERT's unused pooler), tokens =
the non-padding tokens of the texts the step or the embedding is defined on (the same count for both sides: ours
embeds a triplet batch's repeated documents once, and its masked-LM head reads only the masked positions, so it
computes fewer FLOPs than it is credited with). Attention scores and the masked-LM vocabulary projection are not
counted. Beside it, the ceiling measured in every round in a fresh process: the best of 5 timed 2048 × 2048
``torch.mm`` in float32, in bfloat16 where the CPU has avx512_bf16 or AMX, and a dynamic int8 Linear of the same
size (PyTorch's fbgemm kernel, as quantize_int8 runs it).

sentence-transformers' ONNX backend needs optimum-onnx, whose only release requires transformers < 4.58; it runs
from its own folder put first on PYTHONPATH (bench/requirements-onnx.txt; --st-onnx). Its export for this CPU
(--onnx-config: arm64 on ARM, else avx512_vnni, avx512 or avx2 as the CPU's flags allow) is read from the file
sentence-transformers writes it to (``onnx_int8_file``: model_quint8_avx2.onnx for avx2, model_qint8_*.onnx for the
others).

The results name the CPU they were measured on (bench/shared.py's ``machine``: its model name, family and model
numbers, and which of the instruction sets the rows depend on it has, from /proc/cpuinfo), as the run prints it.

On a CUDA machine a GPU section follows: training tokens/s in bfloat16 and model FLOPs utilisation
(6 · parameters · tokens per second / the GPU's dense bf16 peak, 989 TFLOP/s for an H100) for MiniLM and a
BERT-base-sized model, and embedding tokens/s.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.shared import (RUN_SCRIPT, TINY_SHAPE, TRANSFORMERS_LONGFORMER, best_rate, build_model,  # noqa: E402
                          cpu_flags, embed_texts, embedder, ensure_distill, long_texts, machine, nonembedding,
                          run_side, step_tokens, token_counts, train_shape)

H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s of an H100 SXM


def timed(run, texts, warm, path, sync=None):
    """Documents/s of one call ``run(texts)`` after a warm-up call on ``warm`` texts (allocator, kernels, caches);
    the vectors are saved to ``path`` for the comparison of the two sides."""
    import numpy as np
    run(texts[:warm])
    if sync:
        sync()
    start = time.perf_counter()
    vectors = run(texts)
    if sync:
        sync()
    seconds = time.perf_counter() - start
    np.save(path, vectors)
    return {"rate": len(texts) / seconds}


def one_embed(side, args, case="embed"):
    """Documents/s of one side of ``case`` (embed, embed-small, tiny-embed), tokenisation included; the vectors are
    saved for the comparison."""
    import torch
    from bench.train import minilm
    texts = embed_texts(args.work, args.docs)
    batch = {"embed": args.batch, "embed-small": args.small_batch, "tiny-embed": args.tiny_batch}[case]
    length = args.tiny_length if case == "tiny-embed" else args.length
    device = "cuda" if torch.cuda.is_available() else "cpu"
    run = embedder(side, minilm(), length, batch, args.batch_tokens, device)
    return timed(run, texts, batch, os.path.join(args.work, f"{case}-{side}.npy"),
                 torch.cuda.synchronize if device == "cuda" else None)


# sentence-transformers' export_dynamic_quantized_onnx_model saves onnx/model_{weights}_{config}.onnx, where
# {weights} is the weight type of optimum's AutoQuantizationConfig.{config}(is_static=False), lower-cased: unsigned
# 8-bit for avx2, signed for the others (tests/test_bench_onnx.py holds the names to theirs)
ONNX_INT8_WEIGHTS = {"arm64": "qint8", "avx2": "quint8", "avx512": "qint8", "avx512_vnni": "qint8"}


def onnx_config(flags=None, arch=None):
    """The dynamic int8 ONNX export of sentence-transformers that fits a CPU (``flags``: its /proc/cpuinfo flags,
    ``arch``: ``platform.machine()``; this machine's by default): arm64 on ARM; on x86 avx512_vnni, avx512 or avx2,
    the widest the flags allow."""
    flags = cpu_flags() if flags is None else flags
    arch = platform.machine() if arch is None else arch
    if arch.lower() in ("aarch64", "arm64"):
        return "arm64"
    return next((name for name, flag in (("avx512_vnni", "avx512_vnni"), ("avx512", "avx512f")) if flag in flags),
                "avx2")


def onnx_int8_file(config):
    """The file, in the exported folder, of sentence-transformers' dynamic int8 export for ``config``."""
    return f"onnx/model_{ONNX_INT8_WEIGHTS[config]}_{config}.onnx"


def one_embed_int8(side, args):
    """Documents/s of one int8 side, tokenisation included; ours also saves its float32 vectors of the same texts
    (outside the timed region), against which both sides' mean cosine is read."""
    import numpy as np
    from bench.train import minilm
    texts = embed_texts(args.work, args.docs)
    if side == "ours":
        from common.models.inference import embed
        from common.models.loading import load_encoder
        from common.models.quantize import quantize_int8
        from common.models.tokens import TokenStore
        encoder, tokenizer, settings = load_encoder(minilm(), max_length=args.length)
        int8 = quantize_int8(encoder)

        def run(texts):
            return embed(int8, TokenStore(tokenizer, texts, settings["max_length"]), args.batch, args.batch_tokens)
        batch = args.batch
    else:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.backend import export_dynamic_quantized_onnx_model
        folder, config = os.path.join(args.work, "st-onnx-minilm"), args.onnx_config
        name = onnx_int8_file(config)
        if not os.path.exists(os.path.join(folder, name)):  # exported once, outside the timed region
            exported = SentenceTransformer(minilm(), backend="onnx", device="cpu")
            exported.save(folder)
            export_dynamic_quantized_onnx_model(exported, config, folder)
            if not os.path.exists(os.path.join(folder, name)):
                found = sorted(f for f in os.listdir(os.path.join(folder, "onnx")) if f.endswith(".onnx"))
                sys.exit(f"error: embed-int8: sentence-transformers' {config} export wrote {', '.join(found)} in "
                         f"{folder}/onnx, not {name}")
        st = SentenceTransformer(folder, backend="onnx", device="cpu", model_kwargs={"file_name": name})
        st.max_seq_length = args.length
        batch = args.onnx_batch

        def run(texts):
            return st.encode(texts, batch_size=batch, convert_to_numpy=True)
    found = timed(run, texts, batch, os.path.join(args.work, f"embed-int8-{side}.npy"))
    if side == "ours":
        np.save(os.path.join(args.work, "embed-int8-fp32.npy"),
                embed(encoder, TokenStore(tokenizer, texts, settings["max_length"]), args.batch, args.batch_tokens))
    return found


LONG_LENGTH, LONG_WINDOW = 4096, 512  # 04 convert-long's defaults: the Longformer paper's and the thesis's


def long_run(args):
    """The long rows' folder: all-MiniLM-L6-v2 converted by 04 convert-long (``student``), documents of at least
    LONG_LENGTH tokens (``data``) and random teacher vectors (``teach``) for 04 train."""
    from bench.train import minilm
    return ensure_distill(os.path.join(args.work, "long"), minilm(),
                          {"distill_docs": 16, "distill_length": LONG_LENGTH, "distill_window": LONG_WINDOW, "pv": 100})


def one_long_embed(side, args):
    """Documents/s of one side over ``long_texts``, tokenisation included; the vectors are saved."""
    texts = long_texts(args.work, args.long_docs)
    run = embedder(side, os.path.join(long_run(args), "student"), LONG_LENGTH, args.long_batch, args.batch_tokens)
    return timed(run, texts, 2, os.path.join(args.work, f"long-embed-{side}.npy"))


def one_long_short(side, args):
    """Documents/s of ``embed`` on the embed row's texts at --length tokens: the student (ours) or its source
    all-MiniLM-L6-v2 (theirs); the vectors are saved."""
    from bench.train import minilm
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    texts = embed_texts(args.work, args.docs)
    model = os.path.join(long_run(args), "student") if side == "ours" else minilm()
    encoder, tokenizer, settings = load_encoder(model, pooling="mean", normalize=False, max_length=args.length)

    def run(texts):
        return embed(encoder, TokenStore(tokenizer, texts, settings["max_length"]), args.batch, args.batch_tokens)
    return timed(run, texts, args.batch, os.path.join(args.work, f"long-short-{side}.npy"))


def one_long_train(side, args):
    """04 train's steps/s on documents of LONG_LENGTH tokens, from its log.jsonl after --long-warm steps; theirs
    through TRANSFORMERS_LONGFORMER."""
    root = long_run(args)
    with tempfile.TemporaryDirectory() as out:
        prefix = ["-c", TRANSFORMERS_LONGFORMER + RUN_SCRIPT] if side == "theirs" else []
        subprocess.run([sys.executable, *prefix, "04_distill.py", "train", "--data", os.path.join(root, "data"),
                        "--teachers", os.path.join(root, "teach"), "--model", os.path.join(root, "student"),
                        "--out", out, "--max-length", str(LONG_LENGTH), "--batch-size", str(args.long_train_batch),
                        "--grad-accum", "1", "--warmup", "0", "--length-buckets", "0", "--gradient-checkpointing",
                        "--epochs", "1000", "--max-steps", str(args.long_steps), "--log-every", "1",
                        "--checkpoint-every", "0"],
                       cwd=ROOT, check=True, capture_output=True)
        with open(os.path.join(out, "log.jsonl")) as f:
            times = [1 / json.loads(line)["steps_per_s"] for line in f if "steps_per_s" in line]
    return {"rate": 1 / statistics.mean(times[args.long_warm:])}


def one_ceiling(args, n=2048, repeats=5):
    """FLOP/s of this machine now: the best of ``repeats`` timed n × n matrix products in float32, in bfloat16
    where the CPU has it natively, and of a dynamic int8 Linear of the same size (quantize_int8's kernel)."""
    import torch
    from common.models.precision import native_bf16
    from common.models.quantize import FullRangeLinear, full_range_ok, quantize_int8

    def best(fn):
        return best_rate(fn, 2 * n ** 3, repeats)

    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if name == "bf16" and not native_bf16():
            continue
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out[name] = best(lambda: torch.mm(a, b))
    linear = quantize_int8(torch.nn.Sequential(torch.nn.Linear(n, n, bias=False)))[0]
    x = torch.randn(n, n)
    with torch.inference_mode():
        out["int8"] = best(lambda: linear(x))
    out["int8_full_range"] = isinstance(linear, FullRangeLinear) and full_range_ok()
    return out


TINY_LOG_EVERY = 10  # the tiny rows' --log-every: 03's default; its records' rates give the step times


def one_train(side, args, row):
    """Steps/s of one side of a training row (triplet, mnrl, mlm or their tiny-* rows), after the first --warm
    steps (--tiny-warm)."""
    from bench.train import ensure_data, run_ours, run_theirs
    objective = row.removeprefix("tiny-")
    data = ensure_data(args.work, objective)
    batch, length = train_shape(args, row)
    steps, warm = (args.tiny_steps, args.tiny_warm) if row.startswith("tiny-") else (args.steps, args.warm)
    if side == "ours":
        times = run_ours(data, steps, batch, objective, length, TINY_LOG_EVERY if row.startswith("tiny-") else 1)
    else:
        times = run_theirs(data, steps, batch, objective, length)
    return {"rate": 1 / statistics.mean(times[warm:])}


def tokens_per_unit(case, args):
    """Non-padding tokens per embedded text (embed cases) or per training step (training cases), the same count
    for both sides: embedding, the texts truncated at --length; triplet, query, positive and negative documents
    (title [SEP] text) truncated at --triplet-length, mean over the training triplets × batch; mnrl, title and
    abstract each truncated at --mnrl-length, mean over the training pairs × batch; mlm, full blocks. The tiny rows
    the same at --tiny-length and --tiny-batch (their model has MiniLM's vocabulary)."""
    from transformers import AutoTokenizer
    from bench.train import ensure_data, minilm
    tokenizer = AutoTokenizer.from_pretrained(minilm())
    if case == "tiny-embed":
        return statistics.mean(token_counts(tokenizer, embed_texts(args.work, args.docs), args.tiny_length))
    if case.startswith("embed") or case == "long-short":
        return statistics.mean(token_counts(tokenizer, embed_texts(args.work, args.docs), args.length))
    if case == "long-embed":
        return statistics.mean(token_counts(tokenizer, long_texts(args.work, args.long_docs), LONG_LENGTH))
    if case == "long-train":
        return args.long_train_batch * LONG_LENGTH
    objective = case.removeprefix("tiny-")
    return step_tokens(tokenizer, objective, *train_shape(args, case), lambda: ensure_data(args.work, objective))


def budget(a):
    from common.models.batching import token_budget
    import torch
    return a.batch_tokens if a.batch_tokens is not None else \
        f"{token_budget(None, 'cuda' if torch.cuda.is_available() else 'cpu')} (its default here)"


CASES = {
    "embed": ("docs/s", lambda side, args: one_embed(side, args, "embed"),
              lambda a: f"{a.docs} arXiv abstracts, {a.length} tokens, batch {a.batch}, ours --batch-tokens "
                        f"{budget(a)}"),
    "embed-small": ("docs/s", lambda side, args: one_embed(side, args, "embed-small"),
                    lambda a: f"the same at batch {a.small_batch} on both sides"),
    "triplet": ("steps/s", lambda side, args: one_train(side, args, "triplet"),
                lambda a: f"batch {a.triplet_batch}, {a.triplet_length} tokens, {a.steps} steps, first {a.warm} "
                          "left out"),
    "mnrl": ("steps/s", lambda side, args: one_train(side, args, "mnrl"),
             lambda a: f"batch {a.mnrl_batch}, {a.mnrl_length} tokens, {a.steps} steps, first {a.warm} left out"),
    "mlm": ("steps/s", lambda side, args: one_train(side, args, "mlm"),
            lambda a: f"batch {a.mlm_batch}, blocks of {a.mlm_length} tokens, 15 % masked (80/10/10, not whole "
                      f"words), {a.steps} steps, first {a.warm} left out; theirs: transformers' Trainer"),
    "embed-int8": ("docs/s", one_embed_int8,
                   lambda a: f"as embed, int8: ours quantize_int8 at batch {a.batch}, --batch-tokens {budget(a)}; "
                             f"theirs ONNX Runtime, sentence-transformers' {a.onnx_config} dynamic int8 export "
                             f"({onnx_int8_file(a.onnx_config)}), batch {a.onnx_batch}"),
    "long-embed": ("docs/s", one_long_embed,
                   lambda a: f"{a.long_docs} documents of mixed length ({long_quartiles(a)}), read up to "
                             f"{LONG_LENGTH:,} tokens, window {LONG_WINDOW}, batch {a.long_batch}, ours --batch-tokens "
                             f"{budget(a)}; theirs sentence-transformers over transformers' LongformerModel"),
    "long-short": ("docs/s", one_long_short,
                   lambda a: f"the embed row's texts at {a.length} tokens (within half the window), batch {a.batch}; "
                             "ours the Longformer student, theirs its source all-MiniLM-L6-v2, both through embed"),
    "long-train": ("steps/s", one_long_train,
                   lambda a: f"04 train mse-contextual, batch {a.long_train_batch} × {LONG_LENGTH:,} tokens, window "
                             f"{LONG_WINDOW}, --gradient-checkpointing, {a.long_steps} steps, first {a.long_warm} "
                             "left out; theirs the same with transformers' LongformerModel.forward"),
}

def tiny_settings(a):
    m = TINY_SHAPE
    return (f"the tiny BERT ({m['num_hidden_layers']} layers, hidden {m['hidden_size']}, {m['num_attention_heads']} "
            f"heads, feed-forward {m['intermediate_size']}; random weights, all-MiniLM-L6-v2's vocabulary), batch "
            f"{a.tiny_batch}, {a.tiny_length} tokens")


def tiny_steps(a):
    return f"{a.tiny_steps} steps, first {a.tiny_warm} left out; ours --log-every {TINY_LOG_EVERY}"


# the overhead rows: the same sides as the rows they are named after, on the tiny model at tiny shapes, where what
# each side does around the model's arithmetic is most of a step
CASES.update({
    "tiny-triplet": ("steps/s", lambda side, args: one_train(side, args, "tiny-triplet"),
                     lambda a: f"{tiny_settings(a)}, {tiny_steps(a)}"),
    "tiny-mnrl": ("steps/s", lambda side, args: one_train(side, args, "tiny-mnrl"),
                  lambda a: f"{tiny_settings(a)}, {tiny_steps(a)}"),
    "tiny-mlm": ("steps/s", lambda side, args: one_train(side, args, "tiny-mlm"),
                 lambda a: f"{tiny_settings(a)}, 15 % masked (80/10/10, not whole words), {tiny_steps(a)}; theirs: "
                           "transformers' Trainer"),
    "tiny-embed": ("docs/s", lambda side, args: one_embed(side, args, "tiny-embed"),
                   lambda a: f"{tiny_settings(a)}, the embed row's {a.docs} abstracts, ours --batch-tokens "
                             f"{budget(a)}"),
})
GOALS = {"embed": 1.5, "embed-small": None, "triplet": 2.0, "mnrl": 1.3, "mlm": 2.0, "embed-int8": 1.0,
         "long-embed": 3.0, "long-short": 0.8, "long-train": 1.5, "tiny-triplet": 1.5, "tiny-mnrl": 1.5,
         "tiny-mlm": 1.5, "tiny-embed": 1.5}
# with gradient checkpointing the forward runs twice: 8 · N · tokens a step
FLOPS_PER_TOKEN = {"embed": 2, "embed-small": 2, "embed-int8": 2, "triplet": 6, "mnrl": 6, "mlm": 6, "long-embed": 2,
                   "long-short": 2, "long-train": 8, "tiny-triplet": 6, "tiny-mnrl": 6, "tiny-mlm": 6,
                   "tiny-embed": 2}


def long_quartiles(args):
    """The token counts of ``long_texts`` (read up to LONG_LENGTH) as quartiles, for the settings column."""
    import numpy as np
    from transformers import AutoTokenizer
    from bench.train import minilm
    tokenizer = AutoTokenizer.from_pretrained(minilm())
    counts = [min(len(ids), LONG_LENGTH) for ids in tokenizer(long_texts(args.work, args.long_docs),
                                                              verbose=False)["input_ids"]]
    low, mid, high = np.percentile(counts, [25, 50, 75]).round().astype(int)
    return f"tokens: min {min(counts)}, quartiles {low}, {mid}, {high}, max {max(counts)}"


def measure(case, side, args):
    """One side of one case (or ``case`` "ceiling") in a fresh process; returns its JSON result."""
    env = {}
    if case.startswith("tiny-"):
        env["BENCH_MODEL"] = build_model(args.work, "tiny")
    if case == "embed-int8" and side == "theirs":
        env["PYTHONPATH"] = os.pathsep.join([args.st_onnx, *filter(None, [os.environ.get("PYTHONPATH")])])
    return run_side([sys.executable, os.path.abspath(__file__), "--one", case, side, *args.passed], f"{case} {side}",
                    env)


def check_st_onnx(args):
    """Exits with a message saying how to make it where the folder of sentence-transformers' ONNX backend is
    missing."""
    if not os.path.isdir(os.path.join(args.st_onnx, "optimum", "onnxruntime")):
        sys.exit(f"error: embed-int8: {args.st_onnx} holds no sentence-transformers ONNX backend; make it with\n"
                 f"    {sys.executable} -m pip install --no-deps --target {args.st_onnx} -r "
                 "bench/requirements-onnx.txt\nwith onnxruntime in this environment (pip install -r "
                 "bench/requirements.txt), or leave the case out (--only)")


def gpu_section(args):
    """bf16 training tokens/s and MFU, and bf16 embedding tokens/s, of MiniLM and a BERT-base-sized encoder."""
    import torch
    from transformers import AutoConfig, BertConfig, BertModel
    from bench.train import minilm
    from common.models.encoder import Encoder
    rows = []
    for name, config in (("all-MiniLM-L6-v2", AutoConfig.from_pretrained(minilm())), ("BERT-base size", BertConfig())):
        config._attn_implementation = "sdpa"
        encoder = Encoder(BertModel(config), "mean").cuda()
        params = sum(p.numel() for p in encoder.parameters())
        batch, length = args.gpu_batch, args.gpu_length
        ids = torch.randint(1000, config.vocab_size, (batch, length), device="cuda")
        mask = torch.ones_like(ids)
        optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-5)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = encoder.embed(ids, mask).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        def timed(fn, n):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            return batch * length * n / (time.perf_counter() - start)

        train_tokens = timed(step, args.gpu_steps)
        encoder.eval()
        with torch.inference_mode():
            embed_tokens = timed(lambda: encoder.embed(ids, mask), args.gpu_steps)
        rows.append(f"| {name} | {params / 1e6:.1f}M | {batch} × {length} | {train_tokens:,.0f} | "
                    f"{6 * params * train_tokens / H100_BF16_PEAK:.1%} | {embed_tokens:,.0f} |")
        encoder = optimizer = None  # freed before the next model
        torch.cuda.empty_cache()
    return ["## GPU (bf16)", "", f"{torch.cuda.get_device_name(0)}; MFU = 6 · parameters · training tokens/s / "
            f"{H100_BF16_PEAK / 1e12:.0f} TFLOP/s (the H100's dense bf16 peak).", "",
            "| model | parameters | batch × tokens | training tokens/s | MFU | embedding tokens/s |",
            "|---|---|---|---|---|---|", *rows, ""]


def _kept_sections(path):
    """The sections of ``path`` that other benchmarks write (from "## Scale" on, bench/scale.py's), kept as they
    are when this one rewrites its own."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    at = text.find("\n## Scale")
    return [text[at + 1:].rstrip("\n"), ""] if at >= 0 else []


def _median_ceiling(ceilings, key):
    values = [c[key] for c in ceilings if key in c]
    return statistics.median(values) if values else None


def write_results(args, cases, results, started, done, gpu=(), ceilings=(), flops=None):
    """bench/results.md from the rounds done so far (rewritten after each round, so a stopped run leaves its
    finished rounds); ``gpu``: the GPU section's lines; ``ceilings``: each round's ``one_ceiling``; ``flops``:
    model FLOPs per unit (text or step) of each case."""
    import numpy as np
    from common.models.quantize import mean_cosine
    flops = flops or {}
    fp32 = _median_ceiling(ceilings, "fp32")
    lines = ["# Benchmarks against sentence-transformers and transformers", "",
             f"`{' '.join(['python bench/all.py', *args.passed])}`", "",
             f"Measured {started}, {done} of {args.rounds} interleaved rounds, each side a fresh process. "
             f"Machine: {machine(args.st_onnx)}.", ""]
    if ceilings:
        def rounds(key):
            return ", ".join(f"{c[key] / 1e9:.0f}" for c in ceilings)

        parts = [f"float32 **{fp32 / 1e9:.0f} GFLOP/s** (rounds {rounds('fp32')})"]
        if _median_ceiling(ceilings, "bf16"):
            parts.append(f"bfloat16 {_median_ceiling(ceilings, 'bf16') / 1e9:.0f} GFLOP/s (rounds {rounds('bf16')})")
        else:
            parts.append("no bfloat16 (the CPU has neither avx512_bf16 nor AMX)")
        bits = "8-bit" if ceilings[0].get("int8_full_range") else "7-bit"
        parts.append(f"dynamic int8 Linear {_median_ceiling(ceilings, 'int8') / 1e9:.0f} GFLOP/s ({bits} "
                     f"activations; rounds {rounds('int8')})")
        lines += [f"This machine's ceiling, the median of each round's best 2048 × 2048 product in a fresh process: "
                  f"{'; '.join(parts)}. Model FLOP/s: 6 · N · tokens a training step, 2 · N · tokens an embedded "
                  f"text, N = {flops.get('N', 0) / 1e6:.2f} M parameters outside the embeddings"
                  + (f" ({flops['N_tiny'] / 1e6:.3f} M for the tiny rows' model)" if "N_tiny" in flops else "")
                  + ", tokens = non-padding tokens (per step or text, in the settings); the share is of the float32 "
                  "ceiling.", ""]
    lines += ["| case | settings | ours | theirs | ratio (median of rounds) | goal | rounds | model GFLOP/s ours / "
              "theirs (share of the fp32 ceiling) | load average (start → end of each round) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        res, unit = results[case], CASES[case][0]
        ratios = [a / b for a, b in zip(res["ours"], res["theirs"])]
        notes = []
        if case in ("embed", "embed-small", "tiny-embed", "long-embed", "long-short"):
            a, b = (np.load(os.path.join(args.work, f"{case}-{s}.npy")) for s in ("ours", "theirs"))
            notes.append(f"vectors agree to {float(np.abs(a - b).max()):.1e}")
        if case == "embed-int8":
            ref = np.load(os.path.join(args.work, "embed-int8-fp32.npy"))
            cos = [mean_cosine(np.load(os.path.join(args.work, f"embed-int8-{side}.npy")), ref)
                   for side in ("ours", "theirs")]
            notes.append(f"mean cosine to our float32 vectors: ours {cos[0]:.4f}, theirs {cos[1]:.4f}")
            if "embed" in results and len(results["embed"]["ours"]) == len(res["ours"]):
                speedups = [a / b for a, b in zip(res["ours"], results["embed"]["ours"])]
                notes.append(f"ours int8 / ours fp32 (embed row, same round): **{statistics.median(speedups):.2f}×** "
                             f"(rounds {', '.join(f'{x:.2f}×' for x in speedups)}; goal ≥ 2×)")
        if case in flops:
            notes.append(f"{flops[case]['tokens']:,.0f} tokens a {'text' if unit == 'docs/s' else 'step'}")
        settings = "; ".join([CASES[case][2](args), *notes])
        med = {side: statistics.median(res[side]) for side in ("ours", "theirs")}
        if case in flops and fp32:
            achieved = {side: med[side] * flops[case]["flops"] for side in med}
            reach = (f"{achieved['ours'] / 1e9:.1f} / {achieved['theirs'] / 1e9:.1f} "
                     f"({achieved['ours'] / fp32:.0%} / {achieved['theirs'] / fp32:.0%})")
        else:
            reach = "—"
        lines.append(f"| {case} | {settings} | {med['ours']:.3f} {unit} | {med['theirs']:.3f} {unit} | "
                     f"**{statistics.median(ratios):.2f}×** | {f'≥ {GOALS[case]}×' if GOALS[case] else '—'} | "
                     f"{', '.join(f'{x:.2f}×' for x in ratios)} | {reach} | "
                     f"{', '.join(f'{a:.1f} → {b:.1f}' for a, b in res['load'])} |")
    lines += ["", *(gpu or ["No GPU section: no CUDA device on this machine.", ""])]
    lines += _kept_sections(args.out)
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(args.out), delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(f.name, args.out)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--docs", type=int, default=300, help="embed: abstracts (the sample's 994, repeated)")
    parser.add_argument("--length", type=int, default=256, help="embed: tokens per abstract (paper search)")
    parser.add_argument("--batch", type=int, default=64, help="embed: texts per batch, both sides")
    parser.add_argument("--batch-tokens", type=int, default=None,
                        help="embed: ours' padded-token budget [its default on this device]")
    parser.add_argument("--small-batch", type=int, default=8,
                        help="embed-small: the batch size of both sides (sentence-transformers' fastest on 2 CPU "
                             "cores among 4-64)")
    parser.add_argument("--steps", type=int, default=10, help="training steps per measurement")
    parser.add_argument("--warm", type=int, default=3, help="training steps left out of the mean")
    parser.add_argument("--triplet-batch", type=int, default=16)
    parser.add_argument("--triplet-length", type=int, default=128)
    parser.add_argument("--mnrl-batch", type=int, default=16)
    parser.add_argument("--mnrl-length", type=int, default=256)
    parser.add_argument("--mlm-batch", type=int, default=8, help="mlm: blocks per step (03's mlm default)")
    parser.add_argument("--mlm-length", type=int, default=256, help="mlm: tokens per block (paper search's)")
    parser.add_argument("--tiny-batch", type=int, default=4, help="tiny-*: texts (triplets, pairs, blocks) a batch")
    parser.add_argument("--tiny-length", type=int, default=16, help="tiny-*: tokens per text")
    parser.add_argument("--tiny-steps", type=int, default=120,
                        help="tiny-*: training steps per measurement (fewer than an epoch of each row's data at the "
                             "defaults: no epoch end falls among them)")
    parser.add_argument("--tiny-warm", type=int, default=20,
                        help=f"tiny-*: training steps left out of the mean (a multiple of {TINY_LOG_EVERY})")
    parser.add_argument("--onnx-batch", type=int, default=8,
                        help="embed-int8: sentence-transformers' batch size (its ONNX int8 backend's fastest on 2 "
                             "idle AMD EPYC cores among 4-64: 134 docs/s at 8, 118 at 16, 95 at 64)")
    parser.add_argument("--onnx-config", choices=tuple(ONNX_INT8_WEIGHTS), default=onnx_config(),
                        help="embed-int8: sentence-transformers' dynamic int8 export to compare with [%(default)s: "
                             "the one that fits this CPU: arm64 on ARM, else avx512_vnni, avx512 or avx2, the widest "
                             "its flags allow]")
    parser.add_argument("--st-onnx", default=os.path.join(ROOT, "bench", "out", "st-onnx"),
                        help="embed-int8: the folder holding sentence-transformers' ONNX backend "
                             "(bench/requirements-onnx.txt)")
    parser.add_argument("--long-docs", type=int, default=48,
                        help="long-embed: documents of mixed length (long_texts: 8 of each length class at 48)")
    parser.add_argument("--long-batch", type=int, default=4, help="long-embed: documents per batch, both sides")
    parser.add_argument("--long-train-batch", type=int, default=2, help="long-train: documents of 4,096 tokens a step")
    parser.add_argument("--long-steps", type=int, default=5, help="long-train: steps per measurement")
    parser.add_argument("--long-warm", type=int, default=2, help="long-train: steps left out of the mean")
    parser.add_argument("--gpu-batch", type=int, default=32)
    parser.add_argument("--gpu-length", type=int, default=256)
    parser.add_argument("--gpu-steps", type=int, default=20)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results.md"))
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        case, side = args.one
        print(json.dumps(one_ceiling(args) if case == "ceiling" else CASES[case][1](side, args)))
        return
    args.passed = sys.argv[1:]
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"--only: unknown case(s) {sorted(unknown)}; known: {', '.join(CASES)}")
    if "embed-int8" in cases:
        check_st_onnx(args)
    from bench.train import minilm
    flops = {"N": nonembedding(minilm())}
    if any(c.startswith("tiny-") for c in cases):
        flops["N_tiny"] = nonembedding(build_model(args.work, "tiny"))
    for case in cases:
        tokens = tokens_per_unit(case, args)
        n = flops["N_tiny" if case.startswith("tiny-") else "N"]
        flops[case] = {"tokens": tokens, "flops": FLOPS_PER_TOKEN[case] * n * tokens}
    results = {c: {"ours": [], "theirs": [], "load": []} for c in cases}
    ceilings = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{started}, machine: {machine(args.st_onnx)}", flush=True)
    for r in range(args.rounds):
        ceilings.append(measure("ceiling", "-", args))
        print(f"round {r + 1} ceiling  fp32 {ceilings[-1]['fp32'] / 1e9:.0f} GFLOP/s"
              + (f", bf16 {ceilings[-1]['bf16'] / 1e9:.0f}" if "bf16" in ceilings[-1] else "")
              + f", int8 Linear {ceilings[-1]['int8'] / 1e9:.0f}  load {os.getloadavg()[0]:.1f}", flush=True)
        for case in cases:
            load = os.getloadavg()[0]
            for side in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
                results[case][side].append(measure(case, side, args)["rate"])
            results[case]["load"].append((load, os.getloadavg()[0]))
            ratio = results[case]["ours"][-1] / results[case]["theirs"][-1]
            print(f"round {r + 1} {case:8s} ours {results[case]['ours'][-1]:8.3f}  theirs "
                  f"{results[case]['theirs'][-1]:8.3f} {CASES[case][0]}  ratio {ratio:.2f}x  model GFLOP/s "
                  f"{results[case]['ours'][-1] * flops[case]['flops'] / 1e9:.1f} / "
                  f"{results[case]['theirs'][-1] * flops[case]['flops'] / 1e9:.1f}  load "
                  f"{results[case]['load'][-1][0]:.1f} → {results[case]['load'][-1][1]:.1f}", flush=True)
        write_results(args, cases, results, started, r + 1, ceilings=ceilings, flops=flops)
    import torch
    gpu = gpu_section(args) if torch.cuda.is_available() else []
    print("\n".join(write_results(args, cases, results, started, args.rounds, gpu, ceilings, flops)))
    print(f"→ {args.out}")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
