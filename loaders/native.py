"""The loader's native parts (Cython, built by scripts/setup.sh) or None, with ONE warning per process.

A machine without a C compiler (or a wheel installed without the built modules) still loads correctly: the
split reader then takes records with aiokafka's reader and Avro is decoded one record at a time with
fastavro, several times slower. ``FERRY_LOAD_NATIVE=0`` forces that path (tests compare the two).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

_cache: dict[str, ModuleType | None] = {}
_warned = False


class NativeUnavailableWarning(RuntimeWarning):
    pass


def module(name: str) -> ModuleType | None:
    """``ferry.loaders.<name>`` if it was built and native code is not switched off, else None."""
    global _warned
    if name in _cache:
        return _cache[name]
    found = None
    if os.environ.get("FERRY_LOAD_NATIVE", "1") != "0":
        try:
            found = importlib.import_module(f"ferry.loaders.{name}")
        except ImportError as e:
            if not _warned:
                _warned = True
                warnings.warn(f"ferry load: native record/Avro decoding is not built ({e}); using the pure-Python "
                              "path (several times slower). Run scripts/setup.sh (needs gcc and python3-dev) or "
                              ".venv/bin/python scripts/build_native.py", NativeUnavailableWarning, stacklevel=2)
    _cache[name] = found
    return found


def available() -> bool:
    return module("_batch_records") is not None and module("_avro_columns") is not None
