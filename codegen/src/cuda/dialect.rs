//! CUDA C, as the shared printer spells it: the CUDA prelude (fixed-width types without
//! headers, exact overflow checks without compiler builtins, the error state as device
//! globals set atomically, `%globaltimer`, and one compare-and-swap helper per
//! write-conflict resolution and type), functions `__device__`, and no team: a kernel's
//! threads each run their own points, and the host orders the steps on one stream.

use std::fmt::Write as _;

use sdflow_ir::{DType, Wcr};

use crate::cfamily::cexpr::{combine, ctype};
use crate::cfamily::dialect::{Dialect, Team};
use crate::cfamily::prelude::COMMON;

/// CUDA C, compiled by NVRTC (or for the host, on the emulated device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cuda;

impl Dialect for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn prelude(&self) -> String {
        format!("{CUDA_HEAD}{COMMON}{CUDA_TAIL}{}", cuda_atomics())
    }

    fn function_qualifiers(&self, inlined: bool) -> &'static str {
        if inlined {
            "__device__ __forceinline__ "
        } else {
            "__device__ "
        }
    }

    fn atomic_combine(
        &self,
        w: Wcr,
        dt: DType,
        lv: &str,
        value: &str,
        _combined: &str,
    ) -> Vec<String> {
        // One compare-and-swap loop per resolution and type (`sdf_atomic_*`).
        vec![format!(
            "sdf_atomic_{}_{}(&{lv}, {value});",
            w.name(),
            dt.name()
        )]
    }

    fn team(&self) -> Option<&dyn Team> {
        None
    }
}

/// The CUDA dialect: fixed-width types without headers, exact overflow checks without
/// compiler builtins, and the dialect's spellings.
const CUDA_HEAD: &str = r#"#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 550
typedef signed char int8_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#ifndef NAN
#define NAN __longlong_as_double(0x7ff8000000000000ULL)
#endif
#ifndef INFINITY
#define INFINITY __longlong_as_double(0x7ff0000000000000ULL)
#endif
#define restrict __restrict__
/* How CUDA spells what the dialects spell differently (see `cfamily::prelude`). */
#define SDF_FN static __device__ inline
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SDF_COLD static __device__ __noinline__
#else
#define SDF_COLD static __device__ __attribute__((noinline, cold))
#endif
#define SDF_STATE __device__
#define SDF_SET_FLAG() atomicExch(&sdf_error_flag, 1)
#define SDF_CLAIM() (atomicCAS((unsigned long long*)&sdf_err.failed, 0ULL, 1ULL) == 0ULL)
#define SDF_ERR_PTR() (&sdf_err)
#define SDF_ADD_OVF(a, b, r) sdf_ovf_add(a, b, r)
#define SDF_SUB_OVF(a, b, r) sdf_ovf_sub(a, b, r)
#define SDF_MUL_OVF(a, b, r) sdf_ovf_mul(a, b, r)
SDF_FN void* sdf_calloc(size_t n, size_t s) {
    void* p = malloc(n * s); if (p) memset(p, 0, n * s); return p; }
#define calloc(n, s) sdf_calloc((n), (s))
/* Signed overflow checks, exact, without compiler builtins. */
SDF_FN bool sdf_ovf_add(int64_t a, int64_t b, int64_t* r) {
    uint64_t u = (uint64_t)a + (uint64_t)b; *r = (int64_t)u;
    return ((a ^ *r) & (b ^ *r)) < 0; }
SDF_FN bool sdf_ovf_sub(int64_t a, int64_t b, int64_t* r) {
    uint64_t u = (uint64_t)a - (uint64_t)b; *r = (int64_t)u;
    return ((a ^ b) & (a ^ *r)) < 0; }
SDF_FN bool sdf_ovf_mul(int64_t a, int64_t b, int64_t* r) {
    *r = (int64_t)((uint64_t)a * (uint64_t)b);
    if (a == 0 || b == 0) return false;
    if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN)) return true;
    return (*r / b) != a; }
"#;

/// CUDA's clock: the device's `%globaltimer` (the host's on the emulated device).
const CUDA_TAIL: &str = r#"/* A clock in nanoseconds: differences time a region. */
SDF_FN int64_t sdf_wall_ns(void) {
#ifdef SDFLOW_EMULATED
    return sdf_emu_wall_ns(); }
#else
    uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return (int64_t)t; }
#endif
"#;

/// `sdf_atomic_<wcr>_<type>(p, n)`: `*p = combine(*p, n)` atomically, by compare-and-swap
/// of the element's bits (of its 32-bit word for `bool`), with exactly the combination
/// the sequential code uses.
fn cuda_atomics() -> String {
    let mut out = String::from("/* Write-conflict resolutions in parallel maps. */\n");
    for w in [Wcr::Sum, Wcr::Prod, Wcr::Min, Wcr::Max] {
        for t in [DType::F64, DType::F32, DType::I64, DType::I32, DType::Bool] {
            let f = format!("sdf_atomic_{}_{}", w.name(), t.name());
            let c = combine(w, "o", "n", t);
            let ct = ctype(t);
            let _ = match t {
                DType::F64 | DType::I64 => {
                    let (from, to) = if t == DType::F64 {
                        (
                            "__longlong_as_double((long long)assumed)",
                            "(unsigned long long)__double_as_longlong(r)",
                        )
                    } else {
                        ("(int64_t)assumed", "(unsigned long long)r")
                    };
                    writeln!(
                        out,
                        "static __device__ inline void {f}({ct}* p, {ct} n) {{\n    unsigned long long* a = (unsigned long long*)p; unsigned long long old = *a, assumed;\n    do {{ assumed = old; const {ct} o = {from}; const {ct} r = {c}; old = atomicCAS(a, assumed, {to}); }} while (assumed != old); }}"
                    )
                }
                DType::F32 | DType::I32 => {
                    let (from, to) = if t == DType::F32 {
                        (
                            "__int_as_float((int)assumed)",
                            "(unsigned int)__float_as_int(r)",
                        )
                    } else {
                        ("(int32_t)assumed", "(unsigned int)r")
                    };
                    writeln!(
                        out,
                        "static __device__ inline void {f}({ct}* p, {ct} n) {{\n    unsigned int* a = (unsigned int*)p; unsigned int old = *a, assumed;\n    do {{ assumed = old; const {ct} o = {from}; const {ct} r = {c}; old = atomicCAS(a, assumed, {to}); }} while (assumed != old); }}"
                    )
                }
                DType::Bool => writeln!(
                    out,
                    "static __device__ inline void {f}(bool* p, bool n) {{\n    unsigned int* a = (unsigned int*)((size_t)p & ~(size_t)3); const unsigned int sh = (unsigned int)(((size_t)p & 3) * 8);\n    unsigned int old = *a, assumed;\n    do {{ assumed = old; const bool o = ((assumed >> sh) & 0xffu) != 0; const bool r = {c};\n         old = atomicCAS(a, assumed, (assumed & ~(0xffu << sh)) | ((unsigned int)r << sh)); }} while (assumed != old); }}"
                ),
            };
        }
    }
    out
}
