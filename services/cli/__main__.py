"""``python -m croupier.services.cli``: the ``croupier`` command."""

import sys

from croupier.services.cli import main

if __name__ == "__main__":  # importing the module (tests import every one) runs nothing
    sys.exit(main())
