"""01_extract.py on hostile pages and hostile JSONL lines: time and peak memory of the whole run.

    python bench/hostile.py                 # needs `make bench-deps` (psutil)
    python bench/hostile.py --megabytes 10  # a smaller nested-template page
    python bench/hostile.py --lines-only    # only the arXiv snapshots with one long line

One dump per page kind, each page next to a normal article: a page of nested templates ({{a|{{a|…x}}…}}) of
--megabytes, and the adversarial pages that used to stall the wikitext cleaner (a long heading run, an unclosed
category link before a run of spaces, repeated external-link openers, a redirect line padded with spaces). Each is
run with one parsing process, so that the page is cleaned apart from the reading process as in real use.

Then 01 arxiv on snapshots with one long line: a 50 MB record (read), a 1 GiB line without a newline and
/dev/zero (both refused at --max-line-mb, 64 MB, with file:line).

    python bench/hostile.py --safety        # only the cases below (a tiny model; no psutil needed)

Then the output-folder and input cases, each run as a user would (a subprocess) and judged by its exit status,
its last line of stderr and what it left: links planted at temporary and final names in 02's and 03's folders
(nothing outside may change), a folder whose run was killed while committing (every reader refuses it), a file
edited after its run (refused), a full disk (a 256 KB tmpfs where the machine allows mounting one: one line, nothing
left), a damaged faiss index (rebuilt), queries that are not UTF-8 or a folder, a damaged log on resume, absurd
sizes, and resuming with another --chunk-tokens (refused); an --out that is, holds or lies inside an input (a link
included), a finished run trained again with other settings, with the same and with --overwrite, convert-long
killed with SIGKILL while it saves, a start model whose card is damaged, weights and tokenizers that are damaged or
stored as int8, a model path with Markdown and HTML in it (its card and report.md), and each reproduction script
given a missing input; 03 and 04 teachers run with --overwrite and killed with SIGKILL before their new output
exists (the finished one whole, a rerun resumes), a user's file in a folder a previous run wrote, a manifest that
names '.', '..', '/' or a file outside, 05 extract's outputs of one stem and two side by side whose names extend each
other, the masked LM's cache and a --cache-dir inside --data, and numbers not checked before use: a line limit past
memory, masking shares adding up past 1, a pair length too short for --nsp, NaN and infinity as flags, a label of
true, a checkpoint's state, a log record, teacher vectors past float32 and a document id that is a list; a link in a
run folder where a command moves, writes or deletes (RUN/.next-run to another finished run, RUN/cache, a model), a
checkpoint holding another step than its folder names, a run finished on two processes run again on one, and two
CPU processes started by torchrun and by accelerate launch --multi_gpu; one document first and last in docs.jsonl
(the same vector), a search whose --pooling or manifest would embed its queries otherwise than its index, 05's topic
classifiers on a split too small for their grid search, one of them killed from outside, and 05 killed with SIGKILL
beside them (its folder free for the rerun), the masked LM's cache where a file stands and truncated, 03 mlm on an
--out another process holds (refused before any cache is made), WORLD_SIZE and MPI's process counts of -1,
convert-long to a length that holds only the special tokens, and --warmup past the run; 01 hf on a save_to_disk
folder and a README whose paths lead outside, a CSV row short of --csv-columns, a truncated .csv.gz and a folder
holding a dataset script, 02 classify with a task named twice, 05 on a docs.jsonl id holding a space
(docs/reliability.md).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
from common.outdir import written  # noqa: E402
from conftest import make_dump  # noqa: E402

NORMAL = "'''Normaali''' on tavallinen artikkeli, jossa on tarpeeksi tekstiä johdannoksi ja [[linkki]] toiseen."


def pages(megabytes):
    n = megabytes * 1_000_000 // 6
    yield f"nested templates, {megabytes} MB", "{{a|" * n + "x" + "}}" * n
    yield "'=' * 3000 + 'x' (heading)", "=" * 3000 + "x"
    yield "'[[Category:a' + ' ' * 100000 + 'x'", "[[Category:a" + " " * 100000 + "x"
    yield "'[//x ' * 60000", "[//x " * 60000
    yield "'#REDIRECT' + ' ' * 300000 + 'x'", "#REDIRECT" + " " * 300000 + "x"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=50, help="size of the nested-template page")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "hostile"))
    parser.add_argument("--lines-only", action="store_true", help="only the long-line snapshots")
    parser.add_argument("--safety", action="store_true", help="only the output-folder and input cases")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.safety:
        return safety(args.work)
    import measure
    for k, (name, text) in enumerate([] if args.lines_only else pages(args.megabytes)):
        dump = os.path.join(args.work, f"page{k}.xml")
        with open(dump, "w", encoding="utf-8") as f:
            f.write(make_dump([(1, "Normaali", 0, NORMAL * 2), (2, "Vihamielinen", 0, text)]))
        size = os.path.getsize(dump)
        del text
        seconds, peak, rc, stderr = measure.run_measured(
            [sys.executable, "01_extract.py", "wiki", "--dump", dump, "--out", os.path.join(args.work, f"out{k}"),
             "--workers", "1"], cwd=ROOT)
        if rc:
            sys.exit(f"01 failed on {name}:\n{stderr[-2000:]}")
        os.remove(dump)
        print(f"{name:42s} dump {size / 1e6:6.1f} MB: {seconds:6.1f} s, peak RSS {peak / 1e6:6.0f} MB", flush=True)
    long_lines(args.work)


def long_lines(work):
    import measure
    record = b'{"id": "1", "title": "t", "categories": "cs.CL", "abstract": "'
    cases = [("a 50 MB record", record + b"a " * (25 << 20) + b'"}\n'), ("1 GiB, no newline", None),
             ("/dev/zero", "/dev/zero")]
    for k, (name, content) in enumerate(cases):
        path = content if isinstance(content, str) else os.path.join(work, f"line{k}.json")
        if content is None:
            with open(path, "wb") as f:
                for _ in range(1024):
                    f.write(b"a" * (1 << 20))
        elif not isinstance(content, str):
            with open(path, "wb") as f:
                f.write(content)
        seconds, peak, rc, stderr = measure.run_measured(
            [sys.executable, "01_extract.py", "arxiv", "--input", path, "--out", os.path.join(work, f"arxiv{k}")],
            cwd=ROOT)
        if path != "/dev/zero":
            os.remove(path)
        outcome = "read" if rc == 0 else stderr.strip().splitlines()[-1][-60:]
        print(f"01 arxiv, {name:34s}: {seconds:6.1f} s, peak RSS {peak / 1e6:6.0f} MB, {outcome}", flush=True)


def script(*args):
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]


def report(name, rc, line, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {name:58s} exit {rc:3d}  {line[:150]}", flush=True)
    return bool(ok)


def tree_hash(folder):
    """The SHA-256 of every file under ``folder``, by relative path."""
    from common.io import sha256
    return {os.path.relpath(os.path.join(d, f), folder): sha256(os.path.join(d, f))
            for d, _, files in os.walk(folder) for f in files}


def card_is_whole(path):
    """Whether a model card renders with this project's headings alone and no HTML (markdown-it, the CommonMark
    reference's port, with GitHub's tables)."""
    from markdown_it import MarkdownIt
    with open(path, encoding="utf-8") as f:
        body = f.read().split("\n---\n", 1)[1]
    tokens = MarkdownIt("commonmark").enable("table").parse(body)
    html = any(t.type == "html_block" or any(c.type == "html_inline" for c in t.children or ()) for t in tokens)
    headings = [t for t in tokens if t.type == "heading_open"]
    return not html and len(headings) == body.count("\n## ") + body.count("\n### ") + 1


def hand_edited(source, folder):
    """A copy of the output folder ``source`` at ``folder`` whose files a case edits by hand: its manifest's own
    digest dropped, so that the copy is read as a folder written elsewhere, not as a damaged one."""
    shutil.copytree(source, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("sha256")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def issue_cases(root, model, data, train):
    """An --out among the inputs, a finished run run again, a save killed with SIGKILL, a damaged card of the start
    model, damaged weights and tokenizers, text from outside in a card and a report, the reproduction scripts."""
    import signal
    import time
    results = []
    before = tree_hash(model)
    for name, args in (("convert-long --out = --model", ["04_distill.py", "convert-long", "--model", model, "--out",
                                                         model]),
                       ("03 --out inside --model", [*train, "--data", data, "--out", model / "run"]),
                       ("05 --out holding --data", ["05_evaluate.py", "--data", data, "--model", f"b={model}",
                                                    "--out", data.parent])):
        rc, line = script(*args)
        results.append(report(name, rc, line, rc == 2 and "which this command reads" in line
                              and tree_hash(model) == before))
    link = root / "link-to-model"
    link.symlink_to(model)
    rc, line = script("04_distill.py", "convert-long", "--model", model, "--out", link, "--overwrite")
    results.append(report("convert-long --out a link to --model, --overwrite", rc, line,
                          rc == 2 and "which this command reads" in line and tree_hash(model) == before))
    finished = root / "finished"
    quick = [*train[:-2], "--checkpoint-every", "0", "--data", data, "--out", finished]
    script(*quick)
    weights = tree_hash(finished / "model")
    rc, line = script(*quick, "--lr", "1e-3")
    results.append(report("03 again into a finished run, other --lr", rc, line,
                          rc == 2 and "finished" in line and tree_hash(finished / "model") == weights))
    rc, line = script(*quick)
    results.append(report("03 again into a finished run, same settings", rc, line,
                          rc == 0 and tree_hash(finished / "model") == weights))
    (finished / "notes.txt").write_text("mine")
    rc, line = script(*quick, "--lr", "1e-3", "--overwrite")
    results.append(report("03 --overwrite a finished run", rc, line, rc == 0 and tree_hash(finished / "model")
                          != weights and (finished / "notes.txt").read_text() == "mine"))
    long = root / "long"
    proc = subprocess.Popen([sys.executable, "04_distill.py", "convert-long", "--model", str(model), "--out",
                             str(long), "--max-length", "131072", "--window", "16"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not (
            long.is_dir() and any((p / "model.safetensors").exists() for p in long.glob(".staging-*/.scratch/*"))):
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    outside = sorted(p.name for p in root.glob(".staging-*"))
    left = sorted(p.name for p in long.glob(".staging-*")) if long.is_dir() else []
    rc, line = script("04_distill.py", "convert-long", "--model", model, "--out", long, "--max-length", "64",
                      "--window", "16")
    results.append(report(f"convert-long killed while saving ({len(left)} private folder left in --out)", rc, line,
                          rc == 0 and not outside and not list(long.glob(".staging-*"))))
    damaged = root / "damaged-card"
    shutil.copytree(model, damaged)
    for name, card in (("YAML that does not parse", b"---\nbase_model: [x\n---\n"),
                       ("a list", b"---\n- a\n---\n"), ("a key that is not a string", b"---\n? [a]\n: b\n---\n"),
                       ("bytes that are not UTF-8", b"---\nbase_model: \xff\n---\n"),
                       ("a 10 MB base_model", b"---\nbase_model: " + b"a" * (10 << 20) + b"\n---\n")):
        (damaged / "README.md").write_bytes(card)
        out = root / f"card-{len(results)}"
        rc, line = script(*quick[:-1], out, "--model", damaged)
        results.append(report(f"03 from a model whose card is {name}", rc, line, rc == 0 and
                              (out / "model" / "README.md").stat().st_size < 64 << 10))
    from safetensors.torch import load_file, save_file
    weights = load_file(model / "model.safetensors")
    broken = root / "broken"
    for name, damage in (("an empty model.safetensors", lambda f: (f / "model.safetensors").write_bytes(b"")),
                         ("a truncated model.safetensors", lambda f: (f / "model.safetensors").write_bytes(
                             (model / "model.safetensors").read_bytes()[:4000])),
                         ("weights stored as int8", lambda f: save_file(
                             {k: v.to(__import__("torch").int8) for k, v in weights.items()},
                             f / "model.safetensors", metadata={"format": "pt"})),
                         ("a tokenizer.json without added_tokens", lambda f: (f / "tokenizer.json").write_text(
                             json.dumps({k: v for k, v in json.loads((model / "tokenizer.json").read_text()).items()
                                         if k != "added_tokens"}))),
                         ("a tokenizer.json of {}", lambda f: (f / "tokenizer.json").write_text("{}"))):
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(model, broken)
        damage(broken)
        rc, line = script("05_evaluate.py", "--data", data, "--model", f"b={broken}", "--out", root / "ev-broken",
                          "--overwrite")
        results.append(report(f"05 on {name}", rc, line, rc == 2 and str(broken) in line))
    odd = root / "m|`<img src=x onerror=alert(1)>]"
    shutil.copytree(model, odd)
    (odd / "README.md").write_text("---\nbase_model: sentence-transformers/all-MiniLM-L6-v2\n---\n")
    out = root / "odd-run"
    rc, line = script(*quick[:-1], out, "--model", odd)
    rc2, line2 = script("05_evaluate.py", "--data", data, "--model", f"t={out / 'model'}", "--model", f"o={odd}",
                        "--out", root / "odd-eval", "--max-length", "32")
    report_text = (root / "odd-eval" / "report.md").read_text() if rc2 == 0 else ""
    results.append(report("a start model's path with | ` <img> ]: card and report", rc or rc2, line2,
                          rc == rc2 == 0 and card_is_whole(out / "model" / "README.md")
                          and "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%5D" in report_text))
    for script_name, args in (("reproduce/ablation.py", ["--data", data, "--base", root / "nowhere", "--out", root,
                                                         "--rows", "default"]),
                              ("reproduce/distill_probe.py", ["--data", data, "--teach", root, "--eval",
                                                              root / "nowhere", "--raw", root]),
                              ("reproduce/compare.py", ["wikispecter", root / "nowhere.json"]),
                              ("reproduce/label_links.py", [root / "nowhere.jsonl", data]),
                              ("reproduce/manifests.py", [root / "nowhere"])):
        rc, line = script(script_name, *args)
        results.append(report(f"{script_name} on a missing input", rc, line, rc == 2 and "nowhere" in line))
    return results


def killed_when(args, ready, timeout=300):
    """Run a script as a user would and kill it with SIGKILL once ``ready()`` holds (or it ends)."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, *map(str, args)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                            "TOKENIZERS_PARALLELISM": "false"})
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline and not ready():
        time.sleep(0.002)
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return killed


def outputs_hash(folder):
    """``tree_hash`` of what a folder holds but a killed run's lock, private folders and unfinished replacement."""
    return {k: v for k, v in tree_hash(folder).items()
            if not k.split(os.sep)[0].startswith((".lock", ".staging-", ".next-run"))}


def overwrite_cases(root, model, data, train):
    """--overwrite killed before its new output exists (03 and 04 train, 02, 04 teachers, 05 extract), a user's file in
    a folder a previous run wrote, a manifest that names '.', two file outputs of one stem and two side by side whose
    names extend each other, the masked LM's cache, and a --cache-dir among the inputs."""
    results = []
    run = root / "ow-run"
    quick = [*train[:-2], "--checkpoint-every", "1", "--data", data, "--out", run]
    script(*quick)
    (run / "model" / "notes.txt").write_text("mine")
    before = outputs_hash(run)
    killed = killed_when([*quick, "--lr", "1e-3", "--overwrite"],
                         lambda: (run / ".next-run" / "checkpoints" / "step_1" / "trainer_state.json").exists())
    after = outputs_hash(run)
    rc, line = script(*quick)
    again = outputs_hash(run)
    results.append(report("03 --overwrite killed at its first step: the finished run", rc, line,
                          killed and after == before and rc == 0 and again == before))
    rc, line = script(*quick, "--lr", "1e-3", "--overwrite")
    results.append(report("03 --overwrite again: resumed, replaced, user's file kept", rc, line,
                          rc == 0 and (run / "model" / "notes.txt").read_text() == "mine"
                          and json.loads((run / "manifest.json").read_text())["identity"]["lr"] == 1e-3
                          and not (run / ".next-run").exists()))
    teach = root / "ow-teach"
    teachers = ["04_distill.py", "teachers", "--data", data, "--teacher", model, "--teacher-max-length", "32",
                "--pv-vector-size", "8", "--pv-epochs", "1", "--pv-min-count", "1", "--out", teach]
    script(*teachers)
    (teach / "pv" / "notes.txt").write_text("mine")
    before = outputs_hash(teach)
    killed = killed_when([*teachers, "--pv-vector-size", "16", "--overwrite"],
                         lambda: any(p.name == "sbert.npy" for p in teach.glob(".staging-*/*")))
    results.append(report("04 teachers --overwrite killed before its commit", 0 if killed else 1, "",
                          killed and outputs_hash(teach) == before))
    rc, line = script(*teachers, "--pv-vector-size", "16", "--pv", "dbow", "--overwrite")
    results.append(report("04 teachers --overwrite: a user's file in pv/ kept", rc, line,
                          rc == 0 and (teach / "pv" / "notes.txt").read_text() == "mine"
                          and not (teach / "pv" / "dm.model").exists()))
    evaluation = root / "ow-eval"
    evaluate = ["05_evaluate.py", "--data", data, "--model", f"b={model}", "--out", evaluation, "--max-length", "32",
                "--task", "crossref"]
    script(*evaluate)
    (evaluation / "notes.txt").write_text("mine")
    manifest = json.loads((evaluation / "manifest.json").read_text())
    (evaluation / "manifest.json").write_text(json.dumps({**manifest, "files": manifest["files"] + [".", ".."]}))
    rc, line = script(*evaluate, "--overwrite")
    results.append(report("05 --overwrite whose manifest names '.' and '..'", rc, line,
                          rc == 0 and (evaluation / "notes.txt").read_text() == "mine"
                          and (evaluation / "metrics.json").is_file() and (evaluation / "b.npy").is_file()))
    graph_out = root / "ow-data"
    graph = ["02_build_graph.py", "--articles", root / "articles.jsonl", "--crossref-min-links", "2", "--topic-min",
             "2", "--eval-docs", "shared", "--out", graph_out]
    script(*graph)
    manifest = json.loads((graph_out / "manifest.json").read_text())
    (graph_out / "manifest.json").write_text(json.dumps({**manifest, "files": ["../articles.jsonl", "/", "."]}))
    rc, line = script(*graph, "--seed", "7", "--overwrite")
    results.append(report("02 --overwrite whose manifest names a file outside and '/'", rc, line,
                          rc == 0 and (root / "articles.jsonl").is_file() and (graph_out / "docs.jsonl").is_file()))
    keys = root / "keys"
    articles = root / "articles.jsonl"
    extract = ["05_evaluate.py", "extract", "--model", model, "--input", articles, "--query", "gene"]
    for name in ("keys.jsonl", "keys.txt"):
        script(*extract, "--out", keys / name)
    manifests = [json.loads((keys / f"{name}.manifest.json").read_text())["args"]["out"]
                 for name in ("keys.jsonl", "keys.txt")]
    results.append(report("05 extract --out x/keys.txt beside x/keys.jsonl", 0, "",
                          manifests == [str(keys / "keys.jsonl"), str(keys / "keys.txt")]))
    big = root / "many.jsonl"
    big.write_text("".join(json.dumps({"id": f"a{i}", "text": "One gene here. Two genes there. " * 20}) + "\n"
                           for i in range(3000)), encoding="utf-8")
    side = root / "side"
    proc = subprocess.Popen([sys.executable, "05_evaluate.py", "extract", "--model", str(model), "--input", str(big),
                             "--query", "gene", "--out", str(side / "a-b.jsonl")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import time
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not list(side.glob(".staging-a-b.jsonl-*")):
        time.sleep(0.005)
    rc, line = script(*extract, "--out", side / "a")
    rc2 = proc.wait()
    results.append(report("two extracts side by side into x/a and x/a-b.jsonl", rc or rc2, line,
                          rc == rc2 == 0 and (side / "a").is_file() and (side / "a-b.jsonl").is_file()))
    cache = root / "hf-datasets-cache"
    mlm = ["03_train.py", "--model", model, "--objective", "mlm", "--max-length", "16", "--batch-size", "8",
           "--max-steps", "1", "--eval-every", "0", "--checkpoint-every", "0", "--data", data, "--out",
           root / "mlm-run"]
    proc = subprocess.run([sys.executable, *map(str, mlm)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(cache)})
    results.append(report("03 mlm writes its token cache inside --out", proc.returncode,
                          (proc.stderr.strip().splitlines() or [""])[-1],
                          proc.returncode == 0 and not list(cache.rglob("*.arrow"))
                          and list((root / "mlm-run" / "cache").iterdir())))
    before = tree_hash(data)
    rc, line = script(*mlm[:-1], root / "mlm-run2", "--cache-dir", data / "cache")
    results.append(report("03 mlm --cache-dir inside --data", rc, line,
                          rc == 2 and "which this command reads" in line and tree_hash(data) == before))
    return results


def link_cases(root, model, data, train):
    """A symbolic link in a run folder where a command moves, writes or deletes: RUN/.next-run to another finished
    run (a replacement would move its files in and delete RUN's), RUN/cache to a folder outside (the masked LM's
    token cache), RUN/epoch_1 and a link inside RUN/model: each refused in one line by every command, with nothing
    anywhere moved, written or deleted."""
    results = []
    run, other, outside = root / "ln-run", root / "ln-other", root / "ln-outside"
    quick = [*train, "--data", data, "--out", run]
    mlm = ["03_train.py", "--model", model, "--objective", "mlm", "--max-length", "16", "--batch-size", "8",
           "--max-steps", "1", "--eval-every", "0", "--checkpoint-every", "0", "--data", data, "--out", run]
    script(*quick)
    shutil.rmtree(run / "cache")  # the documents a triplet run maps; the case puts a link in its place
    shutil.copytree(run, other)
    outside.mkdir()
    (outside / "config.json").write_text("outside")
    (run / "model" / "1_Pooling" / "config.json").unlink()
    for name, target in ((".next-run", other), ("cache", outside), ("epoch_1", outside),
                         ("model/1_Pooling/config.json", outside / "config.json")):
        (run / name).symlink_to(target)
        before = [tree_hash(folder) for folder in (run, other, outside)]
        refused = []
        for args in (quick, [*quick, "--lr", "1e-3"], [*quick, "--lr", "1e-3", "--overwrite"], mlm):
            rc, line = script(*args)
            refused.append(rc == 2 and line == f"error: {run / name}: a symbolic link in the run folder; remove it "
                                              "(a run never moves, writes or deletes through one)")
        results.append(report(f"03 with a link at RUN/{name} (same, other, --overwrite, mlm)", rc, line,
                              all(refused) and [tree_hash(folder) for folder in (run, other, outside)] == before
                              and (run / name).is_symlink()))
        os.remove(run / name)
    return results


def resume_cases(root, model, data, train):
    """A checkpoint holding another step than its folder names (step_2 holding step 3): passed over with a note for
    the one before, the run resumed to the weights of one not stopped; a run finished on two processes (as an
    earlier version's manifest records it) is not done to the same command on one."""
    results = []
    run = root / "rs-run"
    quick = [*train, "--keep", "0", "--data", data, "--out", run]
    script(*quick)
    weights, log = tree_hash(run / "model"), (run / "log.jsonl").read_text()
    for name in ("model", "manifest.json"):  # killed before its end
        written.remove_entry(run / name)
    shutil.copy(run / "checkpoints" / "step_3" / "trainer_state.json", run / "checkpoints" / "step_2")
    written.remove_entry(run / "checkpoints" / "step_3")
    proc = subprocess.run([sys.executable, *map(str, quick)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    results.append(report("03 resumed where step_2 holds step 3", proc.returncode,
                          (proc.stderr.strip().splitlines() or [""])[-1],
                          proc.returncode == 0 and "step_2 cannot be read (trainer_state.json: step 3, where its "
                          "folder names step 2)" in proc.stdout and "step_1 (step 1 of 3)" in proc.stdout
                          and (run / "log.jsonl").read_text().count("\n") == log.count("\n")
                          and tree_hash(run / "model") == weights))
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["identity"]["processes"]
    (run / "manifest.json").write_text(json.dumps({**manifest, "counts": {**manifest["counts"], "processes": 2}}))
    rc, line = script(*quick)
    results.append(report("03 on one process over a run finished on two", rc, line,
                          rc == 2 and "finished on 2 processes, and this launch starts 1; launch 2" in line))
    return results


def launch_cases(root, model, data, train):
    """Two processes launched on a machine without a GPU, by a bare torchrun and by accelerate launch --multi_gpu:
    one run of two processes (not two runs on one --out, the second refused as in use), which the same command on one
    process then finds finished on two processes, not one."""
    import socket
    results = []
    launchers = (("torchrun", ["torch.distributed.run", "--nproc_per_node", "2", "--master_port"]),
                 ("accelerate launch --multi_gpu", ["accelerate.commands.launch", "--multi_gpu", "--num_processes",
                                                    "2", "--main_process_port"]))
    for k, (name, launcher) in enumerate(launchers):
        run = root / f"launch-{k}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {key: v for key, v in os.environ.items() if key != "ACCELERATE_USE_CPU"}
        proc = subprocess.run([sys.executable, "-m", *launcher, str(port), *map(str, train), "--data", str(data),
                               "--out", str(run)], cwd=ROOT, capture_output=True, text=True,
                              env={**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
        joined = proc.returncode == 0 and json.loads((run / "manifest.json").read_text())["counts"]["processes"] == 2
        rc, line = script(*train, "--data", data, "--out", run)
        results.append(report(f"03 under {name}, 2 CPU processes; then 1", proc.returncode,
                              (proc.stderr.strip().splitlines() or [""])[-1] if not joined else line,
                              joined and rc == 2 and "finished on 2 processes, and this launch starts 1" in line))
    return results


def number_cases(root, model, data, train):
    """Numbers not checked before use: flags (a line limit past memory, shares that add up past 1, a pair length too
    short for --nsp, NaN and infinity, 05's resamples and re-splits past what it can finish) and numbers in files (a label of true, a checkpoint's state, a log record,
    teacher vectors past float32, a document id that is a list)."""
    results = []
    mlm = ["03_train.py", "--model", model, "--objective", "mlm", "--data", data, "--out", root / "x"]
    for name, args in (("--max-line-mb 2**43", ["01_extract.py", "sentences", "--input", root / "in.jsonl", "--out",
                                                root / "x", "--max-line-mb", str(1 << 43)]),
                       ("--mask-replace-prob 0.8 --random-replace-prob 0.5", [*mlm, "--mask-replace-prob", "0.8",
                                                                              "--random-replace-prob", "0.5"]),
                       ("--nsp --max-length 4", [*mlm, "--nsp", "--max-length", "4"]),
                       ("--whole-word-mask --random-replace-prob 0.1", [*mlm, "--whole-word-mask",
                                                                       "--random-replace-prob", "0.1"]),
                       ("--lr nan", [*train, "--data", data, "--out", root / "x", "--lr", "nan"]),
                       ("--warmup inf", [*train, "--data", data, "--out", root / "x", "--warmup", "inf"]),
                       ("--topic-test 1e309", ["02_build_graph.py", "--articles", root / "articles.jsonl", "--out",
                                               root / "x", "--topic-test", "1e309"]),
                       ("05 --resamples 2**30", ["05_evaluate.py", "--data", data, "--model", f"m={model}", "--out",
                                                 root / "x", "--resamples", str(1 << 30)]),
                       ("05 --resplits 100000", ["05_evaluate.py", "--data", data, "--model", f"m={model}", "--out",
                                                 root / "x", "--resplits", "100000"])):
        rc, line = script(*args)
        results.append(report(name, rc, line, rc == 2 and not (root / "x").exists()))
    sentences = root / "labels.jsonl"
    sentences.write_text('{"id": "a", "sentences": ["One.", "Two."], "labels": [true, 0]}\n', encoding="utf-8")
    rc, line = script("02_build_graph.py", "sentences", "--sentences", sentences, "--out", root / "x")
    results.append(report("02 sentences with a label of true", rc, line, rc == 2 and f"{sentences}:1" in line))
    run = root / "num-run"
    quick = [*train, "--data", data, "--out", run]
    script(*quick)
    for name in ("model", "manifest.json"):
        written.remove_entry(run / name)
    state = run / "checkpoints" / "step_3" / "trainer_state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "best": "abc", "step": True}))
    rc, line = script(*quick)
    results.append(report("a checkpoint whose state says step true, best 'abc' (the one before resumed)", rc, line,
                          rc == 0 and (run / "model").is_dir()))
    for name in ("model", "manifest.json"):
        written.remove_entry(run / name)
    log = run / "log.jsonl"
    log.write_text('{"step": 1, "epoch": "abc", "loss": 1.0}\n' + log.read_text())
    rc, line = script(*quick)
    results.append(report("a log.jsonl record whose epoch is 'abc' on resume", rc, line,
                          rc == 2 and f"{log}:1: field 'epoch'" in line))
    teach = root / "num-teach"
    hand_edited(root / "ow-teach", teach)
    vectors = __import__("numpy").load(teach / "sbert.npy").astype("float64")
    vectors[0, 0] = 1e300
    __import__("numpy").save(teach / "sbert.npy", vectors)
    rc, line = script("04_distill.py", "train", "--data", data, "--teachers", teach, "--model", model, "--out",
                      root / "x", "--max-length", "32", "--max-steps", "1", "--preset", "only-mse")
    results.append(report("teacher vectors past float32's range", rc, line, rc == 2 and "float32's range" in line))
    hand = root / "hand-data"
    hand_edited(data, hand)
    lines = (hand / "docs.jsonl").read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "id": ["d2"]})
    (hand / "docs.jsonl").write_text("\n".join(lines) + "\n")
    rc, line = script(*train, "--data", hand, "--out", root / "x")
    results.append(report("03 on a docs.jsonl whose id is a list", rc, line,
                          rc == 2 and f"{hand / 'docs.jsonl'}:3: field 'id'" in line))
    return results


def children(pid):
    """The process ids whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def alive(pid):
    """Whether process ``pid`` runs (a zombie its new parent has not reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def hardening_cases(root, model, data, train):
    """The same document at two places in docs.jsonl, a search whose flags or manifest would embed its queries
    otherwise than its index, 05's classifiers failing, killed from outside and outliving a 05 killed with SIGKILL,
    the masked LM's cache where a file stands and damaged and its --out held by another run, a launch's number of
    processes that is no number, and sizes against what they feed (convert-long's length, --warmup past the run)."""
    import signal
    import time
    import numpy as np
    from common.outdir.folder_lock import LOCK, FolderLock
    from common.distributed import LAUNCH_SIZES
    results = []
    twice = root / "twice-data"
    hand_edited(data, twice)
    lines = [json.loads(line) for line in (twice / "docs.jsonl").read_text().splitlines()]
    for k in (0, len(lines) - 1):  # first and last: the cut of one is checked, not the other's
        lines[k] = {**lines[k], "title": "Twice", "text": "war\x1f" * 40 + "peace " * 10}
    (twice / "docs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rc, line = script("05_evaluate.py", "--data", twice, "--model", f"b={model}", "--out", root / "twice-eval",
                      "--task", "crossref", "--max-length", "16")
    vectors = np.load(root / "twice-eval" / "b.npy") if rc == 0 else np.zeros((2, 1))
    cosine = float(vectors[0] @ vectors[-1] / np.linalg.norm(vectors[0]) / np.linalg.norm(vectors[-1]))
    results.append(report(f"one document first and last in docs.jsonl (cosine {cosine:.6f})", rc, line,
                          rc == 0 and np.allclose(vectors[0], vectors[-1], atol=1e-6)))
    evaluation = root / "mean-eval"
    script("02_build_graph.py", "retrieval", "--articles", root / "papers.jsonl", "--out", root / "pdata2")
    script("05_evaluate.py", "--data", root / "pdata2", "--model", f"base={model}", "--out", evaluation, "--task",
           "retrieval", "--pooling", "base=mean", "--max-length", "24")
    search = ["05_evaluate.py", "search", "--model", model, "--data", root / "pdata2", "--index", evaluation]
    rc, line = script(*search, "gene expression")
    results.append(report("search --index of a mean-pooled evaluation, no flag", rc, line, rc == 0))
    rc, line = script(*search, "--pooling", "cls", "gene expression")
    results.append(report("search --index --pooling cls over mean-pooled vectors", rc, line,
                          rc == 2 and "embedded with pooling mean" in line))
    manifest = json.loads((evaluation / "manifest.json").read_text())
    manifest.pop("sha256")
    manifest.pop("embedding")
    (evaluation / "manifest.json").write_text(json.dumps(manifest))
    rc, line = script(*search, "gene expression")
    results.append(report("search --index whose manifest records no embedding", rc, line,
                          rc == 2 and "records no embedding" in line))
    small = root / "small-topics"
    hand_edited(data, small)
    (small / "topics.top.train.jsonl").write_text('{"id": "d0", "label": "tiede"}\n{"id": "d3", "label": "tiede"}\n'
                                                  '{"id": "d1", "label": "taide"}\n{"id": "d4", "label": "taide"}\n')
    rc, line = script("05_evaluate.py", "--data", small, "--model", f"b={model}", "--out", root / "small-eval")
    results.append(report("05 on a topic split too small for the 3-fold grid search", rc, line,
                          rc == 2 and "topics.top.train.jsonl" in line))
    evaluate = [sys.executable, "05_evaluate.py", "--data", str(data), "--model", f"b={model}", "--out",
                str(root / "killed-eval"), "--max-length", "32", "--resplits", "200", "--resamples", "0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(evaluate, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not children(proc.pid):
        time.sleep(0.002)
    workers = children(proc.pid)
    if workers:
        os.kill(workers[0], signal.SIGKILL)
    line = (proc.communicate()[1].strip().splitlines() or [""])[-1]
    results.append(report("a classifier process of 05 killed from outside", proc.returncode, line,
                          bool(workers) and proc.returncode == 2 and f"its process {workers[0]} was killed by SIGKILL"
                          in line))
    proc = subprocess.Popen(evaluate, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    while proc.poll() is None and time.time() < deadline and not children(proc.pid):
        time.sleep(0.002)
    workers = children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ended = time.time() + 10
    while time.time() < ended and any(map(alive, workers)):
        time.sleep(0.01)
    left = [w for w in workers if alive(w)]
    rc, line = script(*evaluate[1:])
    results.append(report(f"05 killed by SIGKILL beside {len(workers)} forked process(es), then run again", rc, line,
                          bool(workers) and not left and rc == 0))
    mlm = ["03_train.py", "--model", model, "--objective", "mlm", "--max-length", "16", "--batch-size", "8",
           "--max-steps", "1", "--eval-every", "0", "--checkpoint-every", "0", "--data", data]
    a_file = root / "a-file"
    a_file.write_text("mine")
    for name, args, words in (("--cache-dir a file", ["--out", root / "c1", "--cache-dir", a_file], "a file, not"),
                              ("--cache-dir under a file", ["--out", root / "c2", "--cache-dir", a_file / "c"],
                               "a file stands where"),
                              ("--out under a file", ["--out", a_file / "run"], "cannot be created")):
        rc, line = script(*mlm, *args)
        results.append(report(f"03 mlm {name}", rc, line, rc == 2 and words in line and a_file.read_text() == "mine"))
    held = root / "held-run"
    held.mkdir()
    with FolderLock(str(held)):
        rc, line = script(*mlm, "--out", held)
        left = sorted(os.listdir(held))
    results.append(report("03 mlm on an --out another run holds", rc, line,
                          rc == 2 and "in use by another run" in line and left == [LOCK]))
    for name in LAUNCH_SIZES:
        proc = subprocess.run([sys.executable, *map(str, mlm), "--out", root / "sized"], cwd=ROOT, capture_output=True,
                              text=True, env={**env, name: "-1"})
        line = (proc.stderr.strip().splitlines() or [""])[-1]
        results.append(report(f"03 under {name}=-1", proc.returncode, line,
                              proc.returncode == 2 and line.startswith(f"error: {name}='-1'")
                              and not (root / "sized").exists()))
    cached_run = root / "cached-run"
    script(*mlm, "--out", cached_run)
    for cached in (cached_run / "cache").glob("mlm-parts-*/*.npy"):
        cached.write_bytes(cached.read_bytes()[:100])
    rc, line = script(*mlm, "--out", cached_run, "--lr", "1e-3", "--overwrite")
    results.append(report("03 mlm over truncated token parts (made again)", rc, line, rc == 0))
    rc, line = script("04_distill.py", "convert-long", "--model", model, "--out", root / "long1", "--max-length", "1",
                      "--window", "2")
    results.append(report("convert-long --max-length 1", rc, line,
                          rc == 2 and "special tokens" in line and not (root / "long1").exists()))
    rc, line = script(*train, "--data", data, "--out", root / "w1", "--warmup", "1e300")
    results.append(report("--warmup 1e300", rc, line, rc == 2 and not (root / "w1").exists()))
    proc = subprocess.run([sys.executable, *map(str, [*train[:-2], "--checkpoint-every", "0", "--data", data,
                                                      "--out", root / "w2", "--warmup", "10"])],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    note = [out for out in proc.stdout.splitlines() if out.startswith("note: --warmup")]
    results.append(report("--warmup 10 over a run of 3 steps", proc.returncode, (note or [""])[0],
                          proc.returncode == 0 and len(note) == 1))
    return results


def dataset_cases(root, model, data, train):
    """01 hf on datasets that name files outside themselves, that its libraries cannot read, and CSV rows that
    pandas would shift; 02 classify with a task named twice; 05 on a docs.jsonl id holding a space."""
    import gzip
    import datasets
    results = []
    outside = root / "outside.csv"
    outside.write_text("text,label\nsecret,1\n")
    saved = root / "saved"
    datasets.Dataset.from_dict({"text": ["a text", "another"]}).save_to_disk(str(saved))
    datasets.Dataset.from_dict({"text": ["secret"]}).save_to_disk(str(root / "other"))
    state = json.loads((saved / "state.json").read_text())
    (saved / "state.json").write_text(json.dumps({**state, "_data_files": [
        {"filename": "../other/data-00000-of-00001.arrow"}]}))
    readme = root / "readme"
    readme.mkdir()
    (readme / "train.csv").write_text("text\nmine\n")
    (readme / "README.md").write_text('---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n'
                                      '    path: "../outside.csv"\n---\n')
    ragged = root / "ragged.csv"
    ragged.write_text("1,one,two\n0,three\n")
    cut = root / "cut.csv.gz"
    cut.write_bytes(gzip.compress(b"text\n" + b"".join(b"row %d\n" % k for k in range(1000)))[:-100])
    scripted = root / "scripted"
    scripted.mkdir()
    (scripted / "scripted.py").write_text(f"open({str(root / 'ran')!r}, 'w')\n")
    (scripted / "train.csv").write_text("text\na\n")
    hf = ["01_extract.py", "hf", "--dataset"]
    for name, args, words in (
            ("01 hf: state.json names an Arrow file outside", [saved], "outside"),
            ("01 hf: README configs name a file outside", [readme], "outside"),
            ("01 hf: a CSV row short of --csv-columns", [ragged, "--csv-columns", "label", "a", "b", "--text-field",
                                                         "a", "b"], "ragged.csv:2: 2 fields"),
            ("01 hf: a truncated .csv.gz", [cut], "truncated or corrupt compressed file"),
            ("01 hf: a folder holding a dataset script", [scripted], "a dataset script")):
        out = root / "hf-out"
        rc, line = script(*hf, *args, "--out", out)
        results.append(report(name, rc, line, rc == 2 and words in line and not (root / "ran").exists()
                              and (not out.exists() or not os.listdir(out))))
    articles = root / "labelled.jsonl"
    articles.write_text("".join(json.dumps({"id": f"d{k}", "title": "", "text": f"text {k}", "labels": {
        "top": "ab"[k % 2]}}) + "\n" for k in range(4)))
    rc, line = script("02_build_graph.py", "classify", "--name", "t", "--train", articles, "--test", articles,
                      "--name", "t", "--train", articles, "--test", articles, "--out", root / "twice-task")
    results.append(report("02 classify with one --name twice", rc, line, rc == 2 and "given 2 times" in line))
    spaced = root / "spaced-data"
    hand_edited(data, spaced)
    lines = (spaced / "docs.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "id": "a b"})
    (spaced / "docs.jsonl").write_text("\n".join(lines) + "\n")
    rc, line = script("05_evaluate.py", "--data", spaced, "--model", f"b={model}", "--out", root / "spaced-eval")
    results.append(report("05 on a docs.jsonl id holding a space", rc, line,
                          rc == 2 and "docs.jsonl:1: id" in line
                          and (not (root / "spaced-eval").exists() or not os.listdir(root / "spaced-eval"))))
    return results


def safety(work):
    from conftest import build_tiny_model, linked_articles, paper_articles
    from pathlib import Path
    root = Path(tempfile.mkdtemp(dir=work))
    model = build_tiny_model(root / "model")
    articles = root / "articles.jsonl"
    articles.write_text("".join(json.dumps(a) + "\n" for a in linked_articles(40)), encoding="utf-8")
    graph = ["02_build_graph.py", "--articles", articles, "--crossref-min-links", "2", "--topic-min", "2",
             "--eval-docs", "shared"]
    train = ["03_train.py", "--model", model, "--objective", "triplet", "--max-length", "32", "--batch-size", "4",
             "--max-steps", "3", "--eval-every", "0", "--checkpoint-every", "1"]
    results = []
    precious = root / "precious"
    precious.write_text("keep")
    data, run = root / "data", root / "run"
    for folder in (data, run, run / "checkpoints"):
        folder.mkdir(parents=True)
        for name in ("docs.jsonl.tmp", "graph.npz.tmp.indices.tmp", "curves.png.tmp", "log.jsonl.tmp", "x.tmp"):
            (folder / name).symlink_to(precious)
    (data / "manifest.json").write_text(json.dumps({"script": "02_build_graph.py", "files": []}))
    (run / "run.json").write_text(json.dumps({"identity": {}}))
    rc, line = script(*graph, "--out", data, "--overwrite")
    rc2, line2 = script(*train, "--data", data, "--out", run)
    results.append(report("links at temporary names (02, 03)", rc or rc2, line2,
                          rc == rc2 == 0 and precious.read_text() == "keep"))
    (data / "splits.json").unlink()
    (data / "splits.json").symlink_to(precious)
    rc, line = script(*graph, "--out", data, "--overwrite")
    results.append(report("a link at a final name (02)", rc, line,
                          rc == 0 and precious.read_text() == "keep" and not (data / "splits.json").is_symlink()))
    killed = root / "killed"
    shutil.copytree(data, killed, symlinks=True)
    manifest = json.loads((killed / "manifest.json").read_text())
    (killed / "manifest.json").write_text(json.dumps({**manifest, "state": "committing"}))
    for name, args in (("03", [*train, "--data", killed, "--out", root / "r2"]),
                       ("05", ["05_evaluate.py", "--data", killed, "--model", f"base={model}", "--out", root / "e2"])):
        rc, line = script(*args)
        results.append(report(f"a folder killed while committing, read by {name}", rc, line,
                              rc == 2 and "committing" in line))
    edited = root / "edited"
    shutil.copytree(data, edited, symlinks=True)
    with open(edited / "triplets.train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"query": "d1", "pos": "d2", "neg": "d3", "hard": False}) + "\n")
    rc, line = script(*train, "--data", edited, "--out", root / "r3")
    results.append(report("a training file edited after its run", rc, line, rc == 2 and "SHA-256" in line))
    small = root / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                             capture_output=True).returncode == 0
    if mounted:
        try:
            big = root / "big.jsonl"
            big.write_text("".join(json.dumps({**a, "text": a["text"] * 200}) + "\n" for a in linked_articles(40)),
                           encoding="utf-8")
            rc, line = script(*graph[:2], big, *graph[3:], "--out", small / "data")
            big_data = root / "big-data"
            script(*graph[:2], big, *graph[3:], "--out", big_data)
            results.append(report("a full disk (256 KB tmpfs) under 02", rc, line,
                                  rc != 0 and "no space left" in line and not os.listdir(small / "data")))
            rc, line = script(*train, "--data", data, "--out", small / "run")
            results.append(report("a full disk (256 KB tmpfs) under 03's checkpoints", rc, line,
                                  rc != 0 and "no space left" in line))
            shutil.rmtree(small / "run")
            subprocess.run(["mount", "-o", "remount,size=12k", str(small)], check=True)
            rc, line = script("05_evaluate.py", "--data", big_data, "--model", f"base={model}", "--out",
                              small / "eval", "--max-length", "32")
            results.append(report("a full disk (12 KB tmpfs) under 05's vectors", rc, line,
                                  rc != 0 and "no space left" in line and not os.listdir(small / "eval")))
        finally:
            subprocess.run(["umount", str(small)])
    else:
        print("skip a full disk: no tmpfs can be mounted here (needs root)")
    queries = root / "queries.txt"
    queries.write_bytes(b"gene\n\xff expression\n")
    papers = root / "papers.jsonl"
    papers.write_text("".join(json.dumps(a) + "\n" for a in paper_articles()), encoding="utf-8")
    script("02_build_graph.py", "retrieval", "--articles", papers, "--out", root / "pdata")
    for name, path in (("queries not UTF-8", queries), ("a folder as --queries", root)):
        rc, line = script("05_evaluate.py", "search", "--model", model, "--data", root / "pdata", "--queries", path)
        results.append(report(name, rc, line, rc == 2 and str(path) in line))
    log = run / "log.jsonl"
    for name in ("model", "manifest.json"):  # what a killed run lacks
        written.remove_entry(run / name)
    log.write_text("{garbage\n" + log.read_text())
    rc, line = script(*train, "--data", data, "--out", run)
    results.append(report("a damaged log.jsonl on resume", rc, line, rc == 2 and "log.jsonl:1" in line))
    for name, args in (("--student-projection 1e8", ["04_distill.py", "train", "--data", data, "--teachers",
                                                     root / "teach", "--model", model, "--out", root / "x",
                                                     "--student-projection", "100000000"]),
                       ("--max-length 1e8 (05)", ["05_evaluate.py", "--data", data, "--model", f"b={model}",
                                                  "--out", root / "x", "--max-length", "100000000"]),
                       ("--pv-vector-size 1e8", ["04_distill.py", "teachers", "--data", data, "--teacher", model,
                                                 "--out", root / "x", "--pv-vector-size", "100000000"])):
        rc, line = script(*args)
        results.append(report(name, rc, line, rc == 2 and ("must be" in line or "SIZE between" in line)))
    partial = root / "partial"
    script(*train, "--data", data, "--out", partial)
    for name in ("model", "manifest.json", "checkpoints/step_3"):
        written.remove_entry(partial / name)
    rc, line = script(*train, "--data", data, "--out", partial, "--chunk-tokens", "40")
    results.append(report("resume with another --chunk-tokens", rc, line, rc == 2 and "chunk_tokens" in line))
    try:
        import faiss  # noqa: F401
        script("05_evaluate.py", "--data", root / "pdata", "--model", f"base={model}", "--out", root / "ev",
               "--task", "retrieval", "--max-length", "32")
        script("05_evaluate.py", "search", "--model", model, "--data", root / "pdata", "--index", root / "ev",
               "--index-type", "flat", "gene")
        (root / "ev" / "base.flat.faiss").write_bytes(b"garbage")
        rc, line = script("05_evaluate.py", "search", "--model", model, "--data", root / "pdata", "--index",
                          root / "ev", "--index-type", "flat", "gene")
        results.append(report("a damaged faiss index (rebuilt)", rc, line, rc == 0))
    except ImportError:
        print("skip a damaged faiss index: faiss-cpu is not installed")
    results += issue_cases(root, model, data, train)
    results += overwrite_cases(root, model, data, train)
    results += number_cases(root, model, data, train)
    results += link_cases(root, model, data, train)
    results += resume_cases(root, model, data, train)
    results += launch_cases(root, model, data, train)
    results += hardening_cases(root, model, data, train)
    results += dataset_cases(root, model, data, train)
    shutil.rmtree(root, ignore_errors=True)
    print(f"{sum(results)} of {len(results)} cases as expected")
    return 0 if all(results) else 1


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    sys.exit(cli.run(main))
