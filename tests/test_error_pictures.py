"""The report's error pictures (issue 15, item 4): y's error in ulps and its coherence statistics.

* Every forward test of a float16, bfloat16 or float32 output records, through the same
  ``user_properties`` the properties use, a histogram of its error signed toward zero in ulps,
  the same for the reference rounded once to nearest, and the coherence statistics' worst ratios;
  float64 records none. A test that fails records them too (they are taken before any check).
* A correct backend (numpy: float64 arithmetic rounded once) gives the round-to-nearest histogram.
* A truncating kernel (fp32 arithmetic, the output's low bits masked off to bfloat16) gives a
  histogram all on the toward-zero side, mean -0.5 ulp, and a toward-zero ratio far above 1.
* The columns round-trip through the conformance schema (version 2) and a malformed histogram is a
  ResultsError naming the file, the line and the field; version 1 files read them empty.
* The report draws the histograms and the statistics per backend and dtype, and says "not
  measured" for a version 1 run.

The suites run in this process (``normbench.front.runner.run_pytest``, no xdist) on a few cases: seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest

from normbench import get_registry
from normbench.check import conformance, outcomes
from normbench.check.outcomes import Histogram
from normbench.core import storage
from normbench.core.registry import Selection
from normbench.front.runner import outcome_rows, run_pytest
from normbench.report import errors
from normbench.report.render import render_html
from normbench.report.sources import load_result_sets
from normbench.suites import DIRECTORY as SUITES
from tests.mutants import Fp32Kernel


class TruncatingBf16(Fp32Kernel):
    """Correct fp32 arithmetic, but y converted to bfloat16 by masking off fp32's low 16 bits
    (round toward zero), as a bit-mask conversion does."""

    name = "mutant-truncating-bf16"
    description = "fp32 kernel whose output conversion to bfloat16 truncates toward zero"
    dtypes = ("bfloat16",)

    def write(self, y32, x):
        bits = np.ascontiguousarray(y32, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
        return bits.view(np.float32).reshape(x.shape).astype(x.dtype)  # exact: the low bits are zero


SELECT = "test_forward and (hidden1000-offset3 or bfloat16-rows1025-hidden33-offset3) and not add-"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    backends = [get_registry().create("numpy"), TruncatingBf16()]
    args = [str(SUITES / "test_forward.py"), "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-k", SELECT,
            f"--normbench-impl={','.join(b.name for b in backends)}"]
    with contextlib.redirect_stdout(io.StringIO()):
        _, outcomes = run_pytest(args, Selection(backends))
    return outcome_rows(outcomes, "pics")


def _of(rows, backend, dtype):
    found = [r for r in rows if r["backend"] == backend and r["case"].startswith(dtype + "-")
             and r["test"] == "test_forward" and r["outcome"] != "skipped"]
    assert found, (backend, dtype)
    return found


def test_histogram_bins_are_centred_on_zero():
    h = conformance.histogram(np.array([0.0, 0.0624, -0.0625, 0.0625, -0.5, 0.5, -2.07, 2.0625, 2.06]))
    assert len(h.counts) == 33 and h.width == 0.125 and h.edges() == (-2.0625, 2.0625)
    middle = 16
    assert h.counts[middle] == 3  # 0, 0.0624 and -0.0625 (the lower edge is in the bin)
    assert h.counts[middle + 1] == 1 and h.counts[middle - 4] == 1 and h.counts[middle + 4] == 1  # 0.0625, +-0.5
    assert (h.under, h.over, h.counts[-1]) == (1, 1, 1)  # -2.07 below, 2.0625 above, 2.06 in the last bin
    assert Histogram.parse(str(h)) == h


def test_forward_tests_record_the_histograms_and_ratios_and_float64_none(rows):
    for dtype in ("float16", "bfloat16", "float32"):
        for r in _of(rows, "numpy", dtype):
            assert r["outcome"] == "passed"
            e, n = Histogram.parse(r["error_histogram"]), Histogram.parse(r["nearest_histogram"])
            assert e.total == n.total > 0
            ratios = [r[c] for c in conformance.ERROR_STRUCTURE[2:]]
            assert all(v != v or 0 <= v < 1 for v in ratios), r["case"]  # empty (NaN: does not apply) or within
            assert r["coherence_offset"] >= 0, r["case"]  # rows of 1000 elements: the offset always applies
    for r in _of(rows, "numpy", "float64"):
        assert r["error_histogram"] == r["nearest_histogram"] == ""
        assert all(r[c] != r[c] for c in ("coherence_scale", "coherence_offset"))  # NaN: empty


def test_a_correct_backend_matches_the_round_to_nearest_histogram(rows):
    for dtype in ("float16", "bfloat16", "float32"):
        for r in _of(rows, "numpy", dtype):
            e, n = Histogram.parse(r["error_histogram"]), Histogram.parse(r["nearest_histogram"])
            # float64 arithmetic rounded once: within 1/16 ulp of rounding the reference once, bin for bin
            assert errors.within(e, 0.5) == errors.within(n, 0.5) == e.total, r["case"]
            assert abs(errors.mean_of(e) - errors.mean_of(n)) < 0.02, r["case"]
            assert abs(errors.mean_of(e)) < 0.05, r["case"]
            assert sum(abs(a - b) for a, b in zip(e.counts, n.counts)) <= 0.02 * e.total, r["case"]


def test_a_truncating_kernel_is_half_an_ulp_toward_zero_and_fails(rows):
    for r in _of(rows, "mutant-truncating-bf16", "bfloat16"):
        e, n = Histogram.parse(r["error_histogram"]), Histogram.parse(r["nearest_histogram"])
        assert r["outcome"] == "failed" and "toward-zero" in r["message"] + "toward-zero", r["case"]
        assert -0.56 < errors.mean_of(e) < -0.44, (r["case"], errors.mean_of(e))
        assert abs(errors.mean_of(n)) < 0.05
        lo = e.edges()[0]
        away = sum(c for i, c in enumerate(e.counts) if lo + (i + 0.5) * e.width > 0.0625)
        assert away == 0 and e.over == 0, r["case"]  # nothing rounded away from zero
        assert r["coherence_toward_zero"] > 2, r["case"]


def test_the_columns_round_trip_and_a_malformed_histogram_is_refused(rows, tmp_path):
    df = storage.frame(rows, outcomes.CONFORMANCE)
    storage.save(tmp_path, df, outcomes.CONFORMANCE)
    columns = list(conformance.ERROR_STRUCTURE)
    for path in (tmp_path / "conformance.csv", tmp_path / "conformance.json"):
        again = storage.load(path, outcomes.CONFORMANCE)
        assert again[columns].equals(df[columns]), path
    text = (tmp_path / "conformance.csv").read_text().splitlines()
    line = next(i for i, t in enumerate(text) if ",numpy," in t and "b=33x" in t)
    good = re.search(r"b=33x0\.125;u=\d+;o=\d+;c=[0-9,]+", text[line]).group(0)
    text[line] = text[line].replace(good, good.rsplit(",", 1)[0], 1)  # one count short
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "conformance.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(storage.ResultsError) as info:
        storage.load(bad / "conformance.csv", outcomes.CONFORMANCE)
    said = str(info.value)
    assert f"conformance.csv, line {line + 1}: field error_histogram is" in said
    assert "c has 32 counts, b says 33 bins" in said
    for value, why in (("b=32x0.125;u=0;o=0;c=" + ",".join(["0"] * 32), "odd number of bins"),
                       ("b=3x0.5;u=-1;o=0;c=0,0,0", "u must be a count"),
                       ("b=3x0;u=0;o=0;c=0,0,0", "bin width"), ("hello", "not b=BINSxWIDTH")):
        broken = [dict(rows[0], nearest_histogram=value)]
        with pytest.raises(storage.ResultsError, match=f"field nearest_histogram is .*{why}"):
            storage.save(tmp_path / "broken", storage.frame(broken, outcomes.CONFORMANCE), outcomes.CONFORMANCE)


def test_the_report_draws_the_histograms_and_the_statistics(rows, tmp_path):
    storage.save(tmp_path, storage.frame(rows, outcomes.CONFORMANCE), outcomes.CONFORMANCE)
    html = render_html(load_result_sets([tmp_path]))
    section = html[html.index("<h3>Error in ulps, and its structure</h3>"):]
    section = section[:section.index("<h3>", 10)] if "<h3>" in section[10:] else section
    panels = {m.group(1): part for m, part in
              zip(re.finditer(r"<h4>(.*?) <span", section), section.split("<h4>")[1:])}
    # one panel per backend, normalization and dtype (the truncating mutant is LayerNorm-only)
    assert set(panels) == {"numpy, float32", "numpy, float16", "numpy, bfloat16", "mutant-truncating-bf16, bfloat16",
                           "numpy RMSNorm, float32", "numpy RMSNorm, float16", "numpy RMSNorm, bfloat16"}
    truncating = panels["mutant-truncating-bf16, bfloat16"]
    assert truncating.count("<svg") == 1 and truncating.count('class="bar"') >= 35 and 'class="nearest"' in truncating
    mean = float(re.search(r"<td>mean error toward zero</td><td class=\"num\">([-+0-9.]+) ulp", truncating).group(1))
    assert -0.56 < mean < -0.44
    ratio = re.search(r"bias toward zero</td><td class=\"num fail\">([0-9.e+]+)</td><td class=\"msg\">(.*?)</td>",
                      truncating)
    worst = max(r["coherence_toward_zero"] for r in _of(rows, "mutant-truncating-bf16", "bfloat16"))
    assert ratio and float(ratio.group(1)) == pytest.approx(worst, rel=1e-2)
    assert ratio.group(2) in {r["case"] for r in rows if r["coherence_toward_zero"] == worst}
    assert "(2 of 2 forward tests measured)" in html
    numpy_mean = float(re.search(r"<td>mean error toward zero</td><td class=\"num\">([-+0-9.]+) ulp",
                                 panels["numpy, bfloat16"]).group(1))
    assert abs(numpy_mean) < 0.05 and 'class="num fail"' not in panels["numpy, bfloat16"]
    assert "numpy, float64" not in section


def test_version_1_runs_show_the_not_measured_note(rows, tmp_path):
    v1 = [c.name for c in outcomes.CONFORMANCE_COLUMNS if c.name not in
          ("deterministic", "batch_invariant", "property_notes", *conformance.ERROR_STRUCTURE)]
    old = [{**{k: v for k, v in r.items() if k in v1}, "schema_version": 1} for r in rows[:3]]
    (tmp_path / "conformance.json").write_text(json.dumps({"schema": outcomes.CONFORMANCE.name, "schema_version": 1,
                                                           "rows": old}))
    df = storage.load(tmp_path, outcomes.CONFORMANCE)
    assert set(df.error_histogram) == {""} and df.coherence_toward_zero.isna().all()
    html = render_html(load_result_sets([tmp_path]))
    assert "Not measured: this run's conformance results record no error histogram" in html
    assert 'class="bar"' not in html
