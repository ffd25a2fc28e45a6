"""``python -m normbench``: the ``normbench`` command."""

import sys

from normbench.front.cli import main

sys.exit(main())
