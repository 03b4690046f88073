"""Coverage-guided fuzzing of one target of ``fuzz/targets.py`` with atheris (libFuzzer for Python).

    python fuzz/run.py TARGET [-runs=100000] [libFuzzer flags]
    python fuzz/run.py --list

The project's modules are instrumented for coverage; the corpus starts from ``fuzz/seeds/TARGET`` (made from the
test data by ``fuzz/seeds.py``) and grows in ``fuzz/out/TARGET/corpus``; a crashing input is saved as
``fuzz/out/TARGET/crash-*`` (copy it to ``fuzz/corpus/TARGET/`` with the fix, where ``make test`` replays it).
The JSON targets' mutations also insert JSON tokens and the files' field names (``fuzz/dicts/json.dict``). Bounds
per input: 10 s (``-timeout``), 2,048 MB of resident memory for the whole process (``-rss_limit_mb``),
inputs of at most 4,096 bytes (``-max_len``); each is a defect when exceeded.
"""

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = ["-timeout=10", "-rss_limit_mb=2048", "-max_len=4096"]
# targets whose files are JSON: their mutations also insert JSON tokens and field names (fuzz/dicts/json.dict)
JSON = ("arxiv", "sentences", "articles", "splits", "triplets", "pairs", "topics", "queries", "log", "manifest",
        "manifest_files", "safetensors_header", "hf_disk")


def main(argv):
    sys.path.insert(0, HERE)
    if not argv or argv[0] == "--list":
        import targets
        print("\n".join(targets.TARGETS))
        return
    import atheris
    name, flags = argv[0], argv[1:]
    out = os.path.join(HERE, "out", name)
    corpus = os.path.join(out, "corpus")
    os.makedirs(corpus, exist_ok=True)
    seeds = [d for d in (os.path.join(HERE, "seeds", name), os.path.join(HERE, "corpus", name)) if os.path.isdir(d)]
    # the work folder is made and removed for every input: in memory where the machine has a tmpfs. libFuzzer ends
    # the process without Python's exit handlers, so the folders of earlier runs that have ended are removed here
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else out
    for old in os.listdir(scratch):
        pid = old[len("docembed-fuzz-"):]
        if old.startswith("docembed-fuzz-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(os.path.join(scratch, old), ignore_errors=True)
    work = os.path.join(scratch, f"docembed-fuzz-{os.getpid()}")
    with atheris.instrument_imports(include=["common", "targets"]):
        import targets
        for folder in seeds:  # the modules a target imports as it runs are imported here, instrumented
            for seed in sorted(os.listdir(folder)):
                with open(os.path.join(folder, seed), "rb") as f:
                    targets.run_one(name, f.read(), work)

    def one_input(data):
        targets.run_one(name, data, work)
    tokens = [f"-dict={os.path.join(HERE, 'dicts', 'json.dict')}"] if name in JSON else []
    atheris.Setup([sys.argv[0], *DEFAULTS, *tokens, f"-artifact_prefix={out}/", *flags, corpus, *seeds], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(lambda: main(sys.argv[1:]))
