"""Is it right? The float64 oracle, the error model, and the checks built on them:
conformance (forward, statistics, backward against the oracle), reference-free
identities, finite differences, and the sensitivity of an exact LayerNorm.

Imports only the top level of normbench (docs/architecture.md).
"""
