"""``python -m runtime_cuda.capi``: where the C/C++ host API's files are (``-Dhbfsim_DIR=$(... --cmake-dir)``)."""
from __future__ import annotations

import argparse
import sys

from . import ABI_VERSION, cmake_dir, include_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime_cuda.capi",
                                 description="hbfsim's C/C++ host API (libhbfsim, hbfsim.h): where its CMake "
                                             "package and headers are")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--cmake-dir", action="store_true", help="the directory of hbfsimConfig.cmake (hbfsim_DIR)")
    g.add_argument("--include-dir", action="store_true", help="the directory of hbfsim.h and hbfsim.hpp")
    g.add_argument("--version", action="store_true", help="package version and C API ABI version")
    g.add_argument("--program-record", nargs="+", metavar=("PROGRAM", "OBJECT"),
                   help="write PROGRAM.hbfcc.json from the objects' records (CMake: hbfsim_record_program)")
    a = ap.parse_args(argv)
    if a.program_record:
        from hbfcommon.errors import HbfError  # noqa: PLC0415

        from . import write_program_record  # noqa: PLC0415
        try:
            path, n = write_program_record(a.program_record[0], a.program_record[1:])
        except HbfError as e:
            print(f"hbfsim: {e}", file=sys.stderr)
            return 2
        print(f"hbfsim: {path}: {n} kernel(s)")
        return 0
    if a.cmake_dir:
        print(cmake_dir())
    elif a.include_dir:
        print(include_dir())
    else:
        from hbfcommon.version import package_version  # noqa: PLC0415
        print(f"hbfsim {package_version()} (C API ABI {ABI_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
