"""Option values and the options shared by the CLI and the pytest plugin.

Every ``type=`` value parser of ``normbench``'s command line and of its pytest
plugin lives here. Each takes the string the user typed and returns the value,
or raises :class:`argparse.ArgumentTypeError` saying
``Could not parse value: '<value>'. <how to fix it>``; argparse (and pytest,
which uses it) turns that into a usage error.

The options both front ends have are defined once, by the ``add_*_options``
functions, the way pytest-benchmark shares its options: each takes an
``addoption`` callable, either an :mod:`argparse` parser's ``add_argument`` or a
pytest option group's ``addoption``, and a ``prefix`` for the option names:
``"normbench-"`` in the pytest plugin (``--normbench-seed``), ``""`` in the CLI
(``normbench run --seed``).

>>> parse_seeds("0..3")
[0, 1, 2, 3]
>>> parse_directions("sideways")  # doctest: +ELLIPSIS
Traceback (most recent call last):
argparse.ArgumentTypeError: ... Unknown direction 'sideways'; valid directions: forward, backward, forward+backward
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from normbench.check.properties import BATCH_INVARIANT, DEFAULT_REQUIRED, DETERMINISTIC, PROPERTIES
from normbench.core import run_folder
from normbench.core.dtypes import DTYPES
from normbench.core.operations import NAMES
from normbench.core.registry import ALL
from normbench.perf.roofline import DIRECTIONS
from normbench.perf.sweep import sweep_shapes
from normbench.perf.timing import CACHES

#: the suites ``normbench run --suites`` chooses from
SUITES: tuple[str, ...] = ("conformance", "throughput")
#: seeds go from 0 to 2**32 - 1, the range NumPy's legacy ``np.random.seed`` takes and every
#: framework's seeding accepts, so a seed given here can be handed to any of them
SEED_LIMIT = 2**32
#: the most seeds one option value may name (each multiplies the tests): a range is counted
#: before it is made, so ``0..99999999999`` is refused at once instead of filling the memory
MAX_SEEDS = 10_000
#: the longest run id (a folder name; file systems allow 255 bytes)
RUN_ID_MAX = 200  # as run_folder.RUN_ID
_SEED_RANGE = re.compile(r"(\S+?)\.\.(\S+)")
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_RUN_ID = re.compile(r"[A-Za-z0-9._+-]+", re.ASCII)


def _error(value: str, fix: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Could not parse value: {value!r}. {fix}")


# -- value parsers ---------------------------------------------------------------------------------------------------

SEEDS_FORM = (f"Use a seed N from 0 to {SEED_LIMIT - 1}, a range A..B, a list N,M,... or random (e.g. 0, 0..19, "
              f"1,4,9 or random)")


def _seed(value: str, text: str, form: str = SEEDS_FORM) -> int:
    """One seed of ``value`` (the option's whole text, for the message)."""
    text = text.strip()
    if not _DIGITS.fullmatch(text.removeprefix("-")):
        raise _error(value, f"{text!r} is not a whole number. {form}" if text else f"A seed is missing. {form}")
    if text.startswith("-") or len(text.lstrip("0")) > 10 or int(text) >= SEED_LIMIT:
        raise _error(value, f"Seed {text} is out of range. {form}")
    return int(text)


def parse_seed(value: str) -> int:
    """One seed from 0 to ``SEED_LIMIT - 1`` (``normbench check --seed``, ``normbench table1 --seed``).

    >>> parse_seed("7")
    7
    >>> parse_seed("-5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    argparse.ArgumentTypeError: Could not parse value: '-5'. Seed -5 is out of range. Use a seed N from 0 to 4294967295...
    """
    return _seed(value, value, f"Use a seed N from 0 to {SEED_LIMIT - 1}, e.g. 0")


#: where a seed drawn for ``random`` is kept, so that every process of one run (pytest-xdist's workers, the
#: sessions of ``normbench run``) draws the same one: the first to parse ``random`` draws it and sets this
SEED_DRAWN_ENV = "NORMBENCH_SEED_DRAWN"


def random_seed() -> int:
    """The seed ``random`` stands for: drawn from the operating system's entropy (``secrets``) by the first process of
    the run to ask, which keeps it in :data:`SEED_DRAWN_ENV` for the processes it starts (their test ids must match)."""
    import os
    import secrets

    kept = os.environ.get(SEED_DRAWN_ENV, "")
    if _DIGITS.fullmatch(kept) and int(kept) < SEED_LIMIT:
        return int(kept)
    seed = secrets.randbelow(SEED_LIMIT)
    os.environ[SEED_DRAWN_ENV] = str(seed)
    return seed


def parse_seeds(value: str) -> list[int]:
    """``"3"``, ``"0..19"`` (inclusive) or ``"1,4,9"`` as a list of seeds (repeats dropped): each
    from 0 to ``SEED_LIMIT - 1``, at most :data:`MAX_SEEDS` of them (a range is counted first);
    ``"random"``: one seed no one can guess (:func:`random_seed`), recorded with every result as any seed is.

    >>> parse_seeds("0..2"), parse_seeds("random")[0] < SEED_LIMIT
    ([0, 1, 2], True)
    """
    if value.strip() == "random":
        return [random_seed()]
    match = _SEED_RANGE.fullmatch(value.strip())
    if match:
        lo, hi = _seed(value, match[1]), _seed(value, match[2])
        if lo > hi:
            raise _error(value, f"The range {lo}..{hi} is empty: write the smaller seed first, {hi}..{lo}")
        seeds = range(lo, hi + 1)
    else:
        seeds = list(dict.fromkeys(_seed(value, s) for s in value.split(",")))
    if len(seeds) > MAX_SEEDS:
        raise _error(value, f"That is {len(seeds)} seeds; at most {MAX_SEEDS} run in one session. "
                            f"Use fewer, e.g. {seeds[0]}..{seeds[0] + MAX_SEEDS - 1}, and run the rest in another session")
    return list(seeds)


def format_seeds(seeds: Sequence[int]) -> str:
    """The inverse of :func:`parse_seeds`: ``[0, 1, 2]`` -> ``"0..2"``, ``[1, 4]`` -> ``"1,4"``."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def parse_deviations_file(value: str) -> Path:
    """The path of an existing known-deviations file (``--normbench-deviations``)."""
    path = Path(value)
    if not path.is_file():
        raise _error(value, "Give an existing known-deviations file.")
    return path


SHAPE_FORM = ("Use ROWSxHIDDEN[xMORE], e.g. 8x1024 or 2x4x1024: whole numbers joined by 'x' "
              "(one number is a single row), the last >= 1, the others >= 0")


def parse_array_shape(value: str) -> tuple[int, ...]:
    """An array's shape, sizes joined by ``x`` (or commas): ``"64x1000"`` -> ``(64, 1000)``.

    Every size is a whole number; the last (the hidden size, a row's length) is at least 1, the
    others at least 0 (no rows is a case the suites test). ``4x`` and ``4xx8`` miss a size.

    >>> parse_array_shape("2X3,4"), parse_array_shape("0x8")
    ((2, 3, 4), (0, 8))
    >>> parse_array_shape("4xx8")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    argparse.ArgumentTypeError: Could not parse value: '4xx8'. A size is missing (nothing between two 'x'...
    """
    parts = [p.strip() for p in value.strip().lower().replace(",", "x").split("x")]
    if not any(parts):
        raise _error(value, f"No size is given. {SHAPE_FORM}")
    for part in parts:
        if not part:
            raise _error(value, f"A size is missing (nothing between two 'x', or before or after one). {SHAPE_FORM}")
        if not _DIGITS.fullmatch(part):
            raise _error(value, f"{part!r} is not a whole number >= 0. {SHAPE_FORM}")
        if len(part.lstrip("0")) > 18:
            raise _error(value, f"{part} is too large a size. {SHAPE_FORM}")
    dims = tuple(int(p) for p in parts)
    if dims[-1] == 0:
        raise _error(value, f"The last size (the hidden size) is 0: a row needs at least one element. {SHAPE_FORM}")
    return dims


def parse_eps(value: str) -> float:
    """A number (range checks are the case's: :func:`normbench.core.cases.validate_eps`)."""
    try:
        return float(value)
    except ValueError:
        raise _error(value, "Use a number, e.g. 1e-5") from None


def parse_scale(value: str) -> float:
    """A quantization scale or its upper bound (``check --scale``, ``--scale-ub``): a number finite and > 0 in
    float32, as a kernel holds it (:func:`normbench.core.parts.float32_scale`)."""
    from normbench.core.parts import float32_scale

    try:
        number = float(value)
    except ValueError:
        raise _error(value, "Use a number > 0, e.g. 0.05") from None
    if not float32_scale(number):
        raise _error(value, "A scale must stay finite and > 0 in float32 (1.4e-45 to 3.4e38), as a kernel holds it, "
                            "e.g. 0.05")
    return number


def parse_count(minimum: int) -> Callable[[str], int]:
    """A parser of integers >= ``minimum``."""
    def parse(value: str) -> int:
        try:
            number = int(value)
            if number < minimum:
                raise ValueError
            return number
        except ValueError:
            raise _error(value, f"Use an integer >= {minimum}") from None
    return parse


#: the most pytest-xdist workers ``-n`` takes per CPU core this process may use: each worker is a Python process
#: with its frameworks loaded (a hundred thousand of them never come up)
WORKERS_PER_CORE = 4


def parse_workers(value: str) -> str:
    """pytest-xdist's worker count (``normbench test/run -n``): ``auto``, ``logical``, or an integer
    >= 0 (``0``: no workers) and at most :data:`WORKERS_PER_CORE` per usable CPU core, as the string
    pytest-xdist reads."""
    from normbench.core.machine import cpu_threads

    text = value.strip().lower()
    most = WORKERS_PER_CORE * max(1, cpu_threads())
    if text in ("auto", "logical"):
        return text
    if _DIGITS.fullmatch(text) and len(text) <= 6:
        if int(text) > most:
            raise _error(value, f"At most {most} workers here ({WORKERS_PER_CORE} per usable CPU core); 'auto' "
                                f"starts one per core")
        return str(int(text))
    raise _error(value, "Use a number of workers >= 0 (0 runs in one process), 'auto' (one per CPU core) or "
                        "'logical' (one per logical CPU), e.g. -n 4")


#: pytest-xdist's own ways to start workers, which would pass ``-n``'s cap and the no-more-workers-than-tests rule
XDIST_WORKER_OPTIONS = ("--numprocesses", "--maxprocesses", "--tx")


def xdist_worker_argument(extra: Sequence[str]) -> str:
    """The first of ``extra`` (the arguments ``normbench test/run`` passes on to pytest) that sets pytest-xdist's
    workers itself (``--numprocesses=10``, ``--tx 8*popen``, an abbreviation of them), or "" if none does.

    >>> xdist_worker_argument(["-k", "rms", "--numprocesses=10"])
    '--numprocesses=10'
    >>> xdist_worker_argument(["--tx", "8*popen"]), xdist_worker_argument(["-x"])
    ('--tx', '')
    """
    for arg in extra:
        name = arg.split("=", 1)[0]
        if len(name) > 4 and any(option.startswith(name) for option in XDIST_WORKER_OPTIONS) or name == "--tx":
            return arg
    return ""


def parse_threads(value: str) -> int | None:
    """``--normbench-threads``: a library thread count >= 1, or ``library`` (None: each library's own)."""
    text = value.strip().lower()
    if text == "library":
        return None
    if _DIGITS.fullmatch(text) and len(text) <= 4 and int(text) >= 1:
        return int(text)
    raise _error(value, "Use a number of threads >= 1, or 'library' for each library's own default, e.g. 1")


#: ``--normbench-require=none``: no property required, every one reported
REQUIRE_NONE = "none"


def parse_require(value: str) -> tuple[str, ...]:
    """``--normbench-require``: the properties beyond tolerance a test fails without
    (:data:`normbench.check.properties.PROPERTIES`), separated by commas, or ``none``
    (every property is then reported, none fails a test). ``batch-invariant`` implies
    ``deterministic``: bits that differ from one call to the next cannot be independent of the
    batch, and asking for the stronger property never drops the default one.

    >>> parse_require("batch-invariant"), parse_require("none")
    (('deterministic', 'batch-invariant'), ())
    >>> parse_require("bitwise")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    argparse.ArgumentTypeError: Could not parse value: 'bitwise'. Unknown property 'bitwise'; valid properties: deterministic, ...
    """
    chosen = tuple(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))
    fix = (f"valid properties: {', '.join(PROPERTIES)}, or {REQUIRE_NONE} (each then reported, none failing a test); "
           f"e.g. --normbench-require=deterministic,batch-invariant")
    if chosen == (REQUIRE_NONE,):
        return ()
    if not chosen:
        raise _error(value, f"Give one or more properties separated by commas; {fix}")
    for v in chosen:
        if v == REQUIRE_NONE:
            raise _error(value, f"{REQUIRE_NONE!r} cannot be combined with properties; {fix}")
        if v not in PROPERTIES:
            raise _error(value, f"Unknown property {v!r}; {fix}")
    if BATCH_INVARIANT in chosen:
        chosen = (DETERMINISTIC, *(v for v in chosen if v != DETERMINISTIC))
    return chosen


def format_require(required: Sequence[str]) -> str:
    """The inverse of :func:`parse_require`: ``()`` -> ``"none"``."""
    return ",".join(required) or REQUIRE_NONE


def add_require_option(addoption: Callable, prefix: str) -> None:
    """``--<prefix>require``: the properties beyond tolerance that fail a test when violated."""
    addoption(f"--{prefix}require", metavar="LIST", type=parse_require, default=",".join(DEFAULT_REQUIRED),
              help=f"Properties beyond the error model's tolerance that fail a test when violated, separated by "
                   f"commas: {', '.join(PROPERTIES)}; or {REQUIRE_NONE}. The others are measured and reported "
                   f"(the terminal summary, the results, the report), not failures. deterministic: the same input "
                   f"twice gives the same bits (forward y; backward dx, dweight, dbias); batch-invariant: a row's "
                   f"output has the same bits whatever the batch size and its position in the batch (what "
                   f"deterministic inference needs; it implies deterministic). Default: %(default)r (what normbench "
                   f"always required)")


def add_threads_option(addoption: Callable, prefix: str) -> None:
    """``--<prefix>threads``: the CPU threads each backend's library computes with in the conformance suites."""
    addoption(f"--{prefix}threads", metavar="N", type=parse_threads, default="1",
              help="CPU threads each backend's library computes with in the conformance suites (Backend."
                   "set_threads: torch's and our Triton backend's torch.set_num_threads), so that which cases "
                   "pass does not depend on the machine's cores; 'library': each library's own default. The "
                   "throughput suite always runs with the library's own. Default: %(default)r")


def parse_seconds(value: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        number = float(value)
        if not (math.isfinite(number) and number >= 0):
            raise ValueError
        return number
    except ValueError:
        raise _error(value, "Use seconds >= 0, e.g. 1.0") from None


def parse_budget(value: str) -> float:
    """A time budget: seconds from :data:`MIN_BUDGET_S` (the summary and report need some) to :data:`MAX_BUDGET_S`;
    anything else (negative, a word, 1e12: a deadline past any clock's range) is one message saying the range."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not MIN_BUDGET_S <= seconds <= MAX_BUDGET_S:  # NaN included
        raise _error(value, f"A budget is at least {MIN_BUDGET_S:g} s (the run's own start, summary and report take "
                            f"some) and at most {MAX_BUDGET_S:.0f} s (30 days), e.g. --budget=600")
    return seconds


#: the smallest ``--budget``
MIN_BUDGET_S = 30.0
#: the largest ``--budget`` (30 days; beyond it, leave the run without one)
MAX_BUDGET_S = 30 * 86400.0


def _parse_choices(kind: str, plural: str, value: str, valid: Sequence[str]) -> tuple[str, ...]:
    """One or more of ``valid``, separated by commas (case-insensitive, repeats dropped)."""
    chosen = tuple(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))
    if not chosen:
        raise _error(value, f"Give one or more {plural} separated by commas; valid {plural}: {', '.join(valid)}")
    for v in chosen:
        if v not in valid:
            raise _error(value, f"Unknown {kind} {v!r}; valid {plural}: {', '.join(valid)}")
    return chosen


def parse_impl(value: str) -> str:
    """A backend selection: a name, names separated by commas, or ``all``, as one string
    (``"numpy, torch"`` -> ``"numpy,torch"``); names are checked when the backends are
    selected (:meth:`normbench.core.registry.Registry.select`). An empty value names no backend and
    is an error everywhere (not a silent 'all')."""
    names = [n.strip() for n in value.split(",")]
    fix = f"Give a backend name, names separated by commas (e.g. numpy,torch), or {ALL!r} for every available " \
          "backend; `normbench list` shows the names"
    if not any(names):
        raise _error(value, f"It names no backend. {fix}")
    if not all(names):
        raise _error(value, f"A backend name is missing (two commas together, or one at an end). {fix}")
    return ",".join(names)


def check_run_id(text: str) -> str:
    """``text`` if it is a run id: one plain folder name under the results folder (``--out``),
    never a path. Letters, digits, ``.``, ``_``, ``-`` and ``+``, starting with a letter or a
    digit (not ``.``: no ``..``, no hidden folder; not ``-``: not read as an option), no ``..``,
    at most :data:`RUN_ID_MAX` characters: the rule of ``normbench.core.run_folder.RUN_ID``, which
    checks the folder a run claims. Raises :class:`argparse.ArgumentTypeError` saying which
    part of the rule ``text`` breaks.

    >>> check_run_id("2026-11-23_torch.1+fast")
    '2026-11-23_torch.1+fast'
    >>> check_run_id("../x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    argparse.ArgumentTypeError: Could not parse value: '../x'. A run id is one folder's name, not a path...
    """
    rule = ("Use letters, digits, '.', '_', '-' and '+', starting with a letter or a digit, no '..', "
            f"at most {RUN_ID_MAX} characters, e.g. gpu-run-1")
    if not text:
        problem = "The run id is empty"
    elif "/" in text or "\\" in text:
        problem = "A run id is one folder's name, not a path (the results go to OUT/<run-id>/)"
    elif not text[0].isascii() or not text[0].isalnum():
        problem = f"A run id cannot start with {text[0]!r}"
    elif ".." in text:
        problem = "A run id cannot contain '..'"
    elif len(text) > RUN_ID_MAX:
        problem = f"The run id has {len(text)} characters"
    elif not _RUN_ID.fullmatch(text):
        bad = next(ch for ch in text if not _RUN_ID.fullmatch(ch))
        problem = f"A run id cannot contain {bad!r}"
    elif not run_folder.RUN_ID.fullmatch(text):  # the rule itself: the checks above only explain it
        problem = "It is not a plain folder name"
    else:
        return text
    raise _error(text, f"{problem}. {rule}")


def parse_out_folder(value: str) -> str:
    """The results folder (``--out``): any path but an empty one or an existing file."""
    if not value.strip():
        raise _error(value, "The results folder is empty. Give a folder, e.g. reports")
    if Path(value).exists() and not Path(value).is_dir():
        raise _error(value, "It is a file, not a folder. Give a folder (it is created if missing), e.g. reports")
    return value


def parse_suites(value: str) -> tuple[str, ...]:
    """Suites of :data:`SUITES`, separated by commas."""
    chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not chosen or any(v not in SUITES for v in chosen):
        raise _error(value, f"Valid suites: {', '.join(SUITES)}")
    return chosen


def parse_directions(value: str) -> tuple[str, ...]:
    """Throughput directions (:data:`normbench.perf.roofline.DIRECTIONS`), separated by commas."""
    return _parse_choices("direction", "directions", value, DIRECTIONS)


def parse_dtypes(value: str) -> tuple[str, ...]:
    """dtype names (:data:`normbench.core.dtypes.DTYPES`), separated by commas."""
    return _parse_choices("dtype", "dtypes", value, DTYPES)


def timed_norms() -> tuple[str, ...]:
    """The operations the throughput sweep times (every sweep: CPU, GPU, rehearsal), in :data:`NAMES`' order."""
    from normbench.core import cases

    timed = {c.norm for c in cases.THROUGHPUT_CPU_CASES + cases.THROUGHPUT_GPU_CASES + cases.rehearsal_cases()}
    return tuple(name for name in NAMES if name in timed)


def parse_norms(value: str) -> tuple[str, ...]:
    """Throughput normalizations (:func:`timed_norms`), separated by commas: an operation the sweep does not time (a
    quantized one) is a usage error saying so, never a run that selects nothing and passes.

    >>> parse_norms("rms_norm,add_rms_norm")
    ('rms_norm', 'add_rms_norm')
    """
    timed = timed_norms()
    chosen = _parse_choices("normalization", "normalizations", value, NAMES)
    untimed = [name for name in chosen if name not in timed]
    if untimed:
        raise _error(value, f"The throughput sweep does not time {', '.join(untimed)}; it times {', '.join(timed)} "
                            f"(the conformance suites check every operation)")
    return chosen


def parse_shapes(value: str) -> tuple[str, ...]:
    """Shapes of the throughput sweep as ``ROWSxHIDDEN`` (:func:`normbench.perf.sweep.sweep_shapes`), separated by commas."""
    return _parse_choices("shape", "shapes", value, sweep_shapes())


# -- the options shared by the CLI and the pytest plugin -------------------------------------------------------------

#: where both spellings of the backend option note the value they were given (see :class:`ImplAction`)
_IMPL_GIVEN = "_normbench_impl_given"


class ImplAction(argparse.Action):
    """Stores a backend selection; the spellings sharing its ``dest`` (``--normbench-impl`` and the
    ``--impl`` of ``suites/conftest.py``) are one setting, and giving them different values is a
    usage error."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = {**getattr(namespace, _IMPL_GIVEN, {}), option_string: values}
        if len(set(given.values())) > 1:
            both = " and ".join(f"{name}={value}" for name, value in given.items())
            raise argparse.ArgumentError(self, f"{both} are the same setting given two values; give one of them")
        setattr(namespace, _IMPL_GIVEN, given)
        setattr(namespace, self.dest, values)


def impl_given_as(namespace: argparse.Namespace, default: str = "--normbench-impl") -> str:
    """The option the backends were given as (``--impl`` or ``--normbench-impl``), for messages."""
    return next(iter(getattr(namespace, _IMPL_GIVEN, {})), default)


def add_impl_option(addoption: Callable, prefix: str, note: str = "", **attrs) -> None:
    """``--<prefix>impl``: the backends to run on (``None`` when not given, which means 'all').
    ``note`` goes into the help before the default; ``attrs`` (e.g. ``dest``) go to ``addoption``."""
    addoption(f"--{prefix}impl", metavar="NAMES", default=None, action=ImplAction, type=parse_impl,
              help="Backends to run the suites on: a name, names separated by commas, or "
                   f"{ALL!r} (every available backend; unavailable ones are listed and skipped). "
                   f"`normbench list` shows the names.{note} Default: {ALL!r}", **attrs)


def add_seed_option(addoption: Callable, prefix: str) -> None:
    """``--<prefix>seed``: the seeds of the random inputs, as a list of ints."""
    addoption(f"--{prefix}seed", metavar="SEEDS", type=parse_seeds, default="0",
              help="Seed(s) of the random inputs: N, a range A..B, N,M,... or random (one drawn from the operating "
                   "system, printed and recorded with the results: grade kernels you did not write on inputs their "
                   "author cannot have seen). Several seeds add a -seedN suffix to test ids; throughput uses the "
                   "first. Default: %(default)r")


def add_untrusted_option(addoption: Callable, prefix: str) -> None:
    """``--<prefix>untrusted``: every backend computes in a worker process of its own (normbench.core.remote)."""
    addoption(f"--{prefix}untrusted", action="store_true", default=False,
              help="Create and run every backend in a worker process of its own, never loaded in the process that "
                   "holds the oracle, the inputs, the seed and the clock: for kernels whose author you do not trust "
                   "(docs/throughput.md, 'What a backend cannot fake'). Each call is a message on a pipe: speeds "
                   "read slightly low. Default: off")


def add_throughput_options(addoption: Callable, prefix: str) -> None:
    """Where results go and which part of the throughput sweep runs, and how:
    ``--<prefix>out``, ``run-id``, ``cache``, ``direction``, ``dtype``, ``shape``, ``norm`` and ``rehearsal``."""
    addoption(f"--{prefix}out", metavar="DIR", default="reports", type=parse_out_folder,
              help="Results go to DIR/<run-id>/ (CSV, JSON, environment.json). Default: %(default)r")
    addoption(f"--{prefix}run-id", metavar="ID", default=None, type=check_run_id,
              help=f"The run id (the results folder's name): letters, digits, '.', '_', '-' and '+', starting "
                   f"with a letter or a digit, no '..', at most {RUN_ID_MAX} characters. Default: UTC time and "
                   "host name")
    addoption(f"--{prefix}cache", choices=CACHES, default="cold",
              help="cold: flush the last-level cache before every timed sample; warm: do not. Default: %(default)r")
    addoption(f"--{prefix}direction", metavar="LIST", type=parse_directions, default=None,
              help=f"Throughput directions to run, separated by commas: {', '.join(DIRECTIONS)}. Default: all")
    addoption(f"--{prefix}dtype", metavar="LIST", type=parse_dtypes, default=None,
              help="Throughput dtypes to run, separated by commas. Default: all of the sweep's")
    addoption(f"--{prefix}shape", metavar="LIST", type=parse_shapes, default=None,
              help="Throughput shapes to run, ROWSxHIDDEN separated by commas. Default: all of the sweep's")
    addoption(f"--{prefix}norm", metavar="LIST", type=parse_norms, default=None,
              help=f"Throughput normalizations to run, separated by commas: {', '.join(timed_norms())}. Default: all")
    addoption(f"--{prefix}rehearsal", action="store_true", default=False,
              help="A dress rehearsal of the GPU reference run on any machine (docs/gpu-node.md): the GPU sweep's "
                   "cases in its order, each shrunk to a few rows, timed briefly, the copy ceiling on a small buffer; "
                   "the results say rehearsal and are no measurement. Default: %(default)r")
