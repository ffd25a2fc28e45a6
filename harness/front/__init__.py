"""The front: what users run. The ``normbench`` command (:mod:`~normbench.front.cli`), the run it
orchestrates, the pytest plugin the suites run under, and the option parsing they share.

Nothing imports the front but the front; it imports every other room (docs/architecture.md).
"""
