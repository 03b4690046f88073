"""What every numbered script shares at its edge: help formatting and one-line errors."""

import argparse
import sys

from common.io import InputError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def parser(description):
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def run(main):
    """Call ``main()``; bad input becomes one line on stderr and exit status 2."""
    try:
        return main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
