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
sizes, and resuming with another --chunk-tokens (refused).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
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
    return ok


def safety(work):
    from conftest import build_tiny_model, linked_articles
    from test_search import paper_articles
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
    rc, line = script(*graph, "--out", data)
    rc2, line2 = script(*train, "--data", data, "--out", run)
    results.append(report("links at temporary names (02, 03)", rc or rc2, line2,
                          rc == rc2 == 0 and precious.read_text() == "keep"))
    (data / "splits.json").unlink()
    (data / "splits.json").symlink_to(precious)
    rc, line = script(*graph, "--out", data)
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
    shutil.rmtree(run / "model")
    log.write_text("{garbage\n" + log.read_text())
    rc, line = script(*train, "--data", data, "--out", run)
    results.append(report("a damaged log.jsonl on resume", rc, line, rc == 2 and "log.jsonl:1" in line))
    for name, args in (("--student-projection 1e8", ["04_distill.py", "train", "--data", data, "--teachers", root,
                                                     "--model", model, "--out", root / "x",
                                                     "--student-projection", "100000000"]),
                       ("--max-length 1e8 (05)", ["05_evaluate.py", "--data", data, "--model", f"b={model}",
                                                  "--out", root / "x", "--max-length", "100000000"]),
                       ("--pv-vector-size 1e8", ["04_distill.py", "teachers", "--data", data, "--teacher", model,
                                                 "--out", root / "x", "--pv-vector-size", "100000000"])):
        rc, line = script(*args)
        results.append(report(name, rc, line, rc == 2 and ("must be" in line or "SIZE between" in line)))
    partial = root / "partial"
    script(*train, "--data", data, "--out", partial)
    shutil.rmtree(partial / "model")
    shutil.rmtree(partial / "checkpoints" / "step_3")
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
    shutil.rmtree(root, ignore_errors=True)
    print(f"{sum(results)} of {len(results)} cases as expected")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
