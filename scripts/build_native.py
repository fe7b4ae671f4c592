"""Build the warehouse loader's native parts in place (Cython -> C -> shared objects in loaders/).

Called by scripts/setup.sh after the venv is ready. Kept out of ``pip install -e .`` on purpose: a machine
without a C compiler must still install ferry; the loader then runs its pure-Python fallback and warns once
(ferry.loaders.native). Exit code 0 when every module built, 1 otherwise (setup.sh only warns).

    .venv/bin/python scripts/build_native.py [--force]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ("_batch_records", "_avro_columns")  # loaders/<name>.pyx -> ferry.loaders.<name>


def main(argv: list[str]) -> int:
    force = "--force" in argv
    try:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        print(f"build_native: {e}; the loader will use its pure-Python path", file=sys.stderr)
        return 1
    exts = [Extension(f"ferry.loaders.{name}", [str(ROOT / "loaders" / f"{name}.pyx")],
                      extra_compile_args=["-O3"]) for name in MODULES]
    dist = Distribution({"name": "ferry-native", "ext_modules": cythonize(exts, quiet=True, force=force),
                         "package_dir": {"ferry.loaders": str(ROOT / "loaders")}})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.force = force
    cmd.build_temp = str(ROOT / "build" / "native")
    try:
        dist.run_command("build_ext")
    except Exception as e:  # noqa: BLE001 - compiler missing or failing: report, the fallback works
        print(f"build_native: build failed ({type(e).__name__}: {e}); the loader will use its pure-Python path",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
