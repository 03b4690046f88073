"""What every numbered script shares at its edge: help formatting and one-line errors."""

import argparse
import sys

from common.io import InputError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default, except where there is none (required flags, or defaults that depend on the
    objective and are given in the help text itself)."""

    def _get_help_string(self, action):
        if action.default in (None, []) or action.required:
            return action.help
        return super()._get_help_string(action)


def parser(description):
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def run(main):
    """Call ``main()``; bad input becomes one line on stderr and exit status 2."""
    try:
        return main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
