"""Where the running normbench came from: its version and, only where it truly is one, its source commit.

The commit comes from the installed distribution's PEP 610 record
(``direct_url.json``), never from whatever git repository happens to contain
the virtualenv:

* installed from a VCS URL (``pip install git+https://...@REV``): the commit pip recorded;
* installed editable from a checkout (``pip install -e .``): that checkout's
  ``HEAD`` (and whether it has uncommitted changes), but only if the checkout
  is the top of its own git repository and the imported ``normbench`` lives
  inside it;
* installed from a wheel or sdist normbench's build backend made from a checkout
  (``tools/normbench_build.py``: a wheel carried to an offline GPU node, docs/gpu-node.md):
  the commit it was built from, recorded in the package (``BUILD_COMMIT``), with
  whether that checkout had uncommitted changes;
* installed from an index or a plain folder: no commit (the version identifies a
  release; a folder may have changed since it was installed).

>>> source = Source("editable checkout", "/src/normbench", "abc123", dirty=True)
>>> source.commit_label()
'abc123 (with uncommitted changes)'
>>> Source("wheel").commit_label()
''
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

DISTRIBUTION = "normbench"


@dataclass(frozen=True)
class Source:
    """How normbench was installed (``kind``), from where, and its commit ("" when there is none)."""

    kind: str
    location: str = ""
    commit: str = ""
    dirty: bool = False

    def commit_label(self) -> str:
        return self.commit + (" (with uncommitted changes)" if self.commit and self.dirty else "")

    def as_dict(self) -> dict:
        return asdict(self)


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def checkout_commit(folder: Path) -> tuple[str, bool]:
    """``(HEAD, has uncommitted changes)`` of the git repository whose top is ``folder``;
    ``("", False)`` if ``folder`` is not the top of a repository (a folder inside someone
    else's repository, such as a .venv in a user's project, has no commit of its own)."""
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != folder.resolve():
        return "", False
    head = _git(folder, "rev-parse", "HEAD") or ""
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return head, bool(head and status)


def _file_url_path(url: str) -> Path | None:
    parsed = urllib.parse.urlparse(url)
    return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


def from_direct_url(record: dict | None, package_file: Path) -> Source:
    """The source a PEP 610 ``direct_url.json`` record describes (None: no record, an index install)."""
    if not record or "url" not in record:
        return Source("wheel or index")
    url = str(record["url"])
    vcs = record.get("vcs_info")
    if isinstance(vcs, dict):
        return Source(f"{vcs.get('vcs', 'vcs')} URL", url, str(vcs.get("commit_id", "")))
    folder = _file_url_path(url)
    dir_info = record.get("dir_info")
    if isinstance(dir_info, dict) and dir_info.get("editable") and folder is not None:
        if folder.resolve() not in package_file.resolve().parents:
            return Source("editable checkout (not the imported copy)", str(folder))
        commit, dirty = checkout_commit(folder)
        return Source("editable checkout", str(folder), commit, dirty)
    return Source("local folder" if dir_info is not None else "archive", url)


@functools.cache
def source(package_file: Path | None = None) -> Source:
    """Where the imported normbench came from (see the module doc); read once per process."""
    if package_file is None:
        import normbench

        package_file = Path(normbench.__file__)
    # a checkout's build metadata (normbench.egg-info, found when the checkout is the working
    # folder) has no PEP 610 record: the installed distribution's record wins
    found = list(importlib.metadata.distributions(name=DISTRIBUTION))
    if not found:
        return Source("not installed", str(package_file.parent))
    text = next((t for t in (d.read_text("direct_url.json") for d in found) if t), None)
    try:
        record = json.loads(text) if text else None
    except ValueError:
        record = None
    found = from_direct_url(record if isinstance(record, dict) else None, package_file)
    built = built_from(package_file.parent / BUILD_RECORD)
    if found.commit or not built:
        return found
    return Source(f"{found.kind}, built from a checkout", found.location, *built)


#: the record normbench's build backend puts into a wheel or sdist built from a checkout
BUILD_RECORD = "BUILD_COMMIT"


def built_from(path: Path) -> tuple[str, bool] | None:
    """``(commit, dirty)`` from a build record (None: no record, or not one normbench wrote).

    >>> import tempfile
    >>> record = Path(tempfile.mkdtemp()) / BUILD_RECORD
    >>> _ = record.write_text('{"commit": "abc123", "dirty": false}')
    >>> built_from(record)
    ('abc123', False)
    """
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("commit"), str) or not record["commit"]:
        return None
    return record["commit"], bool(record.get("dirty"))
