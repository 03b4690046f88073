"""What every numbered script shares at its edge: help formatting, the sub-commands, a flag's type (a number
within its limit, ``number``; something the command reads, ``reads``), the check of ``--out`` against what the
command reads, and one-line errors."""

import argparse
import glob
import os
import signal
import sys

from common import io
from common.outdir import write_errors
from common.io import InputError, Preempted


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default, except where there is none (required flags, or defaults that depend on the
    objective and are given in the help text itself)."""

    def _get_help_string(self, action):
        if action.default in (None, []) or action.required:
            return action.help
        if action.default == "":
            return f"{action.help} (default: '')"
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse's parser with the project's one-line error: ``error: argument --flag: why``, exit status 2 (argparse
    prints its usage first; the flags are one ``--help`` away)."""

    def error(self, message):
        self.exit(2, f"error: {message}\n")


def parser(description):
    return Parser(description=description, formatter_class=HelpFormatter)


SHARE = ("a share between 0 and 1", lambda v: 0 <= v <= 1)
OPEN_SHARE = ("a share strictly between 0 and 1", lambda v: 0 < v < 1)
POSITIVE = ("a positive number", lambda v: 0 < v < float("inf"))
SEED = ("between 0 and 2**32 - 1 (NumPy's seed range)", lambda v: 0 <= v < 2 ** 32)
NON_NEGATIVE = ("a finite number of at least 0", lambda v: 0 <= v < float("inf"))
# a constant of a loss (a margin, a scale, a weight): a number the loss's arithmetic holds in every precision a run
# trains in, so that it stays finite there (half precision's largest is 65,504; 1e300 was inf in float32)
HALF_MAX = 65504
LOSS_CONSTANT = (f"a number from 0 to {HALF_MAX:,} (half precision's largest)", lambda v: 0 <= v <= HALF_MAX)
LOSS_SCALE = (f"a positive number of at most {HALF_MAX:,} (half precision's largest)", lambda v: 0 < v <= HALF_MAX)


def between(low, high):
    return (f"between {low:,} and {high:,}", lambda v: low <= v <= high)


# every size flag has an upper bound as well as a lower one, so that a slip (1e8 for 1e3) is refused before it
# allocates: a width (a vector, a layer), a length in tokens (Longformer's 131,072 at most), a count of items
WIDTH = between(1, 1 << 16)
LENGTH = between(1, 1 << 17)
COUNT = between(1, 1 << 30)
COUNT_0 = between(0, 1 << 30)
# processes or threads beside the main one: 64, or one a CPU of a larger machine (more only wait, and a thousand
# threads may not even start: "can't start new thread" under a 6 GB address-space limit)
WORKERS_MAX = max(64, os.cpu_count() or 1)
WORKERS = between(0, WORKERS_MAX)


def physical_memory():
    """Bytes of memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(nbytes, what):
    """Refuse, before it is allocated, something that needs more bytes than the machine has."""
    have = physical_memory()
    if nbytes > have:
        raise InputError(f"{what}: needs about {nbytes / 2 ** 30:,.1f} GiB, more than this machine's "
                         f"{have / 2 ** 30:,.1f} GiB")


def name_values(values, flag, what):
    """``NAME=VALUE`` arguments → ``[(argument, name, value)]``; one without a name or a value is refused."""
    found = []
    for value in values or []:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise InputError(f"{flag} {value!r}: expected NAME={what}")
        found.append((value, name, rest))
    return found


def named(values, flag, what):
    """``NAME=VALUE`` arguments → {name: value}, each name fit to become a file name (``io.safe_name``)."""
    return {io.safe_name(name, f"{flag} {value!r}: NAME"): rest
            for value, name, rest in name_values(values, flag, what)}


def per_name(values, allowed, names, flag):
    """A setting of several named things (05's ``--pooling``): a bare value (``cls``, as 03 spells it) is every
    name's, ``NAME=VALUE`` one name's and wins; → {name: value}, each value one of ``allowed``."""
    bare = [v for v in values or [] if "=" not in v and v in allowed]
    spelled = [f"{name}={bare[-1]}" for name in names] if bare else []
    found = named(spelled + [v for v in values or [] if v not in bare], flag, "|".join(allowed))
    unknown = set(found) - set(names)
    if unknown:
        raise InputError(f"{flag} names {sorted(unknown)} but no such --model")
    for name, value in found.items():
        if value not in allowed:
            raise InputError(f"{flag} {name}={value}: expected {name}={'|'.join(allowed)}")
    return found


def pairs(values, names, flag):
    """``A=B`` arguments (05's ``--compare``) → [(a, b)], each name one of ``names`` and the two different."""
    found = []
    for value in values or []:
        a, sep, b = value.partition("=")
        if not sep or not a or not b:
            raise InputError(f"{flag} {value!r}: expected A=B, two of {', '.join(names)}")
        unknown = [name for name in (a, b) if name not in names]
        if unknown:
            raise InputError(f"{flag} {value}: no row {unknown[0]!r} (rows: {', '.join(names)})")
        if a == b:
            raise InputError(f"{flag} {value}: compares {a} with itself")
        found.append((a, b))
    return found


def line_mb():
    """``--max-line-mb``'s limit: at most the machine's memory, as a line is held whole while it is read."""
    return between(1, max(1, physical_memory() >> 20))


def add_max_line(p):
    """``--max-line-mb``, for commands that read JSONL from outside the pipeline."""
    p.add_argument("--max-line-mb", type=number(int, line_mb()),
                   default=io.MAX_LINE_BYTES >> 20,
                   help="refuse a JSONL line longer than this (a line is held whole in memory while read); at most "
                        "this machine's memory")


def set_max_line(args):
    io.MAX_LINE_BYTES = args.max_line_mb << 20


def number(parse, limit):
    """An argparse ``type``: the flag's value parsed by ``parse`` (``int`` or ``float``) and refused unless within
    ``limit``, one of the ranges above, so that each flag is declared once, with its limit, and a setting that
    cannot work is refused as the command line is read (NaN is in no range)::

        p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=16)
    """
    what, ok = limit

    def checked(text):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: not {'an integer' if parse is int else 'a number'}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text}: must be {what}")
        return value

    checked.__name__ = parse.__name__  # argparse names the type in its own messages
    return checked


def checked_by(check):
    """An argparse ``type`` that refuses a value ``check(value)`` refuses (an InputError) as the command line is read,
    and keeps the value as given (02's ``--topic-cap``)."""

    def checked(text):
        try:
            check(text)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    checked.__name__ = getattr(check, "__name__", "value")
    return checked


def reads(value):
    """The argparse ``type`` of a flag that names something the command reads (a file, a folder, or a hub model's
    name): ``check_out`` finds the command's inputs by it, so that a flag that reads cannot be left out."""
    return value


def reads_named(value):
    """``reads`` for ``NAME=PATH`` values: what follows the first ``=`` is read."""
    return value


def writes(value):
    """The argparse ``type`` of a flag besides ``--out`` that names a place the command writes (03 mlm's
    ``--cache-dir``): ``check_out`` checks it as it checks ``--out``."""
    return value


def inputs(parser, args):
    """``[(flag, path)]``: every value of ``args`` given to a flag of ``parser`` typed ``reads`` or
    ``reads_named``."""
    found = []
    for action in parser._actions:
        if action.type not in (reads, reads_named):
            continue
        values = getattr(args, action.dest, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and value:
                path = value.partition("=")[2] if action.type is reads_named else value
                found.append((max(action.option_strings, key=len, default=action.dest), path))
    return found


def check_out(parser, args):
    """Refuse, before any work, an ``--out`` (or another place the command writes: a flag typed ``writes``) that is,
    holds, or lies inside anything the command reads (``inputs``), symbolic links resolved: writing it would
    replace, or remove, what the command is reading."""
    places = [("--out", getattr(args, "out", None))]
    places += [(max(action.option_strings, key=len, default=action.dest), getattr(args, action.dest, None))
               for action in parser._actions if action.type is writes]
    for flag, out in places:
        if isinstance(out, str) and out:
            _check_place(parser, args, flag, out)


def check_file_out(out, overwrite, what="the file"):
    """Refuse an ``--out`` naming ``what`` a command writes (one file, not a folder) that is a directory, or that
    exists where ``overwrite`` (--overwrite) is not given."""
    if os.path.isdir(out):
        raise InputError(f"{out}: is a directory; --out names {what} to write")
    if os.path.lexists(out) and not overwrite:
        raise InputError(f"{out}: exists; give --overwrite to replace it, or another --out")


def _check_place(parser, args, out_flag, out):
    target = os.path.realpath(out)
    for flag, path in inputs(parser, args):
        # what the value names on disk: the path, or the files it is the stem of (01 dictd's INPUT.index and
        # INPUT.dict.dz); a hub model's name, or a path the command will find missing itself, names nothing
        found = [path] if os.path.lexists(path) else glob.glob(glob.escape(path) + ".*")
        for read in found:
            source = os.path.realpath(read)
            if source == target or (os.path.exists(out) and os.path.exists(read) and os.path.samefile(read, out)):
                how = "is"
            elif source.startswith(target.rstrip(os.sep) + os.sep):
                how = "holds"
            elif target.startswith(source.rstrip(os.sep) + os.sep):
                how = "lies inside"
            else:
                continue
            raise InputError(f"{out_flag} {out}: {how} {flag} {read}, which this command reads; give an "
                             f"{out_flag} apart from its inputs")


def add_overwrite(p):
    """``--overwrite``, on every command with an ``--out`` (``dispatch`` adds it)."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace the finished output that --out holds (only what its run wrote is removed); "
                        "without it, such an --out is refused (transformers' --overwrite_output_dir)")


def dispatch(description, commands, argv, default=None):
    """Parse ``argv`` with one argparse sub-parser per command and call that command's ``run(args)``.

    ``commands`` maps a name to ``(help, add_arguments, run)`` or ``(help, add_arguments, run, description)``.
    With ``default``, a command line that names no command is read as that command's (so
    ``02_build_graph.py --articles ...`` still builds the link graph). A command with an ``--out`` gets
    ``--overwrite``, and its ``--out`` is checked against its inputs (``check_out``) before it runs.
    """
    top = parser(description)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, add_arguments, _, *more) in commands.items():
        command = sub.add_parser(name, help=help_text, description=more[0] if more else help_text,
                                 formatter_class=HelpFormatter)
        add_arguments(command)
        dests = {action.dest for action in command._actions}
        if "out" in dests and "overwrite" not in dests:
            add_overwrite(command)
    argv = list(argv)
    if default and (not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help"))):
        argv.insert(0, default)
    args = top.parse_args(argv)
    check_out(sub.choices[args.command], args)
    if hasattr(args, "max_line_mb"):
        set_max_line(args)
    return commands[args.command][2](args)


def run(main):
    """Call ``main()``; bad input becomes one line on stderr and exit status 2, preemption exit status 143.

    SIGTERM unwinds the script like an error (training replaces this with its own checkpointing handler while it
    runs), so that open outputs remove their temporary files; forked workers just exit.
    """
    pid = os.getpid()

    def terminate(signum, frame):
        if os.getpid() != pid:
            os._exit(128 + signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        return main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Preempted:
        sys.exit(143)
    except MemoryError:
        print("error: out of memory; give smaller sizes (--batch-size, --batch-tokens, --max-length)",
              file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # writes the output helpers did not see (a library's own file): still one line
        if e.errno not in write_errors.WRITE_ERRNOS:
            raise
        print(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror}", file=sys.stderr)
        sys.exit(1)
