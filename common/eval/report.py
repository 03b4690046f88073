"""metrics.json → report.md: models as rows, one column per task/metric, ×100 with two decimals and the 95 %
interval beside each figure; the paired differences of ``--compare``; further tables and the figures written beside
it, linked."""

import math
import os

from common.eval.uncertainty import is_difference
from common.jsontext import dumps_line

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


def _number(value, percent, sign=""):
    return f"{100 * value:{sign}.2f}" if percent else f"{value:{sign}.4f}"


def _missing(value):
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell(value, percent, ci=None, withheld=False):
    """A figure, and its interval ``[low, high]`` in brackets where it has one, ``[–]`` where one was ``withheld``
    (asked for and not given: the notes under the table say why)."""
    if _missing(value):
        return "–"
    if ci:
        return f"{_number(value, percent)} [{_number(ci[0], percent)}, {_number(ci[1], percent)}]"
    return _number(value, percent) + (" [–]" if withheld else "")


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


def folder_name(path):
    """A model folder as a reader on another machine knows it: its name with its parent's (``RUN/model``), never the
    path of the machine that evaluated it."""
    parent, name = os.path.split(os.path.abspath(path))
    return f"{os.path.basename(parent)}/{name}" if os.path.basename(parent) else name


def card_names(models):
    """Each model's card as the printed table names it (``{name: text}``): the folder's name (``folder_name``) or
    the hub name, without a path; None where there is no card."""
    from common.markdown import escape
    from common.models.card import hub_name
    found = {}
    for name, model in models.items():
        if os.path.isfile(os.path.join(model, "README.md")):
            found[name] = escape(folder_name(model))
        elif not os.path.exists(model) and hub_name(model):
            found[name] = escape(model)
    return found


def cards(models, report_dir):
    """Where each model's card is (``{name: path or hub name}``, as 05's ``--model`` gives them), as markdown links
    from report.md in ``report_dir``: a folder's README.md (the card every model saved here holds), shown by the
    folder's name (``folder_name``) and linked by its path relative to ``report_dir``; a hub model's page, shown by
    its hub name; None where there is none (a folder without a card). Text from outside is escaped as the link's
    text and percent-encoded as its target (``markdown.link``)."""
    from common.markdown import link
    from common.models.card import hub_name
    found = {}
    for name, model in models.items():
        card = os.path.join(model, "README.md")
        if os.path.isfile(card):
            found[name] = link(folder_name(model), os.path.relpath(os.path.abspath(card), os.path.abspath(report_dir)))
        elif not os.path.exists(model) and hub_name(model):
            found[name] = link(model, model, "https://huggingface.co/")
    return found


def combine(parts):
    """The results of several tasks' evaluations (``(metrics, counts, figures, samples)`` each, ``counts`` with an
    ``embedding`` entry, and ``embedding_seconds``, where models embedded) as one: ``(metrics, counts, figures,
    samples, embedding, seconds)``, ``seconds`` the wall-clock seconds spent loading the models and embedding."""
    metrics, counts, figures, samples, embedded, seconds = {}, {}, [], {}, {}, 0.0
    for part_metrics, part_counts, part_figures, part_samples in parts:
        for name, values in part_metrics.items():
            metrics.setdefault(name, {}).update(values)
        for name, values in part_samples.items():
            samples.setdefault(name, {}).update(values)
        embedded.update(part_counts.get("embedding", {}))
        seconds += sum(part_counts.get("embedding_seconds", {}).values())
        counts.update({k: v for k, v in part_counts.items() if k not in ("embedding", "embedding_seconds")})
        figures += part_figures
    return metrics, counts, figures, samples, embedded, seconds


def time_split(embedding, total):
    """The line that says where 05's time went: ``embedding`` seconds loading the models and embedding, the rest of
    ``total`` (reading, scoring, intervals, re-splits, figures, writing) after it, and their ratio."""
    rest = max(total - embedding, 0.0)
    ratio = f" ({rest / embedding:.2f} × the embedding's)" if embedding > 0 else ""
    return f"time: {embedding:.1f} s embedding, {rest:.1f} s everything else{ratio}\n"


def _scaled(metric, unscaled):
    return metric.split("_")[0] not in unscaled


def how_measured(metrics, resamples, resplits):
    """How the intervals in ``metrics`` were made, for the sentence under the main table ("" where there are
    none): a bootstrap for every task but topics, the splits for topics."""
    kinds = {task.startswith("topics.") for tasks in metrics.values() for task, values in tasks.items()
             if any(key.endswith("_ci") for key in values)}
    ways = ([f"percentile bootstrap over the task's queries, test documents, articles or rated pairs, {resamples:,} "
             "resamples"] if False in kinds else []) + (
        [f"topics: the protocol's split and {resplits} stratified re-splits"] if True in kinds else [])
    return "; ".join(ways)


def differences_table(metrics, unscaled=("mse", "pearson")):
    """The rows ``A - B`` of ``metrics`` as one table: a line per task and figure, the difference (×100 where the
    figures are), its interval and its p-value."""
    rows = {name: tasks for name, tasks in metrics.items() if is_difference(name)}
    if not rows:
        return ""
    lines = ["\nPaired differences A − B (the same queries, documents, articles or splits for both; p two-sided, "
             "paired permutation test):\n", "| A − B | task | metric | difference | 95 % interval | p |",
             "|---|---|---|---:|---:|---:|"]
    for name, tasks in rows.items():
        for task, values in tasks.items():
            for metric, value in values.items():
                if metric.endswith(("_ci", "_p")):
                    continue
                scaled, ci, p = _scaled(metric, unscaled), values.get(f"{metric}_ci"), values.get(f"{metric}_p")
                difference = "–" if _missing(value) else _number(value, scaled, "+")
                lines.append(f"| {name.replace(' - ', ' − ')} | {task} | {metric} | {difference} | "
                             + (f"[{_number(ci[0], scaled, '+')}, {_number(ci[1], scaled, '+')}]" if ci else "–")
                             + f" | {'–' if p is None else f'{p:.3g}'} |")
    return "\n".join(lines) + "\n"


def markdown(metrics, unscaled=("mse", "pearson"), cards=None, resampling=None, notes=()):
    """The report tables: the main one (fractions shown ×100, metrics named in ``unscaled`` as they are, each with
    its interval where ``metrics`` has one; with ``cards``, {model: link or name}, a last column naming each model's
    card; ``resampling``, (resamples, re-splits), says under it how the intervals were made, and ``notes`` why
    some are not given), then the paired differences (``differences_table``), then one table per task of
    ``SEPARATE``, as they are."""
    separate = "".join(_separate_table(metrics, task, caption) for task, caption in SEPARATE.items())
    differences = differences_table(metrics, unscaled)
    metrics = {model: {t: v for t, v in tasks.items() if t not in SEPARATE} for model, tasks in metrics.items()
               if not is_difference(model)}
    cols = _columns(metrics)
    card = " card |" if cards is not None else ""
    head = "| model | " + " | ".join(f"{task} {metric}" for task, metric in cols) + " |" + card
    rule = "|---|" + "---:|" * len(cols) + ("---|" if card else "")
    lines = [head, rule]
    for model, tasks in metrics.items():
        cells = [_cell(tasks.get(task, {}).get(metric), _scaled(metric, unscaled),
                       tasks.get(task, {}).get(f"{metric}_ci"), f"{metric}_ci" in tasks.get(task, {}))
                 for task, metric in cols]
        lines.append(f"| {model} | " + " | ".join(cells) + " |" + (f" {cards.get(model) or '–'} |" if card else ""))
    how = how_measured(metrics, *resampling) if resampling else ""
    note = f"\nIn brackets, the 95 % interval ({how}).\n" if how else ""
    if notes:
        note += "\nNo interval or p (–) where it could not mean what it says:\n\n" + "".join(
            f"- {line}\n" for line in notes)
    return "\n".join(lines) + "\n" + note + differences + separate


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
        cosine = s.get("mean_cosine_to_float32")
        precision = (f" {s['precision']} ({'not measured' if cosine is None else f'{cosine:.4f}'}) |"
                     if s.get("precision") else " float32 |")
        lines.append(f"| {model} | {s['pooling']} | {'yes' if s['normalize'] else 'no'} | {s['max_length'] or '–'} |"
                     + (precision if lower else ""))
    return "\n".join(lines) + "\n"


def write_report(outputs, metrics, models, out, resampling, notes, embedded, written):
    """metrics.json and report.md into ``outputs``, the latter: the metrics table with each model's card linked, how the intervals were made and
    why some are missing (``notes``), how each model embedded, and the figures ``written``; returns the same tables
    as 05 prints them, each card named by folder or hub name instead of a link that climbs out of ``out``."""
    with outputs.open("metrics.json") as f:
        f.write(dumps_line(metrics))
    with outputs.open("report.md") as f:
        f.write(document(markdown(metrics, cards=cards(models, out), resampling=resampling, notes=notes)
                         + embedding_table(embedded), written))
    return markdown(metrics, cards=card_names(models), resampling=resampling, notes=notes) + embedding_table(embedded)


def document(tables, figures):
    """report.md: the tables, then each figure (``(caption, file name)``, the PNG beside report.md) linked."""
    return tables + "".join(f"\n{caption}:\n\n![{caption}]({name})\n" for caption, name in figures)
