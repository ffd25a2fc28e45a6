"""Is it fast? Device-aware timing, the byte model and the measured bandwidth
ceiling (roofline), the sweep, and the throughput runner that verifies every
timed result before and after timing.

Imports the top level and check/, never paper/ (docs/architecture.md).
"""
