"""normbench's build backend: setuptools', with one addition. A wheel or sdist built from a git checkout carries
the commit it was built from in ``normbench/BUILD_COMMIT`` (JSON: the commit, and whether the checkout had
uncommitted changes), so that a copy installed where no checkout is (a wheel carried to an offline GPU node,
docs/gpu-node.md) still says which source it runs (``normbench.core.provenance``). The file exists only while the
build runs; outside a git checkout (an sdist being built into a wheel) nothing is written and an sdist's record is kept.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F401,F403  (every hook setuptools defines, unchanged)

RECORD = Path(__file__).resolve().parents[1] / "harness" / "BUILD_COMMIT"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(RECORD.parents[1]), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@contextlib.contextmanager
def _recorded():
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != RECORD.parents[1] or RECORD.exists():
        yield  # not a checkout of its own (or an sdist, whose record is kept): nothing to add
        return
    head = _git("rev-parse", "HEAD") or ""
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    RECORD.write_text(json.dumps({"commit": head, "dirty": dirty}) + "\n")
    try:
        yield
    finally:
        RECORD.unlink(missing_ok=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with _recorded():
        return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    with _recorded():
        return build_meta.build_sdist(sdist_directory, config_settings)
