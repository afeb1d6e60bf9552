"""``python -m chorus.cli``: the same as the ``chorus`` command."""

import sys

from chorus.cli import main

sys.exit(main())
