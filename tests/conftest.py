import json
import os
import subprocess
import sys
from xml.sax.saxutils import escape, quoteattr

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
           PYTHONHASHSEED="0")


def run_script(script, *args, check=True, timeout=600):
    """Run a numbered script as a user would, from the repository root."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


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
