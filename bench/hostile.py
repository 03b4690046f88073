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
"""

import argparse
import os
import sys

import measure

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
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
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


if __name__ == "__main__":
    main()
