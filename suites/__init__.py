"""normbench's suites (``normbench.suites``): the pytest modules users run on their backends,
and the known deviations shipped with them (``known_deviations.txt``)."""

from pathlib import Path

#: where the suites live: a checkout's ``suites/`` or ``site-packages/normbench/suites``
DIRECTORY = Path(__file__).resolve().parent
