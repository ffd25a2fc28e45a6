"""Render result sets into one self-contained HTML file with Jinja2 (autoescape on).

The page has no script, no external resource and a Content-Security-Policy
that forbids both; charts are inline SVG drawn by the template; the measured
rows are embedded as JSON (``<script type="application/json">``, escaped by
Jinja2's ``tojson``) so the file carries its own data.

A survey's judged findings (``findings.csv`` beside its rows) come first, before
any result, in a table as wide as the page: long words, commands and evidence
wrap inside their cells (the evidence folded under each finding).

The throughput sections (at a glance, the byte model, throughput, speedups)
appear only when some set holds throughput rows; a report of conformance runs
alone says once, at the top, that no throughput was measured.

A set holding traffic counts (``traffic.csv``) or kernel statistics
(``kernels-*.csv``) adds the traffic section: counts and compiler estimates,
said to be no speeds. A report of such sets alone shows only that section (and
the byte model it divides by): there is no run to report on.

The header names the normbench that rendered the page, with its commit where it
is a checkout (``normbench.core.provenance``): a published report says whether
it was rendered from a committed tree.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from normbench import __version__
from normbench.core import provenance
from normbench.core.files import write_atomic
from normbench.core.storage import ResultsError
from normbench.report import codes, errors, properties, shape, survey, svg
from normbench.report.sources import ResultSet, input_files, load_result_sets

TEMPLATE = "report.html.j2"
#: columns of the embedded throughput data (enough to redraw every chart)
EMBEDDED_COLUMNS = ("run_id", "host", "device_name", "backend", "backend_version", "direction", "dtype", "rows",
                    "hidden", "byte_model", "bytes", "median_s", "iqr_s", "n", "gbps", "ceiling_gbps",
                    "pct_of_ceiling", "wide_spread", "verdict")
#: columns of the embedded traffic data (the breakdown per argument stays in traffic.csv)
EMBEDDED_TRAFFIC = ("backend", "direction", "dtype", "rows", "hidden", "gpu", "sm_count", "byte_model", "model_bytes",
                    "unique_bytes", "requested_bytes", "ratio", "requested_ratio", "launches", "kernels")


def _environment() -> Any:
    import jinja2

    text = resources.files("normbench.report").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(text)


def _embedded(sets: list[ResultSet]) -> list[dict[str, Any]]:
    from normbench.core.storage import records

    out = []
    for rs in sets:
        item = {"label": rs.label, "throughput": records(rs.throughput[list(EMBEDDED_COLUMNS)]),
                "conformance_counts": rs.conformance.groupby(["backend", "outcome"]).size().reset_index(name="n")
                .to_dict("records")}
        if rs.traffic is not None:
            item["traffic"] = records(rs.traffic[list(EMBEDDED_TRAFFIC)])
        if rs.kernel_stats is not None:
            item["kernel_stats"] = records(rs.kernel_stats.drop(columns=["schema_version"]))
        out.append(item)
    return out


def context(sets: list[ResultSet], baseline: str = "torch") -> dict[str, Any]:
    """Everything the template shows, as plain values."""
    panels = shape.throughput_panels(sets)
    traffic = shape.traffic_panels(sets)
    return {
        "runs": any(rs.is_run for rs in sets),
        "measured": any(not rs.throughput.empty for rs in sets),
        "traffic_panels": [{"panel": p, "unique": svg.ratio_chart(p, "unique"),
                            "requested": svg.ratio_chart(p, "requested")} for p in traffic],
        "counted": [{"label": rs.label, "traffic": shape.traffic_summary(rs), "kernels": shape.kernel_table(rs),
                     "has_traffic": rs.traffic is not None, "has_kernels": rs.kernel_stats is not None}
                    for rs in sets if rs.traffic is not None or rs.kernel_stats is not None],
        "version": __version__,
        "commit": provenance.source().commit_label(),
        "baseline": baseline,
        "sets": [{"label": rs.label, "source": rs.source, "missing": rs.missing, "notes": rs.notes,
                  "environment": shape.environment_items(rs), "glance": shape.at_a_glance(rs),
                  "speedups": shape.speedups(rs, baseline),
                  "problems": shape.throughput_problems(rs), "matrix": shape.conformance_matrix(rs),
                  "details": shape.conformance_details(rs), "table1": rs.table1, "findings": rs.findings,
                  "n_findings": None if rs.findings is None else len(rs.findings),
                  "properties": properties.properties_table(rs), "errors": errors.error_pictures(rs),
                  "codes": codes.code_table(rs),
                  "n_throughput": len(rs.throughput), "n_conformance": len(rs.conformance),
                  "n_traffic": None if rs.traffic is None else len(rs.traffic),
                  "n_kernels": None if rs.kernel_stats is None else len(rs.kernel_stats), "is_run": rs.is_run}
                 for rs in sets],
        "panels": [{"panel": p, "chart": svg.chart(p)} for p in panels],
        "byte_models": shape.byte_models(sets),
        "verdicts": survey.VERDICTS,
        "data": _embedded(sets),
    }


def render_html(sets: list[ResultSet], baseline: str = "torch") -> str:
    """The report's HTML text."""
    return _environment().render(**context(sets, baseline))


def write_report(sources: list[str | os.PathLike], out: str | os.PathLike, baseline: str = "torch") -> Path:
    """Load ``sources`` (run folders or files), render them, and write ``out``; returns its path.

    ``out`` may not be one of the inputs (a file given, or a file a folder given holds and the report
    reads, :func:`~normbench.report.sources.input_files`): that is a ResultsError, before anything is read."""
    path = Path(out)
    inputs = {f: s for s in sources for f in input_files(s)}
    target = Path(os.path.realpath(path))  # realpath: a link loop is left for the loader to name, never raised here
    if target in inputs or any(target == Path(os.path.realpath(s)) for s in sources):
        source = inputs.get(target, target)
        raise ResultsError(f"cannot write the report to {path}: it is one of the report's inputs (from {source}); the "
                           f"report never overwrites what it reads. Fix: give -o a new file, e.g. "
                           f"{target.parent if target in inputs else target}/report.html")
    sets = load_result_sets(sources)
    html = render_html(sets, baseline)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, html)
    except OSError as exc:
        raise ResultsError(f"cannot write the report to {path}: {exc}") from None
    return path
