"""The traffic and kernel-stats schemas (normbench.traffic, normbench.kernel_stats) and the report's traffic
section, on the published folder reports/traffic-h100. NumPy and pandas only: no torch, no triton."""

from __future__ import annotations

import csv
import re
import shutil

import pytest

from normbench.core import storage
from normbench.core.storage import ResultsError
from normbench.perf import kernel_stats as kernel_stats_schema
from normbench.perf import traffic as traffic_schema
from normbench.perf.kernel_stats import KERNEL_STATS
from normbench.perf.traffic import TRAFFIC
from normbench.report import load_result_sets, render_html, write_report
from tests.plugins import ROOT

PUBLISHED = ROOT / "reports" / "traffic-h100"


def published_rows(name: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(PUBLISHED / name, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def write_rows(path, header, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_the_published_files_load_through_their_schemas():
    traffic = storage.load(PUBLISHED / "traffic.csv", TRAFFIC)
    assert len(traffic) == 54 and set(traffic.direction) == {"forward", "backward"}
    assert list(traffic.columns) == [c.name for c in traffic_schema.TRAFFIC_COLUMNS]
    for name in ("backend", "normalization", "direction", "dtype", "rows", "hidden", "model_bytes", "unique_bytes",
                 "requested_bytes", "ratio"):
        assert name in traffic.columns
    assert str(traffic.ratio.dtype) == "float64" and str(traffic.unique_bytes.dtype) == "int64"
    assert (traffic.ratio - traffic.unique_bytes / traffic.model_bytes).abs().max() < 6e-6
    stats = storage.load(PUBLISHED, KERNEL_STATS)  # the folder: every kernels-*.csv
    assert len(stats) == 2 * 81 and set(stats.arch) == {"sm_90", "sm_80"}
    assert storage.load(PUBLISHED, TRAFFIC).equals(traffic)


def test_every_column_is_documented_in_reports_readme():
    readme = (ROOT / "reports" / "README.md").read_text()
    from normbench.perf.counters import COUNTERS_COLUMNS

    for columns in (traffic_schema.TRAFFIC_COLUMNS, kernel_stats_schema.KERNEL_STATS_COLUMNS, COUNTERS_COLUMNS):
        for c in columns:
            assert c.doc and f"| `{c.name}` | {c.kind} | {c.doc} |" in readme, f"reports/README.md: the row of {c.name}"


@pytest.mark.parametrize("change, said", [
    ({"rows": "many"}, r"traffic\.csv, line 2: field rows is 'many', not an integer \(it must be an integer >= 1\)"),
    ({"ratio": "-0.5"}, r"line 2: field ratio is -0\.5, not a finite number >= 0, <= 1000"),
    ({"ratio": "5000"}, r"line 2: field ratio is 5000\.0, not a finite number >= 0, <= 1000"),
    ({"ratio": "1.5"}, r"line 2: field ratio is 1\.5, but unique_bytes / model_bytes is 1\.00781"),
    ({"ratio": ""}, r"line 2: field ratio is empty; it must be unique_bytes / model_bytes"),
    ({"direction": "sideways"}, r"line 2: field direction is \"sideways\", not one of forward, backward"),
    ({"unique_bytes": "999999999999"}, r"line 2: .*requested_bytes \(574619648\) is below unique_bytes"),
])
def test_a_malformed_traffic_row_is_refused_naming_the_file_line_and_field(tmp_path, change, said):
    header, rows = published_rows("traffic.csv")
    rows[0].update(change)
    write_rows(tmp_path / "traffic.csv", header, rows)
    with pytest.raises(ResultsError, match=said):
        storage.load(tmp_path / "traffic.csv", TRAFFIC)


def test_a_missing_column_is_named(tmp_path):
    header, rows = published_rows("traffic.csv")
    header.remove("unique_bytes")
    write_rows(tmp_path / "traffic.csv", header, [{k: r[k] for k in header} for r in rows])
    with pytest.raises(ResultsError, match=r"traffic\.csv: its header lacks the columns unique_bytes"):
        storage.load(tmp_path, TRAFFIC)
    header, rows = published_rows("kernels-sm90.csv")
    header.remove("schema_version")
    write_rows(tmp_path / "kernels-sm90.csv", header, [{k: r[k] for k in header} for r in rows])
    with pytest.raises(ResultsError, match=r"kernels-sm90\.csv has no schema_version column"):
        storage.load(tmp_path, KERNEL_STATS)


@pytest.mark.parametrize("change, said", [
    ({"registers": "300"}, r"kernels-sm90\.csv, line 2: field registers is 300, not an integer >= 0, <= 255"),
    ({"spill_bytes": "-8"}, r"line 2: field spill_bytes is -8, not an integer >= 0"),
    ({"limited_by": "luck"}, r"line 2: field limited_by is \"luck\", not one of registers, threads"),
    ({"ctas_per_sm": "1", "capacity_warps": "16"}, r"line 2: resident_warps \(64\) exceeds capacity_warps \(16\)"),
    ({"capacity_warps": "32"}, r"line 2: capacity_warps \(32\) is not ctas_per_sm \* num_warps \(4 \* 16\)"),
    ({"widest_load": "8"}, r"line 2: field widest_load is 8, but the widest of load_widths is 16"),
    ({"load_widths": "sixteen"}, r"line 2: field load_widths is 'sixteen', not WIDTHB:COUNT items"),
])
def test_a_malformed_kernel_stats_row_is_refused(tmp_path, change, said):
    header, rows = published_rows("kernels-sm90.csv")
    rows[0].update(change)
    write_rows(tmp_path / "kernels-sm90.csv", header, rows)
    with pytest.raises(ResultsError, match=said):
        storage.load(tmp_path, KERNEL_STATS)


def test_the_writer_goes_through_the_schema(tmp_path):
    """traffic.write_csv (normbench traffic and kernel-stats write with it) adds schema_version, writes what
    loads back equal, and refuses a bad row before writing anything."""
    from normbench.perf import traffic

    _, rows = published_rows("traffic.csv")
    rows = [{k: v for k, v in r.items() if k != "schema_version"} for r in rows]
    assert tuple(rows[0]) == traffic.ROW_FIELDS
    traffic.write_csv(rows, tmp_path / "traffic.csv")
    assert (tmp_path / "traffic.csv").read_bytes() == (PUBLISHED / "traffic.csv").read_bytes()
    _, stats = published_rows("kernels-sm80.csv")
    traffic.write_csv(stats, tmp_path / "kernels-sm80.csv", KERNEL_STATS)
    assert (tmp_path / "kernels-sm80.csv").read_bytes() == (PUBLISHED / "kernels-sm80.csv").read_bytes()
    with pytest.raises(ResultsError, match=r"the normbench.traffic rows to write to .*bad\.csv, row 1: field ratio"):
        traffic.write_csv([{**rows[0], "ratio": "2.0"}], tmp_path / "bad.csv")
    assert not (tmp_path / "bad.csv").exists()


@pytest.fixture(scope="module")
def html():
    return render_html(load_result_sets([PUBLISHED]))


def text_of(fragment: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))


def test_the_published_folder_renders_its_traffic_section(html):
    section = html[html.index('<h2 id="traffic">'):html.index("<h2>Data</h2>")]
    words = text_of(section)
    # what the numbers are, and are not
    assert "Counts and compiler estimates, not speeds." in words
    assert "Triton interpreter" in words and "launch configuration" in words
    assert "modelled, not measured" in words and "no GB/s" in words
    assert "GB/s" not in words.replace("no GB/s", "")  # no speed anywhere in the section
    # the summary, from traffic.csv: 27 cases per direction, the worst backward 1.0426 (bf16 at 32768)
    assert "54 traffic rows of triton with the launch configuration of NVIDIA H100 SXM5 (132 SMs)" in words
    assert "backward backward 27 1.0013 to 1.0426 1.002 to 4.999 bfloat16 8192x32768" in words
    # one panel per direction x dtype, two charts each (unique, requested), the byte model at 1
    for direction in ("forward", "backward"):
        for dtype in ("bfloat16", "float16", "float32"):
            assert f"{direction}, {dtype}: traffic / byte model" in words
    assert section.count("<svg") == 12 and section.count("<polyline") == 12
    assert section.count("<title>1 = the byte model</title>") == 12
    assert "unique bytes / byte model (linear scale)" in section
    assert "triton unique 1.0039 1.0019 1.0010" in words  # forward bf16 at 512, 1024, 2048 (the table)
    # the static table: both targets side by side, no spills, the summary per target
    assert "sm_90 (NVIDIA H100 SXM5)" in words and "sm_80 (NVIDIA A100 SXM4)" in words
    assert "sm_90 (NVIDIA H100 SXM5): 81 launches; no spills; registers" in words
    assert "16-byte widest load and store in" in words
    row = re.search(r"<tr><td>bfloat16</td><td>524288x256</td><td>layer_norm_backward_rows</td>(.*?)</tr>", section,
                    re.S)
    assert row and text_of(row.group(1)).split() == [
        "64", "0", "8192", "2", "x", "16", "32", "of", "32", "registers", "16/16",
        "64", "0", "8192", "2", "x", "16", "32", "of", "32", "registers", "16/16"]


def test_a_folder_of_traffic_files_is_a_report_of_its_own(html):
    """No run there: no run section, nothing called missing, and the byte model the ratios divide by."""
    for heading in ("At a glance", "Environment", "Throughput", "Speedup against", "Conformance"):
        assert f"<h2>{heading}" not in html
    assert "Missing:" not in html and "did not run" not in html
    assert "<h2>Byte model</h2>" in html and "the traffic section counts it" in html
    assert f"<code>traffic-h100</code> ({PUBLISHED}, 54 traffic rows" in html
    assert "54 traffic rows, 162 kernel statistics rows)" in html and "throughput rows" not in html


def test_a_traffic_file_alone_renders_and_a_folder_without_any_known_file_is_refused(tmp_path):
    shutil.copy(PUBLISHED / "traffic.csv", tmp_path / "traffic.csv")
    html = render_html(load_result_sets([tmp_path / "traffic.csv"]))
    assert "No static kernel estimates in traffic.csv (no kernels-*.csv)." in html
    assert "forward, float32: traffic / byte model" in html
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("")
    with pytest.raises(ResultsError, match=r"holds no normbench results \(.*traffic\.csv or kernels-\*\.csv\)"):
        load_result_sets([tmp_path / "empty"])
    with pytest.raises(ResultsError, match=r"not a normbench results file"):
        load_result_sets([tmp_path / "empty" / "notes.txt"])


def test_the_report_never_overwrites_a_kernel_stats_file(tmp_path):
    for name in ("traffic.csv", "kernels-sm90.csv"):
        shutil.copy(PUBLISHED / name, tmp_path / name)
    with pytest.raises(ResultsError, match="it is one of the report's inputs"):
        write_report([tmp_path], tmp_path / "kernels-sm90.csv")
    assert write_report([tmp_path], tmp_path / "report.html").read_text().count("<svg") == 12


def test_a_run_with_traffic_beside_it_keeps_its_run_sections(tmp_path):
    from tests.report_data import write_run

    run = write_run(tmp_path / "r1", "r1", {"numpy": 0.1, "torch": 0.3})
    shutil.copy(PUBLISHED / "traffic.csv", run / "traffic.csv")
    html = render_html(load_result_sets([run]))
    assert "<h2>At a glance</h2>" in html and "<h2>Conformance</h2>" in html and '<h2 id="traffic">' in html
    assert "ceiling 20 GB/s" in html and "No static kernel estimates in r1" in html
