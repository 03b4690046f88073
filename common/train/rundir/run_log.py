"""A training run's log.jsonl: its records written as strict JSON (``log_line``) and read back checked
(``read_log``), and the experiment trackers each record also goes to (``trackers``)."""

import json

from common import io
from common.io import InputError

LARGEST = 1 << 53  # a step, a line or a count of a run: any larger one in a file of the run is damage


def trackers(report_to):
    """``--report-to`` as Accelerate's ``log_with``: known tracker names that are installed."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    names = [n.strip() for n in report_to.split(",") if n.strip() and n.strip() != "none"]
    if names == ["all"]:
        return names
    installed = {t.value for t in get_available_trackers()}
    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            raise InputError(f"--report-to {name}: not a tracker Accelerate knows (one of "
                             f"{', '.join(sorted(LOGGER_TYPE_TO_CLASS))}, all, none)")
        if name not in installed:
            raise InputError(f"--report-to {name}: not installed (pip install {name.replace('_', '-')})")
    return names


def read_log(path, keep=None):
    """The records of a run's log.jsonl (the first ``keep``: the lines after them, which a killed run may have
    left half-written, are not read); a line that is not a JSON object with a step, or whose values are not finite
    numbers (``null`` where the run had none: ``write_log``), is one line naming it and the field."""
    records = []
    with io.open_input(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if keep is not None and len(records) >= keep:
                    break
                if not line.strip():
                    continue
                try:
                    record = io.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict) or type(record.get("step")) is not int:
                    raise InputError(f"{path}:{lineno}: not a record of this run's log (damaged?); remove the "
                                     "line, or train again into another --out")
                for key, value in record.items():
                    where = f"{path}:{lineno}: field {key!r}"
                    if key == "step":
                        io.number(value, where, int, 0, LARGEST)
                    elif value is not None or key == "epoch":
                        io.number(value, where, float, 0 if key == "epoch" else None)
                records.append(record)
        except UnicodeDecodeError:
            raise InputError(f"{path}:{len(records) + 1}: not UTF-8 text (damaged?); train again into another "
                             "--out") from None
    return records


def log_line(record):
    """A record as its log.jsonl line: strict JSON, a value that is not finite (a perplexity past float's range)
    written as null, which ``read_log`` reads back."""
    import math
    return json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()},
                      allow_nan=False) + "\n"
