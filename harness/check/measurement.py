"""What one test measured, as one typed record crossing the pytest boundary: the backend and case it ran, the
property verdicts its checks reported (``normbench.check.properties``: deterministic, batch-invariant) and the
measurements they recorded (y's error structure, a quantized output's codes).

The record travels in a pytest item's ``user_properties`` as one entry, :data:`KEY`, its value a JSON text
(pytest-xdist sends it from a worker as it is; a JUnit XML file keeps it as one property). :func:`store` writes it
and :func:`of_report` reads it back (``normbench.front.runner``, the plugin's terminal summary, the isolation's
quarantine): the one writer and the one reader sit here, side by side.

>>> props = []
>>> update(props, backend="numpy", case="float32-rows2-hidden8-normal")
>>> update(props, properties={"deterministic": "yes"}, values={"codes": "exact=16;allowed=0;wrong=0"})
>>> [key for key, _ in props], read(props).backend, read(props).properties
(['normbench_measurement'], 'numpy', {'deterministic': 'yes'})
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: the one ``user_properties`` key of a test's record
KEY = "normbench_measurement"


@dataclass(frozen=True)
class Measurement:
    """What a test measured: its backend's and case's names (None where the test has none), its property verdicts
    (property -> ``"yes"`` or ``"no: what differed"``) and its recorded values (conformance column -> value)."""

    backend: str | None = None
    case: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, str | float] = field(default_factory=dict)

    def merged(self, backend: str | None = None, case: str | None = None, properties: Mapping[str, str] | None = None,
               values: Mapping[str, str | float] | None = None) -> Measurement:
        """This record with the given fields set (properties and values added to, replacing a name's earlier one)."""
        return Measurement(backend if backend is not None else self.backend, case if case is not None else self.case,
                           {**self.properties, **(properties or {})}, {**self.values, **(values or {})})


def read(user_properties: Iterable[tuple[str, Any]]) -> Measurement:
    """The record among ``user_properties`` (an empty one where there is none, or it does not decode)."""
    text = next((value for key, value in user_properties if key == KEY), None)
    if not isinstance(text, str):
        return Measurement()
    try:
        raw = json.loads(text)
    except ValueError:
        return Measurement()
    if not isinstance(raw, dict):
        return Measurement()
    text_or_none = lambda v: v if isinstance(v, str) else None  # noqa: E731
    properties = {k: v for k, v in (raw.get("properties") or {}).items() if isinstance(v, str)}
    values = {k: v for k, v in (raw.get("values") or {}).items()
              if isinstance(v, str) or isinstance(v, (int, float)) and not isinstance(v, bool)}
    return Measurement(text_or_none(raw.get("backend")), text_or_none(raw.get("case")), properties,
                       {k: float(v) if isinstance(v, int) else v for k, v in values.items()})


def store(user_properties: list, record: Measurement) -> None:
    """Write ``record`` as the one :data:`KEY` entry of ``user_properties`` (in place, replacing an earlier one)."""
    text = json.dumps(asdict(record) | {"properties": dict(record.properties), "values": dict(record.values)})
    user_properties[:] = [p for p in user_properties if p[0] != KEY] + [(KEY, text)]


def update(user_properties: list, **fields: Any) -> None:
    """Set fields of the record in ``user_properties`` (:meth:`Measurement.merged`'s arguments)."""
    store(user_properties, read(user_properties).merged(**fields))


def of_report(report: Any) -> Measurement:
    """The record of a pytest report (its ``user_properties``)."""
    return read(getattr(report, "user_properties", ()) or ())
