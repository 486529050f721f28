"""The CUtensorMap (TMA descriptor) as a value: its byte layout, a decoder, an encoder, and the tile split.

Python twin of ``runtime_cuda/src/hbf_tensormap.cuh`` (issue 15, docs/design.md §3.10). The layout TABLE below is
the one place where the bit position and encoding of every field is written down, with its provenance; the C
header's constants block is generated from it (:func:`header_block`) and tests/tma/test_tensormap.py asserts the
two agree.

PROVENANCE. NVIDIA documents the CUtensorMap as an opaque 128-byte, 64-byte-aligned object (cuda.h:
``CU_TENSOR_MAP_NUM_QWORDS 16``) whose "format may change over time" (CUDA Programming Guide). Documented: the enum
values and value ranges of every field (cuda.h, cuTensorMapEncodeTiled) and the PTX ``tensormap.replace`` operand
codes (``.elemtype`` numbering, which differs from CUtensorMapDataType for FLOAT64/BFLOAT16/FLOAT32_FTZ; zero-based
``.rank``). The BIT POSITIONS are not documented anywhere we found. The table below is FITTED to the real sm_90
descriptors: 3298 calls of ``cuTensorMapEncodeTiled`` recorded on an H200 (driver 580.159.04, cuda-python, 2026-12-05;
``bench/tma_tensormap.py gpu`` -> ``bench/results/tma_tensormap_encodings_h200_r1.json.gz``), of which the driver
accepted 1810; ``bench/tma_layout_fit.py`` derives every field's position and encoding from those records by an
exhaustive search (independently of this table), finds the bits the driver sets that no input field explains
(derived fields: BOX_BYTES, SMEM_ALIGN, the TF32 flag) and checks that :func:`encode` reproduces all 1810 encodings
byte for byte and :func:`decode` gives back their inputs (``bench/results/tma_layout_fit.json``). What was NOT
observed, and is therefore extrapolated or refused here, is said per field: rank 1 (the driver refused every rank-1
map through cuda-python, which passes ``globalStrides = NULL`` for an empty list), global strides >= 2^36 B (the
32-bit stride slots hold stride >> 4; where the documented range's 4 high bits would go was never seen: encode()
refuses them, ``UNFITTED``), the im2col mode (no im2col map was encoded: which bit marks one is unknown; decode()
refuses any bit outside the fields, so an im2col descriptor is refused only if it sets such a bit), and the packed
sub-byte types and the 128B_ATOM_* swizzles (the sm_90 driver refuses them all). The layout is per architecture,
and on Blackwell the driver sets a bit from the ALLOCATION behind the address (NVIDIA's 595.71.05 driver notes,
quoted in triton-lang/triton issue 10442): this table is for sm_90 only.

The layout-independent path is the REGISTRY (:func:`pack_registry`, hb_tmap_lookup): the exact bytes of every
descriptor the host saw made, with the map they mean -- how the paper's public artifact binds descriptors
(SlugLab/HBFSim, include/hbfsim/tensormap.hpp: TensorMapRegistry keyed by a hash of the exact 128 bytes); and, for
a map built on the device, the MIRROR of its tensormap.replace sequence (:class:`Fields`, :func:`replace`,
:func:`from_fields`), whose operand conventions are documented.

What the semantics of a box are (which global bytes it reads, what it fills, how many bytes complete_tx counts)
is documented, not guessed: see :func:`box_runs` and the header's comments. (The driver's BOX_BYTES word is
prod floor(box/elementStride) * elemsize, elementStride[0] included, where cuda.h says the TMA moves
ceil(box/elementStride) elements and ignores elementStride[0] without interleave: the two differ when an
elementStride does not divide its box; the on-device check of bench/tma_tensormap.py decides which the barrier
counts. It has not run.)
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import struct
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from hbfcommon.errors import ErrorCode, HbfError

DESC_BYTES = 128
MAX_RANK = 5
# True: every field's position is fitted to the real encodings and encode() reproduces every accepted one of the
# fixture byte for byte (bench/tma_layout_fit.py; tests/tma/test_tensormap.py checks it in CI)
LAYOUT_VERIFIED = True
FIT_FIXTURE = "bench/results/tma_tensormap_encodings_h200_r1.json.gz"
FIT_RECORDS = 1810          # the driver-accepted encodings of FIT_FIXTURE the table is fitted to
FIT_SOURCE = f"fitted to {FIT_RECORDS} real H200 encodings (driver 580.159.04)"

# ---- documented enum values (cuda.h 13.0, CUtensorMap*_enum) ----------------------------------------------------
DTYPE_NAMES = ("UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
               "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ", "16U4_ALIGN8B", "16U4_ALIGN16B",
               "16U6_ALIGN16B")
# bytes per element; 0: a packed sub-byte type (not modeled: decode refuses it by name)
DTYPE_BYTES = (1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 0, 0, 0)
FLOAT_DTYPES = frozenset({6, 7, 8, 9, 10, 11, 12})
# The PTX ISA's tensormap.replace .elemtype numbering (the "tensormap new_val validity" table of the PTX ISA, the
# constants Triton's TMAUtilities mirrors as TMA_ELEMENT_TYPES): u8 u16 u32 s32 u64 s64 f16 f32 f32.ftz f64 bf16 tf32
# tf32.ftz b4x16 b4x16_p64 b6x16_p32. It differs from CUtensorMapDataType in 8..10 (FLOAT64, BFLOAT16, FLOAT32_FTZ).
# CUDA_TO_PTX_DTYPE[cuda enum] = PTX code.
CUDA_TO_PTX_DTYPE = (0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 8, 11, 12, 13, 14, 15)
PTX_TO_CUDA_DTYPE = tuple(CUDA_TO_PTX_DTYPE.index(p) for p in range(16))
INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B = 0, 1, 2
SWIZZLE_NAMES = ("NONE", "32B", "64B", "128B", "128B_ATOM_32B", "128B_ATOM_32B_FLIP_8B", "128B_ATOM_64B")
SWIZZLE_SPAN = (0, 32, 64, 128, 128, 128, 128)     # bytes: the bound on the box's inner dimension (cuda.h)
# The PTX ISA splits the CUDA swizzle enum into .swizzle_mode (0 none, 1 32B, 2 64B, 3 128B, 4 96B [sm_100+]) and
# .swizzle_atomicity (0 16B, 1 32B, 2 32B + 8B flip, 3 64B [sm_100a+]); CUDA's 128B_ATOM_* are mode 3 + atomicity.
SWIZZLE_TO_PTX = ((0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2), (3, 3))   # cuda enum -> (mode, atomicity)
L2PROMO_NAMES = ("NONE", "L2_64B", "L2_128B", "L2_256B")
FILL_NAMES = ("NONE", "NAN_REQUEST_ZERO_FMA")


# ---- what the sm_90 descriptor stores (fitted: bench/tma_layout_fit.py) -------------------------------------------
# The element-type code in the descriptor: the PTX .elemtype code for UINT8..FLOAT32_FTZ; TFLOAT32 and TFLOAT32_FTZ
# are stored as FLOAT32 (7) / FLOAT32_FTZ (8) with the TF32 flag set (NOT PTX's 11 / 12). DESC_DTYPE[cuda enum] =
# (code, tf32 flag), for the 13 types the sm_90 driver accepts.
DESC_DTYPE = tuple((CUDA_TO_PTX_DTYPE[d], 0) for d in range(11)) + ((7, 1), (8, 1))
# SMEM_ALIGN (a derived word): 16 B without swizzle, 8 rows of the swizzle span with one (256 / 512 / 1024 B) -- the
# shared-memory period of the swizzle pattern
SMEM_ALIGN_OF_SWIZZLE = (16, 256, 512, 1024)
# The sm_90 driver refuses a map whose BOX_BYTES exceed this: 227 KiB, the H200's largest shared-memory block
# (observed bound: accepted up to 231000 B, refused from 234432 B; bench/tma_layout_fit.py)
SMEM_BOX_MAX = 232448
STRIDE_FITTED_LIMIT = 1 << 36   # globalStrides the fitted layout holds (stride >> 4 in 32 bits); documented: < 2^40


@dataclass(frozen=True)
class Field:
    """One field of the descriptor: ``width`` bits at bit ``lo`` of the 1024-bit little-endian descriptor."""
    name: str          # C constant stem: HB_TMAP_<NAME>_LO / _W
    lo: int
    width: int
    encoding: str      # "raw" | "minus1" (stored value - 1) | "shr4" (stored value >> 4) | "desc_dtype" (DESC_DTYPE)
    #                    | "derived" (a function of the other fields: written by encode(), not read by decode())
    status: str        # "confirmed": fitted to the real encodings and reproduced byte for byte
    provenance: str


def _fields() -> tuple[Field, ...]:
    fit = FIT_SOURCE
    f = [Field("ADDR", 0, 64, "raw", "confirmed",
               f"{fit}: qword 0 = globalAddress, bits 4..47 observed varying (bases up to 2^48)")]
    f += [
        Field("RANK", 68, 3, "minus1", "confirmed",
              f"{fit}: ranks 2..5 stored 1..4; rank 1 -> 0 extrapolated (every rank-1 map was refused: cuda-python "
              "passes globalStrides = NULL for an empty list)"),
        Field("DTYPE", 71, 4, "desc_dtype", "confirmed",
              f"{fit}: the PTX .elemtype code for UINT8..FLOAT32_FTZ; TFLOAT32 / TFLOAT32_FTZ stored as 7 / 8 "
              "with TF32 set"),
        Field("INTERLEAVE", 75, 2, "raw", "confirmed", f"{fit}: CUtensorMapInterleave 0..2"),
        Field("SWIZZLE", 77, 2, "raw", "confirmed",
              f"{fit}: CUtensorMapSwizzle 0..3 (4..6, the 128B_ATOM_* swizzles, are refused by the sm_90 driver)"),
        Field("FILL", 79, 1, "raw", "confirmed", f"{fit}: CUtensorMapFloatOOBfill 0..1"),
        Field("TF32", 80, 1, "raw", "confirmed", f"{fit}: 1 for TFLOAT32 and TFLOAT32_FTZ, else 0"),
        Field("L2PROMO", 81, 2, "raw", "confirmed", f"{fit}: CUtensorMapL2promotion 0..3"),
    ]
    for i in range(MAX_RANK - 1):
        f.append(Field(f"GSTRIDE{i}", 96 + 32 * i, 32, "shr4", "confirmed",
                       f"{fit}: globalStrides[{i}] >> 4 in 32 bits (strides up to 2^34.8 B observed; >= 2^36 B "
                       "not observed: encode() refuses them)"))
    for i in range(MAX_RANK):
        f.append(Field(f"DIM{i}", 256 + 32 * i, 32, "minus1", "confirmed", f"{fit}: globalDim[{i}] - 1"))
    for i in range(MAX_RANK):
        f.append(Field(f"ESTRIDE{i}", 416 + 3 * i, 3, "minus1", "confirmed", f"{fit}: elementStrides[{i}] - 1"))
    f.append(Field("BOX0", 440, 8, "minus1", "confirmed", f"{fit}: boxDim[0] - 1"))
    for i in range(1, MAX_RANK):
        f.append(Field(f"BOX{i}", 448 + 8 * (i - 1), 8, "minus1", "confirmed", f"{fit}: boxDim[{i}] - 1"))
    f += [
        Field("BOX_BYTES", 512, 32, "derived", "confirmed",
              f"{fit}: prod_k floor(boxDim[k] / elementStrides[k]) * elemsize, elementStrides[0] included (values "
              f"observed < 2^18; the driver refuses a map above {SMEM_BOX_MAX} B)"),
        Field("SMEM_ALIGN", 576, 32, "derived", "confirmed",
              f"{fit}: 16 / 256 / 512 / 1024 for SWIZZLE NONE / 32B / 64B / 128B (the swizzle pattern's shared-memory "
              "period)"),
    ]
    return tuple(f)


FIELDS: tuple[Field, ...] = _fields()
FIELD = {f.name: f for f in FIELDS}
DERIVED = tuple(f.name for f in FIELDS if f.encoding == "derived")
# every bit no field holds: zero in every recorded encoding; decode() refuses a descriptor with one set
RESERVED_MASK = ((1 << (DESC_BYTES * 8)) - 1) & ~sum(((1 << f.width) - 1) << f.lo for f in FIELDS)


# ---- error codes (the C header's HB_TMAP_E_*; the same values) ---------------------------------------------------
E_CODES = {
    "OK": (0, "decoded"),
    "NULL": (1, "null descriptor or output pointer"),
    "RESERVED": (2, "a bit no field of the fitted sm_90 layout holds is set: not a tiled descriptor of that layout"),
    "RANK": (3, "rank outside 1..5"),
    "DTYPE": (4, "unknown CUtensorMapDataType (or an element-type code the driver does not write)"),
    "PACKED": (5, "a packed sub-byte element type (16U4_ALIGN8B/16U4_ALIGN16B/16U6_ALIGN16B): not modeled"),
    "ENUM": (6, "interleave/swizzle/l2promo/fill outside its documented enum"),
    "ALIGN": (7, "globalAddress or a global stride misaligned (16 B; 32 B with INTERLEAVE_32B)"),
    "RULE": (8, "a cuTensorMapEncodeTiled rule is violated (documented: ranges, box inner bytes, swizzle span, "
                "interleave rank, OOB NaN fill on an integer type; observed on the sm_90 driver: a 128B_ATOM_* "
                "swizzle, box bytes above 227 KiB)"),
    "EXTENT": (9, "the tensor's byte extent overflows 64 bits"),
    "IM2COL": (10, "an im2col-mode map where a tiled one is required"),
    "SPANS": (11, "more HBF page spans than the caller's buffer holds (fail closed: nothing truncated)"),
    "REPLACE": (12, "a tensormap.replace value outside its documented range (no defined effect: refused)"),
    "UNSET": (13, "a field the rank needs was never given a value (a device-built map must set them all)"),
    "UNFITTED": (14, "a value the fitted layout never held (a global stride >= 2^36 B): not encoded by guessing"),
}


class TensorMapError(HbfError):
    """A descriptor or TensorMap that cannot be decoded/encoded; ``reason`` is the HB_TMAP_E_* name."""
    code = ErrorCode.INVALID_ARGUMENT

    def __init__(self, reason: str, message: str, **fields) -> None:
        super().__init__(f"tensor map {reason}: {message}", reason=reason, **fields)
        self.reason = reason


@dataclass(frozen=True)
class TensorMap:
    """A decoded CUtensorMap (tiled mode), the fields of cuTensorMapEncodeTiled; lists are per dimension, dim 0
    innermost (contiguous). ``gstrides`` are the rank-1 documented globalStrides (bytes) of dims 1..rank-1."""
    base: int
    dtype: int
    dims: tuple[int, ...]
    gstrides: tuple[int, ...]
    box: tuple[int, ...]
    estrides: tuple[int, ...]
    interleave: int = 0
    swizzle: int = 0
    l2promo: int = 0
    fill: int = 0
    im2col: int = 0

    def __post_init__(self) -> None:
        r = len(self.dims)
        if not 1 <= r <= MAX_RANK:
            raise TensorMapError("RANK", f"rank {r} outside 1..{MAX_RANK}", rank=r)
        if len(self.box) != r or len(self.estrides) != r or len(self.gstrides) != r - 1:
            raise TensorMapError("RANK", "dims/box/estrides need rank entries and gstrides rank-1",
                                 dims=self.dims, box=self.box, estrides=self.estrides, gstrides=self.gstrides)
        if not 0 <= self.dtype < len(DTYPE_NAMES):
            raise TensorMapError("DTYPE", f"unknown data type {self.dtype}", dtype=self.dtype)
        if DTYPE_BYTES[self.dtype] == 0:
            raise TensorMapError("PACKED", f"{DTYPE_NAMES[self.dtype]} is a packed sub-byte type (not modeled)",
                                 dtype=self.dtype)
        for name, v, hi in (("interleave", self.interleave, 2), ("swizzle", self.swizzle, 6),
                            ("l2promo", self.l2promo, 3), ("fill", self.fill, 1), ("im2col", self.im2col, 1)):
            if not 0 <= v <= hi:
                raise TensorMapError("ENUM", f"{name} {v} outside 0..{hi}", **{name: v})

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte stride of every dimension: (elem_bytes, *gstrides) -- the C struct's ``stride``."""
        return (self.elem_bytes, *self.gstrides)

    @property
    def extent(self) -> int:
        """Bytes from base to one past the last element: sum((dim-1)*stride) + elem_bytes."""
        return sum((d - 1) * s for d, s in zip(self.dims, self.strides)) + self.elem_bytes

    def counts(self) -> tuple[int, ...]:
        """Elements the box moves along each dimension (ceil(box/estride); dim 0 ignores its elementStride
        unless the map is interleaved)."""
        out = []
        for k in range(self.rank):
            s = self._step(k)
            out.append(-(-self.box[k] // s))
        return tuple(out)

    def _step(self, k: int) -> int:
        if k == 0 and self.interleave == INTERLEAVE_NONE:
            return 1
        return self.estrides[k]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box moves into shared memory (= what complete_tx counts), OOB-filled included."""
        return math.prod(self.counts()) * self.elem_bytes


# ---- bit access ---------------------------------------------------------------------------------------------------
def _get(n: int, f: Field) -> int:
    return (n >> f.lo) & ((1 << f.width) - 1)


def _stored(f: Field, value: int) -> int:
    if f.encoding == "minus1":
        return value - 1
    if f.encoding == "shr4":
        return value >> 4
    return value


def _value(f: Field, stored: int) -> int:
    if f.encoding == "minus1":
        return stored + 1
    if f.encoding == "shr4":
        return stored << 4
    return stored


def desc_box_bytes(m: TensorMap) -> int:
    """The descriptor's BOX_BYTES word: prod_k floor(boxDim[k] / elementStrides[k]) * elemsize, elementStrides[0]
    included (fitted: bench/tma_layout_fit.py). NOT box_bytes (cuda.h's ceil, elementStrides[0] ignored without
    interleave): the two differ when an elementStride does not divide its box."""
    return math.prod(b // s for b, s in zip(m.box, m.estrides)) * m.elem_bytes


def check_rules(m: TensorMap) -> None:
    """The cuTensorMapEncodeTiled rules that constrain a tiled map of a modeled type on sm_90: the documented ones
    (cuda.h 13.0) the H200's driver enforces, and two it enforces that cuda.h does not state for sm_90 (observed:
    bench/tma_layout_fit.py): no 128B_ATOM_* swizzle, BOX_BYTES <= SMEM_BOX_MAX. (cuda.h's "INTERLEAVE_32B requires
    SWIZZLE_32B" is NOT enforced by driver 580.159.04: it accepted INTERLEAVE_32B with SWIZZLE_NONE, so neither do
    we.) Raises TensorMapError naming the first one violated. Used by encode() and by decode() (a descriptor that
    breaks them is not one the driver makes, so the simulator refuses it)."""
    e = m.elem_bytes
    align = 32 if m.interleave == INTERLEAVE_32B else 16
    if m.base % align:
        raise TensorMapError("ALIGN", f"globalAddress {m.base:#x} not {align}-byte aligned", base=m.base)
    for i in range(m.rank):                       # ranges first, per dimension (hb_tmap_from_fields' order)
        d, bx, es = m.dims[i], m.box[i], m.estrides[i]
        if not 1 <= d <= 1 << 32:
            raise TensorMapError("RULE", f"globalDim[{i}]={d} outside 1..2^32", dim=i, value=d)
        if not 1 <= bx <= 256:
            raise TensorMapError("RULE", f"boxDim[{i}]={bx} outside 1..256", dim=i, value=bx)
        if not 1 <= es <= 8:
            raise TensorMapError("RULE", f"elementStrides[{i}]={es} outside 1..8", dim=i, value=es)
    for i, s in enumerate(m.gstrides):
        if s % align or not 0 <= s < 1 << 40:
            raise TensorMapError("ALIGN", f"globalStrides[{i}]={s} not a multiple of {align} below 2^40",
                                 dim=i + 1, value=s)
    if m.interleave != INTERLEAVE_NONE and m.rank < 3:
        raise TensorMapError("RULE", "an interleaved map needs rank >= 3", rank=m.rank)
    if m.interleave == INTERLEAVE_NONE and (m.box[0] * e) % 16:
        raise TensorMapError("RULE", f"boxDim[0]*elemsize = {m.box[0] * e} B is not a multiple of 16",
                             box0=m.box[0], elem_bytes=e)
    if m.swizzle > 3:
        raise TensorMapError("RULE", f"swizzle {SWIZZLE_NAMES[m.swizzle]} is refused by the sm_90 driver",
                             swizzle=m.swizzle)
    if m.interleave == INTERLEAVE_NONE and m.swizzle and m.box[0] * e > SWIZZLE_SPAN[m.swizzle]:
        raise TensorMapError("RULE", f"inner box {m.box[0] * e} B exceeds the {SWIZZLE_NAMES[m.swizzle]} span",
                             box0=m.box[0], swizzle=m.swizzle)
    if m.fill and m.dtype not in FLOAT_DTYPES:
        raise TensorMapError("RULE", "NAN_REQUEST_ZERO_FMA fill needs a floating-point type", dtype=m.dtype)
    if desc_box_bytes(m) > SMEM_BOX_MAX:
        raise TensorMapError("RULE", f"box of {desc_box_bytes(m)} B (prod floor(box/elementStride) * elemsize) above "
                             f"the sm_90 driver's {SMEM_BOX_MAX} B", box_bytes=desc_box_bytes(m))
    if m.extent >= 1 << 64 or m.base + m.extent >= 1 << 64:
        raise TensorMapError("EXTENT", "the tensor's byte extent overflows 64 bits", extent=m.extent)


def encode(m: TensorMap) -> bytes:
    """The 128 bytes cuTensorMapEncodeTiled writes for ``m`` on sm_90 (the fitted layout of FIELDS), after the
    rules (check_rules); fields of dimensions >= rank are zero. Byte for byte the driver's for every accepted
    encoding of FIT_FIXTURE (tests/tma/test_tensormap.py). A global stride >= 2^36 B raises UNFITTED (where its high
    bits go was never observed)."""
    if m.im2col:
        raise TensorMapError("IM2COL", "encode() builds tiled maps only")
    check_rules(m)
    for i, s in enumerate(m.gstrides):
        if s >= STRIDE_FITTED_LIMIT:
            raise TensorMapError("UNFITTED", f"globalStrides[{i}]={s} >= 2^36: its high bits' position was never "
                                 "observed", dim=i + 1, value=s)
    n = 0

    def put(name: str, value: int) -> None:
        nonlocal n
        f = FIELD[name]
        s = _stored(f, value)
        assert 0 <= s < 1 << f.width, (name, value)
        n |= s << f.lo

    put("ADDR", m.base)
    for i in range(m.rank):
        put(f"DIM{i}", m.dims[i])
        put(f"BOX{i}", m.box[i])
        put(f"ESTRIDE{i}", m.estrides[i])
    for i, s in enumerate(m.gstrides):
        put(f"GSTRIDE{i}", s)
    put("RANK", m.rank)
    code, tf32 = DESC_DTYPE[m.dtype]
    for name, v in (("DTYPE", code), ("TF32", tf32), ("INTERLEAVE", m.interleave), ("SWIZZLE", m.swizzle),
                    ("L2PROMO", m.l2promo), ("FILL", m.fill), ("BOX_BYTES", desc_box_bytes(m)),
                    ("SMEM_ALIGN", SMEM_ALIGN_OF_SWIZZLE[m.swizzle])):
        put(name, v)
    return n.to_bytes(DESC_BYTES, "little")


def decode(b: bytes) -> TensorMap:
    """The TensorMap of a 128-byte descriptor (same checks, same order, as hb_tmap_decode): reserved bits, the
    element-type code, then from_fields. The derived words (BOX_BYTES, SMEM_ALIGN) are not read: they are functions
    of the other fields, and what a descriptor completed on the device by tensormap.replace holds there was never
    observed. An im2col map cannot be told apart by any observed bit: it is refused only if it sets a reserved one."""
    if not isinstance(b, (bytes, bytearray, memoryview)) or len(b) != DESC_BYTES:
        raise TensorMapError("NULL", f"a descriptor is {DESC_BYTES} bytes",
                             got=len(b) if hasattr(b, "__len__") else type(b).__name__)
    n = int.from_bytes(bytes(b), "little")
    if n & RESERVED_MASK:
        raise TensorMapError("RESERVED", "bits outside every field of the fitted layout are set",
                             bits=hex(n & RESERVED_MASK))

    def get(name: str) -> int:
        f = FIELD[name]
        return _value(f, _get(n, f))

    code, tf32 = get("DTYPE"), get("TF32")
    if code in (11, 12) or (tf32 and code not in (7, 8)):
        raise TensorMapError("DTYPE", f"element-type code {code} with TF32={tf32}: not one the driver writes",
                             code=code, tf32=tf32)
    elemtype = code + 4 if tf32 else code      # PTX .elemtype: tf32 11, tf32.ftz 12
    f = Fields(global_address=get("ADDR"), gdim=[get(f"DIM{i}") for i in range(MAX_RANK)],
               gstride=[get(f"GSTRIDE{i}") for i in range(MAX_RANK - 1)],
               box=[get(f"BOX{i}") for i in range(MAX_RANK)], estride=[get(f"ESTRIDE{i}") for i in range(MAX_RANK)],
               rank_m1=get("RANK") - 1, elemtype=elemtype, interleave=get("INTERLEAVE"),
               swizzle_mode=get("SWIZZLE"), swizzle_atom=0, fill=get("FILL"), l2promo=get("L2PROMO"),
               im2col=0, set=SET_ALL)
    return from_fields(f)


# ---- the map as tensormap.replace sees it (hb_tmap_fields) --------------------------------------------------------------
# .field of tensormap.replace.tile.<field>, by HB_TMAP_F_* number
REPLACE_FIELDS = ("global_address", "rank", "box_dim", "global_dim", "global_stride", "element_stride", "elemtype",
                  "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode")
SET_ADDR, SET_RANK, SET_ELEMTYPE, SET_INTERLEAVE, SET_SWIZZLE, SET_FILL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
SET_ALL = 0x1FFFFFF


def SET_BOX(o: int) -> int:  # noqa: N802 -- the C macro's name
    return 0x40 << o


def SET_GDIM(o: int) -> int:  # noqa: N802
    return 0x800 << o


def SET_GSTRIDE(o: int) -> int:  # noqa: N802
    return 0x10000 << o


def SET_ESTRIDE(o: int) -> int:  # noqa: N802
    return 0x100000 << o


@dataclass
class Fields:
    """hb_tmap_fields: a tiled map as the PTX tensormap.replace operands see it -- natural counts, strides in bytes,
    PTX codes, zero-based rank -- with a mask of what has a value. Mutable on purpose: replace() applies one
    tensormap.replace to it (the mirror of a device-side descriptor build needs no knowledge of the byte layout)."""
    global_address: int = 0
    gdim: list = dataclasses.field(default_factory=lambda: [0] * MAX_RANK)
    gstride: list = dataclasses.field(default_factory=lambda: [0] * (MAX_RANK - 1))
    box: list = dataclasses.field(default_factory=lambda: [0] * MAX_RANK)
    estride: list = dataclasses.field(default_factory=lambda: [0] * MAX_RANK)
    rank_m1: int = 0
    elemtype: int = 0
    interleave: int = 0
    swizzle_mode: int = 0
    swizzle_atom: int = 0
    fill: int = 0
    l2promo: int = 0
    im2col: int = 0
    set: int = 0


def replace(f: Fields, field: int | str, ord: int, val: int) -> None:  # noqa: A002 -- PTX's name
    """hb_tmap_replace: mirror ``tensormap.replace.tile.<field> [tm], {ord,} val`` onto ``f``; a value outside the
    documented range raises TensorMapError("REPLACE") and leaves ``f`` unchanged."""
    k = REPLACE_FIELDS.index(field) if isinstance(field, str) else field

    def bad(why: str) -> TensorMapError:
        return TensorMapError("REPLACE", f"tensormap.replace.{REPLACE_FIELDS[k] if 0 <= k < 11 else k}: {why}",
                              ord=ord, value=val)
    if k == 0:
        f.global_address, f.set = val, f.set | SET_ADDR
    elif k == 1:
        if not 0 <= val <= 4:
            raise bad("rank operand (zero-based) outside 0..4")
        f.rank_m1, f.set = val, f.set | SET_RANK
    elif k == 2:
        if not (0 <= ord <= 4 and 1 <= val <= 256):
            raise bad("box_dim outside 1..256 (or ord > 4)")
        f.box[ord], f.set = val, f.set | SET_BOX(ord)
    elif k == 3:
        if not (0 <= ord <= 4 and 1 <= val <= 1 << 32):
            raise bad("global_dim outside 1..2^32 (or ord > 4)")
        f.gdim[ord], f.set = val, f.set | SET_GDIM(ord)
    elif k == 4:
        if not (0 <= ord <= 3 and val % 16 == 0 and 0 <= val < 1 << 40):
            raise bad("global_stride not a multiple of 16 below 2^40 (or ord > 3)")
        f.gstride[ord], f.set = val, f.set | SET_GSTRIDE(ord)
    elif k == 5:
        if not (0 <= ord <= 4 and 1 <= val <= 8):
            raise bad("element_stride outside 1..8 (or ord > 4)")
        f.estride[ord], f.set = val, f.set | SET_ESTRIDE(ord)
    elif k == 6:
        if not 0 <= val <= 15:
            raise bad("elemtype code outside 0..15")
        f.elemtype, f.set = val, f.set | SET_ELEMTYPE
    elif k == 7:
        if not 0 <= val <= 2:
            raise bad("interleave_layout outside 0..2")
        f.interleave, f.set = val, f.set | SET_INTERLEAVE
    elif k == 8:
        if not 0 <= val <= 4:
            raise bad("swizzle_mode outside 0..4")
        f.swizzle_mode, f.set = val, f.set | SET_SWIZZLE
    elif k == 9:
        if not 0 <= val <= 3:
            raise bad("swizzle_atomicity outside 0..3")
        f.swizzle_atom = val
    elif k == 10:
        if not 0 <= val <= 1:
            raise bad("fill_mode outside 0..1")
        f.fill, f.set = val, f.set | SET_FILL
    else:
        raise bad("unknown field")


def fields_of(m: TensorMap) -> Fields:
    """hb_tmap_fields_of: the fields of a known map, every one set (a copied template's starting point)."""
    pad = [0] * (MAX_RANK - m.rank)
    mode, atom = SWIZZLE_TO_PTX[m.swizzle]
    return Fields(global_address=m.base, gdim=[*m.dims, *pad], gstride=[*m.gstrides, *pad],
                  box=[*m.box, *pad], estride=[*m.estrides, *pad], rank_m1=m.rank - 1,
                  elemtype=CUDA_TO_PTX_DTYPE[m.dtype], interleave=m.interleave, swizzle_mode=mode, swizzle_atom=atom,
                  fill=m.fill, l2promo=m.l2promo, im2col=m.im2col, set=SET_ALL)


def from_fields(f: Fields) -> TensorMap:
    """hb_tmap_from_fields: the map ``f`` describes (same checks, same order)."""
    rank = f.rank_m1 + 1
    if rank <= MAX_RANK:
        need = SET_ADDR | SET_RANK | SET_ELEMTYPE | SET_INTERLEAVE | SET_SWIZZLE | SET_FILL
        for i in range(rank):
            need |= SET_BOX(i) | SET_GDIM(i) | SET_ESTRIDE(i) | (SET_GSTRIDE(i - 1) if i else 0)
        if f.set & need != need:
            raise TensorMapError("UNSET", "fields the rank needs were never given a value", missing=hex(need & ~f.set))
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError("RANK", f"rank {rank} outside 1..{MAX_RANK}", rank=rank)
    dtype = PTX_TO_CUDA_DTYPE[f.elemtype & 15]
    if DTYPE_BYTES[dtype] == 0:
        raise TensorMapError("PACKED", f"{DTYPE_NAMES[dtype]} is a packed sub-byte type (not modeled)", dtype=dtype)
    il, mode, atom, l2, fill = f.interleave, f.swizzle_mode, f.swizzle_atom, f.l2promo, f.fill
    if il > 2 or mode > 3 or (atom and mode != 3) or l2 > 3 or fill > 1 or atom > 3:
        raise TensorMapError("ENUM", "interleave/swizzle/l2promo/fill outside its enum (or a sm_100-only swizzle)",
                             interleave=il, swizzle_mode=mode, swizzle_atomicity=atom, l2promo=l2, fill=fill)
    m = TensorMap(base=f.global_address, dtype=dtype, dims=tuple(f.gdim[:rank]), gstrides=tuple(f.gstride[:rank - 1]),
                  box=tuple(f.box[:rank]), estrides=tuple(f.estride[:rank]), interleave=il,
                  swizzle=3 + atom if atom else mode, l2promo=l2, fill=fill, im2col=f.im2col)
    check_rules(m)
    return m


# ---- the hash (hb_tmap_hash) ----------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1


def desc_hash(b: bytes) -> int:
    """64-bit hash of the exact 128 bytes (FNV-style over the 16 little-endian qwords, then a murmur3 finalizer);
    the C hb_tmap_hash computes the same value."""
    if len(b) != DESC_BYTES:
        raise TensorMapError("NULL", f"a descriptor is {DESC_BYTES} bytes", got=len(b))
    h = 0xCBF29CE484222325
    for (w,) in struct.iter_unpack("<Q", bytes(b)):
        h = ((h ^ w) * 0x100000001B3) & _M64
        h ^= h >> 29
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    h ^= h >> 33
    return h


# ---- the registry (hb_tmap_entry; the path that needs no knowledge of the layout) -------------------------------------
_HB_TMAP = struct.Struct("<Q8I5Q5Q5I5IQ")           # struct hb_tmap (168 bytes)
_ENTRY = struct.Struct("<128sQQ168s")               # struct hb_tmap_entry (312 bytes)
HB_TMAP_SIZE, ENTRY_SIZE = _HB_TMAP.size, _ENTRY.size


def c_struct(m: TensorMap) -> bytes:
    """``m`` as the C struct hb_tmap (fields of dimensions >= rank zero)."""
    pad = (0,) * (MAX_RANK - m.rank)
    return _HB_TMAP.pack(m.base, m.rank, m.dtype, m.elem_bytes, m.interleave, m.swizzle, m.l2promo, m.fill, m.im2col,
                         *m.dims, *pad, *m.strides, *pad, *m.box, *pad, *m.estrides, *pad, m.extent)


def pack_registry(items: Sequence[tuple[bytes, TensorMap]], generation: int) -> bytes:
    """The device table of hb_tmap_entry for (descriptor bytes, the map they mean) pairs, sorted by hash (the order
    hb_tmap_lookup searches). A descriptor listed twice with different maps is refused (it cannot mean both)."""
    seen: dict[bytes, TensorMap] = {}
    for desc, m in items:
        if len(desc) != DESC_BYTES:
            raise TensorMapError("NULL", f"a descriptor is {DESC_BYTES} bytes", got=len(desc))
        if m.im2col:
            raise TensorMapError("IM2COL", "the registry holds tiled maps")
        check_rules(m)
        if seen.setdefault(bytes(desc), m) != m:
            raise TensorMapError("RULE", "one descriptor published with two different maps", hash=desc_hash(desc))
    rows = sorted((desc_hash(d), d) for d in seen)
    return b"".join(_ENTRY.pack(d, h, generation, c_struct(seen[d])) for h, d in rows)


def lookup(table: bytes, desc: bytes) -> int:
    """hb_tmap_lookup: the index of the entry holding exactly ``desc`` in a pack_registry() table, or -1."""
    h = desc_hash(desc)
    n = len(table) // ENTRY_SIZE
    for i in range(n):
        d, eh, _, _ = _ENTRY.unpack_from(table, i * ENTRY_SIZE)
        if eh == h and d == bytes(desc):
            return i
    return -1


# ---- the box ----------------------------------------------------------------------------------------------------------
RUN_MAX = 1 << 31    # a merged run never grows past this many bytes (the C run length is 32-bit)


def _inbounds(c: int, step: int, count: int, dim: int) -> tuple[int, int]:
    """[jlo, jhi): the steps j in 0..count-1 whose index c + j*step lies in [0, dim)."""
    jlo = 0 if c >= 0 else (-c + step - 1) // step
    jhi = 0 if c >= dim else min(count, (dim - c + step - 1) // step)
    return jlo, max(jlo, jhi)


def box_runs(m: TensorMap, coords: Sequence[int]) -> tuple[list[tuple[int, int]], int]:
    """(runs, oob_bytes) of the box at element coordinates ``coords`` (signed, one per dimension): the in-bounds
    global bytes it reads or writes as maximal contiguous (addr, nbytes) runs in visit order (dim 0 fastest;
    a run that starts where the previous one ends is merged into it), and the bytes of its out-of-bounds elements
    (filled per ``fill`` on a load, dropped on a store, never read). Same order and merging as hb_tmap_box_runs."""
    if m.im2col:
        raise TensorMapError("IM2COL", "box_runs needs a tiled map")
    r = m.rank
    if len(coords) != r:
        raise TensorMapError("RANK", f"{len(coords)} coordinates for a rank-{r} map", coords=tuple(coords))
    e, strides, counts = m.elem_bytes, m.strides, m.counts()
    total = math.prod(counts) * e
    lo, hi = [], []
    for k in range(r):
        a, b = _inbounds(int(coords[k]), m._step(k), counts[k], m.dims[k])
        lo.append(a)
        hi.append(b)
    inb = math.prod(b - a for a, b in zip(lo, hi))
    runs: list[tuple[int, int]] = []
    if inb == 0:
        return runs, total
    pend = [0, 0]

    def emit(addr: int, n: int) -> None:
        if pend[1] and pend[0] + pend[1] == addr and pend[1] + n <= RUN_MAX:
            pend[1] += n
            return
        if pend[1]:
            runs.append((pend[0], pend[1]))
        pend[0], pend[1] = addr, n

    s0 = m._step(0)

    def rows() -> Iterator[tuple[int, ...]]:
        idx = [lo[k] for k in range(1, r)]
        while True:
            yield tuple(idx)
            k = 0
            while k < r - 1:
                idx[k] += 1
                if idx[k] < hi[k + 1]:
                    break
                idx[k] = lo[k + 1]
                k += 1
            if k == r - 1:
                return

    for js in rows():
        row = m.base + sum((coords[k] + j * m._step(k)) * strides[k] for k, j in zip(range(1, r), js))
        if s0 == 1:
            emit(row + (coords[0] + lo[0]) * e, (hi[0] - lo[0]) * e)
        else:
            for j in range(lo[0], hi[0]):
                emit(row + (coords[0] + j * s0) * e, e)
    runs.append((pend[0], pend[1]))
    return runs, total - inb * e


@dataclass(frozen=True)
class Range:
    """One device range (hbf_dev_range): [base, end), media_offset, page_shift. Sorted, non-overlapping."""
    base: int
    end: int
    media_offset: int
    page_shift: int = 12
    range_id: int = 1


@dataclass(frozen=True)
class Span:
    """Consecutive media pages of one range the box touches (hb_tmap_span)."""
    range_idx: int
    first_page: int
    npages: int
    bytes: int


@dataclass(frozen=True)
class Split:
    box_bytes: int
    hbm_bytes: int
    hbf_bytes: int
    oob_bytes: int
    nruns: int
    spans: tuple[Span, ...]


def unmeasured(m: TensorMap, coords: Sequence[int]) -> bool:
    """A copy the TMA unit does not do as this model says, so the modeled path refuses it (hb_tmap_unmeasured, the
    same rule; __hb_tma fails closed with UNSUPPORTED, recorded): an
    interleaved map whose dimension-0 coordinate is not 0, or whose elementStride[0] is not 1. Measured with real
    loads on an H100 (driver 580.159.04, 2026-12-05, bench/results/tma_tensormap_gpu_r4_h100_semantics.json): of
    the 18 interleaved copies, all 15 with a nonzero dimension-0 coordinate hung (barrier never completed with the
    model's, the descriptor's or the whole box's byte count), faulted (CUDA_ERROR_ILLEGAL_ADDRESS), completed with
    the descriptor's count or moved other bytes; both with elementStride[0] = 3 hung; the one with
    elementStride[0] = 2 and coordinate 0 was right (too few to trust). The 182 non-interleaved copies, 65 of them
    boxes wholly outside the tensor, were all as modeled."""
    return m.interleave != INTERLEAVE_NONE and (coords[0] != 0 or m.estrides[0] != 1)


def split(m: TensorMap, coords: Sequence[int], ranges: Sequence[Range], max_spans: int) -> Split:
    """The box's bytes split into HBM (in bounds, outside every range), HBF (inside a range, as page spans) and
    OOB; raises TensorMapError("SPANS") when more than ``max_spans`` spans are needed. Same as hb_tmap_split.
    (Geometry only: whether the TMA unit does the copy as modeled is ``unmeasured``'s question.)"""
    runs, oob = box_runs(m, coords)
    bases = [rg.base for rg in ranges]
    spans: list[list[int]] = []
    hbm = hbf = 0
    for addr, n in runs:
        end = addr + n
        i = max(0, bisect.bisect_right(bases, addr) - 1)
        if i < len(ranges) and ranges[i].end <= addr:
            i += 1
        cur = addr
        while i < len(ranges) and ranges[i].base < end:
            rg = ranges[i]
            a, b = max(cur, rg.base), min(end, rg.end)
            hbm += a - cur
            hbf += b - a
            mo = rg.media_offset + (a - rg.base)
            fp, lp = mo >> rg.page_shift, (mo + (b - a) - 1) >> rg.page_shift
            if spans and spans[-1][0] == i and spans[-1][1] <= fp <= spans[-1][1] + spans[-1][2]:
                sp = spans[-1]
                sp[2] = max(sp[2], lp - sp[1] + 1)
                sp[3] += b - a
            else:
                if len(spans) >= max_spans:
                    raise TensorMapError("SPANS", f"more than {max_spans} HBF page spans", max_spans=max_spans)
                spans.append([i, fp, lp - fp + 1, b - a])
            cur = b
            i += 1
        hbm += end - cur
    return Split(box_bytes=m.box_bytes, hbm_bytes=hbm, hbf_bytes=hbf, oob_bytes=oob, nruns=len(runs),
                 spans=tuple(Span(*s) for s in spans))


# ---- one real tiled load (cp.async.bulk.tensor ... mbarrier::complete_tx::bytes): what the TMA unit refuses --------
# A descriptor the driver accepted can still fault at use: Hopper reports a tensor copy it refuses as
# CUDA_ERROR_ILLEGAL_INSTRUCTION (sticky: the context is lost). The rules below are the ones a test harness that
# issues real copies must keep; copy_problems() names every one a launch would break.
INNER_COORD_ALIGN = 16     # bytes: the innermost coordinate * elemsize. Not in cuda.h; triton-lang/triton PR 9112
                           # (Gluon TMA tutorial + its "illegal instruction" sanitizer: "the innermost coordinate must
                           # be 16-byte aligned"), issue 7385 (an unaligned read address -> illegal instruction),
                           # tile-ai/tilelang issue 2527 (Hopper: cudaErrorIllegalInstruction), Triton's interpreter
                           # ("block offset start must be 16-byte aligned")
SMEM_DST_ALIGN = 128       # bytes: the shared-memory destination of a tiled copy without swizzle (CUDA C++
                           # Programming Guide, the TMA alignment table); a swizzled one: SMEM_ALIGN_OF_SWIZZLE
MBARRIER_ALIGN = 8         # an mbarrier object is 8 bytes, 8-byte aligned (PTX ISA, mbarrier)


def smem_dst_align(m: TensorMap) -> int:
    """The alignment the box's shared-memory destination needs: 128 B, or the swizzle pattern's repeat (256 / 512 /
    1024 B for 32B / 64B / 128B; the descriptor's SMEM_ALIGN word holds the same repeat, and 16 for no swizzle)."""
    if m.swizzle == 0:
        return SMEM_DST_ALIGN
    return SMEM_ALIGN_OF_SWIZZLE[m.swizzle] if m.swizzle < len(SMEM_ALIGN_OF_SWIZZLE) else 1024


def smem_reserve(m: TensorMap) -> int:
    """Shared-memory bytes to reserve at the destination for one box: box_bytes, or for a swizzled map the box with
    every row of its inner dimension widened to the swizzle span and rounded up to the pattern's repeat (the pattern
    permutes 16-byte chunks inside span-wide rows; whether the unit pads a narrower row is not documented). An upper
    bound, not a measurement: a harness reserves this much so no placement can leave its allocation."""
    if m.swizzle == 0:
        return m.box_bytes
    span, rep = SWIZZLE_SPAN[m.swizzle], smem_dst_align(m)
    inner = m.counts()[0] * m.elem_bytes
    rows = m.box_bytes // inner if inner else 0
    need = max(m.box_bytes, rows * max(span, inner))
    return -(-need // rep) * rep


def copy_problems(m: TensorMap, coords: Sequence[int], *, smem_offset: int, mbar_offset: int,
                  smem_bytes: int) -> list[str]:
    """Why one real tiled load of ``m`` at ``coords`` into shared memory at byte ``smem_offset`` (of a CTA's
    ``smem_bytes``), completing on an mbarrier at ``mbar_offset``, would fault or write outside its shared memory
    (empty: none of the rules is broken). Offsets are from a 1024-byte-aligned origin (a dynamic block declared
    __align__(1024))."""
    out = []
    if m.im2col:
        out.append("an im2col map: a tiled copy needs a tiled map")
    if len(coords) != m.rank:
        out.append(f"{len(coords)} coordinates for a rank-{m.rank} map")
    elif any(not -(1 << 31) <= c < (1 << 31) for c in coords):
        out.append("a coordinate outside int32")
    elif (coords[0] * m.elem_bytes) % INNER_COORD_ALIGN:
        out.append(f"innermost coordinate {coords[0]} x {m.elem_bytes} B is not a multiple of {INNER_COORD_ALIGN} B "
                   "(the TMA unit faults: CUDA_ERROR_ILLEGAL_INSTRUCTION)")
    if smem_offset % smem_dst_align(m):
        out.append(f"shared-memory destination at {smem_offset} not {smem_dst_align(m)}-byte aligned")
    if mbar_offset % MBARRIER_ALIGN:
        out.append(f"mbarrier at {mbar_offset} not {MBARRIER_ALIGN}-byte aligned")
    end = smem_offset + smem_reserve(m)
    if end > smem_bytes:
        out.append(f"the box needs shared memory up to byte {end}, the CTA has {smem_bytes}")
    if mbar_offset < end and smem_offset < mbar_offset + 8:
        out.append("the mbarrier lies inside the box's destination")
    return out


# ---- the C header's generated block -----------------------------------------------------------------------------------
HEADER_BEGIN = "/* BEGIN GENERATED LAYOUT (hbfcommon/tensormap.py header_block(); tests/tma check it) */"
HEADER_END = "/* END GENERATED LAYOUT */"


def header_block() -> str:
    lines = [HEADER_BEGIN,
             f"/* {FIT_SOURCE}: bench/tma_layout_fit.py, {FIT_FIXTURE} */",
             f"#define HB_TMAP_LAYOUT_VERIFIED {1 if LAYOUT_VERIFIED else 0}"]
    for f in FIELDS:
        lines.append(f"#define HB_TMAP_{f.name}_LO {f.lo}u  /* {f.width} bits, {f.encoding}, {f.status} */")
        lines.append(f"#define HB_TMAP_{f.name}_W {f.width}u")
    for q in range(DESC_BYTES // 8):
        lines.append(f"#define HB_TMAP_RESERVED_Q{q} 0x{(RESERVED_MASK >> (64 * q)) & ((1 << 64) - 1):016X}ull")
    lines.append(f"#define HB_TMAP_SMEM_BOX_MAX {SMEM_BOX_MAX}ull  /* the sm_90 driver refuses larger boxes */")
    packed = sum(c << (4 * p) for p, c in enumerate(PTX_TO_CUDA_DTYPE))
    lines.append(f"#define HB_TMAP_PTX_TO_CUDA_DTYPE 0x{packed:016X}ull  /* nibble p: the CUtensorMapDataType of "
                 "PTX .elemtype code p */")
    for name, (v, why) in E_CODES.items():
        lines.append(f"#define HB_TMAP_E_{name} {v}  /* {why} */" if name != "OK" else f"#define HB_TMAP_OK {v}")
    lines.append(HEADER_END)
    return "\n".join(lines)


# ---- layout discovery (run against the real driver by bench/tma_tensormap.py; tested against encode()) ---------------
BASELINE_BASE = 0x7F0000000000   # the probes' global address: an encoder that only packs fields takes any


def _baseline(rank: int = 5, base: int = BASELINE_BASE) -> TensorMap:
    dims = (64, 32, 8, 4, 2)[:rank]
    gs, acc = [], 64 * 2
    for d in dims[1:]:
        gs.append(acc)
        acc *= d
    return TensorMap(base=base, dtype=6, dims=dims, gstrides=tuple(gs), box=(64, 8, 2, 2, 1)[:rank],
                     estrides=(1,) * rank)


def _diff_bits(a: bytes, b: bytes) -> set[int]:
    x = int.from_bytes(a, "little") ^ int.from_bytes(b, "little")
    return {i for i in range(DESC_BYTES * 8) if x >> i & 1}


def _derived_bits() -> set[int]:
    return {b for nm in DERIVED for b in range(FIELD[nm].lo, FIELD[nm].lo + FIELD[nm].width)}


def discover_layout(encode_fn: Callable[[TensorMap], bytes], base_address: int = BASELINE_BASE) -> dict[str, dict]:
    """Infer every input field's bit position and encoding from an encoder (the real cuTensorMapEncodeTiled wrapped
    by bench/tma_tensormap.py, or encode()) by differential probing: from a valid baseline map, change one field to
    values that set single bits of its stored form and see which descriptor bits follow (the bits of the derived
    fields of FIELDS, which follow box / elementStrides / dtype / swizzle changes too, are set aside). Returns, per
    FIELDS name except the derived ones, {"bits": sorted observed bit positions, "lo", "encoding", "agrees": bool with
    FIELDS}. A field whose probes move no bits or a non-contiguous set is reported with agrees False.
    ``base_address``: the baseline's global address (a driver that refuses an address no allocation holds needs one
    that does; the address probes that leave the allocation are then refused and not counted)."""
    out: dict[str, dict] = {}
    base = _baseline(base=base_address)
    b0 = encode_fn(base)
    derived = _derived_bits()

    def diff(a: bytes, b: bytes) -> set[int]:
        return _diff_bits(a, b) - derived

    def probe(name: str, variants: list[tuple[TensorMap, int]], encoding: str) -> None:
        # variants: (map, the stored-bit index the change is expected to flip relative to the baseline)
        bits: set[int] = set()
        pos: dict[int, set[int]] = {}
        for mv, k in variants:
            try:
                d = diff(b0, encode_fn(mv))
            except TensorMapError:
                continue
            pos[k] = d
            bits |= d
        f = FIELD[name]
        single = {k: next(iter(d)) for k, d in pos.items() if len(d) == 1}
        lo = min((p - k for k, p in single.items()), default=None)
        consistent = bool(single) and all(p - k == lo for k, p in single.items())
        out[name] = {"bits": sorted(bits), "lo": lo if consistent else None, "encoding": encoding,
                     "probes": len(pos), "agrees": consistent and lo == f.lo and encoding == f.encoding}

    rep = dataclasses.replace
    # base address: flip stored bits 4..47 (16-B aligned)
    probe("ADDR", [(rep(base, base=base.base ^ (1 << k)), k) for k in range(4, 47)], "raw")
    for i in range(MAX_RANK):
        v = []
        for k in range(32):
            d = list(base.dims)
            d[i] = ((d[i] - 1) ^ (1 << k)) + 1
            if d[i] >= base.box[i]:
                v.append((rep(base, dims=tuple(d)), k))
        probe(f"DIM{i}", v, "minus1")
    for i in range(MAX_RANK - 1):
        v = []
        for k in range(4, 36):
            gs = list(base.gstrides)
            new = gs[i] ^ (1 << k)
            if new < 16 or new >= 1 << 40:
                continue
            gs[i] = new
            v.append((rep(base, gstrides=tuple(gs)), k - 4))
        probe(f"GSTRIDE{i}", v, "shr4")
    for i in range(MAX_RANK):
        v = []
        for k in range(8):
            b = list(base.box)
            new = (b[i] - 1) ^ (1 << k)
            b[i] = new + 1
            if i == 0 and (b[0] * 2) % 16:
                continue
            v.append((rep(base, box=tuple(b)), k))
        probe(f"BOX{i}", v, "minus1")
    for i in range(MAX_RANK):
        v = []
        for k in range(3):
            es = list(base.estrides)
            es[i] = ((es[i] - 1) ^ (1 << k)) + 1
            v.append((rep(base, estrides=tuple(es)), k))
        probe(f"ESTRIDE{i}", v, "minus1")

    def probe_enum(name: str, values: list[TensorMap], documented: list[int],
                   expect: Callable[[int], int] = lambda v: v) -> None:
        f = FIELD[name]
        bits: set[int] = set()
        encs: list[tuple[int, bytes]] = []
        ref = encode_fn(values[0])          # the first documented value, everything else equal
        for mv, dv in zip(values, documented):
            try:
                enc = encode_fn(mv)
            except TensorMapError:
                continue
            bits |= diff(ref, enc)
            encs.append((dv, enc))
        lo = min(bits) if bits else None
        stored = {}
        if lo is not None:
            for dv, enc in encs:
                stored[dv] = (int.from_bytes(enc, "little") >> lo) & ((1 << f.width) - 1)
        out[name] = {"bits": sorted(bits), "lo": lo, "encoding": f.encoding, "probes": len(encs),
                     "stored": stored, "agrees": lo == f.lo and all(expect(k) == v for k, v in stored.items())}

    probe_enum("DTYPE", [rep(base, dtype=d) for d in range(13)], list(range(13)), expect=lambda d: DESC_DTYPE[d][0])
    probe_enum("TF32", [rep(base, dtype=7), rep(base, dtype=11)], [7, 11], expect=lambda d: DESC_DTYPE[d][1])
    probe_enum("SWIZZLE", [rep(base, swizzle=s, box=(16, *base.box[1:])) for s in range(4)], list(range(4)))
    probe_enum("L2PROMO", [rep(base, l2promo=v) for v in range(4)], list(range(4)))
    probe_enum("FILL", [rep(base, fill=v) for v in range(2)], list(range(2)))
    il = _baseline(base=base_address)
    il = rep(il, dims=(8, *il.dims[1:]), box=(8, *il.box[1:]), gstrides=(64, *il.gstrides[1:]))
    probe_enum("INTERLEAVE", [rep(il, interleave=v) for v in range(3)], list(range(3)))
    # rank: the bits that change between rank 5 and rank r that no field of the dropped dimensions explains
    known: set[int] = set(derived)
    for nm in ("DIM", "BOX", "ESTRIDE", "GSTRIDE"):
        for i in range(MAX_RANK):
            key = f"{nm}{i}"
            if key in out and out[key]["lo"] is not None:
                known |= set(range(out[key]["lo"], out[key]["lo"] + FIELD[key].width))
    rbits: set[int] = set()
    rstored: dict[int, int] = {}
    for r in range(1, MAX_RANK):
        try:
            rbits |= _diff_bits(b0, encode_fn(_baseline(r, base_address))) - known
        except TensorMapError:
            continue
    lo = min(rbits) if rbits else None
    if lo is not None:
        for r in range(1, MAX_RANK + 1):
            try:     # (the H200's driver through cuda-python refused every rank-1 map, 2026-12-05: NULL strides)
                n = int.from_bytes(encode_fn(_baseline(r, base_address)), "little")
            except TensorMapError:
                continue
            rstored[r] = (n >> lo) & ((1 << FIELD["RANK"].width) - 1)
    out["RANK"] = {"bits": sorted(rbits), "lo": lo, "encoding": "minus1", "probes": MAX_RANK - 1, "stored": rstored,
                   "agrees": lo == FIELD["RANK"].lo and all(v == k - 1 for k, v in rstored.items())}
    return out
