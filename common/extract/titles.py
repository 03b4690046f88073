"""Title → page id resolution through redirects, in about 16 bytes per page.

Titles are kept as 64-bit BLAKE2 hashes of ``"ns:Title"`` in numpy arrays rather than as strings, so the index
of a full Wikipedia dump (tens of millions of titles and redirects) fits in a few hundred MB.
"""

import hashlib
from array import array

import numpy as np

OTHER, ARTICLE, REDIRECT, DROPPED = 0, 1, 2, 3
MAX_REDIRECT_HOPS = 32


def title_hash(key):
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


class TitleIndex:
    """Pages in the order a dump lists them; ``resolver()`` freezes them into lookup arrays."""

    def __init__(self):
        self.hashes = array("Q")
        self.ids = array("q")
        self.kinds = array("b")
        self.targets = array("Q")
        self.dropped = array("q")

    def add(self, key_hash, page_id, kind, target_hash=0):
        self.hashes.append(key_hash)
        self.ids.append(page_id)
        self.kinds.append(kind)
        self.targets.append(target_hash)

    def drop(self, page_id):
        """An article that was read but not kept (disambiguation, too short): links to it resolve to nothing."""
        self.dropped.append(page_id)

    def repeated_id(self):
        """A page id that two pages share, or None."""
        ids = np.sort(np.frombuffer(self.ids, dtype=np.int64))
        twice = ids[1:][ids[1:] == ids[:-1]]
        return int(twice[0]) if len(twice) else None

    def resolver(self):
        return Resolver(self)


class Resolver:
    def __init__(self, index):
        hashes = np.frombuffer(index.hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        self.duplicate_titles = int((~first).sum())
        order = order[first]  # the first page listed under a title wins
        self.hashes = hashes[first]
        ids = np.frombuffer(index.ids, dtype=np.int64)[order]
        kinds = np.frombuffer(index.kinds, dtype=np.int8)[order].copy()
        if len(index.dropped):
            kinds[np.isin(ids, np.frombuffer(index.dropped, dtype=np.int64)) & (kinds == ARTICLE)] = DROPPED
        targets = np.frombuffer(index.targets, dtype=np.uint64)[order]

        n = len(self.hashes)
        nxt = np.full(n, -1, dtype=np.int64)
        is_redirect = kinds == REDIRECT
        if n:
            pos = np.searchsorted(self.hashes, targets[is_redirect])
            pos = np.minimum(pos, n - 1)
            found = self.hashes[pos] == targets[is_redirect]
            nxt[np.flatnonzero(is_redirect)[found]] = pos[found]
        # Follow redirect chains by pointer jumping; a chain that never reaches an article (cycle, missing page,
        # other namespace) stays unresolved.
        resolved = np.where(kinds == ARTICLE, ids, -1)
        ends_dropped = kinds == DROPPED
        cur = nxt.copy()
        open_ = np.flatnonzero(is_redirect & (cur >= 0))
        for _ in range(MAX_REDIRECT_HOPS):
            if not len(open_):
                break
            at = cur[open_]
            hit = kinds[at] == ARTICLE
            resolved[open_[hit]] = ids[at[hit]]
            ends_dropped[open_[kinds[at] == DROPPED]] = True
            go_on = (kinds[at] == REDIRECT) & (nxt[at] >= 0)
            open_ = open_[go_on]
            cur[open_] = nxt[at[go_on]]
        self.resolved = resolved
        self.ends_dropped = ends_dropped
        self.kinds = kinds
        self.redirects = int(is_redirect.sum())
        self.redirects_resolved = int((resolved[is_redirect] >= 0).sum())

    def lookup(self, hashes):
        """Page ids for title hashes (-1 where unresolved) and how each went: 'direct', 'redirect', 'missing' (no
        such page), 'dropped' (a disambiguation or too-short article, or a redirect into one), 'broken_redirect'
        (a redirect cycle or a redirect to a missing page) or 'not_article' (a page that is no article)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        n = len(self.hashes)
        if n == 0:
            return np.full(len(hashes), -1, dtype=np.int64), np.full(len(hashes), "missing", dtype=object)
        pos = np.minimum(np.searchsorted(self.hashes, hashes), n - 1)
        found = self.hashes[pos] == hashes
        ids = np.where(found, self.resolved[pos], -1)
        kind = self.kinds[pos]
        how = np.full(len(hashes), "not_article", dtype=object)
        how[~found] = "missing"
        how[found & (kind == ARTICLE)] = "direct"
        how[found & (kind == REDIRECT) & (ids >= 0)] = "redirect"
        how[found & (kind == REDIRECT) & (ids < 0)] = "broken_redirect"
        how[found & self.ends_dropped[pos]] = "dropped"
        return ids, how
