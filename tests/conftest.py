import gzip
import importlib.util
import json
import os
import subprocess
import sys
from xml.sax.saxutils import escape, quoteattr

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The tests' own process runs as `make test` runs it: offline, every model from a local folder (set before
# huggingface_hub is imported, which reads it once). Without it a hub name that is not in the cache waits for the hub
# through five retries (about 25 s) before it fails.
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
# One intra-op thread unless the caller chose (set before torch is imported; the scripts the tests start inherit it).
# The tiny models' operations are too small to share out, and a second OpenMP thread that spins while the other waits
# for a core made a training step several times slower on a busy machine. The tests of the thread count set their own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
ENV = dict(os.environ, PYTHONHASHSEED="0")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device, skipped without one (pytest -m gpu runs them)")
    config.addinivalue_line("markers", "slow: seconds to a minute each, of a whole that nothing shorter tests (a "
                                       "launcher's processes, a run killed and resumed, the pipeline end to end, a "
                                       "reference library's compile); left out unless -m names them: make test-slow")
    config.addinivalue_line("markers", "slurm: needs a Slurm cluster it starts as root, skipped unless chosen (make "
                            "test-slurm: pytest -m slurm tests/slurm)")


def pytest_collection_modifyitems(config, items):
    """The slow suite runs where ``-m`` selects it (``make test-slow`` runs ``-m slow``, and CI runs it after ``make
    test``) or a test is named by its id; otherwise it is deselected, so that ``make test`` stays the quick suite."""
    if config.option.markexpr or any("::" in arg for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def forget_hashes(folder):
    """Make an output folder a hand-made one, for a test that edits its files on purpose to check what a reader
    does with them: its manifest keeps no SHA-256, so ``io.verify_input`` takes the files as they are."""
    path = os.path.join(folder, "manifest.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    manifest.pop("sha256", None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def unfinish(run, model=True):
    """Make a finished training run one that was killed before its end: its manifest.json (the run's last file)
    removed, and its model with ``model`` (a run that selects its model by validation may have saved one before),
    so that the next run resumes from its checkpoints."""
    import shutil
    if model:
        shutil.rmtree(os.path.join(run, "model"), ignore_errors=True)
    if os.path.exists(os.path.join(run, "manifest.json")):
        os.remove(os.path.join(run, "manifest.json"))


def run_script(script, *args, check=True, timeout=600):
    """Run a numbered script as a user would, from the repository root."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


_MODULES = {}


def script_error(script, *args, in_subprocess=False):
    """The one-line error a numbered script gives for bad input. In-process by default (``main(argv)`` must raise
    the project's InputError, or refuse a flag's value as argparse reads it: exit status 2 and the line on stderr);
    ``in_subprocess`` runs the script as a user would and checks exit status 2."""
    if in_subprocess:
        proc = run_script(script, *args, check=False)
        assert proc.returncode == 2, proc.stderr
        return one_error_line(proc.stderr)
    import contextlib
    import io
    from common.io import InputError
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises((InputError, SystemExit)) as e:
        script_main(script)([str(a) for a in args])
    if isinstance(e.value, SystemExit):
        assert e.value.code == 2, stderr.getvalue()
        return one_error_line(stderr.getvalue())
    return f"error: {e.value}"


def script_module(script):
    """A numbered script as a module, loaded once, to call its functions in this process."""
    if script not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"script_{script.split('_')[0]}", os.path.join(ROOT, script))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[script] = module
    return _MODULES[script]


def script_main(script):
    """A numbered script's ``main(argv)``, to run it in this process."""
    return script_module(script).main


def run_main(script, *args):
    """A numbered script's ``main(argv)`` run in this process, where ``run_script`` would start a fresh one: what it
    printed (``.stdout``, ``.stderr``) and what it returned (``.value``). Its errors are raised, as the project's
    InputError (``script_error`` reads them)."""
    import contextlib
    import io
    from types import SimpleNamespace
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        value = script_main(script)([str(a) for a in args])
    return SimpleNamespace(stdout=stdout.getvalue(), stderr=stderr.getvalue(), value=value)


def train_in_process(argv):
    """03_train.py's run of ``argv`` in this process (its counts), as ``python 03_train.py ARGV`` trains it."""
    training = script_module("03_train.py")
    return training.train(training.parse_args([str(a) for a in argv]))


def st_losses():
    """sentence-transformers' losses module (moved in version 6)."""
    try:
        from sentence_transformers.sentence_transformer import losses
    except ImportError:
        from sentence_transformers import losses
    return losses


def one_error_line(stderr):
    """The error a script printed: exactly one line starts with 'error:', and it is the last (progress bars, which
    also go to stderr, may precede it)."""
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    return errors[0]


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_lines(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


FINNISH_NAMESPACES = {-2: "Media", -1: "Toiminnot", 0: "", 1: "Keskustelu", 2: "Käyttäjä", 4: "Wikipedia",
                      6: "Tiedosto", 10: "Malline", 14: "Luokka"}
ENGLISH_NAMESPACES = {-2: "Media", -1: "Special", 0: "", 1: "Talk", 2: "User", 4: "Wikipedia", 6: "File",
                      10: "Template", 14: "Category"}


def make_dump(pages, namespaces=FINNISH_NAMESPACES, lang="fi"):
    """A MediaWiki export document. ``pages``: (id, title, ns, text) or (id, title, ns, text, redirect)."""
    ns_xml = "".join(
        f'      <namespace key="{k}" case="first-letter">{escape(v)}</namespace>\n' if v else
        f'      <namespace key="{k}" case="first-letter" />\n' for k, v in namespaces.items())
    out = [f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="{lang}">\n'
           f"  <siteinfo>\n    <sitename>Wikipedia</sitename>\n    <case>first-letter</case>\n"
           f"    <namespaces>\n{ns_xml}    </namespaces>\n  </siteinfo>\n"]
    for page in pages:
        page_id, title, ns, text = page[:4]
        redirect = page[4] if len(page) > 4 else None
        red = f"    <redirect title={quoteattr(redirect)} />\n" if redirect else ""
        out.append(f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
                   f"{red}    <revision>\n      <id>{page_id * 10}</id>\n      <contributor><id>1</id></contributor>\n"
                   f'      <text xml:space="preserve">{escape(text)}</text>\n    </revision>\n  </page>\n')
    out.append("</mediawiki>\n")
    return "".join(out)


@pytest.fixture
def write_dump(tmp_path):
    def write(pages, name="dump.xml", **kw):
        path = tmp_path / name
        data = make_dump(pages, **kw).encode("utf-8")
        if name.endswith(".bz2"):
            import bz2
            data = bz2.compress(data)
        path.write_bytes(data)
        return path
    return write


WORDS = ("kaupunki maa joki meri vuori metsä järvi saari tie silta kirkko linna koulu kirja laulu runo taide "
         "tiede fysiikka kemia biologia historia sota rauha kuningas presidentti valtio kunta kylä satama rautatie "
         "city country river sea mountain forest lake island road bridge church castle school book song poem art "
         "science physics chemistry biology history war peace king president state town village harbour railway "
         "gene cell knockout crispr protein mutation silence edit remove lack expression tumour line mouse "
         "human").split()


def corpus_text(seed=0, n=400):
    import random
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 25))).capitalize() + "." for _ in range(n)]


def build_tiny_model(path, max_position=64, seed=0):
    """A small BERT and a WordPiece tokenizer trained on the fixture vocabulary, saved as a user's model folder."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast
    path.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=False)
    wordpiece.train_from_iterator(corpus_text() + [" ".join(WORDS)], vocab_size=300, min_frequency=1,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    wordpiece.save_model(str(path))
    tokenizer = BertTokenizerFast(str(path / "vocab.txt"), do_lower_case=False)  # positional: 4.x and 5.x names differ
    tokenizer.model_max_length = max_position
    tokenizer.save_pretrained(str(path))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=max_position, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1)
    BertModel(config).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bert")


def linked_articles(n=60, seed=1, labels=("tiede", "taide", "maa")):
    """A corpus in the contract format with a link structure: articles link within their topic."""
    import random
    rng = random.Random(seed)
    texts = corpus_text(seed, n)
    out = []
    for i in range(n):
        topic = i % len(labels)
        same = [j for j in range(n) if j % len(labels) == topic and j != i]
        links = [f"d{j}" for j in rng.sample(same, rng.randint(2, 7))]
        out.append({"id": f"d{i}", "title": f"{WORDS[i % len(WORDS)].capitalize()} {i}",
                    "text": f"{labels[topic]} {texts[i]}", "links": links,
                    "labels": {"top": labels[topic]}})
    return out


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A data directory from 02 over ``linked_articles``; evaluation documents shared with training (in 60
    articles the held-out ones would leave nothing to train on)."""
    root = tmp_path_factory.mktemp("data")
    with open(root / "articles.jsonl", "w", encoding="utf-8") as f:
        for a in linked_articles():
            f.write(json.dumps(a) + "\n")
    script_main("02_build_graph.py")(["--articles", str(root / "articles.jsonl"), "--out", str(root / "data"),
                                      "--crossref-min-links", "2", "--topic-min", "5", "--eval-docs", "shared"])
    return root / "data"


def paper_articles(n=60, seed=3):
    """Papers in the contract format for paper search: a title and an abstract each, no links, two topics."""
    texts = corpus_text(seed, n)
    return [{"id": f"p{i}", "title": f"{WORDS[(7 * i) % len(WORDS)]} {WORDS[(3 * i + 1) % len(WORDS)]} {i}",
             "text": texts[i], "links": [], "labels": {"top": ("tiede", "taide")[i % 2]}} for i in range(n)]


@pytest.fixture(scope="session")
def paper_data(tmp_path_factory):
    """A data directory from 02 retrieval over ``paper_articles``, test and validation 20 % each, with one abstract
    repeated (a false negative where both papers share a batch). Read only: a test that changes it copies it."""
    root = tmp_path_factory.mktemp("papers")
    articles = paper_articles()
    articles[5]["text"] = articles[4]["text"]
    (root / "articles.jsonl").write_text("".join(json.dumps(a) + "\n" for a in articles), encoding="utf-8")
    script_main("02_build_graph.py")(["retrieval", "--articles", str(root / "articles.jsonl"), "--out",
                                      str(root / "data"), "--test", "0.2", "--val", "0.2", "--topic-min", "5"])
    return root / "data"


KEYSENT_DEMO = os.path.join(ROOT, "data", "keysent-demo.jsonl")


@pytest.fixture(scope="session")
def keysent_data(tmp_path_factory):
    """The key-sentence demo's abstracts through 01 sentences (ROOT/sentences.jsonl) and 02 sentences (ROOT/data).
    Read only."""
    root = tmp_path_factory.mktemp("keysent")
    script_main("01_extract.py")(["sentences", "--input", KEYSENT_DEMO, "--out", str(root)])
    script_main("02_build_graph.py")(["sentences", "--sentences", str(root / "sentences.jsonl"), "--out",
                                      str(root / "data")])
    return root


@pytest.fixture(scope="session")
def teach(tiny_model, tiny_data, tmp_path_factory):
    """04 teachers on the tiny data: the tiny model as structural teacher (64 tokens), an 8-dimensional Paragraph
    Vector. Read only."""
    out = tmp_path_factory.mktemp("teach") / "teach"
    script_main("04_distill.py")(["teachers", "--data", str(tiny_data), "--out", str(out), "--teacher", str(tiny_model),
                                  "--teacher-max-length", "64", "--pv-vector-size", "8", "--pv-epochs", "3",
                                  "--pv-min-count", "1"])
    return out


def short_teachers(data, teacher):
    """04 teachers' arguments on tiny sizes (no --out)."""
    return ["teachers", "--data", data, "--teacher", teacher, "--teacher-max-length", "32", "--pv-vector-size", "8",
            "--pv-epochs", "1", "--pv-min-count", "1"]


# 03's arguments for a 3-step triplet run on the tiny data (no --data, --model, --out)
SHORT_TRAIN = ["--objective", "triplet", "--pooling", "mean", "--max-length", "32", "--batch-size", "4", "--epochs",
               "1", "--log-every", "1", "--eval-every", "0", "--checkpoint-every", "0", "--length-groups", "2",
               "--max-steps", "3"]


def write_linked_articles(path, n=24):
    """``linked_articles(n)`` written as an articles.jsonl at ``path``."""
    path.write_text("".join(json.dumps(a) + "\n" for a in linked_articles(n)), encoding="utf-8")
    return path


def file_tree(folder):
    """Every file under ``folder`` with its SHA-256."""
    from common import io
    return {str(p.relative_to(folder)): io.sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def full_disk(*args, **kwargs):
    """A replacement for a file operation that fails as on a full disk."""
    import errno
    raise OSError(errno.ENOSPC, "No space left on device")


TOY = ["--log-every", "1", "--eval-every", "0", "--checkpoint-every", "5", "--keep", "10"]


def register_toy(monkeypatch):
    """tests/toy_objective.py registered as objective ``toy`` while ``monkeypatch`` holds; returns
    ``train(data, model, out, *flags)``, 03's run of it in this process (its counts)."""
    from common.train import objectives
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    monkeypatch.setitem(objectives.REGISTRY, "toy", objectives.Entry("toy_objective.ToyObjective", ("docs.jsonl",)))

    def train(data, model, out, *extra):
        argv = ["--objective", "toy", "--data", data, "--model", model, "--out", out, *TOY, *extra]
        return train_in_process(argv)
    return train


@pytest.fixture
def toy(monkeypatch):
    """03 with the toy objective registered: ``toy(data, model, out, *flags)`` trains in this process."""
    return register_toy(monkeypatch)


@pytest.fixture(scope="session")
def toy_run(tiny_model, tiny_data, tmp_path_factory):
    """A finished run of the toy objective on the tiny data with TOY's flags (20 steps, a checkpoint every 5, all
    kept) and its counts. Read only: a test that resumes it copies it."""
    out = tmp_path_factory.mktemp("toy") / "ref"
    with pytest.MonkeyPatch.context() as monkeypatch:
        counts = register_toy(monkeypatch)(tiny_data, tiny_model, out)
    return out, counts


def free_port():
    """A TCP port nobody listens on, for a test's process group."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def every_parser():
    """(where, parser) of every command of 01, 02, 04, 05 and of every objective's training command line."""
    import importlib.util

    from common import cli
    from common.train import objectives
    found = []
    for script in ("01_extract.py", "02_build_graph.py", "04_distill.py", "05_evaluate.py"):
        spec = importlib.util.spec_from_file_location(f"flags_{script[:2]}", os.path.join(ROOT, script))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, (_, add_arguments, *_) in (module.commands([]) if script == "04_distill.py" else
                                             module.COMMANDS).items():
            parser = cli.parser("")
            add_arguments(parser)
            found.append((f"{script} {name}", parser))
    for name in objectives.REGISTRY:
        parser = cli.parser("")
        script_module("03_train.py").add_training_arguments(parser, objectives.get(name), [])
        found.append((f"train {name}", parser))
    return found
