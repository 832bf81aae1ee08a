"""``python -m jaxeval``: the command line (see ``jaxeval --help``)."""

import sys

from jaxeval._cli import cli

sys.exit(cli())
