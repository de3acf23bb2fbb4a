"""``python -m croupier.services.cli``: the ``croupier`` command."""

import sys

from croupier.services.cli import main

sys.exit(main())
