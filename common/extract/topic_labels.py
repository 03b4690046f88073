"""Topic labels for articles: from a category tree under a root category, or from a hand-made map."""

import collections

from common.io import InputError, open_input

FINNISH_ROOT = "Yleinen wikiluokitusjärjestelmä"


class CategoryTree:
    """Parent links between categories, as category pages declare them; labels come from the levels below a root.

    ``top`` = the root's sub-categories, ``second`` = theirs. Every category gets the label of its nearest
    labelled ancestor by breadth-first search down from the top and second levels (seconds before tops at equal
    distance, then name order), which is deterministic and safe on the cycles real category graphs have.
    """

    def __init__(self):
        self.parents = {}

    def add(self, name, parents):
        self.parents.setdefault(name, []).extend(p for p in parents if p != name)

    def labels(self, root, max_depth=None):
        """``{category: (distance, top, second or None)}``; empty if the root has no sub-categories. With
        ``max_depth``, only categories at most that many levels below their labelled ancestor are labelled."""
        children = collections.defaultdict(list)
        for child in sorted(self.parents):
            for parent in self.parents[child]:
                children[parent].append(child)
        tops = sorted(set(children.get(root, ())) - {root})
        label = {}
        queue = collections.deque()
        seconds = []
        for top in tops:
            for second in children.get(top, ()):
                if second != root and second not in tops:
                    seconds.append((second, top))
        for second, top in sorted(seconds):
            if second not in label:
                label[second] = (0, top, second)
                queue.append(second)
        for top in tops:
            label[top] = (0, top, None)
            queue.append(top)
        while queue:
            node = queue.popleft()
            dist, top, second = label[node]
            if max_depth is not None and dist >= max_depth:
                continue  # breadth first: every category still queued is at least this far down
            for child in children.get(node, ()):
                if child not in label and child != root:
                    label[child] = (dist + 1, top, second)
                    queue.append(child)
        return label


def article_label(categories, table):
    """The nearest labelled category of an article: ``{"top": …, "second": …}`` (levels found only)."""
    best = None
    for cat in categories:
        hit = table.get(cat)
        if hit is None:
            continue
        dist, top, second = hit
        key = (dist, second is None, top, second or "")
        if best is None or key < best[0]:
            best = (key, top, second)
    if best is None:
        return {}
    return {"top": best[1], "second": best[2]} if best[2] else {"top": best[1]}


def read_topic_map(path):
    """``category<TAB>top<TAB>second`` lines (second may be empty; ``#`` starts a comment)."""
    table = {}
    with open_input(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) not in (2, 3) or not parts[0].strip() or not parts[1].strip():
                raise InputError(f"{path}:{lineno}: expected 'category<TAB>top<TAB>second'")
            second = parts[2].strip() if len(parts) == 3 else ""
            table[parts[0].strip()] = (0, parts[1].strip(), second or None)
    return table


def mapped_label(categories, table):
    """With a topic map, an article takes the label of its first mapped category, in page order."""
    for cat in categories:
        hit = table.get(cat)
        if hit is not None:
            return {"top": hit[1], "second": hit[2]} if hit[2] else {"top": hit[1]}
    return {}


def label_counts(labelled):
    """Articles per label in Table 3.1's layout: ``[(top, second or "", articles)]``, each top-level label (all its
    articles) followed by its second-level labels, by count then name. ``labelled`` counts ``(top, second or "")``
    per article."""
    tops = collections.Counter()
    seconds = collections.defaultdict(collections.Counter)
    for (top, second), n in labelled.items():
        tops[top] += n
        if second:
            seconds[top][second] += n
    rows = []
    for top, n in sorted(tops.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append((top, "", n))
        rows.extend((top, second, m) for second, m in sorted(seconds[top].items(), key=lambda kv: (-kv[1], kv[0])))
    return rows


def write_label_counts(outputs, labelled):
    """``label_counts(labelled)``, also written as topic_labels.tsv into ``outputs`` where there are any."""
    rows = label_counts(labelled)
    if rows:
        with outputs.open("topic_labels.tsv") as f:
            f.write("top\tsecond\tarticles\n")
            f.writelines(f"{top}\t{second}\t{n}\n" for top, second, n in rows)
    return rows


def format_label_counts(rows, labelled):
    """The rows of :func:`label_counts` as the lines 01 prints under their heading (``labelled``: the articles with
    a label): a top-level label, then its second-level ones indented."""
    width = max((len(second or top) + (2 if second else 0) for top, second, _ in rows), default=0)
    return [f"articles per topic label ({labelled} labelled; a top-level label counts all its articles, its "
            "second-level labels follow; also in topic_labels.tsv):"] + \
        [f"  {'  ' + second if second else top:<{width}}  {n:>7}" for top, second, n in rows]
