"""ferry.wire.native: one loader for the native parts, one switch convention, their states reported (the
start-up line, the gauge) and, with FERRY_REQUIRE_NATIVE=1, a missing part an error instead of a fallback."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from ferry.wire import native

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"ferry.wire": "wire", "ferry.broker": "broker", "ferry.mirror": "mirror", "ferry.loaders": "loaders"}


@pytest.fixture(autouse=True)
def _states_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tests switch parts off; the registry is the process's: put back what the imports found."""
    for name in (native.OFF_SWITCH, native.DISABLE, native.REQUIRE):
        monkeypatch.delenv(name, raising=False)
    yield
    monkeypatch.undo()
    native.load_all()


def _pyx(module: str) -> Path:
    package, _, name = module.rpartition(".")
    top = next(p for p in sorted(FOLDERS, key=len, reverse=True) if package.startswith(p))
    return ROOT / FOLDERS[top] / Path(*package[len(top) + 1:].split(".")) / f"{name}.pyx"


def test_every_pyx_setup_builds_is_a_part_and_every_part_has_its_pyx() -> None:
    """setup.py builds every .pyx of the package folders: the registry names each of them, no more."""
    built = {p.relative_to(ROOT) for folder in FOLDERS.values() for p in (ROOT / folder).rglob("*.pyx")}
    assert {_pyx(m).relative_to(ROOT) for m in native.PARTS.values()} == built
    assert len(built) == 7


def test_every_part_loads_when_built() -> None:
    states = native.load_all()
    assert list(states) == list(native.PARTS)
    for part, state in states.items():
        if state.on:
            assert native.load(part) is importlib.import_module(native.PARTS[part])


def test_ferry_native_0_turns_every_part_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE", "0")
    for part in native.PARTS:
        assert native.load(part) is None
        assert native.state(part) == native.PartState(False, "disabled by FERRY_NATIVE=0", True)
    monkeypatch.setenv("FERRY_REQUIRE_NATIVE", "1")  # switched off on purpose is not "missing"
    assert native.load("produce") is None


def test_ferry_native_disable_names_the_parts_it_turns_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "produce, append")
    assert native.load("produce") is None and native.load("append") is None
    assert native.state("append").reason == "disabled by FERRY_NATIVE_DISABLE"
    crc = native.load("crc32c")
    assert (crc is not None) == native.state("crc32c").on and not native.state("crc32c").switched_off
    described = native.describe()
    assert "produce off (disabled by FERRY_NATIVE_DISABLE)" in described
    assert "append off (disabled by FERRY_NATIVE_DISABLE)" in described


def test_a_misspelt_part_is_an_error_not_a_silent_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "prodcue")
    with pytest.raises(ValueError, match="prodcue"):
        native.load("produce")
    with pytest.raises(KeyError, match="nope"):
        native.load("nope")


def _not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, *args: object) -> object:
        if name == native.PARTS["forward_scan"]:
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_module)


def test_a_part_that_is_not_built_is_off_with_the_import_error_as_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _not_built(monkeypatch)
    assert native.load("forward_scan") is None
    state = native.state("forward_scan")
    assert not state.on and not state.switched_off and "No module named" in state.reason


def test_required_and_not_built_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _not_built(monkeypatch)
    monkeypatch.setenv("FERRY_REQUIRE_NATIVE", "1")
    with pytest.raises(native.NativeRequiredError, match="forward_scan.*not built.*FERRY_REQUIRE_NATIVE=1"):
        native.load("forward_scan")
    assert isinstance(native.NativeRequiredError("x"), ImportError)
    assert not native.load_all()["forward_scan"].on  # a report (ferry version) lists it instead of raising


def test_the_gauge_is_in_the_default_registry_and_in_a_components_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "avro_columns")
    native.load("avro_columns")
    on = native.load("crc32c") is not None
    text = generate_latest(REGISTRY).decode()
    assert 'ferry_native_enabled{part="avro_columns"} 0.0' in text
    assert f'ferry_native_enabled{{part="crc32c"}} {1.0 if on else 0.0}' in text
    own = CollectorRegistry()
    native.register_metrics(own)
    assert 'ferry_native_enabled{part="avro_columns"} 0.0' in generate_latest(own).decode()


def test_the_start_up_line(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_NATIVE", "0")
    native.load_all()
    with caplog.at_level("INFO"):
        native.log_parts()
    assert caplog.messages[-1] == "native parts: " + ", ".join(
        f"{part} off (disabled by FERRY_NATIVE=0)" for part in native.PARTS)


def test_the_summary_a_broker_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """What goes into /brokers/ids/<id> ("ferry_native"): parts on of parts loaded, the off ones named."""
    parts = native.NativeParts()  # a registry of its own: only the parts this test loads
    assert parts.summary() == "0/0 native"
    for part in ("crc32c", "produce", "append"):
        parts.load(part)
    assert parts.summary() == "3/3 native"  # every part is built in the suite (FERRY_REQUIRE_NATIVE=1)
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "append,crc32c")
    for part in ("crc32c", "append"):
        parts.load(part)
    assert parts.summary() == "1/3 native (crc32c, append off)"
