"""How far 05's figures can be trusted: a 95 % interval on every figure, and paired differences between models.

Every task's figure is computed from units — queries (crossref, retrieval, similarity's sources), test documents
(classify), rated pairs (similarity's Spearman), test articles (keysent) — and a task hands them over as a
``Sample``: one row per unit, and the statistic that turns rows into the task's figures (their mean, for most).
Its interval is the percentile bootstrap (Efron & Tibshirani 1993, ch. 13): the units drawn with replacement
``resamples`` times, the figure computed on each resample, the 2.5th and 97.5th percentiles of those figures, as
``scipy.stats.bootstrap(method="percentile")`` computes them (the tests give both the same resamples). The index
sets are drawn from the seed alone, so every model is resampled on the same units: differences are paired.

The topic task's figure is a statistic of one split of its documents into training and test, not of units: its
``Sample`` holds one row per split (the protocol's first, then stratified re-splits: ``wikispecter.resplits``),
and its interval is the narrowest run of split figures holding at least 95 % of them: with fewer than 40 splits,
their range, so that the protocol's figure always lies inside.

A comparison A − B on a task is the difference of the two models' figures, its interval the percentiles of the
paired differences (over the same resamples, or over the same splits), and a two-sided p-value from a paired
permutation (randomisation) test: under "A and B are exchangeable", each unit's (or split's) two rows are swapped
at random and the difference recomputed, as ``scipy.stats.permutation_test(permutation_type="samples")`` computes
it. Where the units are few (``EXACT_UNITS``) every one of the 2^n swaps is tried, and the smallest p is 2 / 2^n;
otherwise ``resamples`` random swaps, and the smallest p is 2 / (resamples + 1). For means over queries this is
Fisher's randomization test as ranx's ``compare`` runs it (Smucker et al. 2007).

An interval is given only where it can mean what a reader takes it to mean, that a difference whose interval
excludes zero is one chance does not explain (``summarise``; elsewhere ``None`` and a note that says why):

- at least ``MIN_RESAMPLES`` resamples, so that each 2.5 % tail holds a resample and the ends are percentiles, not
  the extremes (and a random-swap p can fall below 0.05: 2 / 41);
- at least ``MIN_UNITS`` units (or splits), the fewest over which a paired test can reach p < 0.05 (2 / 2^6 =
  0.031; with 5 units the smallest p is 0.0625, and one unit gives a zero-width interval and p 1 whatever the
  models);
- a figure defined on every resample (a resample without a key sentence has no ARP), and an interval that holds
  its figure (a percentile interval of a skewed statistic can leave it out).

A difference that is not a number (a figure undefined on the data, such as Spearman's correlation with ratings
that are all equal) has neither interval nor p, nor has a p whose null differences are not all numbers.
"""

from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
# each 2.5 % tail of at least 1 / 0.025 = 40 resamples holds a resample
MIN_RESAMPLES = 40
# the most resamples (and --compare's random swaps): ten times scipy.stats.bootstrap's 9,999; each figure keeps one
# float per resample, and a million resamples of 18,426 documents would already take hours
MAX_RESAMPLES = 100_000
# the most topic re-splits: each trains its classifiers again (a grid search of LinearSVC for each label level)
MAX_RESPLITS = 1_000
# the fewest units whose paired sign-flip test reaches p < 0.05: its smallest two-sided p is 2 / 2^n
MIN_UNITS = 6
# every one of the 2^n swaps is tried up to this many units (65,536 swaps): exact p-values where they are cheap
EXACT_UNITS = 16
# elements of resampled rows held at a time
CHUNK = 1 << 22


class Sums:
    """A statistic whose figures are functions (``figures``) of the column sums over the units: a resample's sums
    are its counts of each unit times the rows, and a swap's add the swapped units' differences, both one matrix
    product instead of the resampled rows themselves. Means, and key sentences' ARP, MSE and r, are such."""
    names = ()

    def figures(self, totals, n):
        """{name: [...]} from ``totals`` [..., k], the sums over ``n`` units."""
        raise NotImplementedError

    def __call__(self, rows):
        """``rows`` [..., n, k] → {name: [...]}."""
        return self.figures(rows.sum(-2), rows.shape[-2])


class Means(Sums):
    """The statistic of figures that are means over units, one column each (``names``)."""

    def __init__(self, names):
        self.names = tuple(names)

    def figures(self, totals, n):
        return {name: totals[..., j] / n for j, name in enumerate(self.names)}


@dataclass(frozen=True)
class Sample:
    """What one model's figures on one task are computed from: ``values`` [n, k], a row per unit (``splits``:
    per split, the figures themselves, the protocol's split first), and ``statistic``, rows [..., n, k] →
    {figure: [...]}, with the figures' ``names``; ``unit`` names a unit in the notes, as (one, several)."""
    values: np.ndarray
    statistic: object
    splits: bool = False
    unit: tuple = ("unit", "units")

    @property
    def names(self):
        return self.statistic.names

    def count(self):
        """How many units, in words: "1 query", "5 test articles"."""
        n = len(self.values)
        return f"{n:,} {self.unit[n != 1]}"


def means(values, names, unit=("unit", "units")):
    """A Sample of figures that are means of ``values`` (a row per unit, a column per name)."""
    return Sample(np.asarray(values, dtype=np.float64).reshape(-1, len(names)), Means(names), unit=unit)


def splits(values, names):
    """A Sample of figures measured on several splits (a row per split, the protocol's first)."""
    return Sample(np.asarray(values, dtype=np.float64).reshape(-1, len(names)), Means(names), splits=True,
                  unit=("split", "splits"))


def draws(n, resamples, seed, width=1):
    """The bootstrap's index sets over ``n`` units, ``[rows, n]`` at a time (``width``: the elements each
    resampled unit brings, so that a chunk of resampled rows stays near ``CHUNK`` elements): the stream of
    ``np.random.default_rng(seed).integers(0, n, (resamples, n))``, whatever the chunks."""
    rng = np.random.default_rng(seed)
    step = max(1, CHUNK // max(n * width, 1))
    for start in range(0, resamples, step):
        yield rng.integers(0, n, (min(step, resamples - start), n))


def counts(idx, n):
    """How many times each of ``n`` units is drawn in each index set of ``idx`` [rows, n]: float [rows, n]."""
    offsets = idx + n * np.arange(len(idx))[:, None]
    return np.bincount(offsets.ravel(), minlength=idx.size).reshape(idx.shape).astype(np.float64)


def bootstrap(values, statistic, resamples, seed):
    """The statistic on ``resamples`` resamples of the units (axis -2 of ``values`` [..., n, k]; every leading
    index, a model, is resampled on the same units): {name: [..., resamples]}."""
    n = values.shape[-2]
    found = {name: [] for name in statistic.names}
    sums = isinstance(statistic, Sums)
    for idx in draws(n, resamples, seed, 1 if sums else values.size // max(n, 1)):
        figures = statistic.figures(counts(idx, n) @ values, n) if sums else statistic(values[..., idx, :])
        for name, x in figures.items():
            found[name].append(x)
    return {name: np.concatenate(parts, -1) for name, parts in found.items()}


def interval(x, splits=False):
    """The central 95 % of ``x``: its 2.5th and 97.5th percentiles, interpolated linearly as ``np.percentile`` and
    scipy's bootstrap do, or (``splits``, a few values) the values at or beyond them, so that at least 95 % of the
    values lie inside; None where some value is not a number (a resample on which the figure is undefined)."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x) or not np.isfinite(x).all():
        return None
    ends = (50 * (1 - LEVEL), 50 * (1 + LEVEL))
    if splits:
        return [float(np.percentile(x, ends[0], method="lower")), float(np.percentile(x, ends[1], method="higher"))]
    return [float(v) for v in np.percentile(x, ends)]


def holds(ci, value):
    """Whether the interval ``ci`` holds ``value``, up to the rounding of a figure computed two ways (a mean over
    the units, and the same mean from their sums)."""
    slack = 1e-9 * max(1.0, abs(value))
    return ci[0] - slack <= value <= ci[1] + slack


def too_few(sample, resamples, task):
    """Why no interval or p can be given over ``sample``'s units, the task's ``task`` ("" where they can): a
    bootstrap's resamples fewer than ``MIN_RESAMPLES`` (every task's), units (or splits) fewer than
    ``MIN_UNITS``."""
    if not sample.splits and resamples < MIN_RESAMPLES:
        return f"--resamples {resamples:,}: fewer than {MIN_RESAMPLES}, too few for the 2.5 % and 97.5 % ends"
    if len(sample.values) < MIN_UNITS:
        return (f"{task}: {sample.count()}, fewer than {MIN_UNITS}: no paired test over so few reaches p < 0.05 "
                f"(the smallest is 2 / 2^{len(sample.values)})")
    return ""


def swaps(n, permutations, seed):
    """Boolean masks ``[rows, n]`` of the units whose two rows are swapped, a chunk at a time: all 2^n of them
    where ``n <= EXACT_UNITS``, else ``permutations`` random ones from a stream spawned from ``seed`` (None where
    that is 0). Returns ``(chunks, exact, count)``."""
    if n <= EXACT_UNITS:
        total = 1 << n
        step = max(1, CHUNK // max(n, 1))
        bits = np.arange(n)
        return ((((np.arange(s, min(s + step, total))[:, None] >> bits) & 1).astype(bool)
                 for s in range(0, total, step)), True, total)
    if not permutations:
        return None, False, 0
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    step = max(1, CHUNK // n)
    return ((rng.random((min(step, permutations - s), n)) < 0.5 for s in range(0, permutations, step)), False,
            permutations)


def permutation_p(a, b, statistic, permutations, seed):
    """Two-sided p-values, {name: p}, of the paired permutation test of ``statistic(a) - statistic(b)`` (``a``, ``b``
    [n, k], row i of each the same unit), as ``scipy.stats.permutation_test((a, b), …,
    permutation_type="samples")``: twice the smaller tail, each tail counting the null values at least as extreme
    within scipy's relative tolerance, + 1 over + 1 when the swaps are drawn at random; {} where there are no
    swaps. None where the difference, or the difference on some swap, is not a number: the test is undefined."""
    n = len(a)
    chunks, exact, total = swaps(n, permutations, seed)
    if chunks is None:
        return {}
    observed = {name: x - y for (name, x), y in zip(statistic(a).items(), statistic(b).values())}
    low = {name: 0 for name in observed}
    high = dict(low)
    defined = {name: bool(np.isfinite(value)) for name, value in observed.items()}
    sum_a, sum_b, change = a.sum(0), b.sum(0), b - a
    for mask in chunks:
        if isinstance(statistic, Sums):  # the swapped units move their difference from one side's sums to the other
            moved = mask.astype(np.float64) @ change
            first, second = statistic.figures(sum_a + moved, n), statistic.figures(sum_b - moved, n)
        else:
            m = mask[..., None]
            first, second = statistic(np.where(m, b, a)), statistic(np.where(m, a, b))
        for name, value in observed.items():
            null = first[name] - second[name]
            defined[name] = defined[name] and bool(np.isfinite(null).all())
            gamma = abs(np.finfo(np.float64).eps * 100 * value)
            low[name] += int(np.count_nonzero(null <= value + gamma))
            high[name] += int(np.count_nonzero(null >= value - gamma))
    extra = 0 if exact else 1
    return {name: float(min(1.0, 2 * min(low[name] + extra, high[name] + extra) / (total + extra)))
            if defined[name] else None for name in observed}


def difference_name(a, b):
    """The metrics.json row of the comparison a − b (model names hold no spaces, so no model has this name)."""
    return f"{a} - {b}"


def uncompared(pairs, metrics):
    """The pairs (a, b) of ``pairs`` that no task of ``metrics`` scores both of."""
    return [(a, b) for a, b in pairs if difference_name(a, b) not in metrics]


def is_difference(row):
    return " - " in row


def _spreads(group, resamples, seed, task):
    """What the intervals of one task's figures are taken over, for the models whose samples are ``group``
    (the same units or splits each): ``({figure: [model, values]}, "")``; ``(None, why)`` where an interval was
    asked for and cannot be given (``too_few``); ``(None, "")`` where none was asked for (``--resamples 0``, a
    single split)."""
    first = group[0]
    if len(first.values) < 2 if first.splits else not resamples:
        return None, ""
    why = too_few(first, resamples, task)
    if why:
        return None, why
    if first.splits:
        return {name: np.stack([s.values[:, j] for s in group]) for j, name in enumerate(first.names)}, ""
    return bootstrap(np.stack([s.values for s in group]), first.statistic, resamples, seed), ""


def _shown(ci, value, where, notes):
    """``ci``, the interval of the figure ``value``, where it can be shown; else None, with a note on ``notes``."""
    if ci is None:
        notes.append(f"{where}: undefined on some resamples, so no percentile interval")
    elif not holds(ci, value):
        notes.append(f"{where}: the 2.5th and 97.5th percentiles of its resamples leave the figure out (a statistic "
                     "skewed on these units), so no interval")
    else:
        return ci
    return None


def summarise(metrics, samples, pairs, resamples, seed):
    """``metrics`` ({model: {task: {figure: value}}}, the headline figures) with each figure's interval beside it,
    ``"<figure>_ci": [low, high]``, and a row per comparison of ``pairs`` [(a, b)], ``"a - b": {task: {figure: a − b,
    "<figure>_ci": [low, high], "<figure>_p": p}}``, over the tasks both have samples of. ``samples`` = {model:
    {task: [Sample]}}. Without ``resamples`` the units' figures get neither interval nor p-value, and a single
    split gives the topics' neither. Where one was asked for and cannot be given (the module's rules), it is None.
    Returns ``(metrics, notes)``, ``notes`` a line for each reason an interval or p is None."""
    notes = []
    spreads, why = {}, {}
    for task in sorted({task for found in samples.values() for task in found}):
        models = [model for model in samples if task in samples[model]]
        for position in range(len(samples[models[0]][task])):
            group = [samples[model][task][position] for model in models]
            found, reason = _spreads(group, resamples, seed, task)
            if reason:
                notes.append(reason)
            for i, model in enumerate(models):
                spreads[model, task, position] = found and {name: x[i] for name, x in found.items()}
                why[model, task, position] = reason
    out = {model: {task: dict(values) for task, values in tasks.items()} for model, tasks in metrics.items()}
    for (model, task, position), found in spreads.items():
        sample = samples[model][task][position]
        figures = out[model][task]
        if why[model, task, position]:
            figures.update({f"{name}_ci": None for name in sample.names})
        for name, x in (found or {}).items():
            value = metrics[model][task][name]
            figures[f"{name}_ci"] = None if not np.isfinite(value) else _shown(
                interval(x, sample.splits), value, f"{model}: {task} {name}", notes)
    for a, b in pairs:
        row = {}
        for task in [task for task in metrics[a] if task in samples.get(a, {}) and task in samples.get(b, {})]:
            found = row[task] = {}
            for position, (first, second) in enumerate(zip(samples[a][task], samples[b][task])):
                found.update({name: metrics[a][task][name] - metrics[b][task][name] for name in first.names})
                spread_a, spread_b = spreads[a, task, position], spreads[b, task, position]
                if why[a, task, position]:
                    found.update({f"{key}_{end}": None for end in ("ci", "p") for key in first.names})
                if spread_a is None:
                    continue
                tested = permutation_p(first.values, second.values, first.statistic, resamples, seed)
                cis, ps = {}, {}
                for name in first.names:
                    where = f"{a} − {b}: {task} {name}"
                    if not np.isfinite(found[name]):
                        notes.append(f"{where}: the difference is not a number (a figure is undefined), so it has "
                                     "no interval and no p")
                        cis[f"{name}_ci"] = ps[f"{name}_p"] = None
                        continue
                    cis[f"{name}_ci"] = _shown(interval(spread_a[name] - spread_b[name], first.splits), found[name],
                                               where, notes)
                    if name in tested:
                        ps[f"{name}_p"] = tested[name]
                        if tested[name] is None:
                            notes.append(f"{where}: the difference is not a number on some swaps, so no p")
                found.update({**cis, **ps})
        if row:
            out[difference_name(a, b)] = row
    return out, list(dict.fromkeys(notes))
