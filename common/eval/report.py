"""metrics.json → report.md: models as rows, one column per task/metric, ×100 with two decimals."""

import math

COLUMN_ORDER = ("crossref", "topics", "keysent")


def _columns(metrics):
    cols = []
    for tasks in metrics.values():
        for task, values in tasks.items():
            for metric, value in values.items():
                if isinstance(value, (int, float)) and metric not in ("C",) and (task, metric) not in cols:
                    cols.append((task, metric))
    return sorted(cols, key=lambda c: (next((i for i, p in enumerate(COLUMN_ORDER) if c[0].startswith(p)), 9),
                                       c[0]))


def _cell(value, percent):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{100 * value:.2f}" if percent else f"{value:.4f}"


def markdown(metrics, unscaled=("mse", "pearson")):
    """The report table; fractions are shown ×100, metrics named in ``unscaled`` as they are."""
    cols = _columns(metrics)
    head = "| model | " + " | ".join(f"{task} {metric}" for task, metric in cols) + " |"
    rule = "|---|" + "---:|" * len(cols)
    lines = [head, rule]
    for model, tasks in metrics.items():
        cells = [_cell(tasks.get(task, {}).get(metric), metric.split("_")[0] not in unscaled)
                 for task, metric in cols]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
