"""normbench.front.options: the value parsers (good values, bad ones and their message), the options
the CLI and the pytest plugin share, and the backend option's two spellings in pytest:
``--normbench-impl`` (the plugin's, everywhere) and ``--impl`` (suites/conftest.py's alias, on
the suites folder), one setting; and a project's own ``--impl`` still works with normbench installed."""

import argparse
import os
import subprocess
import sys

import pytest

from normbench.front import options
from normbench.perf.roofline import DIRECTIONS
from normbench.suites import DIRECTORY as SUITES
from tests.plugins import counts

FORWARD = str(SUITES / "test_forward.py")
ONE_CASE = "float32-rows5-hidden1000-offset3"


@pytest.mark.parametrize("parse, value, expected", [
    (options.parse_seeds, "3", [3]),
    (options.parse_seeds, " 0..3 ", [0, 1, 2, 3]),
    (options.parse_seeds, "4,1,4", [4, 1]),
    (options.parse_array_shape, "64x1000", (64, 1000)),
    (options.parse_array_shape, "2X3,4", (2, 3, 4)),
    (options.parse_array_shape, "0x8", (0, 8)),
    (options.parse_eps, "1e-5", 1e-5),
    (options.parse_eps, "inf", float("inf")),  # range checks are the case's, with their own message
    (options.parse_count(3), "3", 3),
    (options.parse_seconds, "0", 0.0),
    (options.parse_threads, "2", 2),
    (options.parse_threads, "library", None),
    (options.parse_seconds, "1.5", 1.5),
    (options.parse_suites, "throughput, conformance", ("throughput", "conformance")),
    (options.parse_directions, "Backward,forward+backward,backward", ("backward", "forward+backward")),
    (options.parse_dtypes, "bfloat16", ("bfloat16",)),
    (options.parse_shapes, "256x16384", ("256x16384",)),
])
def test_a_good_value_parses(parse, value, expected):
    assert parse(value) == expected


SEEDS = ("Use a seed N from 0 to 4294967295, a range A..B, a list N,M,... or random (e.g. 0, 0..19, 1,4,9 or "
         "random)")
SHAPE = ("Use ROWSxHIDDEN[xMORE], e.g. 8x1024 or 2x4x1024: whole numbers joined by 'x' (one number is a single row), "
         "the last >= 1, the others >= 0")


@pytest.mark.parametrize("parse, value, fix", [
    (options.parse_seeds, "x", f"'x' is not a whole number. {SEEDS}"),
    (options.parse_seeds, "3..1", "The range 3..1 is empty: write the smaller seed first, 1..3"),
    (options.parse_seeds, "-1", f"Seed -1 is out of range. {SEEDS}"),
    (options.parse_seeds, "", f"A seed is missing. {SEEDS}"),
    (options.parse_deviations_file, "no-such-file.txt", "Give an existing known-deviations file."),
    (options.parse_array_shape, "4xq", f"'q' is not a whole number >= 0. {SHAPE}"),
    (options.parse_array_shape, "x", f"No size is given. {SHAPE}"),
    (options.parse_array_shape, "-4x8", f"'-4' is not a whole number >= 0. {SHAPE}"),
    (options.parse_eps, "small", "Use a number, e.g. 1e-5"),
    (options.parse_count(3), "2", "Use an integer >= 3"),
    (options.parse_count(1), "1.5", "Use an integer >= 1"),
    (options.parse_seconds, "-1", "Use seconds >= 0, e.g. 1.0"),
    (options.parse_threads, "0", "Use a number of threads >= 1, or 'library'"),
    (options.parse_seconds, "nan", "Use seconds >= 0, e.g. 1.0"),
    (options.parse_suites, "speed", "Valid suites: conformance, throughput"),
    (options.parse_suites, ",", "Valid suites: conformance, throughput"),
    (options.parse_directions, "sideways",
     "Unknown direction 'sideways'; valid directions: forward, backward, forward+backward"),
    (options.parse_directions, " , ", "Give one or more directions separated by commas; valid directions: forward"),
    (options.parse_dtypes, "float32,int8", "Unknown dtype 'int8'; valid dtypes: float64, float32, float16, bfloat16"),
    (options.parse_shapes, "3x3", "Unknown shape '3x3'; valid shapes: 16384x256, "),
])
def test_a_bad_value_says_which_and_how_to_fix_it(parse, value, fix):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(value)
    assert str(info.value).startswith(f"Could not parse value: {value!r}. {fix}"), str(info.value)


# -- issue 13: every bad input gets one message -------------------------------------------------------------------------

def refused(parse, value) -> str:
    """The message ``parse`` refuses ``value`` with (it must start the way every option value's does)."""
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(value)
    assert str(info.value).startswith(f"Could not parse value: {value!r}. "), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("value, problem", [
    ("4x", "A size is missing"),  # was (4,)
    ("4xx8", "A size is missing"),  # was (4, 8)
    ("x8", "A size is missing"),
    ("4x,8", "A size is missing"),
    ("8x0", "The last size (the hidden size) is 0: a row needs at least one element"),
    ("4x1.5", "'1.5' is not a whole number >= 0"),
    ("4x+8", "'+8' is not a whole number >= 0"),
    ("4x\u0668", "'\u0668' is not a whole number >= 0"),  # an Arabic-Indic 8: int() reads it
    ("4x" + "9" * 5000, "is too large a size"),  # int() refuses it with a message of its own
])
def test_a_malformed_shape_says_what_is_wrong_and_the_accepted_form(value, problem):
    message = refused(options.parse_array_shape, value)
    assert problem in message and message.endswith(SHAPE), message


def test_a_shape_may_have_no_rows_and_one_or_more_dims():
    """Zero rows is a case the suites test (cases.ROWS); a single size is one row (rank 1)."""
    assert options.parse_array_shape(" 0x33 ") == (0, 33)
    assert options.parse_array_shape("19") == (19,) and options.parse_array_shape("2x0x4x8") == (2, 0, 4, 8)
    refused(options.parse_array_shape, "0")


def test_seeds_go_from_0_to_2_to_the_32_minus_1():
    assert options.parse_seeds("4294967295") == [4294967295] and options.parse_seeds("0004") == [4]
    for value, seed in (("4294967296", "4294967296"), ("1,4294967296", "4294967296"), ("-5", "-5"),
                        ("1,-2", "-2"), ("-1..3", "-1"), ("0..99999999999", "99999999999"), ("9" * 5000, "9" * 5000)):
        assert f"Seed {seed} is out of range. {SEEDS}" in refused(options.parse_seeds, value)
    assert "A seed is missing" in refused(options.parse_seeds, "1,,4")


def test_a_range_of_more_than_MAX_SEEDS_seeds_is_refused_before_it_is_made():
    assert len(options.parse_seeds("5..10004")) == options.MAX_SEEDS == 10_000
    message = refused(options.parse_seeds, "5..10005")
    assert "That is 10001 seeds; at most 10000 run in one session. Use fewer, e.g. 5..10004" in message
    # 2**32 seeds: made into a list, they would take over 100 GiB
    assert "That is 4294967296 seeds" in refused(options.parse_seeds, "0..4294967295")
    assert "That is 10001 seeds" in refused(options.parse_seeds, ",".join(map(str, range(10_001))))


def test_one_seed_for_check_and_table1():
    assert options.parse_seed("0") == 0 and options.parse_seed(" 4294967295 ") == 4294967295
    fix = "Use a seed N from 0 to 4294967295, e.g. 0"
    assert refused(options.parse_seed, "-5").endswith(f"Seed -5 is out of range. {fix}")
    assert refused(options.parse_seed, "4294967296").endswith(f"Seed 4294967296 is out of range. {fix}")
    assert refused(options.parse_seed, "1,2").endswith(f"'1,2' is not a whole number. {fix}")
    assert refused(options.parse_seed, "").endswith(f"A seed is missing. {fix}")


IMPL_FIX = ("Give a backend name, names separated by commas (e.g. numpy,torch), or 'all' for every available backend; "
            "`normbench list` shows the names")


def test_an_empty_backend_selection_is_an_error_not_all():
    assert (options.parse_impl("all"), options.parse_impl(" numpy , torch")) == ("all", "numpy,torch")
    for value in ("", " ", ",", " , "):
        assert refused(options.parse_impl, value).endswith(f"It names no backend. {IMPL_FIX}")
    for value in ("numpy,,torch", "numpy,", ",numpy"):
        assert "A backend name is missing (two commas together, or one at an end)" in refused(options.parse_impl, value)
    for prefix in ("", "normbench-"):  # the option both front ends share
        with pytest.raises(argparse.ArgumentError, match=f"argument --{prefix}impl: Could not parse value: ''. It names "):
            argparser(prefix).parse_args([f"--{prefix}impl="])


@pytest.mark.parametrize("value, problem", [
    ("../../x", "A run id is one folder's name, not a path"),
    ("/tmp/x", "A run id is one folder's name, not a path"),
    ("a/b", "A run id is one folder's name, not a path"),
    ("a\\b", "A run id is one folder's name, not a path"),
    ("..", "A run id cannot start with '.'"),
    (".hidden", "A run id cannot start with '.'"),
    ("-r1", "A run id cannot start with '-'"),  # read as an option by the pytest command it is passed on to
    ("_r1", "A run id cannot start with '_'"),
    ("\u00e9t\u00e9", "A run id cannot start with '\u00e9'"),
    ("a..b", "A run id cannot contain '..'"),
    ("", "The run id is empty"),
    ("r" * 201, "The run id has 201 characters"),
    ("my run", "A run id cannot contain ' '"),
    ("r1\n", "A run id cannot contain '\\n'"),  # a regex's '$' lets a last newline through
    ("run\x00", "A run id cannot contain '\\x00'"),
    ("r\u00e9sum\u00e9", "A run id cannot contain '\u00e9'"),
])
def test_a_run_id_must_be_a_plain_folder_name(value, problem):
    rule = ("Use letters, digits, '.', '_', '-' and '+', starting with a letter or a digit, no '..', at most 200 "
            "characters, e.g. gpu-run-1")
    message = refused(options.check_run_id, value)
    assert message.startswith(f"Could not parse value: {value!r}. {problem}") and message.endswith(f". {rule}"), message


def test_the_run_id_options_use_the_run_id_rule():
    for good in ("r1", "20261101T150102Z-myhost-4711-0a3f", "a.b_c-9+x", "9", "R" * 200):
        assert options.check_run_id(good) == good
        assert argparser("").parse_args([f"--run-id={good}"]).run_id == good
    for prefix in ("", "normbench-"):
        with pytest.raises(argparse.ArgumentError, match=f"argument --{prefix}run-id: Could not parse value: "
                                                         "'../x'. A run id is one folder's name, not a path"):
            argparser(prefix).parse_args([f"--{prefix}run-id=../x"])


def test_the_results_folder_is_not_empty_nor_a_file(tmp_path):
    (tmp_path / "a-file").write_text("")
    assert options.parse_out_folder(str(tmp_path)) == str(tmp_path)
    assert options.parse_out_folder(str(tmp_path / "new")) == str(tmp_path / "new")
    assert refused(options.parse_out_folder, str(tmp_path / "a-file")).endswith(
        "It is a file, not a folder. Give a folder (it is created if missing), e.g. reports")
    assert refused(options.parse_out_folder, "").endswith("The results folder is empty. Give a folder, e.g. reports")
    with pytest.raises(argparse.ArgumentError, match="argument --out: Could not parse value"):
        argparser("").parse_args([f"--out={tmp_path / 'a-file'}"])


def test_the_worker_count_is_a_number_auto_or_logical():
    assert [options.parse_workers(v) for v in ("0", "04", "Auto", "logical", " 8 ")] == ["0", "4", "auto", "logical", "8"]
    for value in ("-2", "x", "", "1.5", "9" * 5000):
        assert refused(options.parse_workers, value).endswith(
            "Use a number of workers >= 0 (0 runs in one process), 'auto' (one per CPU core) or 'logical' (one per "
            "logical CPU), e.g. -n 4")


def test_the_deviations_file_must_exist(tmp_path):
    (tmp_path / "known.txt").write_text("")
    assert options.parse_deviations_file(str(tmp_path / "known.txt")) == tmp_path / "known.txt"
    with pytest.raises(argparse.ArgumentTypeError, match="Give an existing known-deviations file"):
        options.parse_deviations_file(str(tmp_path))  # a folder


@pytest.mark.parametrize("seeds, text", [([0], "0"), ([0, 1], "0,1"), ([0, 1, 2], "0..2"), ([5, 2, 9], "5,2,9"),
                                         (list(range(3, 23)), "3..22")])
def test_format_seeds_gives_back_what_parse_seeds_reads(seeds, text):
    assert options.format_seeds(seeds) == text and options.parse_seeds(text) == seeds


def argparser(prefix: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    options.add_impl_option(parser.add_argument, prefix)
    options.add_seed_option(parser.add_argument, prefix)
    options.add_throughput_options(parser.add_argument, prefix)
    return parser


def test_the_shared_options_are_the_same_under_either_prefix():
    short, long = argparser(""), argparser("normbench-")
    described = lambda parser: [(a.option_strings[0].removeprefix("--normbench-").removeprefix("--"), a.default,
                                 a.metavar, a.help, a.type, a.choices) for a in parser._actions[1:]]
    assert described(short) == described(long)
    assert [a.dest for a in long._actions[1:]] == ["normbench_impl", "normbench_seed", "normbench_out",
                                                   "normbench_run_id", "normbench_cache", "normbench_direction",
                                                   "normbench_dtype", "normbench_shape", "normbench_norm",
                                                   "normbench_rehearsal"]
    assert all(a.help.endswith(("Default: %(default)r", "Default: all", "Default: 'all'", "Default: all of the sweep's",
                                "Default: UTC time and host name")) for a in long._actions[1:])


def test_the_shared_options_parse_their_values_and_defaults():
    args = argparser("").parse_args([])
    assert (args.impl, args.seed, args.out, args.run_id, args.cache, args.direction, args.dtype, args.shape) == \
        (None, [0], "reports", None, "cold", None, None, None)
    args = argparser("").parse_args(["--impl=numpy,torch", "--seed=1..3", "--direction=forward", "--dtype=float16",
                                     "--shape=256x16384", "--cache=warm"])
    assert (args.impl, args.seed, args.direction, args.dtype, args.shape, args.cache) == \
        ("numpy,torch", [1, 2, 3], ("forward",), ("float16",), ("256x16384",), "warm")
    assert ", ".join(DIRECTIONS) in argparser("")._option_string_actions["--direction"].help


def test_two_spellings_of_the_backends_are_one_setting():
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    options.add_impl_option(parser.add_argument, "normbench-")
    options.add_impl_option(parser.add_argument, "", dest="normbench_impl")
    assert parser.parse_args(["--impl=numpy"]).normbench_impl == "numpy"
    assert parser.parse_args(["--normbench-impl=numpy"]).normbench_impl == "numpy"
    both = parser.parse_args(["--impl=numpy", "--normbench-impl=numpy"])
    assert both.normbench_impl == "numpy" and options.impl_given_as(both) == "--impl"
    assert parser.parse_args(["--impl=a", "--impl=b"]).normbench_impl == "b"  # one spelling twice: the last wins
    with pytest.raises(argparse.ArgumentError, match="--impl=numpy and --normbench-impl=torch are the same setting "
                                                     "given two values; give one of them"):
        parser.parse_args(["--impl=numpy", "--normbench-impl=torch"])
    assert options.impl_given_as(parser.parse_args([])) == "--normbench-impl"


# -- in pytest, as users run it --------------------------------------------------------------------------------------

def pytest_run(*args, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
@pytest.mark.parametrize("spelling", [["--impl=numpy"], ["--normbench-impl=numpy"],
                                      ["--impl=numpy", "--normbench-impl=numpy"]])
def test_either_spelling_selects_the_backends_on_the_suites(spelling, tmp_path):
    out = pytest_run(FORWARD, *spelling, "--collect-only", "-q", "-k",
                     f"test_forward and {ONE_CASE} and not rms and not add-", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert [line.rpartition("::")[2] for line in out.stdout.splitlines() if "::" in line] == \
        [f"test_forward[numpy-{ONE_CASE}]"]


@pytest.mark.e2e
def test_both_spellings_with_different_values_is_a_usage_error(tmp_path):
    out = pytest_run(FORWARD, "--impl=numpy", "--normbench-impl=torch", "--collect-only", "-q", cwd=tmp_path)
    assert out.returncode == 4, out.stdout[-2000:]
    assert "--impl=numpy and --normbench-impl=torch are the same setting given two values; give one of them" \
        in out.stderr and "Traceback" not in out.stderr


@pytest.mark.e2e
def test_a_bad_backend_name_is_reported_under_the_spelling_given(tmp_path):
    for flag in ("--impl", "--normbench-impl"):
        out = pytest_run(FORWARD, f"{flag}=nope", "--collect-only", "-q", cwd=tmp_path)
        assert out.returncode == 4 and f"{flag}=nope: unknown backend 'nope'" in out.stderr, out.stderr


@pytest.fixture
def project_with_impl(tmp_path):
    """A user's project whose conftest.py defines its own --impl."""
    (tmp_path / "conftest.py").write_text("def pytest_addoption(parser):\n"
                                          "    parser.addoption('--impl', default='mine')\n")
    (tmp_path / "test_mine.py").write_text("def test_mine(request):\n"
                                           "    assert request.config.getoption('impl') == 'fast'\n")
    return tmp_path


@pytest.mark.e2e
def test_a_projects_own_impl_option_works_with_normbench_installed(project_with_impl):
    out = pytest_run("--impl=fast", "-q", cwd=project_with_impl)
    assert out.returncode == 0 and counts(out.stdout) == {"passed": 1}, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.e2e
def test_a_projects_own_impl_and_normbenchs_suites_in_one_session(project_with_impl):
    """The suites' alias stands back where --impl is taken; --normbench-impl selects the backends."""
    out = pytest_run("test_mine.py", "--pyargs", "normbench.suites.test_forward", "--impl=fast",
                     "--normbench-impl=numpy", "-q", "-k", f"test_mine or ({ONE_CASE} and not rms and not add-)",
                     cwd=project_with_impl)
    assert out.returncode == 0 and counts(out.stdout) == {"passed": 2}, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.e2e
def test_the_reproduce_line_outside_the_suites_says_normbench_impl(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own(backend):\n    assert backend is None\n")
    out = pytest_run("test_own.py", "--normbench-impl=numpy", "--normbench-seed=4", "-q", cwd=tmp_path)
    assert out.returncode == 1, out.stdout[-2000:]
    assert "pytest 'test_own.py::test_own[numpy]' --normbench-impl=numpy --normbench-seed=4" in out.stdout


@pytest.mark.e2e
def test_normbench_test_passes_the_backends_and_seeds_on(tmp_path):
    out = subprocess.run([sys.executable, "-m", "normbench", "test", "--impl=numpy", "--seed=1..3", "-n", "0",
                          "--collect-only", "-q", "-k", f"test_forward and {ONE_CASE} and not rms and not add-"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert [line.rpartition("::")[2] for line in out.stdout.splitlines() if "::" in line] == \
        [f"test_forward[numpy-{ONE_CASE}-seed{s}]" for s in (1, 2, 3)]


def test_a_random_seed_is_drawn_once_per_run_and_kept_for_its_processes(monkeypatch):
    """``--normbench-seed=random``: drawn from the OS by the first process to parse it, kept in the environment for
    the processes it starts (pytest-xdist's workers must collect the same test ids), recorded as any seed is."""
    from normbench.front import options

    monkeypatch.delenv(options.SEED_DRAWN_ENV, raising=False)
    [first] = options.parse_seeds("random")
    assert os.environ[options.SEED_DRAWN_ENV] == str(first) and options.parse_seeds("random") == [first]
    draws = set()
    for _ in range(5):
        monkeypatch.delenv(options.SEED_DRAWN_ENV)
        draws |= set(options.parse_seeds("random"))
    assert len(draws) > 1 and all(0 <= s < options.SEED_LIMIT for s in draws)  # not a fixed seed in disguise
