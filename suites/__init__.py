"""normbench's conformance and throughput suites (run with ``pytest suites/ --impl=NAME``,
or ``normbench test --impl=NAME`` from an installed normbench)."""
