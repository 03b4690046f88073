"""JSON text as the project writes it: one compact line (``dumps_line``), a value's bytes (``json_bytes``), and
tables of pre-encoded pieces a large file is assembled from (``TokenTable``)."""

import orjson


def dumps_line(obj):
    return orjson.dumps(obj).decode("utf-8") + "\n"


def json_bytes(value):
    """A value as UTF-8 JSON bytes, for writers that keep many pre-encoded pieces. The result is copied: the
    bytes object orjson returns keeps its whole output buffer (about 4 KB), 4 GB for a million short ids."""
    return bytes(memoryview(orjson.dumps(value)))


class TokenTable:
    """Pre-encoded pieces of JSON text, padded with tabs to one width, so that a file is assembled from them by a
    single numpy gather instead of one Python string operation per piece.

    The pieces are every template (bytes with one ``%s``) applied to every value, template by template, then the
    ``tail`` pieces; they are made a slice at a time, so building the table takes little more than the table.
    JSON never holds a raw tab inside a string (it is escaped as ``\\t``), so dropping every tab after the gather
    gives back the exact compact text. Memory: number of pieces × the longest piece.
    """

    def __init__(self, templates, values, tail=()):
        import numpy as np  # here, so that the scripts that only write lines start without it
        longest = max(map(len, values), default=0)
        width = max([len(t) - 2 + longest for t in templates] + [len(p) for p in tail])
        self.table = np.empty(len(templates) * len(values) + len(tail), dtype=f"S{width}")
        step = 65536
        for k, template in enumerate(templates):
            for start in range(0, len(values), step):
                part = values[start:start + step]
                at = k * len(values) + start
                self.table[at:at + len(part)] = [(template % v).ljust(width, b"\t") for v in part]
        self.table[len(templates) * len(values):] = [p.ljust(width, b"\t") for p in tail]

    def render(self, index):
        return self.table[index].tobytes().replace(b"\t", b"")
