"""``python -m looptoolkit``: the same as the ``looptoolkit`` command."""

import sys

from looptoolkit.cli import main

sys.exit(main())
