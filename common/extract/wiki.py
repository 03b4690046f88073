"""Dump → ``articles.jsonl`` in two streaming passes.

Pass 1 reads the dump once: every page's title goes to the title index (hashes, not strings); articles are
cleaned in worker processes and written to a temporary file with their links still as title hashes. Pass 2
streams that file, resolves links through redirects to page ids, adds topic labels and writes the final file.
Memory holds the title index and, with ``--topic-root``, the category graph, never article text.
"""

import collections
import itertools
import json
import os
import re
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from common.extract import topic_labels, wikitext
from common.extract.dump import DumpReader
from common.io import InputError
from common.jsontext import dumps_line
from common.outdir.folders import create
from common.pool import ordered_map
from common.extract.titles import ARTICLE, OTHER, REDIRECT, TitleIndex, title_hash

DISAMBIGUATION_MARKERS = ("(täsmennyssivu)", "(disambiguation)")
DISAMBIGUATION_TEMPLATES = ("täsmennyssivu", "disambiguation", "disambig", "dab", "disamb", "hndis", "geodis",
                            "numberdis", "set index article")
BATCH_PAGES = 64

_config = None


class ExtractConfig:
    def __init__(self, namespaces, lead="first-paragraph", links="lead", min_chars=90,
                 disambiguation_markers=DISAMBIGUATION_MARKERS, disambiguation_templates=DISAMBIGUATION_TEMPLATES,
                 text="lead"):
        self.namespaces = namespaces
        self.lead = lead
        self.text = text
        self.links = links
        self.min_chars = min_chars
        self.markers = tuple(m.lower() for m in disambiguation_markers)
        names = "|".join(re.escape(t).replace(r"\ ", "[ _]") for t in disambiguation_templates)
        self.disambiguation = re.compile(r"\{\{\s*+(?:%s)\s*+(?:\||\}\})" % names, re.I) if names else None
        self.category_re = wikitext.category_pattern(namespaces)


def _init_worker(config):
    global _config
    _config = config


def is_disambiguation(title, text, config):
    low = title.lower()
    if any(low.endswith(m) for m in config.markers):
        return True
    return bool(config.disambiguation and config.disambiguation.search(text))


def process_article(title, text, config):
    """One article page → ``("ok", text, link_hashes, other_namespace_links, categories)`` or a drop reason."""
    if is_disambiguation(title, text, config):
        return ("disambiguation",)
    found = []
    if config.text == "full":
        body = wikitext.full_text(text, config.namespaces, found)
    else:
        body = wikitext.lead(text, config.namespaces, config.lead, found)
    if len(body) < config.min_chars:
        return ("too_short",)
    if config.links == "all":
        found = wikitext.all_links(text, config.namespaces)
    other = sum(1 for t in found if t is None)
    hashes = [title_hash(wikitext.title_key(0, t)) for t in found if t is not None]
    cats = wikitext.categories(text, config.namespaces, config.category_re)
    return ("ok", body, hashes, other, cats)


def _process_batch(batch):
    return [(page_id, title, process_article(title, text, _config)) for page_id, title, text in batch]


def _page_key(page, namespaces):
    name = namespaces.name_of.get(page.ns, "")
    title = page.title[len(name) + 1:] if name and page.title.startswith(name + ":") else page.title
    return wikitext.title_key(page.ns, title), title


def _read_pages(reader, index, tree, counts, bar):
    """Pass 1 producer: index every page, yield batches of article pages for the workers."""
    batch = []
    for page in reader:
        counts["pages"] += 1
        bar.update(1)
        ns = reader.namespaces
        key, bare = _page_key(page, ns)
        if page.redirect:
            counts["redirects"] += 1
            target = wikitext.normalize_title(page.redirect, ns)
            target_hash = title_hash(wikitext.title_key(*target)) if target else 0
            index.add(title_hash(key), page.id, REDIRECT, target_hash)
            continue
        if page.ns != 0:
            counts["other_namespace"] += 1
            index.add(title_hash(key), page.id, OTHER)
            if page.ns == wikitext.CATEGORY_NS and tree is not None:
                tree.add(bare, wikitext.categories(page.text, ns))
            continue
        index.add(title_hash(key), page.id, ARTICLE)
        batch.append((page.id, page.title, page.text))
        if len(batch) >= BATCH_PAGES:
            yield batch
            batch = []
    if batch:
        yield batch


def pass_one(dump, tmp_path, index, tree, counts, workers, make_config):
    """Read the dump; write kept articles (links as hashes) to ``tmp_path``. Returns the reader (siteinfo)."""
    reader = DumpReader(dump)
    with tqdm(desc="pages", unit=" pages", smoothing=0.05, mininterval=1.0) as bar, \
            create(tmp_path) as out:
        pages = _read_pages(reader, index, tree, counts, bar)
        first = next(pages, None)  # the siteinfo is known once the first page is read
        config = make_config(reader.namespaces or wikitext.Namespaces.english())
        batches = itertools.chain([first], pages) if first is not None else iter(())
        for results in ordered_map(_process_batch, batches, workers, _init_worker, (config,)):
            for page_id, title, result in results:
                if result[0] != "ok":
                    counts[result[0]] += 1
                    index.drop(page_id)
                    continue
                _, text, hashes, other, cats = result
                counts["articles"] += 1
                counts["links_other_namespace"] += other
                out.write(json.dumps([page_id, title, text, hashes, cats], ensure_ascii=False) + "\n")
    return reader


def pass_two(tmp_path, out, resolver, label_of, counts):
    """Resolve links (ids, redirects followed, self/duplicates/missing dropped) and write articles.jsonl. Returns
    the number of articles per ``(top, second or "")`` label."""
    labelled = collections.Counter()
    with open(tmp_path, encoding="utf-8") as f:
        for line in tqdm(f, total=counts["articles"], desc="links", unit=" articles", mininterval=1.0):
            page_id, title, text, hashes, cats = json.loads(line)
            links = []
            if hashes:
                ids, how = resolver.lookup(np.array(hashes, dtype=np.uint64))
                seen = set()
                for target, h in zip(ids.tolist(), how):
                    if target < 0:
                        counts[f"links_{h}"] += 1
                    elif target == page_id:
                        counts["links_self"] += 1
                    elif target in seen:
                        counts["links_duplicate"] += 1
                    else:
                        seen.add(target)
                        links.append(str(target))
                        counts["links_resolved"] += 1
                        if h == "redirect":
                            counts["links_via_redirect"] += 1
            record = {"id": str(page_id), "title": title, "text": text, "links": links, "categories": cats}
            labels = label_of(cats)
            if labels:
                record["labels"] = labels
                for level in labels:
                    counts[f"labelled_{level}"] += 1
                labelled[labels["top"], labels.get("second") or ""] += 1
            out.write(dumps_line(record))
    return labelled


@dataclass(frozen=True)
class WikiSettings:
    """01 wiki's settings (its flags of the same names)."""
    dump: str
    lead: str
    links: str
    min_chars: int
    disambiguation_markers: str
    disambiguation_templates: str
    text: str
    workers: int
    topic_root: str = None
    topic_map: str = None
    topic_depth: int = None


def extract_wiki(settings, outputs):
    """The whole of ``01_extract.py wiki`` (``settings``: a ``WikiSettings``); writes ``articles.jsonl`` through
    ``outputs``. Returns the dump reader,
    the articles per label (:func:`pass_two`) and the counts of what was read, written and skipped."""
    counts = collections.Counter()
    index = TitleIndex()
    tree = topic_labels.CategoryTree() if (settings.topic_root and not settings.topic_map) else None
    topic_map = topic_labels.read_topic_map(settings.topic_map) if settings.topic_map else None
    tmp_path = outputs.scratch("articles.pass1.jsonl")

    def make_config(namespaces):
        return ExtractConfig(namespaces, settings.lead, settings.links, settings.min_chars,
                             [m for m in settings.disambiguation_markers.split(",") if m],
                             [t for t in settings.disambiguation_templates.split(",") if t], settings.text)

    try:
        reader = pass_one(settings.dump, tmp_path, index, tree, counts, settings.workers, make_config)
        twice = index.repeated_id()
        if twice is not None:  # 02 would refuse the articles; a dump with one is broken
            raise InputError(f"{settings.dump}: page id {twice} is used by more than one page")
        resolver = index.resolver()
        del index
        counts["duplicate_titles"] = resolver.duplicate_titles
        counts["redirects_unresolved"] = resolver.redirects - resolver.redirects_resolved
        if topic_map is not None:
            def label_of(cats):
                return topic_labels.mapped_label(cats, topic_map)
        elif tree is not None:
            root = wikitext.normalize_name(settings.topic_root, reader.namespaces or wikitext.Namespaces.english())
            table = tree.labels(root, settings.topic_depth)
            counts["topic_categories"] = len(table)
            if not table:
                tqdm.write(f"note: category {root!r} has no sub-categories in this dump; no topic labels")

            def label_of(cats):
                return topic_labels.article_label(cats, table)
        else:
            def label_of(cats):
                return {}
        with outputs.open("articles.jsonl") as out:
            labelled = pass_two(tmp_path, out, resolver, label_of, counts)
    finally:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
    return reader, labelled, counts
