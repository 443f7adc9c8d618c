"""``python -m pyroce``: the same as the ``pyroce`` command."""

import sys

from pyroce.cli import main

sys.exit(main())
