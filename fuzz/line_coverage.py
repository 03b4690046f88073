"""The line coverage the fuzzer reached: every target's seeds and the corpus its run kept (``fuzz/out/TARGET/
corpus``) replayed under coverage.py, each target measured on the lines of the readers it is there to reach
(``READERS``: the functions it calls and their own helpers; a docstring or a comment is no line).

    python fuzz/line_coverage.py [TARGET ...]
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# the functions (and classes) each target is there to reach: the reader it calls and that reader's own helpers
READERS = {
    "dump": ["common.extract.dump:DumpReader", "common.extract.dump:redirect_target"],
    "dump_bz2": ["common.extract.dump:DumpReader", "common.extract.dump:_decompressed_blocks",
                 "common.extract.dump:PrefetchReader"],
    "wikitext": ["common.extract.wiki:process_article", "common.extract.wiki:is_disambiguation"]
    + ["common.extract.wikitext:" + f for f in ("Spans", "strip_templates", "strip_tables", "outer_links",
                                                "strip_noise", "_link_kind", "strip_nontext_links", "render_links",
                                                "finish_prose", "strip_structure", "clean", "lead", "full_text",
                                                "all_links", "categories", "normalize_title", "title_key")],
    "arxiv": ["common.extract.arxiv:read_records", "common.extract.arxiv:extract_arxiv",
              "common.extract.arxiv:parse_categories", "common.io:read_jsonl"],
    "dictd": ["common.extract.dictd:" + f for f in ("b64_number", "read_index", "link_target",
                                                 "split_entry", "categories", "clean", "extract_dictd")],
    "rst": ["common.extract.rst:" + f for f in ("role_text", "inline", "prose_lines", "title_of", "read_text",
                                             "source_files", "extract_rst")],
    "folder": ["common.extract.plaintext:" + f for f in ("decode", "labelled_files", "extract_folder")],
    "csv": ["common.extract.plaintext:" + f for f in ("decode", "open_table", "extract_csv")],
    "sentences": ["common.extract.sentences:extract_sentences", "common.extract.sentences:clean",
                  "common.extract.sentences:split", "common.extract.sentences:label",
                  "common.data.keysent_splits:read_sentences"],
    "articles": ["common.data.articles:read_articles", "common.data.articles:_check_unique",
                 "common.data.docs_jsonl:Documents"],
    "splits": ["common.data.retrieval:read_split_ids"],
    "triplets": ["common.data.docs_jsonl:read_triplets"],
    "pairs": ["common.data.retrieval:file_queries"],
    "qrels": ["common.io:read_trec_qrels", "common.data.retrieval:read_qrels", "common.eval.wikispecter:read_qrels"],
    "topics": ["common.eval.wikispecter:read_topics", "common.eval.classify:read_split",
               "common.eval.similarity:read_ratings", "common.extract.topic_labels:read_topic_map"],
    "queries": ["common.data.retrieval:read_queries", "common.eval.retrieval:read_query_file"],
    "log": ["common.train.rundir.run_log:read_log"],
    "manifest": ["common.io:read_json_or_empty", "common.io:read_manifest", "common.io:verify_input",
                 "common.train.rundir.run_identity:data_fingerprint", "common.eval.retrieval:read_manifest_args"],
    "manifest_files": ["common.outdir.written:previous_files", "common.outdir.written:written_name",
                       "common.outdir.written:inside", "common.outdir.written:remove_written",
                       "common.outdir.folders:put_written", "common.outdir.folders:_clear_way",
                       "common.outdir.written:entries", "common.outdir.folders:Outputs._claim",
                       "common.outdir.folders:Outputs._commit", "common.outdir.folders:Outputs._remove_stale"],
    "teacher_ids": ["common.distill.teachers:read_vectors", "common.distill.teachers:read_lengths"],
    "npy": ["common.vectors:read_rows", "common.vectors:check_finite_rows", "common.distill.teachers:read_vectors",
            "common.distill.teachers:read_lengths"],
    "safetensors_header": ["common.models.loading:stored_weights", "common.io:read_json"],
    "card_front_matter": ["common.models.card:base_model", "common.models.card:declared_base_model",
                          "common.models.card:hub_name", "common.markdown:escape", "common.models.card:_data",
                          "common.models.card:_files", "common.models.card:_value"],
    "training_flags": ["common.train.objectives.base:Objective", "common.cli:number", "common.cli:check_out"],
    "name_values": ["common.cli:name_values", "common.cli:named", "common.cli:per_name",
                    "common.data.splits:parse_caps", "common.io:safe_name"],
    "projection": ["common.distill.softcca:projection_blocks", "common.distill.softcca:projection",
                   "common.cli:check_memory"],
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", default=list(READERS))
    p.add_argument("--one", help=argparse.SUPPRESS)  # measure one target in this process (a module's import too)
    args = p.parse_args()
    if args.one:
        return measure(args.one)
    print("| target | inputs replayed | reader lines run |\n|---|---:|---:|", flush=True)
    for name in args.targets:
        subprocess.run([sys.executable, __file__, "--one", name], check=True)


def _lines(spec):
    """(file, the line numbers of ``module:name``'s source)."""
    import importlib
    import inspect
    module, name = spec.split(":")
    obj = importlib.import_module(module)
    for part in name.split("."):  # a class's method as Class.method
        obj = getattr(obj, part)
    source, first = inspect.getsourcelines(obj)
    return inspect.getsourcefile(obj), set(range(first, first + len(source)))


def measure(name):
    import coverage
    inputs = []
    for folder in (os.path.join(HERE, "seeds", name), os.path.join(HERE, "corpus", name),
                   os.path.join(HERE, "out", name, "corpus")):
        inputs += [os.path.join(folder, f) for f in sorted(os.listdir(folder))] if os.path.isdir(folder) else []
    cov = coverage.Coverage(data_file=None, include=[os.path.join(ROOT, "common", "*")])
    cov.start()
    sys.path.insert(0, HERE)
    import targets
    with tempfile.TemporaryDirectory() as work:
        for path in inputs:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # a corpus file that a running fuzzer has just replaced by a shorter one
                continue
            targets.run_one(name, data, work)
    cov.stop()
    run = total = 0
    for spec in READERS[name]:
        path, lines = _lines(spec)
        _, statements, _, missing, _ = cov.analysis2(path)
        statements = set(statements) & lines
        total += len(statements)
        run += len(statements - set(missing))
    print(f"| {name} | {len(inputs):,} | {run} / {total} ({100 * run / total:.0f} %) |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
