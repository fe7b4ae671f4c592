"""The native twin tests' guard: skip when a native part is switched off, fail when it is missing and
FERRY_REQUIRE_NATIVE=1 (scripts/test.sh), so that a .pyx that does not build cannot leave the suite green."""

from __future__ import annotations

from types import ModuleType

import pytest

from ferry.wire import native


def needs_native(*parts: str) -> pytest.MarkDecorator:
    """A skipif mark for tests of these parts; loading them raises NativeRequiredError when they are required."""
    off = [f"{part}: {native.state(part).reason}" for part in parts if native.load(part) is None]
    return pytest.mark.skipif(bool(off), reason=f"native part off ({'; '.join(off)})")


def native_or_skip(part: str) -> ModuleType:
    """The part's module, or skip (a test's or a fixture's body); missing and required: NativeRequiredError."""
    found = native.load(part)
    if found is None:
        pytest.skip(f"native part {part} is off ({native.state(part).reason})")
    return found
