"""No page can stall extraction: the cleaners' time grows linearly with the length of any run of markup.

Each case times a cleaner on an adversarial text at two lengths, n and 4n, and asks that the time grow less than
10-fold (linear: 4; quadratic: 16; the old heading pattern was cubic). Times are CPU times of this thread, the
best of two tries, so other work on the machine does not count; no absolute time is asserted.
"""

import signal
import time

import pytest

from common.extract import sentences, wikitext
from common.extract.dump import redirect_target
from common.extract.wiki import ExtractConfig, process_article

FI = wikitext.Namespaces({6: "Tiedosto", 10: "Malline", 14: "Luokka"})
CONFIG = ExtractConfig(FI, links="all", min_chars=0)  # every page goes through every step
MARKUP = list("{}[]|'=<>!-&;#*:/\n \t_(),.\"a") + ["\n\n"]
WIKI_OPENERS = ["", "[[", "[[Luokka:a", "[[a|", "[//x ", "[http://x", "{{", "{{ndash", "{{dab", "{|", "<ref ", "<ref>",
                "<!--", "<br", "<a ", "<math", "__A", "=", "(", " (", "#REDIRECT", "&", "'''"]
TEXT_OPENERS = ["", "<", "<a", "<!--", "<script>", "\\cite[", "\\cite{", "\\a{", "\\", "$", "&"]


def wiki_cleaner(text):
    process_article("Otsikko", text, CONFIG)
    wikitext.full_text(text, FI)
    redirect_target(text)


class TooSlow(Exception):
    pass


def _too_slow(signum, frame):
    raise TooSlow


def cpu_time(clean, text, limit=None, tries=2):
    """The best CPU time of a few tries; ``limit`` (seconds of CPU) stops a try that runs longer and gives inf, so
    that a super-linear case fails at once instead of running for minutes."""
    best = float("inf")
    previous = signal.signal(signal.SIGPROF, _too_slow)
    try:
        for _ in range(tries):
            start = time.thread_time()
            if limit:
                signal.setitimer(signal.ITIMER_PROF, limit)
            try:
                clean(text)
            except TooSlow:
                return float("inf")
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            best = min(best, time.thread_time() - start)
    finally:
        signal.signal(signal.SIGPROF, previous)
    return best


def growth(clean, make, n):
    """How many times longer ``clean`` takes on ``make(4 * n)`` than on ``make(n)``, counted from 0.2 ms so that
    cases too quick to time pass. Each length's run is stopped (inf) once it takes far longer than 10 times the
    previous, shorter one (n / 4 before n): a cubic case fails in seconds, not minutes. The margin is wide because
    the CPU timer counts in whole clock ticks."""
    previous = None
    for size in (n // 4, n, 4 * n):
        limit = None if previous is None else 10 * previous + 0.05
        took = cpu_time(clean, make(size), limit)
        if took == float("inf"):
            return took
        small, previous = previous, max(took, 2e-4)
    return previous / small


def shapes(opener):
    """A construct left open before a long run of one character, and the construct repeated with it."""
    for char in MARKUP:
        yield f"{opener!r} + {char!r} * n + 'x'", lambda n, o=opener, c=char: o + c * n + "x"
        yield f"({opener!r} + {char!r}) * n", lambda n, o=opener, c=char: (o + c) * (n // len(o + c))


def assert_linear(clean, cases, n):
    slow = [(name, round(ratio, 1)) for name, make in cases if (ratio := growth(clean, make, n)) >= 10]
    assert not slow, f"time grows faster than the input: {slow}"


@pytest.mark.parametrize("opener", WIKI_OPENERS)
def test_wikitext_cleaner_time_is_linear_in_any_run_of_markup(opener):
    assert_linear(wiki_cleaner, shapes(opener), 1000)


def test_wikitext_cleaner_time_is_linear_in_nesting_depth():
    nested = [("templates", lambda n: "{{a|" * (n // 6) + "x" + "}}" * (n // 6)),
              ("parameters", lambda n: "{{{" * (n // 6) + "}}}" * (n // 6)),
              ("links", lambda n: "[[a|" * (n // 6) + "x" + "]]" * (n // 6)),
              ("tables", lambda n: "{|\n" * (n // 6) + "|}\n" * (n // 6))]
    assert_linear(wiki_cleaner, nested, 4000)


@pytest.mark.parametrize("opener", TEXT_OPENERS)
def test_html_and_latex_cleaner_time_is_linear_in_any_run_of_markup(opener):
    assert_linear(sentences.clean, shapes(opener), 1000)


def test_html_and_latex_cleaner_time_is_linear_in_unclosed_and_nested_constructs():
    cases = [(f"<p> + {tag!r} * n", lambda n, t=tag: "<p>" + t * (n // len(t)) + "x")
             for tag in ("<!--", "<a", "</a", "<!", "<?", "<script>", "\\cite[")]
    cases.append(("nested commands", lambda n: "\\a{" * (n // 4) + "x" + "}" * (n // 4)))
    assert_linear(sentences.clean, cases, 4000)
