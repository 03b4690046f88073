"""metrics.json → report.md: models as rows, one column per task/metric, ×100 with two decimals; further tables
and the figures written beside it, linked."""

import math
import os

COLUMN_ORDER = ("crossref", "topics", "keysent")


def _columns(metrics):
    cols = []
    for tasks in metrics.values():
        for task, values in tasks.items():
            for metric, value in values.items():
                if (isinstance(value, (int, float)) and not isinstance(value, bool) and metric not in ("C", "cv_margin")
                        and (task, metric) not in cols):
                    cols.append((task, metric))
    return sorted(cols, key=lambda c: (next((i for i, p in enumerate(COLUMN_ORDER) if c[0].startswith(p)), 9),
                                       c[0]))


def _cell(value, percent):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{100 * value:.2f}" if percent else f"{value:.4f}"


SEPARATE = {"keysent.cosine": "Mean cosine similarity to the query per outcome (top R = the article's R "
                              "sentences closest to the query, as ARP ranks them)"}


def _separate_table(metrics, task, caption):
    rows = {model: tasks[task] for model, tasks in metrics.items() if task in tasks}
    if not rows:
        return ""
    cols = list(next(iter(rows.values())))
    lines = [f"\n{caption}:\n", "| model | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    lines += [f"| {model} | " + " | ".join(_cell(values.get(c), False) for c in cols) + " |"
              for model, values in rows.items()]
    return "\n".join(lines) + "\n"


def cards(models, report_dir):
    """Where each model's card is (``{name: path or hub name}``, as 05's ``--model`` gives them), as markdown links
    from report.md in ``report_dir``: a folder's README.md (the card every model saved here holds), a hub model's
    page; None where there is none (a folder without a card). A path is text from outside: escaped as the link's
    text, percent-encoded as its target (``markdown.link``)."""
    from common.markdown import link
    from common.models.card import hub_name
    found = {}
    for name, model in models.items():
        card = os.path.join(model, "README.md")
        if os.path.isfile(card):
            found[name] = link(card, os.path.relpath(os.path.abspath(card), os.path.abspath(report_dir)))
        elif not os.path.exists(model) and hub_name(model):
            found[name] = link(model, model, "https://huggingface.co/")
    return found


def markdown(metrics, unscaled=("mse", "pearson"), cards=None):
    """The report tables: the main one (fractions shown ×100, metrics named in ``unscaled`` as they are; with
    ``cards``, {model: link}, a last column linking each model's card), then one per task of ``SEPARATE``, as
    they are."""
    separate = "".join(_separate_table(metrics, task, caption) for task, caption in SEPARATE.items())
    metrics = {model: {t: v for t, v in tasks.items() if t not in SEPARATE} for model, tasks in metrics.items()}
    cols = _columns(metrics)
    card = " card |" if cards is not None else ""
    head = "| model | " + " | ".join(f"{task} {metric}" for task, metric in cols) + " |" + card
    rule = "|---|" + "---:|" * len(cols) + ("---|" if card else "")
    lines = [head, rule]
    for model, tasks in metrics.items():
        cells = [_cell(tasks.get(task, {}).get(metric), metric.split("_")[0] not in unscaled)
                 for task, metric in cols]
        lines.append(f"| {model} | " + " | ".join(cells) + " |" + (f" {cards.get(model) or '–'} |" if card else ""))
    return "\n".join(lines) + "\n" + separate


def embedding_table(embedding):
    """How each model embedded the documents (``{model: {pooling, normalize, max_length}}``), so that a reader sees
    whether the rows compare like with like."""
    if not embedding:
        return ""
    lower = any(s.get("precision") for s in embedding.values())  # a column only where some model ran below float32
    lines = ["\nHow each model embedded the documents:\n",
             "| model | pooling | normalised | tokens |" + (" precision (mean cosine to float32) |" if lower else ""),
             "|---|---|---|---:|" + ("---|" if lower else "")]
    for model, s in embedding.items():
        precision = f" {s['precision']} ({s['mean_cosine_to_float32']:.4f}) |" if s.get("precision") else " float32 |"
        lines.append(f"| {model} | {s['pooling']} | {'yes' if s['normalize'] else 'no'} | {s['max_length'] or '–'} |"
                     + (precision if lower else ""))
    return "\n".join(lines) + "\n"


def document(tables, figures):
    """report.md: the tables, then each figure (``(caption, file name)``, the PNG beside report.md) linked."""
    return tables + "".join(f"\n{caption}:\n\n![{caption}]({name})\n" for caption, name in figures)
