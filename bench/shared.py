"""What the two model benchmarks share, bench/all.py (every row on this machine, CPU first) and bench/gpu.py (every
row on a GPU): the texts the embedding rows read, the Longformer rows' student and documents, a side of each row
in one fresh process, the shapes and token counts behind the model FLOP/s, the timing of a matrix-product ceiling,
and the machine's description.
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# every side's process reads models and tokenizers from local folders only
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# ``python -c RUN_SCRIPT SCRIPT ARGS…`` runs SCRIPT as ``python SCRIPT ARGS…`` after whatever code is put before it
RUN_SCRIPT = "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
# Encoder.embed calling the model itself (transformers' LongformerModel.forward) in place of
# common/models/sliding_window.py: put before RUN_SCRIPT, a script's run with transformers' Longformer, the same
# data, loss, optimizer and loop otherwise
TRANSFORMERS_LONGFORMER = ("from common.models import sliding_window\n"
                           "sliding_window.is_longformer = lambda transformer: False\n")


CONFIGS = os.path.join(ROOT, "bench", "configs")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
# the overhead rows' model (bench/all.py's and bench/gpu.py's tiny-* rows): BERT's layout at a size where a step's
# arithmetic is small beside the work a training loop or an embedding call does around it, with all-MiniLM-L6-v2's
# vocabulary and tokenizer, so that the texts are tokenised as in the real rows
TINY_SHAPE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256}
# bench/gpu.py --dry: every model smaller still
DRY_SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
# a model shape: (its folder in bench/configs, the configuration values changed)
SHAPES = {"minilm": ("minilm", {}), "bert-base": ("bert-base", {}), "tiny": ("minilm", TINY_SHAPE)}


def build_model(work, shape, dry=False):
    """WORK/models/SHAPE: a model of ``SHAPES[shape]`` (bench/configs' config.json and sentence-transformers files
    with its values changed) with random weights (seed 0; speed does not depend on their values) and MiniLM's
    tokenizer; ``dry`` shrinks it to DRY_SHAPE."""
    path = os.path.join(work, "models", shape)
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    folder, values = SHAPES[shape]
    values = {**values, **(DRY_SHAPE if dry else {})}
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(os.path.join(CONFIGS, folder), tmp)
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(CONFIGS, "minilm", name), tmp)
    config = BertConfig.from_pretrained(tmp)
    for key, value in values.items():
        setattr(config, key, value)
    if "hidden_size" in values:
        with open(os.path.join(tmp, "1_Pooling", "config.json")) as f:
            pooling = json.load(f)
        with open(os.path.join(tmp, "1_Pooling", "config.json"), "w") as f:
            json.dump({**pooling, "word_embedding_dimension": values["hidden_size"]}, f)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(tmp)
    BertTokenizerFast.from_pretrained(tmp).save_pretrained(tmp)
    os.replace(tmp, path)
    return path


def run_side(argv, what, env=None):
    """The JSON result that one side's fresh process (``argv``, with the OFFLINE variables and ``env`` beside the
    environment) prints last; a side that fails ends the benchmark with ``what`` and the tail of its stderr."""
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, **OFFLINE, **(env or {})))
    if out.returncode:
        sys.exit(f"error: {what} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def script(*argv):
    """One of the project's scripts run to its end, its output kept from the benchmark's."""
    subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT, check=True, capture_output=True)


def embed_texts(work, docs):
    """``docs`` abstracts of the arXiv sample, repeated where it has fewer."""
    from bench.train import ensure_arxiv
    from common.data.docs_jsonl import Documents
    abstracts = Documents(ensure_arxiv(work)).texts
    return [abstracts[i % len(abstracts)] for i in range(docs)]


def long_texts(work, n):
    """``n`` documents of mixed length: document i joins 2^(i mod 6) consecutive abstracts of the arXiv sample."""
    from bench.train import ensure_arxiv
    from common.data.docs_jsonl import Documents
    abstracts = Documents(ensure_arxiv(work)).texts
    out, at = [], 0
    for i in range(n):
        parts = 2 ** (i % 6)
        out.append(" ".join(abstracts[(at + k) % len(abstracts)] for k in range(parts)))
        at += parts
    return out


def ensure_distill(work, shape_path, size):
    """Documents of at least the student's length (abstracts joined end to end), teacher vectors (random: speed only;
    every other document short enough for the structural loss, so both losses train) and the Longformer student."""
    import numpy as np
    from transformers import AutoTokenizer
    from bench.project import texts_of
    from bench.train import ensure_arxiv
    from common.data.docs_jsonl import Documents
    from common.outdir.folders import Outputs
    root = os.path.join(work, "distill")
    if os.path.exists(os.path.join(root, "student", "config.json")):
        return root
    shutil.rmtree(root, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(shape_path)
    texts = texts_of("full", Documents(ensure_arxiv(work)).texts, tokenizer, size["distill_docs"],
                     size["distill_length"])
    ids = [f"long{i}" for i in range(len(texts))]
    with Outputs(os.path.join(root, "data")) as out, out.open("docs.jsonl") as f:
        for i, text in zip(ids, texts):
            f.write(json.dumps({"id": i, "title": i, "text": text}) + "\n")
    rng = np.random.default_rng(0)
    hidden = json.load(open(os.path.join(shape_path, "config.json")))["hidden_size"]
    vectors = {"sbert": rng.standard_normal((len(ids), hidden)).astype(np.float32),
               "pv": rng.standard_normal((len(ids), size["pv"])).astype(np.float32),
               "lengths": np.where(np.arange(len(ids)) % 2 == 0, 300, 5000).astype(np.int64)}
    with Outputs(os.path.join(root, "teach")) as out:
        for name, array in vectors.items():
            with out.open(f"{name}.npy", "wb") as f:
                np.save(f, array)
            with out.open(f"{name}.ids.txt") as f:
                f.writelines(f"{i}\n" for i in ids)
    script("04_distill.py", "convert-long", "--model", shape_path, "--out", os.path.join(root, "student"),
           "--max-length", size["distill_length"], "--window", size["distill_window"])
    return root


def embedder(side, model, max_length=None, batch=64, batch_tokens=None, device="cpu", st_kwargs=None, say=print):
    """A function texts → vectors ``[N, d]`` of one side of an embedding row, tokenisation included: ours ``embed``
    (05's path) over a ``TokenStore``, theirs ``SentenceTransformer.encode`` at the same batch size; ``max_length``
    None: each side's own default. ``st_kwargs``: sentence-transformers' ``model_kwargs`` (a dtype)."""
    if side == "ours":
        from common.models.inference import embed
        from common.models.loading import load_encoder
        from common.models.tokens import TokenStore
        encoder, tokenizer, settings = load_encoder(model, max_length=max_length, say=say)
        encoder.to(device)
        return lambda texts: embed(encoder, TokenStore(tokenizer, texts, settings["max_length"]), batch, batch_tokens)
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(model, device=device, model_kwargs=st_kwargs)
    if max_length:
        st.max_seq_length = max_length
    return lambda texts: st.encode(texts, batch_size=batch, convert_to_numpy=True)


def train_shape(args, row):
    """(batch, tokens per text) of a training row; the overhead rows' (tiny-*) are --tiny-batch and --tiny-length."""
    if row.startswith("tiny-"):
        return args.tiny_batch, args.tiny_length
    return {"triplet": (args.triplet_batch, args.triplet_length), "mnrl": (args.mnrl_batch, args.mnrl_length),
            "mlm": (args.mlm_batch, args.mlm_length)}[row]


def nonembedding(path):
    """N of the FLOP counts: a model's parameters outside its embeddings and its pooler."""
    from transformers import AutoModel
    model = AutoModel.from_pretrained(path)
    return sum(p.numel() for name, p in model.named_parameters()
               if not name.startswith(("embeddings.", "pooler.")))


def token_counts(tokenizer, texts, limit):
    """Each text's tokens, special tokens included, read up to ``limit``."""
    return [min(len(ids), limit) for ids in tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]]


def step_tokens(tokenizer, objective, batch, length, data):
    """Non-padding tokens of a training step, the same count for both sides: mlm, full blocks; mnrl, title and
    abstract each read up to ``length``, the mean over the pairs × ``batch``; triplet, query, positive and negative
    documents (title [SEP] text) read up to ``length``, the mean over the triplets × ``batch``. ``data``: a function
    giving the row's data folder, called where the count needs it."""
    if objective == "mlm":
        return batch * length
    from bench.train import pair_columns, triplet_columns
    columns = pair_columns(data()) if objective == "mnrl" else triplet_columns(data(), tokenizer.sep_token)
    return batch * sum(statistics.mean(token_counts(tokenizer, texts, length)) for texts in columns.values())


def best_rate(fn, work, repeats, sync=None):
    """``work`` over the shortest of ``repeats`` timed calls of ``fn``, after one call untimed (allocator, kernels);
    ``sync`` (a GPU's synchronize) runs around each timed call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        if sync:
            sync()
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - start)
    return work / best


# the instruction sets the rows depend on: x86's vector widths, int8 dot products (VNNI: ONNX Runtime's and
# quantize_int8's full 8-bit activations) and bfloat16 products; ARM's counterparts
SHOWN_FLAGS = {"x86": ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8"),
               "arm": ("asimd", "asimddp", "i8mm", "bf16", "sve", "sve2")}
# ARM's "CPU part" codes of the server cores most often met (Arm Ltd., implementer 0x41)
ARM_PARTS = {"0xd0c": "Neoverse N1", "0xd40": "Neoverse V1", "0xd49": "Neoverse N2", "0xd4f": "Neoverse V2"}


def read_cpuinfo(path="/proc/cpuinfo"):
    """The text of /proc/cpuinfo ('' where there is none: not Linux)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpuinfo_fields(text):
    """The first processor's fields of a /proc/cpuinfo text, as {name: value}."""
    fields = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    return fields


def cpu_flags(text=None):
    """The CPU's instruction-set flags: x86's "flags", ARM's "Features"."""
    fields = cpuinfo_fields(read_cpuinfo() if text is None else text)
    return set((fields.get("flags") or fields.get("Features") or "").split())


def describe_cpu(text, arch):
    """This CPU in one line, from its /proc/cpuinfo ``text`` and ``platform.machine()`` ``arch``: its model name
    (x86: with vendor, family and model numbers, which tell a generation where a virtual machine names only "AMD
    EPYC"; ARM: the implementer and part codes, named where known), the architecture, and which of the flags the
    rows depend on it has (``SHOWN_FLAGS``) and which it lacks."""
    fields = cpuinfo_fields(text)
    arm = arch.lower() in ("aarch64", "arm64")
    if arm:
        part = fields.get("CPU part", "?")
        name = fields.get("model name") or ARM_PARTS.get(part, "ARM")
        name += f" (implementer {fields.get('CPU implementer', '?')}, part {part})"
    else:
        name = fields.get("model name") or "unknown CPU"
        if "cpu family" in fields:
            name += (f" ({fields.get('vendor_id', '?')} family {fields['cpu family']} model {fields.get('model', '?')}"
                     f" stepping {fields.get('stepping', '?')})")
    flags = cpu_flags(text)
    shown = SHOWN_FLAGS["arm" if arm else "x86"]
    has, lacks = [f for f in shown if f in flags], [f for f in shown if f not in flags]
    return f"{name}, {arch}, with {', '.join(has) or 'none of ' + ', '.join(shown)}" + (
        f", without {', '.join(lacks)}" if has and lacks else "")


def machine(st_onnx=None):
    """The CPU (``describe_cpu``: its name and the instruction sets the rows depend on, from /proc/cpuinfo), its
    cores, the GPU and the libraries' versions; with ``st_onnx`` (bench/all.py's --st-onnx folder), the versions
    of the ONNX side installed there."""
    import torch
    from importlib import metadata
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    versions = ", ".join(f"{p} {version(p)}" for p in ("torch", "transformers", "sentence-transformers", "accelerate",
                                                        "onnxruntime"))
    text = (f"CPU {describe_cpu(read_cpuinfo(), platform.machine())}; {os.cpu_count()} cores (torch threads "
            f"{torch.get_num_threads()}); GPU: {gpu}; Python {platform.python_version()}; {versions}")
    if st_onnx is not None and os.path.isdir(st_onnx):
        found = {d.metadata["Name"].lower().replace("_", "-"): d.version
                 for d in metadata.distributions(path=[st_onnx])}
        text += "; the ONNX side from --st-onnx: " + ", ".join(
            f"{p} {found[p]}" for p in ("sentence-transformers", "transformers", "optimum-onnx") if p in found)
    return text


def version(package):
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
