"""The loader's native parts (Cython, ferry.wire.native's ``batch_records`` and ``avro_columns``) or None, with
ONE warning per process when they are not built.

A machine without a C compiler (or a wheel installed without the built modules) still loads correctly: the
split reader then takes records with aiokafka's reader and Avro is decoded one record at a time with
fastavro, several times slower. ``FERRY_NATIVE_DISABLE=batch_records,avro_columns`` (or ``FERRY_NATIVE=0``)
forces that path (tests compare the two).
"""

from __future__ import annotations

import warnings
from types import ModuleType

from ferry.wire import native as native_parts

_cache: dict[str, ModuleType | None] = {}
_warned = False
_PARTS = {"_batch_records": "batch_records", "_avro_columns": "avro_columns"}  # module name -> native part


class NativeUnavailableWarning(RuntimeWarning):
    pass


def module(name: str) -> ModuleType | None:
    """``ferry.loaders.<name>`` if it was built and native code is not switched off, else None."""
    global _warned
    if name in _cache:
        return _cache[name]
    part = _PARTS[name]
    found = native_parts.load(part)
    if found is None and not _warned and not native_parts.state(part).switched_off:
        _warned = True
        warnings.warn(f"ferry load: native record/Avro decoding is not built ({native_parts.state(part).reason}); "
                      "using the pure-Python path (several times slower). Run scripts/setup.sh (needs gcc and "
                      "python3-dev) or .venv/bin/python setup.py build_ext --inplace", NativeUnavailableWarning,
                      stacklevel=2)
    _cache[name] = found
    return found


def available() -> bool:
    return module("_batch_records") is not None and module("_avro_columns") is not None
