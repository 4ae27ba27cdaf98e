"""``python -m verishard.cli``: the console script ``verishard``."""

import sys

from . import main

sys.exit(main())
