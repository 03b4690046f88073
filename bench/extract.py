"""01_extract.py against wikiextractor on a ≥ 100 MB dump, in one run.

    python bench/extract.py                 # needs `make bench-deps` (wikiextractor, psutil)
    python bench/extract.py --copies 34     # a larger dump

The dump repeats gensim's enwiki sample with fresh page ids and titles (" (k)" appended), so links and
redirects of every copy resolve into the first. Both tools get the same number of parsing processes
(wikiextractor --processes N, 01_extract.py --workers N) and write JSON lines; wikiextractor cleans whole
articles (--no-templates), 01 cleans leads and also emits links resolved through redirects and categories.
Peak RSS is summed over each tool's process tree. 01 also runs on a dump of half the size: flat memory means the
two peaks are alike.
"""

import argparse
import bz2
import json
import os
import re
import shutil
import sys

import measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def sample_path():
    import gensim
    return os.path.join(os.path.dirname(gensim.__file__), "test", "test_data", SAMPLE)


def build_dump(path, copies):
    xml = bz2.open(sample_path(), "rt", encoding="utf-8").read()
    head, rest = xml.split("  <page>", 1)
    body, tail = ("  <page>" + rest).rsplit("</page>", 1)
    body += "</page>\n"
    with bz2.open(path, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write(head)
        for k in range(copies):
            if k == 0:
                out.write(body)
                continue
            page = re.sub(r"<title>(.*?)</title>", lambda m, k=k: f"<title>{m.group(1)} ({k})</title>", body)
            page = re.sub(r"(<page>\s*<title>.*?</title>\s*<ns>\d+</ns>\s*<id>)(\d+)",
                          lambda m, k=k: f"{m.group(1)}{int(m.group(2)) + k * 1_000_000}", page)
            out.write(page)
        out.write(tail)
    return os.path.getsize(path)


def run_measured(cmd):
    seconds, peak, rc, stderr = measure.run_measured(cmd, cwd=ROOT)
    if rc:
        sys.exit(f"{cmd[:3]} failed:\n{stderr[-2000:]}")
    return seconds, peak


def xml_megabytes(path):
    size = 0
    with bz2.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            size += len(chunk)
    return size / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=17, help="copies of the 6 MB sample (17 → 103 MB of XML)")
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "extract"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    dumps = {}
    for copies in (args.copies // 2, args.copies):
        path = os.path.join(args.work, f"enwiki-x{copies}.xml.bz2")
        if not os.path.exists(path):
            print(f"building {path} ...", flush=True)
            build_dump(path + ".tmp.bz2", copies)
            os.replace(path + ".tmp.bz2", path)
        dumps[copies] = path
    big = dumps[args.copies]
    print(f"dump: {xml_megabytes(big):.0f} MB of XML ({os.path.getsize(big) / 1e6:.0f} MB bz2), "
          f"{args.processes} parsing process(es) each")

    results = {}
    for copies, path in dumps.items():
        out = os.path.join(args.work, f"ours-{copies}")
        seconds, peak = run_measured([sys.executable, "01_extract.py", "wiki", "--dump", path, "--out", out,
                                      "--workers", str(args.processes)])
        articles = json.load(open(os.path.join(out, "manifest.json")))["counts"]["articles"]
        results[copies] = (seconds, peak, articles)
    out = os.path.join(args.work, "wikiextractor")
    shutil.rmtree(out, ignore_errors=True)
    wx_seconds, wx_peak = run_measured([sys.executable, "-m", "wikiextractor.WikiExtractor", "--json",
                                        "--no-templates", "--processes", str(args.processes), "-o", out, big])
    wx_articles = sum(1 for root, _, files in os.walk(out) for name in files
                      for _ in open(os.path.join(root, name), encoding="utf-8"))

    seconds, peak, articles = results[args.copies]
    ours_rate, wx_rate = articles / seconds, wx_articles / wx_seconds
    print(f"01_extract.py : {articles:6d} articles in {seconds:6.1f} s = {ours_rate:7.1f} articles/s, "
          f"peak RSS {peak / 1e6:5.0f} MB")
    print(f"wikiextractor : {wx_articles:6d} articles in {wx_seconds:6.1f} s = {wx_rate:7.1f} articles/s, "
          f"peak RSS {wx_peak / 1e6:5.0f} MB")
    print(f"speed ratio 01_extract / wikiextractor: {ours_rate / wx_rate:.2f}x (goal >= 2x)")
    half = results[args.copies // 2]
    print(f"01_extract peak RSS: {half[1] / 1e6:.0f} MB on the {args.copies // 2}-copy dump, "
          f"{peak / 1e6:.0f} MB on the {args.copies}-copy dump (flat memory: alike)")
    print("(01 keeps fewer articles: it drops disambiguation pages and leads under 90 characters)")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
