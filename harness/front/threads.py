"""The CPU threads each backend's library computes with, set where the suites run.

A CPU kernel's reduction order can follow its thread count (PyTorch splits a row's
sums across OpenMP threads), so the same library passes different cases on
machines with different cores. The conformance suites therefore run every backend
with ``--normbench-threads`` threads (default 1) through :meth:`Backend.set_threads
<normbench.core.backend.Backend.set_threads>`, and the throughput suite with each library's
own count: a case there runs alone and may use every core. :func:`describe` is the
line the run's header prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from normbench.core.backend import Backend

#: the conformance suites' default
CONFORMANCE_THREADS = 1


def apply(backend: Backend, threads: int | None) -> int | None:
    """Set ``backend``'s library to ``threads`` (None: its own default); the count in effect, or None
    when the library has no such setting."""
    return backend.set_threads(threads)


def describe(backends: Iterable[Backend], threads: int | None) -> str:
    """``"torch 1, triton 1; numpy, jax: no setting (their own)"``: the threads each backend
    computes with in the conformance suites (setting them, as the suites will)."""
    if threads is None:
        return "each library's own (--normbench-threads=library)"
    set_, unset = [], []
    for backend in backends:
        count = apply(backend, threads)
        (set_ if count is not None else unset).append(backend.name if count is None else f"{backend.name} {count}")
    parts = [", ".join(set_)] if set_ else []
    if unset:
        parts.append(f"{', '.join(unset)}: no setting (the library's own)")
    return "; ".join(parts) or "no backend"
