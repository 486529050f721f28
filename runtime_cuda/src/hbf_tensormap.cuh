/*
 * hbf_tensormap.cuh — a CUtensorMap (TMA descriptor) as a value: decode its 128 bytes, enumerate the global bytes
 * one box (tile) of it reads or writes, and split them into HBM / HBF / out-of-bounds bytes against the device range
 * table (issue 15, items 2-3; docs/design.md §3.10). Header-only; every function is __host__ __device__ (the very
 * same code runs on the CPU in tests/tma/ and in the device helpers), no dynamic memory, no recursion.
 *
 * Python twin: hbfcommon/tensormap.py (same decode checks in the same order, same run order and merging, same hash,
 * same split); tests/tma/test_tensormap.py compiles this header into a host program and compares the two.
 *
 * ---- THE LAYOUT: FITTED TO THE H200's DRIVER ----------------------------------------------------------------------
 * NVIDIA documents the CUtensorMap as opaque (128 bytes, 64-byte aligned) and warns its format may change; no public
 * source gives bit positions. The generated block below is FITTED to 1810 real sm_90 descriptors written by
 * cuTensorMapEncodeTiled on an H200 (driver 580.159.04, 2026-12-05; bench/tma_layout_fit.py derives every position
 * and encoding from bench/results/tma_tensormap_encodings_h200_r1.json.gz and reproduces all 1810 byte for byte;
 * hbfcommon/tensormap.py FIELDS holds the provenance of each). The layout, little-endian qwords:
 *   q0        globalAddress
 *   q1        bits 4..6 rank-1, 7..10 element-type code (PTX .elemtype; TFLOAT32/_FTZ = 7/8 + TF32 bit 16),
 *             11..12 interleave, 13..14 swizzle (0..3), 15 OOB fill, 16 TF32, 17..18 L2 promotion;
 *             bits 32..63 globalStrides[0] >> 4
 *   q2, q3lo  globalStrides[1..3] >> 4 (32 bits each)
 *   q4..q6lo  globalDim[0..4] - 1 (32 bits each)
 *   q6        bits 32..46 elementStrides[0..4] - 1 (3 bits each), bits 56..63 boxDim[0] - 1
 *   q7        boxDim[1..4] - 1 (8 bits each)
 *   q8lo      BOX_BYTES = prod floor(boxDim/elementStrides) * elemsize (derived)
 *   q9lo      SMEM_ALIGN = 16 / 256 / 512 / 1024 for swizzle NONE / 32B / 64B / 128B (derived)
 *   all other bits zero (reserved: decode refuses them set).
 * NOT observed: rank 1 (cuda-python passed NULL globalStrides and the driver refused every rank-1 map: extrapolated
 * as rank field 0), strides >= 2^36 B, im2col maps (no bit is known to mark one), and the packed types and 128B_ATOM
 * swizzles (the sm_90 driver refuses them). The layout is per architecture (NVIDIA's 595.71.05 driver notes describe
 * an allocation-dependent bit on Blackwell): for sm_90 only. HB_TMAP_LAYOUT_VERIFIED is 1 because every accepted
 * encoding of the fixture is reproduced and decodes back to its inputs (tests/tma); hb_tmap_decode has NOT yet been
 * run on the GPU itself, nor have the box semantics been checked on the TMA unit (bench/tma_tensormap.py gpu:
 * device_decode, tma_semantics). The REGISTRY path (hb_tmap_entry / hb_tmap_lookup below: the exact bytes of every
 * descriptor the host saw made, with the map they mean) needs no layout. Decoding fails closed on anything outside
 * the layout: reserved bits set, codes the driver does not write, out-of-range enums, a rule broken -> an error
 * code, never a guess.
 *
 * ---- THE SEMANTICS OF A BOX (cuda.h cuTensorMapEncodeTiled; PTX ISA "tensor copy" / tiled mode; basis per item) -
 *  - Element (i0..i{r-1}) of the tensor lives at base + sum_k i_k * stride_k, stride_0 = element size (dim 0 is
 *    contiguous), stride_k = globalStrides[k-1] (bytes).
 *  - A box at coordinates c_k (signed 32-bit element indices, the PTX operand) traverses, along dimension k, the
 *    indices c_k + j * s_k for j = 0 .. ceil(box_k / s_k) - 1, s_k = elementStrides[k]. With INTERLEAVE_NONE the
 *    elementStride of dimension 0 is IGNORED (cuda.h: "TMA doesn't support the stride for dimension zero"), so
 *    dimension 0 is always box_0 consecutive elements; with an interleaved layout it is honoured (inferred from the
 *    same sentence; to be checked on the GPU).
 *  - An element whose index is outside [0, globalDim_k) in ANY dimension is out of bounds: it is never read from
 *    global memory; a load fills it in shared memory (zero, or the NaN of FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA), a
 *    store drops it. Coordinates may be negative or past the end.
 *  - The bytes a box moves -- what mbarrier complete_tx counts, what expect_tx must announce -- are ALL the elements
 *    traversed, out-of-bounds ones included: prod_k ceil(box_k / s_k) * elemsize (hb_tmap_box_bytes). Basis: the
 *    shared-memory box is always whole (cuda.h: "TMA loads ceil(boxDim/elementStrides) elements"), and Triton's
 *    generated code announces the full box for every tile, edge tiles included (expect_tx 16384 for a 64x64 fp32
 *    box, ../shared/notes/ptx-and-toolchain.md §1.6, observed on the H200). bench/tma_tensormap.py gpu measures it.
 *  - swizzle and interleave change only WHERE in shared memory each element lands (and the validity rules); they never
 *    change which global bytes are read. l2promo changes only the L2 fill granularity (the DRAM side of L2), not the
 *    bytes the program reads; it is not modeled. (Verified as far as the documentation goes: both are defined on the
 *    shared-memory side and on L2 requests; the device check in bench/tma_tensormap.py is the measurement.)
 *
 * ---- WHAT THE CALLER GETS ------------------------------------------------------------------------------------------
 *  hb_tmap_decode   128 bytes -> hb_tmap (0 or an HB_TMAP_E_* code; an im2col map decodes with im2col = 1: the caller
 *                   refuses it -- hb_tmap_split returns HB_TMAP_E_IM2COL; hb_tmap_box_runs must not be given one)
 *  hb_tmap_hash     64-bit hash of the exact 128 bytes: key a decode cache with it AND the range generation
 *  hb_tmap_lookup   the registry: the entry holding exactly these 128 bytes (hash, then a full compare), or -1
 *  hb_tmap_replace  mirror one device-side tensormap.replace onto an hb_tmap_fields (from a zeroed buffer, or from
 *                   hb_tmap_fields_of a template); hb_tmap_from_fields -> hb_tmap. Needs no layout knowledge.
 *                   (Not a hot path: the fields struct is indexed by the runtime ord, 160 B of local memory.)
 *  hb_tmap_box_runs the in-bounds bytes of one box as maximal contiguous runs, in a fixed order; returns OOB bytes.
 *                   Cost: one callback per row of dimension 0 (a 128x128 fp16 box: at most 128 rows, fewer after
 *                   merging), per ELEMENT only for an interleaved map with elementStride[0] > 1.
 *  hb_tmap_split    the box against the sorted hbf_dev_range table: HBM / HBF / OOB byte counts and the HBF part as
 *                   page spans (range index, first media page, page count, bytes) into a caller buffer; more spans
 *                   than the buffer holds -> HB_TMAP_E_SPANS (nothing truncated).
 */
#ifndef HBF_TENSORMAP_CUH
#define HBF_TENSORMAP_CUH

#include <stddef.h>
#include <stdint.h>
#include "hbf_device.h"

#if defined(__CUDACC__)
#define HB_TMAP_HD __host__ __device__ __forceinline__
#define HB_TMAP_UNROLL _Pragma("unroll")
#else
#define HB_TMAP_HD static inline
#define HB_TMAP_UNROLL
#endif

#define HB_TMAP_BYTES 128u
#define HB_TMAP_MAX_RANK 5u
#define HB_TMAP_RUN_MAX 0x80000000u     /* a merged run never grows past 2^31 bytes */

/* CUtensorMap* enum values (cuda.h 13.0; documented) */
#define HB_TMAP_DT_PACKED_FIRST 13u     /* 16U4_ALIGN8B, 16U4_ALIGN16B, 16U6_ALIGN16B: sub-byte, not modeled */
#define HB_TMAP_INTERLEAVE_NONE 0u
#define HB_TMAP_INTERLEAVE_32B 2u
#define HB_TMAP_SWIZZLE_32B 1u

/* BEGIN GENERATED LAYOUT (hbfcommon/tensormap.py header_block(); tests/tma check it) */
/* fitted to 1810 real H200 encodings (driver 580.159.04): bench/tma_layout_fit.py, bench/results/tma_tensormap_encodings_h200_r1.json.gz */
#define HB_TMAP_LAYOUT_VERIFIED 1
#define HB_TMAP_ADDR_LO 0u  /* 64 bits, raw, confirmed */
#define HB_TMAP_ADDR_W 64u
#define HB_TMAP_RANK_LO 68u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_RANK_W 3u
#define HB_TMAP_DTYPE_LO 71u  /* 4 bits, desc_dtype, confirmed */
#define HB_TMAP_DTYPE_W 4u
#define HB_TMAP_INTERLEAVE_LO 75u  /* 2 bits, raw, confirmed */
#define HB_TMAP_INTERLEAVE_W 2u
#define HB_TMAP_SWIZZLE_LO 77u  /* 2 bits, raw, confirmed */
#define HB_TMAP_SWIZZLE_W 2u
#define HB_TMAP_FILL_LO 79u  /* 1 bits, raw, confirmed */
#define HB_TMAP_FILL_W 1u
#define HB_TMAP_TF32_LO 80u  /* 1 bits, raw, confirmed */
#define HB_TMAP_TF32_W 1u
#define HB_TMAP_L2PROMO_LO 81u  /* 2 bits, raw, confirmed */
#define HB_TMAP_L2PROMO_W 2u
#define HB_TMAP_GSTRIDE0_LO 96u  /* 32 bits, shr4, confirmed */
#define HB_TMAP_GSTRIDE0_W 32u
#define HB_TMAP_GSTRIDE1_LO 128u  /* 32 bits, shr4, confirmed */
#define HB_TMAP_GSTRIDE1_W 32u
#define HB_TMAP_GSTRIDE2_LO 160u  /* 32 bits, shr4, confirmed */
#define HB_TMAP_GSTRIDE2_W 32u
#define HB_TMAP_GSTRIDE3_LO 192u  /* 32 bits, shr4, confirmed */
#define HB_TMAP_GSTRIDE3_W 32u
#define HB_TMAP_DIM0_LO 256u  /* 32 bits, minus1, confirmed */
#define HB_TMAP_DIM0_W 32u
#define HB_TMAP_DIM1_LO 288u  /* 32 bits, minus1, confirmed */
#define HB_TMAP_DIM1_W 32u
#define HB_TMAP_DIM2_LO 320u  /* 32 bits, minus1, confirmed */
#define HB_TMAP_DIM2_W 32u
#define HB_TMAP_DIM3_LO 352u  /* 32 bits, minus1, confirmed */
#define HB_TMAP_DIM3_W 32u
#define HB_TMAP_DIM4_LO 384u  /* 32 bits, minus1, confirmed */
#define HB_TMAP_DIM4_W 32u
#define HB_TMAP_ESTRIDE0_LO 416u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_ESTRIDE0_W 3u
#define HB_TMAP_ESTRIDE1_LO 419u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_ESTRIDE1_W 3u
#define HB_TMAP_ESTRIDE2_LO 422u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_ESTRIDE2_W 3u
#define HB_TMAP_ESTRIDE3_LO 425u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_ESTRIDE3_W 3u
#define HB_TMAP_ESTRIDE4_LO 428u  /* 3 bits, minus1, confirmed */
#define HB_TMAP_ESTRIDE4_W 3u
#define HB_TMAP_BOX0_LO 440u  /* 8 bits, minus1, confirmed */
#define HB_TMAP_BOX0_W 8u
#define HB_TMAP_BOX1_LO 448u  /* 8 bits, minus1, confirmed */
#define HB_TMAP_BOX1_W 8u
#define HB_TMAP_BOX2_LO 456u  /* 8 bits, minus1, confirmed */
#define HB_TMAP_BOX2_W 8u
#define HB_TMAP_BOX3_LO 464u  /* 8 bits, minus1, confirmed */
#define HB_TMAP_BOX3_W 8u
#define HB_TMAP_BOX4_LO 472u  /* 8 bits, minus1, confirmed */
#define HB_TMAP_BOX4_W 8u
#define HB_TMAP_BOX_BYTES_LO 512u  /* 32 bits, derived, confirmed */
#define HB_TMAP_BOX_BYTES_W 32u
#define HB_TMAP_SMEM_ALIGN_LO 576u  /* 32 bits, derived, confirmed */
#define HB_TMAP_SMEM_ALIGN_W 32u
#define HB_TMAP_RESERVED_Q0 0x0000000000000000ull
#define HB_TMAP_RESERVED_Q1 0x00000000FFF8000Full
#define HB_TMAP_RESERVED_Q2 0x0000000000000000ull
#define HB_TMAP_RESERVED_Q3 0xFFFFFFFF00000000ull
#define HB_TMAP_RESERVED_Q4 0x0000000000000000ull
#define HB_TMAP_RESERVED_Q5 0x0000000000000000ull
#define HB_TMAP_RESERVED_Q6 0x00FF800000000000ull
#define HB_TMAP_RESERVED_Q7 0xFFFFFFFF00000000ull
#define HB_TMAP_RESERVED_Q8 0xFFFFFFFF00000000ull
#define HB_TMAP_RESERVED_Q9 0xFFFFFFFF00000000ull
#define HB_TMAP_RESERVED_Q10 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_RESERVED_Q11 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_RESERVED_Q12 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_RESERVED_Q13 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_RESERVED_Q14 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_RESERVED_Q15 0xFFFFFFFFFFFFFFFFull
#define HB_TMAP_SMEM_BOX_MAX 232448ull  /* the sm_90 driver refuses larger boxes */
#define HB_TMAP_PTX_TO_CUDA_DTYPE 0xFEDCB98A76543210ull  /* nibble p: the CUtensorMapDataType of PTX .elemtype code p */
#define HB_TMAP_OK 0
#define HB_TMAP_E_NULL 1  /* null descriptor or output pointer */
#define HB_TMAP_E_RESERVED 2  /* a bit no field of the fitted sm_90 layout holds is set: not a tiled descriptor of that layout */
#define HB_TMAP_E_RANK 3  /* rank outside 1..5 */
#define HB_TMAP_E_DTYPE 4  /* unknown CUtensorMapDataType (or an element-type code the driver does not write) */
#define HB_TMAP_E_PACKED 5  /* a packed sub-byte element type (16U4_ALIGN8B/16U4_ALIGN16B/16U6_ALIGN16B): not modeled */
#define HB_TMAP_E_ENUM 6  /* interleave/swizzle/l2promo/fill outside its documented enum */
#define HB_TMAP_E_ALIGN 7  /* globalAddress or a global stride misaligned (16 B; 32 B with INTERLEAVE_32B) */
#define HB_TMAP_E_RULE 8  /* a cuTensorMapEncodeTiled rule is violated (documented: ranges, box inner bytes, swizzle span, interleave rank, OOB NaN fill on an integer type; observed on the sm_90 driver: a 128B_ATOM_* swizzle, box bytes above 227 KiB) */
#define HB_TMAP_E_EXTENT 9  /* the tensor's byte extent overflows 64 bits */
#define HB_TMAP_E_IM2COL 10  /* an im2col-mode map where a tiled one is required */
#define HB_TMAP_E_SPANS 11  /* more HBF page spans than the caller's buffer holds (fail closed: nothing truncated) */
#define HB_TMAP_E_REPLACE 12  /* a tensormap.replace value outside its documented range (no defined effect: refused) */
#define HB_TMAP_E_UNSET 13  /* a field the rank needs was never given a value (a device-built map must set them all) */
#define HB_TMAP_E_UNFITTED 14  /* a value the fitted layout never held (a global stride >= 2^36 B): not encoded by guessing */
/* END GENERATED LAYOUT */

/* A decoded CUtensorMap, tiled mode. Fields of dimensions >= rank are zero. */
struct hb_tmap {
    uint64_t base;                 /* globalAddress */
    uint32_t rank;                 /* 1..5 */
    uint32_t dtype;                /* CUtensorMapDataType value */
    uint32_t elem_bytes;           /* bytes per element (packed sub-byte types do not decode: HB_TMAP_E_PACKED) */
    uint32_t interleave, swizzle, l2promo, fill;   /* the enum values of cuTensorMapEncodeTiled */
    uint32_t im2col;               /* nonzero: an im2col-mode map (not modeled: the caller refuses it with a reason) */
    uint64_t dim[5];               /* globalDim, elements */
    uint64_t stride[5];            /* bytes; stride[0] == elem_bytes (dim 0 contiguous); stride[i] = globalStrides[i-1] */
    uint32_t box[5];               /* boxDim, elements */
    uint32_t estride[5];           /* elementStrides */
    uint64_t extent;               /* bytes from base to one past the last element: sum (dim-1)*stride + elem_bytes */
};

/* One run of consecutive media pages of one range the box touches (the HBF part, in visit order). */
struct hb_tmap_span {
    uint64_t first_page;           /* media page number: (media_offset + (addr - base)) >> page_shift */
    uint64_t bytes;                /* bytes of the box inside these pages */
    uint32_t npages;               /* pages first_page .. first_page + npages - 1 */
    uint32_t range_idx;            /* index into the range table passed to hb_tmap_split */
};

/* The split of one box: box_bytes == hbm_bytes + hbf_bytes + oob_bytes. */
struct hb_tmap_split_t {
    uint64_t box_bytes;            /* bytes the copy moves (= complete_tx), OOB-filled elements included */
    uint64_t hbm_bytes;            /* in bounds, outside every range: the native path */
    uint64_t hbf_bytes;            /* in bounds, inside a range: the spans */
    uint64_t oob_bytes;            /* out of bounds: filled (load) / dropped (store), never read */
    uint32_t nspans;               /* spans written */
    uint32_t nruns;                /* contiguous global runs the box was made of */
};

/* bytes per element of CUtensorMapDataType dt (0: a packed sub-byte type or unknown) */
HB_TMAP_HD uint32_t hb_tmap_dtype_bytes(uint32_t dt) {
    /* UINT8 UINT16 UINT32 INT32 UINT64 INT64 FLOAT16 FLOAT32 FLOAT64 BFLOAT16 FLOAT32_FTZ TFLOAT32 TFLOAT32_FTZ */
    const uint64_t packed = 0x4442842884421ull;   /* 4 bits per type, types 0..12 */
    return dt < HB_TMAP_DT_PACKED_FIRST ? (uint32_t)((packed >> (4u * dt)) & 0xFu) : 0u;
}

/* the PTX .elemtype code of CUtensorMapDataType dt (they differ for FLOAT64, BFLOAT16, FLOAT32_FTZ) */
HB_TMAP_HD uint32_t hb_tmap_cuda_to_ptx_dtype(uint32_t dt) {
    for (uint32_t p = 0; p < 16u; ++p)
        if (((HB_TMAP_PTX_TO_CUDA_DTYPE >> (4u * p)) & 0xFu) == dt) return p;
    return 16u;
}

/* width <= 64 bits at bit lo of the 16 little-endian qwords */
HB_TMAP_HD uint64_t hb_tmap_bits(const uint64_t* w, uint32_t lo, uint32_t width) {
    const uint32_t q = lo >> 6, sh = lo & 63u;
    uint64_t v = w[q] >> sh;
    if (sh && sh + width > 64u) v |= w[q + 1] << (64u - sh);
    return width == 64u ? v : (v & ((1ull << width) - 1ull));
}

/* ---- a tiled map as the PTX tensormap.replace operands see it ------------------------------------------------------
 * Natural values (dims, boxes, element strides as counts; global strides in bytes), the PTX codes of .elemtype,
 * .interleave_layout, .swizzle_mode, .swizzle_atomicity, .fill_mode, and .rank zero-based -- the operand conventions
 * the PTX ISA documents (and Triton 3.6's generated code uses, tests/tma). It is the common form of the two ways a map
 * is known: decoded from bytes (hb_tmap_decode fills every field), or mirrored from a device-side tensormap.replace
 * sequence (hb_tmap_replace, starting from a zeroed struct or from hb_tmap_fields_of(a known map)), which needs no
 * knowledge of the byte layout. hb_tmap_from_fields turns it into an hb_tmap under the documented rules. */
#define HB_TMAP_F_GLOBAL_ADDRESS 0u
#define HB_TMAP_F_RANK 1u
#define HB_TMAP_F_BOX_DIM 2u          /* ord 0..4 */
#define HB_TMAP_F_GLOBAL_DIM 3u       /* ord 0..4 */
#define HB_TMAP_F_GLOBAL_STRIDE 4u    /* ord 0..3: globalStrides[ord], bytes */
#define HB_TMAP_F_ELEMENT_STRIDE 5u   /* ord 0..4 */
#define HB_TMAP_F_ELEMTYPE 6u
#define HB_TMAP_F_INTERLEAVE 7u
#define HB_TMAP_F_SWIZZLE_MODE 8u
#define HB_TMAP_F_SWIZZLE_ATOM 9u     /* sm_100a+; 0 (16B) when never replaced */
#define HB_TMAP_F_FILL 10u

struct hb_tmap_fields {
    uint64_t global_address;
    uint64_t gdim[5];              /* globalDim */
    uint64_t gstride[4];           /* globalStrides (bytes) */
    uint32_t box[5], estride[5];
    uint32_t rank_m1;              /* the .rank operand: rank - 1 */
    uint32_t elemtype;             /* PTX .elemtype code */
    uint32_t interleave, swizzle_mode, swizzle_atom, fill;
    uint32_t l2promo, im2col;      /* not replaceable on the device: kept from the starting map */
    uint32_t set;                  /* what has a value: bit HB_TMAP_SET_*(ord) */
};
#define HB_TMAP_SET_ADDR 0x1u
#define HB_TMAP_SET_RANK 0x2u
#define HB_TMAP_SET_ELEMTYPE 0x4u
#define HB_TMAP_SET_INTERLEAVE 0x8u
#define HB_TMAP_SET_SWIZZLE 0x10u
#define HB_TMAP_SET_FILL 0x20u
#define HB_TMAP_SET_BOX(o) (0x40u << (o))         /* bits 6..10 */
#define HB_TMAP_SET_GDIM(o) (0x800u << (o))       /* bits 11..15 */
#define HB_TMAP_SET_GSTRIDE(o) (0x10000u << (o))  /* bits 16..19 */
#define HB_TMAP_SET_ESTRIDE(o) (0x100000u << (o)) /* bits 20..24 */
#define HB_TMAP_SET_ALL 0x1FFFFFFu

/* Mirror one `tensormap.replace.tile.<field> [tm], {ord,} val` onto f. Values outside the documented ranges
 * (cuTensorMapEncodeTiled's: box 1..256, elementStride 1..8, globalDim >= 1, globalStride a multiple of 16 below
 * 2^40, rank 1..5; the enum codes) have no defined effect: HB_TMAP_E_REPLACE, f unchanged. */
HB_TMAP_HD int hb_tmap_replace(hb_tmap_fields* f, uint32_t field, uint32_t ord, uint64_t val) {
    if (!f) return HB_TMAP_E_NULL;
    switch (field) {
    case HB_TMAP_F_GLOBAL_ADDRESS: f->global_address = val; f->set |= HB_TMAP_SET_ADDR; return HB_TMAP_OK;
    case HB_TMAP_F_RANK:
        if (val > 4u) return HB_TMAP_E_REPLACE;
        f->rank_m1 = (uint32_t)val; f->set |= HB_TMAP_SET_RANK; return HB_TMAP_OK;
    case HB_TMAP_F_BOX_DIM:
        if (ord > 4u || val < 1u || val > 256u) return HB_TMAP_E_REPLACE;
        f->box[ord] = (uint32_t)val; f->set |= HB_TMAP_SET_BOX(ord); return HB_TMAP_OK;
    case HB_TMAP_F_GLOBAL_DIM:
        if (ord > 4u || val < 1u || val > (1ull << 32)) return HB_TMAP_E_REPLACE;
        f->gdim[ord] = val; f->set |= HB_TMAP_SET_GDIM(ord); return HB_TMAP_OK;
    case HB_TMAP_F_GLOBAL_STRIDE:
        if (ord > 3u || (val & 15u) || val >= (1ull << 40)) return HB_TMAP_E_REPLACE;
        f->gstride[ord] = val; f->set |= HB_TMAP_SET_GSTRIDE(ord); return HB_TMAP_OK;
    case HB_TMAP_F_ELEMENT_STRIDE:
        if (ord > 4u || val < 1u || val > 8u) return HB_TMAP_E_REPLACE;
        f->estride[ord] = (uint32_t)val; f->set |= HB_TMAP_SET_ESTRIDE(ord); return HB_TMAP_OK;
    case HB_TMAP_F_ELEMTYPE:
        if (val > 15u) return HB_TMAP_E_REPLACE;
        f->elemtype = (uint32_t)val; f->set |= HB_TMAP_SET_ELEMTYPE; return HB_TMAP_OK;
    case HB_TMAP_F_INTERLEAVE:
        if (val > 2u) return HB_TMAP_E_REPLACE;
        f->interleave = (uint32_t)val; f->set |= HB_TMAP_SET_INTERLEAVE; return HB_TMAP_OK;
    case HB_TMAP_F_SWIZZLE_MODE:
        if (val > 4u) return HB_TMAP_E_REPLACE;
        f->swizzle_mode = (uint32_t)val; f->set |= HB_TMAP_SET_SWIZZLE; return HB_TMAP_OK;
    case HB_TMAP_F_SWIZZLE_ATOM:
        if (val > 3u) return HB_TMAP_E_REPLACE;
        f->swizzle_atom = (uint32_t)val; return HB_TMAP_OK;
    case HB_TMAP_F_FILL:
        if (val > 1u) return HB_TMAP_E_REPLACE;
        f->fill = (uint32_t)val; f->set |= HB_TMAP_SET_FILL; return HB_TMAP_OK;
    default: return HB_TMAP_E_REPLACE;
    }
}

/* The fields of a known map (every field set): the start of a replace sequence applied to a copied template. */
HB_TMAP_HD hb_tmap_fields hb_tmap_fields_of(const hb_tmap& m) {
    hb_tmap_fields f;
    f.global_address = m.base;
    f.rank_m1 = m.rank - 1u;
    f.elemtype = hb_tmap_cuda_to_ptx_dtype(m.dtype);
    f.interleave = m.interleave;
    f.swizzle_mode = m.swizzle > 3u ? 3u : m.swizzle;
    f.swizzle_atom = m.swizzle > 3u ? m.swizzle - 3u : 0u;
    f.fill = m.fill;
    f.l2promo = m.l2promo;
    f.im2col = m.im2col;
HB_TMAP_UNROLL
    for (uint32_t i = 0; i < 5; ++i) {
        f.gdim[i] = m.dim[i];
        f.box[i] = m.box[i];
        f.estride[i] = m.estride[i];
        if (i < 4) f.gstride[i] = m.stride[i + 1];
    }
    f.set = HB_TMAP_SET_ALL;
    return f;
}

/* The descriptor's BOX_BYTES word (hbfcommon/tensormap.py desc_box_bytes): prod floor(box/estride) * elemsize,
 * estride[0] included -- not hb_tmap_box_bytes (cuda.h's ceil): the driver bounds this one by HB_TMAP_SMEM_BOX_MAX. */
HB_TMAP_HD uint64_t hb_tmap_desc_box_bytes(const hb_tmap& m) {
    uint64_t n = m.elem_bytes;
HB_TMAP_UNROLL
    for (uint32_t k = 0; k < 5; ++k)
        if (k < m.rank) n *= (uint64_t)(m.box[k] / m.estride[k]);
    return n;
}

/* The map f describes, under the driver's rules. Checks, in this order (the Python twin's): every field the rank
 * needs has a value (HB_TMAP_E_UNSET: a map built on the device from a zeroed buffer must set them all; what a
 * zero field means to the TMA unit was not observed), rank, packed dtype, enums, then the rules (alignment, ranges,
 * interleave/swizzle rules, fill, the sm_90 driver's swizzle and box-size bounds), then the extent. */
HB_TMAP_HD int hb_tmap_from_fields(const hb_tmap_fields* f, hb_tmap* out) {
    if (!f || !out) return HB_TMAP_E_NULL;
    hb_tmap m;
    m.rank = f->rank_m1 + 1u;
    if (m.rank <= HB_TMAP_MAX_RANK) {
        uint32_t need = HB_TMAP_SET_ADDR | HB_TMAP_SET_RANK | HB_TMAP_SET_ELEMTYPE | HB_TMAP_SET_INTERLEAVE |
                        HB_TMAP_SET_SWIZZLE | HB_TMAP_SET_FILL;
HB_TMAP_UNROLL
        for (uint32_t i = 0; i < 5; ++i)
            if (i < m.rank)
                need |= HB_TMAP_SET_BOX(i) | HB_TMAP_SET_GDIM(i) | HB_TMAP_SET_ESTRIDE(i) |
                        (i ? HB_TMAP_SET_GSTRIDE(i - 1) : 0u);
        if ((f->set & need) != need) return HB_TMAP_E_UNSET;
    }
    if (m.rank > HB_TMAP_MAX_RANK) return HB_TMAP_E_RANK;
    /* the element type is a PTX .elemtype code; hb_tmap.dtype is the CUtensorMapDataType */
    m.dtype = (uint32_t)((HB_TMAP_PTX_TO_CUDA_DTYPE >> (4u * (f->elemtype & 15u))) & 0xFu);
    m.elem_bytes = hb_tmap_dtype_bytes(m.dtype);
    if (!m.elem_bytes) return HB_TMAP_E_PACKED;
    m.interleave = f->interleave;
    m.l2promo = f->l2promo;
    m.fill = f->fill;
    m.im2col = f->im2col;
    /* swizzle_mode 4 (96B) is sm_100+; an atomicity other than 16B only goes with the 128B mode */
    if (m.interleave > 2u || f->swizzle_mode > 3u || (f->swizzle_atom && f->swizzle_mode != 3u) || m.l2promo > 3u ||
        m.fill > 1u || f->swizzle_atom > 3u)
        return HB_TMAP_E_ENUM;
    m.swizzle = f->swizzle_atom ? 3u + f->swizzle_atom : f->swizzle_mode;   /* back to CUtensorMapSwizzle */
    m.base = f->global_address;
HB_TMAP_UNROLL
    for (uint32_t i = 0; i < 5; ++i) {
        const bool on = i < m.rank;
        m.dim[i] = on ? f->gdim[i] : 0ull;
        m.box[i] = on ? f->box[i] : 0u;
        m.estride[i] = on ? f->estride[i] : 0u;
        m.stride[i] = !on ? 0ull : i == 0 ? (uint64_t)m.elem_bytes : f->gstride[i - 1];
    }
    /* the documented rules (hbfcommon/tensormap.py check_rules, same order) */
    const uint64_t align = m.interleave == HB_TMAP_INTERLEAVE_32B ? 32ull : 16ull;
    if (m.base % align) return HB_TMAP_E_ALIGN;
    bool misaligned = false, range = false;
HB_TMAP_UNROLL
    for (uint32_t i = 0; i < 5; ++i) {
        if (i >= m.rank) continue;
        range |= m.dim[i] < 1u || m.dim[i] > (1ull << 32) || m.box[i] < 1u || m.box[i] > 256u ||
                 m.estride[i] < 1u || m.estride[i] > 8u;
        if (i) misaligned |= (m.stride[i] % align) != 0 || m.stride[i] >= (1ull << 40);
    }
    if (range) return HB_TMAP_E_RULE;
    if (misaligned) return HB_TMAP_E_ALIGN;
    if (m.interleave != HB_TMAP_INTERLEAVE_NONE && m.rank < 3u) return HB_TMAP_E_RULE;
    if (m.interleave == HB_TMAP_INTERLEAVE_NONE && (m.box[0] * m.elem_bytes) % 16u) return HB_TMAP_E_RULE;
    /* (cuda.h's "INTERLEAVE_32B requires SWIZZLE_32B" is not enforced by the sm_90 driver: not checked) */
    if (m.swizzle > 3u) return HB_TMAP_E_RULE;      /* 128B_ATOM_*: refused by the sm_90 driver */
    if (m.interleave == HB_TMAP_INTERLEAVE_NONE && m.swizzle) {
        const uint32_t span = m.swizzle == 1u ? 32u : m.swizzle == 2u ? 64u : 128u;
        if (m.box[0] * m.elem_bytes > span) return HB_TMAP_E_RULE;
    }
    if (m.fill && !(m.dtype >= 6u && m.dtype <= 12u)) return HB_TMAP_E_RULE;
    if (hb_tmap_desc_box_bytes(m) > HB_TMAP_SMEM_BOX_MAX) return HB_TMAP_E_RULE;   /* the sm_90 driver's bound */
    /* extent = sum (dim-1)*stride + elem, and base + extent, without overflow */
    uint64_t ext = m.elem_bytes;
    bool over = false;
HB_TMAP_UNROLL
    for (uint32_t i = 0; i < 5; ++i) {
        const uint64_t d = i < m.rank ? m.dim[i] - 1ull : 0ull, s = m.stride[i];
        if (d && s && d > (~0ull - ext) / s) over = true;
        else ext += d * s;
    }
    if (over) return HB_TMAP_E_EXTENT;
    if (ext > ~0ull - m.base) return HB_TMAP_E_EXTENT;
    m.extent = ext;
    *out = m;
    return HB_TMAP_OK;
}

/* desc128: the 128 descriptor bytes, 8-byte aligned (a CUtensorMap is 64-byte aligned). The reserved bits (every
 * bit no field of the fitted layout holds), the element-type code, then the fields through hb_tmap_from_fields. The
 * derived words (BOX_BYTES, SMEM_ALIGN) are not read (functions of the other fields; what tensormap.replace leaves
 * there on the device was never observed). No observed bit marks an im2col map: im2col is 0 here, and an im2col
 * descriptor is refused only if it sets a reserved bit. */
HB_TMAP_HD int hb_tmap_decode(const void* desc128, hb_tmap* out) {
    if (!desc128 || !out) return HB_TMAP_E_NULL;
    uint64_t w[16];
    const uint64_t* src = (const uint64_t*)desc128;
HB_TMAP_UNROLL
    for (int i = 0; i < 16; ++i) w[i] = src[i];
    {
        const uint64_t resv[16] = {HB_TMAP_RESERVED_Q0, HB_TMAP_RESERVED_Q1, HB_TMAP_RESERVED_Q2, HB_TMAP_RESERVED_Q3,
                                   HB_TMAP_RESERVED_Q4, HB_TMAP_RESERVED_Q5, HB_TMAP_RESERVED_Q6, HB_TMAP_RESERVED_Q7,
                                   HB_TMAP_RESERVED_Q8, HB_TMAP_RESERVED_Q9, HB_TMAP_RESERVED_Q10, HB_TMAP_RESERVED_Q11,
                                   HB_TMAP_RESERVED_Q12, HB_TMAP_RESERVED_Q13, HB_TMAP_RESERVED_Q14,
                                   HB_TMAP_RESERVED_Q15};
        uint64_t acc = 0;
HB_TMAP_UNROLL
        for (int i = 0; i < 16; ++i) acc |= w[i] & resv[i];
        if (acc) return HB_TMAP_E_RESERVED;
    }
    hb_tmap_fields f;
    /* the element-type code: the PTX .elemtype code, except TFLOAT32 / TFLOAT32_FTZ = 7 / 8 with the TF32 flag */
    const uint32_t code = (uint32_t)hb_tmap_bits(w, HB_TMAP_DTYPE_LO, HB_TMAP_DTYPE_W);
    const uint32_t tf32 = (uint32_t)hb_tmap_bits(w, HB_TMAP_TF32_LO, HB_TMAP_TF32_W);
    if (code == 11u || code == 12u || (tf32 && code != 7u && code != 8u)) return HB_TMAP_E_DTYPE;
    f.elemtype = tf32 ? code + 4u : code;
    f.rank_m1 = (uint32_t)hb_tmap_bits(w, HB_TMAP_RANK_LO, HB_TMAP_RANK_W);
    f.interleave = (uint32_t)hb_tmap_bits(w, HB_TMAP_INTERLEAVE_LO, HB_TMAP_INTERLEAVE_W);
    f.swizzle_mode = (uint32_t)hb_tmap_bits(w, HB_TMAP_SWIZZLE_LO, HB_TMAP_SWIZZLE_W);
    f.swizzle_atom = 0u;
    f.l2promo = (uint32_t)hb_tmap_bits(w, HB_TMAP_L2PROMO_LO, HB_TMAP_L2PROMO_W);
    f.fill = (uint32_t)hb_tmap_bits(w, HB_TMAP_FILL_LO, HB_TMAP_FILL_W);
    f.im2col = 0u;
    f.global_address = hb_tmap_bits(w, HB_TMAP_ADDR_LO, HB_TMAP_ADDR_W);
    const uint32_t dlo[5] = {HB_TMAP_DIM0_LO, HB_TMAP_DIM1_LO, HB_TMAP_DIM2_LO, HB_TMAP_DIM3_LO, HB_TMAP_DIM4_LO};
    const uint32_t blo[5] = {HB_TMAP_BOX0_LO, HB_TMAP_BOX1_LO, HB_TMAP_BOX2_LO, HB_TMAP_BOX3_LO, HB_TMAP_BOX4_LO};
    const uint32_t elo[5] = {HB_TMAP_ESTRIDE0_LO, HB_TMAP_ESTRIDE1_LO, HB_TMAP_ESTRIDE2_LO, HB_TMAP_ESTRIDE3_LO,
                             HB_TMAP_ESTRIDE4_LO};
    const uint32_t slo[4] = {HB_TMAP_GSTRIDE0_LO, HB_TMAP_GSTRIDE1_LO, HB_TMAP_GSTRIDE2_LO, HB_TMAP_GSTRIDE3_LO};
HB_TMAP_UNROLL
    for (uint32_t i = 0; i < 5; ++i) {
        f.gdim[i] = hb_tmap_bits(w, dlo[i], HB_TMAP_DIM0_W) + 1ull;
        f.box[i] = (uint32_t)hb_tmap_bits(w, blo[i], HB_TMAP_BOX0_W) + 1u;
        f.estride[i] = (uint32_t)hb_tmap_bits(w, elo[i], HB_TMAP_ESTRIDE0_W) + 1u;
        if (i < 4) f.gstride[i] = hb_tmap_bits(w, slo[i], HB_TMAP_GSTRIDE0_W) << 4;
    }
    f.set = HB_TMAP_SET_ALL;
    return hb_tmap_from_fields(&f, out);
}

/* 64-bit hash of the exact 128 bytes (8-byte aligned); hbfcommon/tensormap.py desc_hash computes the same. */
HB_TMAP_HD uint64_t hb_tmap_hash(const void* desc128) {
    const uint64_t* w = (const uint64_t*)desc128;
    uint64_t h = 0xCBF29CE484222325ull;
HB_TMAP_UNROLL
    for (int i = 0; i < 16; ++i) {
        h = (h ^ w[i]) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    h ^= h >> 33; h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}

/* ---- the registry path (needs no knowledge of the layout) ---------------------------------------------------------
 * The host publishes, for every descriptor it saw encoded (the inputs of cuTensorMapEncodeTiled, or a device-side
 * tensormap.replace sequence mirrored by the rewrite), the exact 128 bytes with the map it means. The device finds a
 * descriptor by hash and then compares all 128 bytes: a hash collision is a miss, never a wrong map. This is how the
 * HBFSim paper's artifact binds descriptors (a hash of the exact bytes -> a decoded, generation-stamped record;
 * SlugLab/HBFSim include/hbfsim/tensormap.hpp, TensorMapRegistry); it needs no layout (a build with
 * HB_TMAP_LAYOUT_VERIFIED 0, or another architecture, relies on it). hbfcommon/tensormap.py pack_registry() builds
 * the table (sorted by hash). */
struct hb_tmap_entry {
    uint64_t desc[16];             /* the exact 128 descriptor bytes */
    uint64_t hash;                 /* hb_tmap_hash(desc): the sort key */
    uint64_t generation;           /* the registry publication that added it (for staleness reports) */
    hb_tmap map;                   /* what the descriptor means */
};

/* Index of the entry holding exactly these 128 bytes in table[0..n) (sorted by hash), or -1. */
HB_TMAP_HD int hb_tmap_lookup(const hb_tmap_entry* table, uint32_t n, const void* desc128, uint64_t hash) {
    const uint64_t* d = (const uint64_t*)desc128;
    uint32_t a = 0, b = n;
    while (a < b) {                               /* first entry with hash >= the key */
        const uint32_t mid = (a + b) >> 1;
        if (table[mid].hash < hash) a = mid + 1; else b = mid;
    }
    for (; a < n && table[a].hash == hash; ++a) {
        uint64_t diff = 0;
HB_TMAP_UNROLL
        for (int i = 0; i < 16; ++i) diff |= table[a].desc[i] ^ d[i];
        if (!diff) return (int)a;
    }
    return -1;
}

/* traversal step of dimension k (dimension 0 ignores its elementStride unless the map is interleaved) */
HB_TMAP_HD uint32_t hb_tmap_step(const hb_tmap& m, uint32_t k) {
    return (k == 0 && m.interleave == HB_TMAP_INTERLEAVE_NONE) ? 1u : m.estride[k];
}

/* elements the box moves along dimension k: ceil(box / step) */
HB_TMAP_HD uint32_t hb_tmap_count(const hb_tmap& m, uint32_t k) {
    const uint32_t s = hb_tmap_step(m, k);
    return (m.box[k] + s - 1u) / s;
}

/* bytes one copy of the box moves into / out of shared memory = what complete_tx counts (OOB-filled included) */
HB_TMAP_HD uint64_t hb_tmap_box_bytes(const hb_tmap& m) {
    uint64_t n = m.elem_bytes;
HB_TMAP_UNROLL
    for (uint32_t k = 0; k < 5; ++k)
        if (k < m.rank) n *= hb_tmap_count(m, k);
    return n;
}

/* Visit the in-bounds bytes of the box at coords[0..rank-1] as maximal contiguous global byte runs, in visit order
 * (dimension 0 fastest, then 1, ...; a run that starts where the previous one ends is merged into it, up to
 * HB_TMAP_RUN_MAX bytes): f(uint64_t addr, uint32_t nbytes) per run. Returns the out-of-bounds bytes of the box.
 * Iterates only over in-bounds rows (the in-bounds index range of each dimension is computed, not searched). */
template <class F>
HB_TMAP_HD uint64_t hb_tmap_box_runs(const hb_tmap& m, const int32_t* coords, F&& f) {
    const uint32_t r = m.rank;
    const uint64_t e = m.elem_bytes;
    int64_t lo[5], hi[5];             /* in-bounds steps j in [lo, hi) per dimension */
    uint64_t total = e, inb = e;
    /* every loop over dimensions runs to the constant 5 (unrolled, predicated on k < r) so that lo/hi/j and the
     * fields of m stay in registers on the device: a loop bounded by r would index them dynamically (local memory) */
HB_TMAP_UNROLL
    for (uint32_t k = 0; k < 5; ++k) {
        if (k >= r) { lo[k] = hi[k] = 0; continue; }
        const int64_t c = coords[k], s = hb_tmap_step(m, k), n = hb_tmap_count(m, k), d = (int64_t)m.dim[k];
        const int64_t jlo = c >= 0 ? 0 : (-c + s - 1) / s;
        int64_t jhi = c >= d ? 0 : (d - c + s - 1) / s;
        if (jhi > n) jhi = n;
        lo[k] = jlo;
        hi[k] = jhi > jlo ? jhi : jlo;
        total *= (uint64_t)n;
        inb *= (uint64_t)(hi[k] - lo[k]);
    }
    if (!inb) return total;
    uint64_t pa = 0, pn = 0;          /* pending run */
    const int64_t s0 = hb_tmap_step(m, 0);
    /* the row address is kept incrementally: +adv[k] when j[k] steps, -back[k] when it wraps to lo[k] */
    int64_t j[5] = {0, 0, 0, 0, 0};
    uint64_t adv[5] = {0, 0, 0, 0, 0}, back[5] = {0, 0, 0, 0, 0};
    uint64_t row = m.base + (uint64_t)(coords[0] + lo[0] * s0) * e;   /* address of the first in-bounds element */
HB_TMAP_UNROLL
    for (uint32_t k = 1; k < 5; ++k) {
        if (k >= r) continue;
        j[k] = lo[k];
        adv[k] = (uint64_t)hb_tmap_step(m, k) * m.stride[k];
        back[k] = (uint64_t)(hi[k] - 1 - lo[k]) * adv[k];
        row += (uint64_t)(coords[k] + lo[k] * (int64_t)hb_tmap_step(m, k)) * m.stride[k];
    }
    const uint64_t n0 = s0 == 1 ? 1u : (uint64_t)(hi[0] - lo[0]);
    const uint64_t run0 = s0 == 1 ? (uint64_t)(hi[0] - lo[0]) * e : e;   /* bytes per piece */
    const uint64_t step0 = (uint64_t)s0 * e;                              /* between pieces (strided dim 0) */
    for (;;) {
        uint64_t a = row;
        for (uint64_t t = 0; t < n0; ++t, a += step0) {
            if (pn && pa + pn == a && pn + run0 <= HB_TMAP_RUN_MAX) {
                pn += run0;
            } else {
                if (pn) f(pa, (uint32_t)pn);
                pa = a;
                pn = run0;
            }
        }
        bool carry = true;      /* odometer over dimensions 1..r-1 */
HB_TMAP_UNROLL
        for (uint32_t k = 1; k < 5; ++k) {
            if (carry && k < r) {
                if (++j[k] < hi[k]) { carry = false; row += adv[k]; }
                else { j[k] = lo[k]; row -= back[k]; }
            }
        }
        if (carry) break;
    }
    f(pa, (uint32_t)pn);
    return total - inb;
}

/* A copy the sm_90 TMA unit does not do as this model says (tensormap.py unmeasured(), the same rule and its
 * measurement): an interleaved map with a dimension-0 coordinate other than 0 or an elementStride[0] other than 1.
 * __hb_tma refuses it (UNSUPPORTED, recorded); hb_tmap_split and hb_tmap_box_runs are geometry and do not ask. */
HB_TMAP_HD bool hb_tmap_unmeasured(const hb_tmap& m, const int32_t* coords) {
    return m.interleave != 0u && (coords[0] != 0 || m.estride[0] != 1u);
}

/* Split the box at coords against ranges[0..n_ranges) (hbf_dev_range: sorted by base, non-overlapping, [base,end)).
 * Writes out (always, counts complete even on error) and up to max_spans spans. Returns HB_TMAP_OK,
 * HB_TMAP_E_IM2COL for an im2col map, or HB_TMAP_E_SPANS when more spans were needed than max_spans (out->nspans ==
 * max_spans then, and the spans must not be used: fail closed). Spans are in visit order; a span is extended when the
 * next piece lies in the same range and starts inside or right after its pages, so a page the traversal returns to
 * later appears again in a later span. Permissions and modes are the caller's to check (range_idx). */
HB_TMAP_HD int hb_tmap_split(const hb_tmap& m, const int32_t* coords, const hbf_dev_range* ranges,
                             uint32_t n_ranges, hb_tmap_span* spans, uint32_t max_spans, hb_tmap_split_t* out) {
    out->box_bytes = hb_tmap_box_bytes(m);
    out->hbm_bytes = out->hbf_bytes = out->oob_bytes = 0;
    out->nspans = out->nruns = 0;
    if (m.im2col) return HB_TMAP_E_IM2COL;
    bool overflow = false;
    out->oob_bytes = hb_tmap_box_runs(m, coords, [&](uint64_t addr, uint32_t nbytes) {
        out->nruns++;
        const uint64_t end = addr + nbytes;
        /* last range with base <= addr */
        uint32_t a = 0, b = n_ranges;
        while (a < b) {
            const uint32_t mid = (a + b) >> 1;
            if (ranges[mid].base <= addr) a = mid + 1; else b = mid;
        }
        uint32_t i = a ? a - 1 : 0;
        if (i < n_ranges && ranges[i].end <= addr) ++i;
        uint64_t cur = addr;
        for (; i < n_ranges && ranges[i].base < end; ++i) {
            const hbf_dev_range& rg = ranges[i];
            const uint64_t x = cur > rg.base ? cur : rg.base, y = end < rg.end ? end : rg.end;
            out->hbm_bytes += x - cur;
            out->hbf_bytes += y - x;
            const uint64_t mo = rg.media_offset + (x - rg.base);
            const uint64_t fp = mo >> rg.page_shift, lp = (mo + (y - x) - 1ull) >> rg.page_shift;
            hb_tmap_span* last = out->nspans ? &spans[out->nspans - 1] : nullptr;
            if (last && last->range_idx == i && fp >= last->first_page && fp <= last->first_page + last->npages) {
                const uint64_t np = lp - last->first_page + 1ull;
                if (np > last->npages) last->npages = (uint32_t)np;
                last->bytes += y - x;
            } else if (out->nspans < max_spans) {
                hb_tmap_span& s = spans[out->nspans++];
                s.first_page = fp;
                s.npages = (uint32_t)(lp - fp + 1ull);
                s.range_idx = i;
                s.bytes = y - x;
            } else {
                overflow = true;
            }
            cur = y;
        }
        out->hbm_bytes += end - cur;
    });
    return overflow ? HB_TMAP_E_SPANS : HB_TMAP_OK;
}

#endif /* HBF_TENSORMAP_CUH */
