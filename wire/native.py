"""ferry's native parts (the Cython modules setup.py builds), loaded through one function with one switch.

Every part has a pure-Python twin that gives the same answers, so a machine without a C compiler still runs
ferry, slower. Which one runs is decided here, for every package (wire is the lowest layer):

* ``FERRY_NATIVE=0`` turns every part off; ``FERRY_NATIVE_DISABLE=produce,append`` turns the named ones off
  (tests compare the two paths that way);
* ``FERRY_REQUIRE_NATIVE=1`` makes a part that is not built an error instead of a silent fallback
  (scripts/test.sh sets it, so that a broken .pyx cannot leave the suite green).

The registry keeps each part's state and why (the ImportError's text, or the switch), for the start-up log
line, ``ferry version`` and the ``ferry_native_enabled{part=...}`` gauge.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator
from types import ModuleType
from typing import NamedTuple

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# part -> its module (setup.py builds every .pyx; tests/wire/test_native.py holds the two lists together)
PARTS: dict[str, str] = {
    "crc32c": "ferry.wire.record._crc32c",  # record_batch's CRC-32C
    "batch_concat": "ferry.wire.record._batch_concat",  # the mirror's coalescing of small batches
    "forward_scan": "ferry.mirror._forward_scan",  # the mirror's walk over a fetch answer
    "produce": "ferry.broker.server._produce_native",  # the broker's one-batch Produce request parse
    "append": "ferry.broker.log._append_native",  # that batch written from the request's buffer
    "batch_records": "ferry.loaders._batch_records",  # the loader's record walk
    "avro_columns": "ferry.loaders._avro_columns",  # the loader's Avro decoding into columns
}
OFF_SWITCH = "FERRY_NATIVE"
DISABLE = "FERRY_NATIVE_DISABLE"
REQUIRE = "FERRY_REQUIRE_NATIVE"


class NativeRequiredError(ImportError):
    """A native part is not built while FERRY_REQUIRE_NATIVE=1 asks for every one."""


class PartState(NamedTuple):
    on: bool
    reason: str  # "" when on; the ImportError's text, or which switch turned it off
    switched_off: bool = False  # off by choice (a switch), not because it is not built


class NativeParts:
    """Each part's state in this process, as the last ``load`` of it found it."""

    def __init__(self) -> None:
        self._states: dict[str, PartState] = {}

    def load(self, part: str) -> ModuleType | None:
        if part not in PARTS:
            raise KeyError(f"unknown native part {part!r} (known: {', '.join(PARTS)})")
        reason = _switched_off(part)
        switched_off = bool(reason)
        found = None
        if not switched_off:
            try:
                found = importlib.import_module(PARTS[part])
            except ImportError as e:
                reason = str(e) or type(e).__name__
                if os.environ.get(REQUIRE) == "1":
                    self._states[part] = PartState(False, reason)  # reported (load_all), then raised
                    raise NativeRequiredError(
                        f"ferry's native part {part!r} ({PARTS[part]}) is not built: {e}. {REQUIRE}=1 asks for "
                        "every part: build them (python setup.py build_ext --inplace, or scripts/setup.sh)") from e
        self._states[part] = PartState(found is not None, reason, switched_off)
        return found

    def state(self, part: str) -> PartState:
        """The part's state as its last load found it (KeyError if it was not loaded in this process)."""
        return self._states[part]

    def states(self) -> dict[str, PartState]:
        """The parts loaded so far in this process, in PARTS order."""
        return {part: self._states[part] for part in PARTS if part in self._states}

    def load_all(self) -> dict[str, PartState]:
        """Every part's state (a report: a part that is required but missing is reported, not raised)."""
        for part in PARTS:
            try:
                self.load(part)
            except NativeRequiredError:
                pass
        return self.states()

    def describe(self) -> str:
        """The start-up line's text: "produce on, append off (disabled by FERRY_NATIVE_DISABLE), ..."."""
        return ", ".join(f"{part} on" if s.on else f"{part} off ({s.reason})" for part, s in self.states().items())

    def summary(self) -> str:
        """Short enough for a broker's registration: "3/3 native", or "2/3 native (append off)"."""
        states = self.states()
        off = [part for part, s in states.items() if not s.on]
        text = f"{len(states) - len(off)}/{len(states)} native"
        return f"{text} ({', '.join(off)} off)" if off else text


class NativeCollector(Collector):
    """``ferry_native_enabled{part}``: 1 when the part runs natively, for the parts this process loaded."""

    def __init__(self, parts: NativeParts) -> None:
        self._parts = parts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("ferry_native_enabled", "1 when a native (Cython) part runs, 0 when its "
                                  "pure-Python twin does", labels=["part"])
        for part, state in self._parts.states().items():
            gauge.add_metric([part], 1.0 if state.on else 0.0)
        yield gauge


def _switched_off(part: str) -> str:
    if os.environ.get(OFF_SWITCH, "1") == "0":
        return f"disabled by {OFF_SWITCH}=0"
    disabled = {p.strip() for p in os.environ.get(DISABLE, "").split(",") if p.strip()}
    unknown = disabled - PARTS.keys()
    if unknown:
        raise ValueError(f"{DISABLE} names unknown native parts {sorted(unknown)} (known: {', '.join(PARTS)})")
    return f"disabled by {DISABLE}" if part in disabled else ""


_parts = NativeParts()
COLLECTOR = NativeCollector(_parts)
REGISTRY.register(COLLECTOR)

load = _parts.load
state = _parts.state
states = _parts.states
load_all = _parts.load_all
describe = _parts.describe
summary = _parts.summary


def register_metrics(registry: CollectorRegistry) -> None:
    """Add the gauge to a component's own registry (the default one has it already)."""
    registry.register(COLLECTOR)


def log_parts(logger: logging.Logger = log) -> None:
    """The one start-up line: 'native parts: produce on, append on, ...'."""
    logger.info("native parts: %s", describe())
