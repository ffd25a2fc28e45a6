"""Plugins tried in a child process before this one loads them.

A third-party plugin is code normbench does not know: importing it, asking its availability or
creating it may end the process (a segfault in a native extension, ``os._exit``) or never return.
Loaded in the process that runs the suites, such a plugin would end ``normbench run``, ``normbench
test`` and ``pytest suites --impl=all`` with nothing measured. So before a selection loads a plugin
from another distribution than normbench, :func:`vet` does the same three steps in a child process
(all plugins of the selection in one child, one after another) and watches it: a plugin that ends
the child, or spends longer than the time limit on one step, gets a verdict (the problem, with the
fix), and the selection leaves it out, or refuses it where it was named, while the others load as
usual. normbench's own backends are loaded in process: their code is ours and tested, and a framework
that cannot be imported says so with an exception.

The verdicts are kept in the environment variable :data:`VERDICTS_ENV` (keyed by the plugin's name,
target, distribution, version and place), so the processes this one starts (pytest-xdist's workers, a
``normbench check`` child) reach the same verdicts without trying again. A process takes them only from itself or
an ancestor (the variable names its maker's process id): a variable inherited from a shell, an earlier run or a
hand is not taken, and is removed before any process is started. (Whoever sets a process's environment can also
set its ``PYTHONPATH``: this guards against accidents and stale state, not against the user's own shell.)

``normbench list`` watches its own listing child with :func:`watch` and says what happened with
:func:`problem`: one mechanism, one wording.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from normbench.core.exceptions import InvalidInput

#: seconds one plugin may take to be imported, answer ``availability()`` and be created
PLUGIN_TIMEOUT_S = 60.0
#: seconds a watched child may take to start (Python and normbench imported, before it says anything): on a busy
#: machine this alone can take longer than a short plugin limit, and it is no plugin's time, so it is not counted
#: in any plugin's limit (a ``.pth`` file that hangs Python's own start-up is caught by this one)
STARTUP_S = 120.0
#: the environment variable that sets another limit for every command (``normbench list --plugin-timeout`` wins)
TIMEOUT_ENV = "NORMBENCH_PLUGIN_TIMEOUT"
#: the environment variable holding the verdicts reached so far (JSON: key -> problem, "" when fine)
VERDICTS_ENV = "NORMBENCH_PLUGIN_VERDICTS"


#: the shortest limit per plugin taken: importing a plugin's framework alone takes longer than a shorter one, and
#: a limit that ends every child outside any plugin would vet nothing
MIN_TIMEOUT_S = 1.0


def check_timeout(value: float, said: str) -> float:
    """``value`` as a plugin time limit, or one :class:`InvalidInput` saying ``said`` is not one and how to fix it."""
    if not (math.isfinite(value) and value >= MIN_TIMEOUT_S):
        raise InvalidInput(f"{said} is not a plugin time limit: it must be at least {MIN_TIMEOUT_S:g} s (a shorter "
                           f"one ends the vetting child before a plugin has loaded). Fix: give seconds >= "
                           f"{MIN_TIMEOUT_S:g}, e.g. {PLUGIN_TIMEOUT_S:g}, or leave it unset")
    return value


def timeout_s() -> float:
    """The time limit per plugin: :data:`TIMEOUT_ENV` if set, else :data:`PLUGIN_TIMEOUT_S`; a value that is not
    seconds >= :data:`MIN_TIMEOUT_S` is one :class:`InvalidInput` (never silently another limit)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return PLUGIN_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    return check_timeout(value, f"{TIMEOUT_ENV}={raw[:40]!r}")


@dataclass(frozen=True)
class Watched:
    """How a watched child ended: its exit status, the step it was in (``loading``: the plugin's name, ""
    outside any), that plugin's provider, and whether the watcher ended it for taking too long."""

    returncode: int
    loading: str
    provider: str
    timed_out: bool
    #: whether the child had started (written its progress file) when it ended
    started: bool = True


def watch(command: Sequence[str], progress_file: str, timeout: float, stdout=subprocess.DEVNULL,
          stderr=subprocess.DEVNULL) -> Watched:
    """Run ``command``, which creates ``progress_file`` (empty) as soon as it has started, then writes
    ``name<TAB>provider`` to it as it starts on each plugin (and "" when it is outside any); end it when one
    plugin takes longer than ``timeout`` seconds (anything outside a plugin, e.g. entry-point discovery, twice
    that). The limits count from the child's start, not from its launch: starting Python has :data:`STARTUP_S`
    of its own. ``progress_file`` must not exist before the call."""
    child = subprocess.Popen(list(command), stdout=stdout, stderr=stderr)
    loading, since, timed_out, started = "", time.monotonic(), False, False
    while child.poll() is None:
        time.sleep(0.05)
        if not started:
            started = os.path.exists(progress_file)
            if started:
                since = time.monotonic()
            elif time.monotonic() - since > STARTUP_S:
                timed_out = _kill(child)
            continue
        now = read_text(progress_file)
        if now != loading:
            loading, since = now, time.monotonic()
        elif time.monotonic() - since > timeout * (1 if loading else 2):
            timed_out = _kill(child)
    name, _, provider = read_text(progress_file).partition("\t")
    return Watched(child.returncode, name, provider, timed_out, started or os.path.exists(progress_file))


def _kill(child: subprocess.Popen) -> bool:
    child.kill()
    child.wait()
    return True


def problem(watched: Watched, timeout: float, consequence: str = "") -> str:
    """What a plugin that stopped a watched child did, ``consequence`` (a sentence: what normbench did about it),
    and the fix (``watched.loading`` names it)."""
    if watched.timed_out:
        what = (f"did not finish loading within {timeout:g} s (it hangs, or loads very slowly; the environment "
                f"variable {TIMEOUT_ENV} sets another limit)")
    elif watched.returncode < 0:
        what = f"ended the process with signal {signal_name(-watched.returncode)} while loading (a crash)"
    else:
        what = f"ended the process with exit status {watched.returncode} while loading"
    return (f"backend {watched.loading!r} from distribution {watched.provider} {what}. {consequence}Fix: report it to "
            f"the plugin's authors; `pip uninstall` its distribution to silence this")


def unvetted(watched: Watched, timeout: float) -> str:
    """Why a plugin is left out when its vetting child was killed (too slow) or crashed outside any plugin:
    nothing says it is safe to load."""
    if watched.timed_out:
        how = (f"Python did not start within {STARTUP_S:g} s" if not watched.started else
               f"it spent more than {2 * timeout:g} s outside any plugin (entry-point discovery)")
    else:
        how = f"it ended with signal {signal_name(-watched.returncode)} outside any plugin"
    return (f"could not be vetted: the child process that tries plugins before normbench loads them ended "
            f"early ({how}), so it is not loaded. Fix: run `python -m normbench.front.cli list --in-process` to see "
            f"why; a longer limit ({TIMEOUT_ENV}) if the machine is slow")


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11 (the number itself where no signal has it)."""
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def read_text(path: str) -> str:
    """A small file's text, "" where it cannot be read (a progress file not written yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def key(plugin) -> str:
    """What identifies a plugin's code for a verdict: name, target, distribution, version and where it is installed."""
    return f"{plugin.name}={plugin.target} ({plugin.provider}, {plugin.origin})"


#: the most characters of the verdicts variable: Linux refuses to start a process with one variable above 128 KiB
#: (E2BIG), so a larger one is neither taken nor written (the processes started then vet again)
MAX_VERDICTS = 100_000
#: the most characters of one problem kept in the variable (the processes it starts inherit it)
MAX_PROBLEM = 2000


def _ancestors() -> list[int]:
    """This process's id and its ancestors' (read from /proc where the system has it, else the parent alone)."""
    pids, pid = [os.getpid()], os.getppid()
    for _ in range(64):
        if pid <= 1:
            break
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _verdicts() -> dict[str, str]:
    """The verdicts this process inherited, taken only from a normbench process that is this one or one of its
    ancestors (``{"maker": pid, "verdicts": {...}}``): a variable left in a shell by an earlier run, set by hand or
    forged is not taken, and is removed so that the processes this one starts do not inherit it (an oversized one
    made their start fail with E2BIG)."""
    raw = os.environ.get(VERDICTS_ENV)
    if raw is None:
        return {}
    found = None
    if len(raw) <= MAX_VERDICTS:
        try:
            found = json.loads(raw)
        except ValueError:
            pass
    if not (isinstance(found, dict) and found.get("maker") in _ancestors() and isinstance(found.get("verdicts"), dict)):
        os.environ.pop(VERDICTS_ENV, None)
        return {}
    return {k: v for k, v in found["verdicts"].items() if isinstance(k, str) and isinstance(v, str)}


def discard_foreign() -> None:
    """Remove an inherited verdicts variable that no ancestor normbench process wrote (:func:`_verdicts`); the
    command line and the pytest plugin call it before they start any process."""
    _verdicts()


def vet(registry, names: Sequence[str], child: Sequence[str]) -> dict[str, str]:
    """The problem of each plugin among ``names`` that ends or hangs a process while it is imported, asked its
    availability or created (name -> problem; the others are absent), from the verdicts already reached or
    from a child process trying those not judged yet: ``child`` is its command, which is given the progress
    file and the names (the registry's, which runs :func:`normbench.core.registry.try_loading`)."""
    verdicts = _verdicts()
    untried = [n for n in names if key(registry.plugin(n)) not in verdicts]
    if untried:
        limit = timeout_s()
        with tempfile.TemporaryDirectory(prefix="normbench-vet-") as folder:
            progress_file = os.path.join(folder, "loading")
            while untried:
                watched = watch([*child, progress_file, *untried], progress_file, limit)
                outside = watched.loading not in untried
                if watched.returncode == 0 or outside and watched.returncode > 0 and not watched.timed_out:
                    # each loaded, or the child raised outside any plugin (a plugin it cannot find, say): an
                    # exception, not a crash, which the selection's own load here says as a PluginError
                    verdicts.update({key(registry.plugin(n)): "" for n in untried})
                    break
                if outside:
                    # killed or crashed outside any plugin (entry-point discovery, Python's start): none was vetted,
                    # so none is loaded here (before, each was marked fine and a crashing one ended this process)
                    verdicts.update({key(registry.plugin(n)): unvetted(watched, limit) for n in untried})
                    break
                stopped = untried.index(watched.loading)
                verdicts.update({key(registry.plugin(n)): "" for n in untried[:stopped]})
                verdicts[key(registry.plugin(watched.loading))] = problem(watched, limit)
                untried = untried[stopped + 1:]
                os.remove(progress_file)  # the next child's start is told by its creating the file anew
        from normbench.core import safe_text

        verdicts = {k: safe_text.safe(v, MAX_PROBLEM) for k, v in verdicts.items()}
        value = json.dumps({"maker": os.getpid(), "verdicts": verdicts})
        if len(value) <= MAX_VERDICTS:
            os.environ[VERDICTS_ENV] = value
        else:
            os.environ.pop(VERDICTS_ENV, None)
    return {n: verdicts[key(registry.plugin(n))] for n in names if verdicts.get(key(registry.plugin(n)))}
