"""``python -m jaxeval``: the command line (see ``jaxeval --help``)."""

import sys

from jaxeval._cli import main

sys.exit(main())
