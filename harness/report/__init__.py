"""The HTML report: result sets -> pandas -> one self-contained HTML file.

``normbench report RESULTS... -o report.html`` and ``normbench run`` (into its
run folder) use it. Modules: :mod:`~normbench.report.sources` (load run folders
and files, JSON and CSV only), :mod:`~normbench.report.shape` (pandas shaping),
:mod:`~normbench.report.svg` (chart geometry), :mod:`~normbench.report.render`
(the Jinja2 template, autoescaped). Importing it imports neither pandas nor
any array framework.

Example::

    from normbench.report import write_report
    write_report(["reports/run-a", "reports/run-b"], "compare.html", baseline="torch")
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_result_sets", "render_html", "write_report"]


def __getattr__(name: str) -> Any:
    if name in ("render_html", "write_report"):
        from normbench.report import render as module

        return getattr(module, name)
    if name == "load_result_sets":
        from normbench.report.sources import load_result_sets

        return load_result_sets
    raise AttributeError(name)
