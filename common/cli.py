"""What every numbered script shares at its edge: help formatting and one-line errors."""

import argparse
import sys

from common.io import InputError, Preempted


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default, except where there is none (required flags, or defaults that depend on the
    objective and are given in the help text itself)."""

    def _get_help_string(self, action):
        if action.default in (None, []) or action.required:
            return action.help
        return super()._get_help_string(action)


def parser(description):
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def dispatch(description, commands, argv, default=None):
    """Parse ``argv`` with one argparse sub-parser per command and call that command's ``run(args)``.

    ``commands`` maps a name to ``(help, add_arguments, run)``. With ``default``, a command line that names no
    command is read as that command's (so ``02_build_graph.py --articles ...`` still builds the link graph).
    """
    top = parser(description)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, add_arguments, _) in commands.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter))
    argv = list(argv)
    if default and (not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help"))):
        argv.insert(0, default)
    args = top.parse_args(argv)
    return commands[args.command][2](args)


def run(main):
    """Call ``main()``; bad input becomes one line on stderr and exit status 2, preemption exit status 143."""
    try:
        return main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Preempted:
        sys.exit(143)
