"""ferry's native parts, declared once: every .pyx in a package folder is a compiled module of that package.

pyproject.toml holds the rest of the metadata; this file only adds the Cython extensions, so that `pip wheel .`
and `python -m build` give a platform wheel with them, and `python setup.py build_ext --inplace`
(scripts/setup.sh) builds the same modules beside their .pyx for a development checkout. The C the modules
share (big-endian fields, CRC-32C) is wire/record/batch_bytes.h, declared for Cython in batch_bytes.pxd: both
are on every module's include path and are dependencies of every module (a change rebuilds them all).

A machine without a C compiler must still install ferry (ferry.wire.native then reports each part off and
the pure-Python twins run), so a failed build only warns, unless FERRY_REQUIRE_NATIVE=1 (scripts/test.sh, a
release build): then it fails.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
SHARED = "wire/record"  # batch_bytes.h + batch_bytes.pxd
REQUIRED = os.environ.get("FERRY_REQUIRE_NATIVE") == "1"


def _extensions() -> list[Extension]:
    """One Extension per .pyx under pyproject.toml's package folders (wire/record/x.pyx -> ferry.wire.record.x)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shared = [f"{SHARED}/batch_bytes.h", f"{SHARED}/batch_bytes.pxd"]
    out = []
    for package, folder in package_dir.items():  # top-level folders, none inside another
        for pyx in sorted((ROOT / folder).rglob("*.pyx")):
            rel = pyx.relative_to(ROOT)
            name = ".".join([package, *pyx.relative_to(ROOT / folder).with_suffix("").parts])
            includes = [str(p.relative_to(ROOT)) for p in sorted(pyx.parent.glob("*.pxi"))]
            out.append(Extension(name, [str(rel)], include_dirs=[SHARED], depends=shared + includes,
                                 extra_compile_args=["-O3"], optional=not REQUIRED))
    return out


def _cythonized() -> list[Extension]:
    try:
        from Cython.Build import cythonize  # a build requirement (pyproject.toml [build-system])

        return cythonize(_extensions(), quiet=True, include_path=[SHARED])
    except Exception as e:  # Cython missing or a .pyx that does not compile
        if REQUIRED:
            raise
        print(f"setup.py: WARNING: ferry's native parts are not built ({type(e).__name__}: {e}); "
              "the pure-Python twins will run", file=sys.stderr)
        return []


os.chdir(ROOT)  # the Extension paths are relative to the checkout
setup(ext_modules=_cythonized())
