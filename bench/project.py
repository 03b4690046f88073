"""How long embedding a whole corpus takes on this machine: documents/s of ``embed`` at 128 and 512 tokens, float32,
int8 (``quantize_int8``) and, on a CPU with native bfloat16, bf16 autocast (``precision.encoder_for``, 05's
``--bf16``), and the hours for a Finnish Wikipedia and for 2 million arXiv abstracts.

    python bench/project.py                       # all-MiniLM-L6-v2 and a BERT-base-sized encoder
    python bench/project.py --models minilm --docs 600

Texts: the shipped arXiv sample's abstracts as they are (``abstracts``: most are shorter than 512 tokens, so at
512 each is read whole), and the same abstracts joined end to end into texts of at least 512 tokens (``full``:
every text fills the length, as a Wikipedia article longer than it does). Models: all-MiniLM-L6-v2 (384 wide, 6
layers), and a BERT-base-sized encoder (768 wide, 12 layers: FinBERT's and the WikiSpecter thesis's architecture,
randomly initialised with the MiniLM tokenizer; its speed is a trained one's). Each measurement runs ``embed`` as
05 and 04 do (--batch-size 64, the CPU's default token budget) after a warm-up, in this one process, one after
another; the load average is printed beside each.

Projection: hours = documents / documents per second / 3600, for 560,000 Finnish Wikipedia articles read as
``full`` texts (an upper bound: a stub shorter than the length costs less) and 2,000,000 arXiv abstracts read as
``abstracts``.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CORPORA = (("Finnish Wikipedia", 560_000, "full"), ("arXiv abstracts", 2_000_000, "abstracts"))


def texts_of(kind, abstracts, tokenizer, n, length=512):
    if kind == "abstracts":
        return [abstracts[i % len(abstracts)] for i in range(n)]
    out, current, tokens, i = [], [], 0, 0
    while len(out) < n:
        text = abstracts[i % len(abstracts)]
        i += 1
        current.append(text)
        tokens += len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        if tokens >= length:
            out.append(" ".join(current))
            current, tokens = [], 0
    return out


def load(model, length):
    import torch
    from transformers import BertConfig, BertModel
    from bench.train import minilm
    from common.models.encoder import Encoder
    from common.models.loading import load_encoder
    encoder, tokenizer, settings = load_encoder(minilm(), max_length=length, say=lambda *a: None)
    if model == "bert-base":
        torch.manual_seed(0)
        config = BertConfig(vocab_size=tokenizer.vocab_size)
        config._attn_implementation = "sdpa"
        encoder = Encoder(BertModel(config, add_pooling_layer=False), "mean").eval()
    return encoder, tokenizer, settings["max_length"]


def rate(encoder, tokenizer, texts, length, batch_size, batch_tokens):
    from common.models.inference import embed
    from common.models.tokens import TokenStore
    embed(encoder, TokenStore(tokenizer, texts[:8], length), batch_size, batch_tokens)  # warm-up
    start = time.perf_counter()
    store = TokenStore(tokenizer, texts, length)
    embed(encoder, store, batch_size, batch_tokens)
    seconds = time.perf_counter() - start
    return len(texts) / seconds, sum(store.lengths()) / len(texts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm,bert-base", help="comma-separated: minilm, bert-base")
    parser.add_argument("--docs", type=int, default=300, help="texts per measurement with MiniLM")
    parser.add_argument("--docs-base", type=int, default=40, help="texts per measurement with the BERT-base size")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=None, help="[the CPU default of embed]")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    args = parser.parse_args()
    import torch
    from bench.train import ensure_arxiv
    from common.data.docs_jsonl import Documents
    from common.models.precision import encoder_for, native_bf16
    precisions = ("float32", "int8", "bf16") if native_bf16() else ("float32", "int8")
    abstracts = Documents(ensure_arxiv(args.work)).texts
    rows = {}
    print(f"torch threads {torch.get_num_threads()}", flush=True)
    for model in args.models.split(","):
        n = args.docs if model == "minilm" else args.docs_base
        for length in (int(x) for x in args.lengths.split(",")):
            encoder, tokenizer, length = load(model, length)
            models = {precision: encoder_for(encoder, precision) for precision in precisions}
            for kind in ("abstracts", "full"):
                texts = texts_of(kind, abstracts, tokenizer, n)
                for precision, m in models.items():
                    before = os.getloadavg()[0]
                    docs_s, tokens = rate(m, tokenizer, texts, length, args.batch_size, args.batch_tokens)
                    rows[model, length, kind, precision] = docs_s
                    print(f"{model:9s} {length:4d} tokens {kind:9s} {precision}: {docs_s:8.2f} docs/s "
                          f"({tokens:.0f} tokens a text, {n} texts)  load {before:.1f} → {os.getloadavg()[0]:.1f}",
                          flush=True)
    print()
    lower = precisions[1:]
    print("| model | tokens | corpus | documents | fp32 docs/s | fp32 hours | "
          + " | ".join(f"{p} docs/s | {p} hours | {p} / fp32" for p in lower) + " |")
    print("|---|---|---|---|---|---|" + "---|---|---|" * len(lower))
    for model, length, kind in sorted({k[:3] for k in rows}, key=lambda k: (k[0] != "minilm", k[1], k[2])):
        for name, size, corpus_kind in CORPORA:
            if corpus_kind != kind:
                continue
            fp32 = rows[model, length, kind, "float32"]
            cells = [f"{rows[model, length, kind, p]:.1f} | {size / rows[model, length, kind, p] / 3600:.1f} | "
                     f"{rows[model, length, kind, p] / fp32:.2f}×" for p in lower]
            print(f"| {model} | {length} | {name} ({kind}) | {size:,} | {fp32:.1f} | {size / fp32 / 3600:.1f} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
