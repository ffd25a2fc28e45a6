"""The core every room shares: the Backend contract, the operations normbench knows, the registry
of backends, cases, dtypes, known deviations, and a run's files (storage, run folder, environment).

Imports nothing but the core (docs/architecture.md).
"""
