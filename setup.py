"""hbfsim's two generated parts, built with the package (pyproject.toml holds all the metadata).

1. The gRPC stubs: proto/hbf.proto -> hbfproto/{__init__,hbf_pb2,hbf_pb2_grpc}.py by grpc_tools.protoc
   (the grpcio-tools pinned in pyproject.toml [build-system] requires), with the grpc module's import made
   absolute (``import hbf_pb2`` -> ``from hbfproto import hbf_pb2``).
2. The device helper PTX: runtime_cuda/ptx/{hbf_helpers, hbf_helpers_lean, hbf_helpers_l2, hbf_eidola_helpers}.ptx, by nvcc
   when it is on PATH (or named by $NVCC); without nvcc the package has no helper PTX and hbfcc / the
   runtime say so when they need it (hbfcommon.resources: "helper PTX not built: ...").

pip (PEP 517, setuptools.build_meta) runs both in ``build_py``: into the wheel's build directory for a
wheel, into the source tree for an editable install. The Makefile runs the same code in the source tree:

    python setup.py proto [OUT_DIR]               the stubs (default hbfproto/)
    python setup.py helper-ptx BUILD OUT.ptx      one helper build: direct | lean | l2 | eidola
    python setup.py helpers-ptx [OUT_DIR]         all three (default runtime_cuda/ptx/)

$HBF_HELPER_NVCC_FLAGS adds nvcc options to a helper build, for debug builds beside the package's (e.g.
``-DHB_DEBUG_ASKS`` into a path of their own: bench/gpu_calls/stop54_asks.sh); any build run with it set carries
them, so leave it unset for the package's own (pip, make).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from hbfcommon.resources import HELPER_PTX_FILES, HELPER_PTX_PACKAGE, HELPER_PTX_SUBDIR  # noqa: E402

PROTO = ROOT / "proto" / "hbf.proto"
PROTO_PACKAGE = "hbfproto"
PROTO_INIT = '"""gRPC stubs generated from proto/hbf.proto at build time. Never edited by hand."""\n'
HELPER_DIR = Path(HELPER_PTX_PACKAGE, HELPER_PTX_SUBDIR)          # relative to the package root

# The helper builds: nvcc -ptx for compute_90a, -rdc so the helpers link into any module
NVCC_PTX_FLAGS = ("-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx", "-Iruntime_cuda/include")
HELPER_SOURCES = {
    "direct": ("runtime_cuda/src/hbf_helpers.cu", ()),
    "lean": ("runtime_cuda/src/hbf_helpers.cu", ("-DHBF_OOL_OPAQUE=1",)),
    "l2": ("runtime_cuda/src/hbf_helpers.cu", ("-DHBF_L2_MODEL=1",)),
    "eidola": ("eidola/src/hbf_eidola_helpers.cu", ("-Iruntime_cuda/src", "-Ieidola/src")),
}
assert set(HELPER_SOURCES) == set(HELPER_PTX_FILES)
# Exported helpers become .weak so several -rdc modules (nvlink) can carry the same ones
_VISIBLE_FUNC = re.compile(r"^\.visible \.func", re.M)


class BuildStepError(Exception):
    pass


def generate_proto(out_dir: Path) -> list[Path]:
    """The stubs of proto/hbf.proto in ``out_dir`` (each file replaced atomically)."""
    if not PROTO.is_file():
        raise BuildStepError(f"{PROTO} missing: the gRPC stubs cannot be generated")
    try:
        import grpc_tools  # noqa: F401
    except ImportError as e:
        raise BuildStepError("grpcio-tools is not installed: it generates the gRPC stubs "
                             "(pyproject.toml [build-system] requires it)") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hbfproto-", dir=out_dir) as td:
        argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={td}",
                f"--grpc_python_out={td}", str(PROTO)]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildStepError(f"grpc_tools.protoc failed ({r.returncode}): {r.stderr.strip()}")
        grpc_py = Path(td, "hbf_pb2_grpc.py")
        text, n = re.subn(r"^import hbf_pb2 as", f"from {PROTO_PACKAGE} import hbf_pb2 as", grpc_py.read_text(),
                          flags=re.M)
        if n != 1:
            raise BuildStepError("hbf_pb2_grpc.py: the `import hbf_pb2 as` line to fix was not found")
        grpc_py.write_text(text)
        Path(td, "__init__.py").write_text(PROTO_INIT)
        written = []
        for name in ("__init__.py", "hbf_pb2.py", "hbf_pb2_grpc.py"):
            os.replace(Path(td, name), out_dir / name)
            written.append(out_dir / name)
    return written


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def find_nvcc() -> str | None:
    return os.environ.get("NVCC") or shutil.which("nvcc")


def _extra_nvcc_flags() -> list[str]:
    """$HBF_HELPER_NVCC_FLAGS split as a shell would (a debug build's nvcc options); a malformed value is an error."""
    v = os.environ.get("HBF_HELPER_NVCC_FLAGS", "")
    try:
        return shlex.split(v)
    except ValueError as e:
        raise BuildStepError(f"HBF_HELPER_NVCC_FLAGS={v!r} cannot be split into nvcc options ({e})") from None


def build_helper_ptx(build: str, out: Path, nvcc: str) -> Path:
    """One helper build (``direct`` | ``lean`` | ``l2`` | ``eidola``) to ``out`` (atomic replace)."""
    src, extra = HELPER_SOURCES[build]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        argv = [nvcc, *NVCC_PTX_FLAGS, *extra, *_extra_nvcc_flags(), src, "-o", tmp]
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildStepError(f"nvcc failed building the {build} helper PTX ({' '.join(argv)}):\n"
                                 f"{r.stderr.strip()}")
        Path(tmp).write_text(_VISIBLE_FUNC.sub(".weak .func", Path(tmp).read_text()))
        os.chmod(tmp, 0o666 & ~_umask())      # mkstemp made it 0600: package data is world-readable
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def build_helpers(out_dir: Path) -> list[Path]:
    """All helper builds into ``out_dir`` when nvcc exists; [] (and a note on stderr) when it does not."""
    nvcc = find_nvcc()
    if not nvcc:
        print(f"nvcc not found: the device helper PTX ({HELPER_DIR}) is not built; hbfcc and the runtime "
              "need it (build with nvcc on PATH, or set HBFCC_HELPER_PTX)", file=sys.stderr)
        return []
    return [build_helper_ptx(b, out_dir / HELPER_PTX_FILES[b], nvcc) for b in HELPER_SOURCES]


def _script(argv: list[str]) -> int:
    """``python setup.py proto|helper-ptx|helpers-ptx ...`` (what the Makefile runs)."""
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "proto" and len(args) <= 1:
            generate_proto(Path(args[0]) if args else ROOT / PROTO_PACKAGE)
        elif cmd == "helper-ptx" and len(args) == 2 and args[0] in HELPER_SOURCES:
            nvcc = find_nvcc()
            if nvcc:
                build_helper_ptx(args[0], Path(args[1]).resolve(), nvcc)
            else:
                build_helpers(Path(args[1]).parent)   # prints the note
        elif cmd == "helpers-ptx" and len(args) <= 1:
            build_helpers(Path(args[0]).resolve() if args else ROOT / HELPER_DIR)
        else:
            print(__doc__.split("\n\n")[-1], file=sys.stderr)
            return 2
    except BuildStepError as e:
        print(f"setup.py {cmd}: {e}", file=sys.stderr)
        return 1
    return 0


SCRIPT_COMMANDS = ("proto", "helper-ptx", "helpers-ptx")

if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] in SCRIPT_COMMANDS:
    sys.exit(_script(sys.argv[1:]))

from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py as _build_py  # noqa: E402


class build_py(_build_py):
    """setuptools' build_py, then the stubs and the helper PTX (see the module docstring)."""

    def run(self) -> None:
        super().run()
        editable = getattr(self, "editable_mode", False)
        root = ROOT if editable else Path(self.build_lib).resolve()
        try:
            generate_proto(root / PROTO_PACKAGE)
            built = build_helpers(root / HELPER_DIR)
        except BuildStepError as e:
            raise SystemExit(f"hbfsim build: {e}") from e
        if built:
            self.announce(f"built {len(built)} helper PTX modules into {root / HELPER_DIR}", level=2)
        if editable and PROTO_PACKAGE not in (self.distribution.packages or []):
            # the editable finder maps the packages known after the build: the stubs were just generated
            self.distribution.packages.append(PROTO_PACKAGE)


setup(cmdclass={"build_py": build_py})
