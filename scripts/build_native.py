"""Build ferry's native parts in place (Cython -> C -> shared objects beside their .pyx).

The warehouse loader's record/Avro decoders (loaders/), the mirror's record concatenation
(wire/record/_batch_concat.pyx, ferry.wire.record.batch_concat) and the broker's one-batch produce path
(broker/server/_produce_native.pyx, broker/log/_append_native.pyx; docs/scale.md). The C they share (big-endian
fields, CRC-32C) is wire/record/batch_bytes.h, declared for Cython in batch_bytes.pxd beside it; both are on
every module's include path.

Called by scripts/setup.sh after the venv is ready. Kept out of ``pip install -e .`` on purpose: a machine
without a C compiler must still install ferry; the loader then runs its pure-Python fallback and warns once
(ferry.loaders.native), the mirror coalesces with aiokafka's record builder as before, and the broker parses
and writes produce requests in Python (it logs which at start). Exit code 0
when every module built, 1 otherwise (setup.sh only warns).

    .venv/bin/python scripts/build_native.py [--force]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "wire" / "record" / "batch_bytes.h"  # C shared by the modules: big-endian fields, CRC-32C
# (package, folder, module): <folder>/<module>.pyx -> <package>.<module>
MODULES = (
    ("ferry.loaders", "loaders", "_batch_records"),
    ("ferry.loaders", "loaders", "_avro_columns"),
    ("ferry.wire.record", "wire/record", "_batch_concat"),
    ("ferry.wire.record", "wire/record", "_crc32c"),  # record_batch's CRC-32C (validate_batches, batch_crc)
    ("ferry.mirror", "mirror", "_forward_scan"),  # the mirror's batch walk (batch_rewrite.forward_batches)
    ("ferry.broker.server", "broker/server", "_produce_native"),  # the Produce fast path's parse (produce_parse)
    ("ferry.broker.log", "broker/log", "_append_native"),  # a batch written from the request (log_append)
)


def main(argv: list[str]) -> int:
    force = "--force" in argv
    try:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        print(f"build_native: {e}; the loader, the mirror and the broker will use their slower paths", file=sys.stderr)
        return 1
    exts = [Extension(f"{package}.{name}", [str(ROOT / folder / f"{name}.pyx")], extra_compile_args=["-O3"],
                      include_dirs=[str(HEADER.parent)], depends=[str(HEADER), str(HEADER.with_suffix(".pxd"))])
            for package, folder, name in MODULES]
    dist = Distribution({"name": "ferry-native", "ext_modules": cythonize(exts, quiet=True, force=force,
                                                                include_path=[str(HEADER.parent)]),
                         "package_dir": {package: str(ROOT / folder) for package, folder, _ in MODULES}})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.force = force
    cmd.build_temp = str(ROOT / "build" / "native")
    try:
        dist.run_command("build_ext")
    except Exception as e:  # noqa: BLE001 - compiler missing or failing: report, the fallback works
        print(f"build_native: build failed ({type(e).__name__}: {e}); the pure-Python paths will be used",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
