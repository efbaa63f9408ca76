//! C with OpenMP, as the shared printer spells it: the C prelude (standard headers,
//! compiler builtins for overflow, thread-local error state, C11's clock), functions
//! `static inline`, write-conflict resolutions in parallel maps as `omp atomic` or an
//! `omp critical` section, and the team of the program's one parallel region — every
//! thread walks the control flow; `omp for`, `single`, `barrier` share the steps.

use sdflow_ir::{DType, Wcr};

use crate::cfamily::dialect::{Dialect, Team};
use crate::cfamily::prelude::COMMON;

/// C11 with OpenMP, compiled by the host's C compiler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenMp;

impl Dialect for OpenMp {
    fn name(&self) -> &'static str {
        "c"
    }

    fn prelude(&self) -> String {
        format!("{C_HEAD}{COMMON}{C_TAIL}")
    }

    fn function_qualifiers(&self, inlined: bool) -> &'static str {
        if inlined {
            "inline __attribute__((always_inline)) "
        } else {
            ""
        }
    }

    fn atomic_combine(
        &self,
        w: Wcr,
        dt: DType,
        lv: &str,
        value: &str,
        combined: &str,
    ) -> Vec<String> {
        match (w, dt) {
            (Wcr::Sum, t) if t.is_float() => vec![
                "#pragma omp atomic update".to_string(),
                format!("{lv} += {value};"),
            ],
            _ => vec![
                self.critical("sdf_wcr"),
                format!("{{ {lv} = {combined}; }}"),
            ],
        }
    }

    fn team(&self) -> Option<&dyn Team> {
        Some(self)
    }
}

impl Team for OpenMp {
    fn share_loops(&self, collapse: usize, schedule: &str) -> String {
        if collapse > 1 {
            format!("#pragma omp for collapse({collapse}) schedule({schedule}) nowait")
        } else {
            format!("#pragma omp for schedule({schedule}) nowait")
        }
    }

    fn single(&self) -> &'static str {
        "#pragma omp single nowait"
    }

    fn master(&self) -> &'static str {
        "#pragma omp master"
    }

    fn barrier(&self) -> &'static str {
        "#pragma omp barrier"
    }

    fn atomic_write(&self) -> &'static str {
        "#pragma omp atomic write"
    }

    fn atomic_read(&self) -> &'static str {
        "#pragma omp atomic read"
    }

    fn critical(&self, name: &str) -> String {
        format!("#pragma omp critical({name})")
    }

    fn simd(&self, lanes: u32) -> String {
        format!("#pragma omp simd simdlen({lanes})")
    }

    fn simd_loop(&self) -> String {
        // GCC's own mark: with `omp simd` GCC 12 leaves the loops of GT4Py's neighbour
        // sums (scalars copied into scalars) scalar, with `ivdep` it vectorizes them.
        // Other compilers ignore it.
        "#pragma GCC ivdep".into()
    }
}

/// The C dialect: the standard headers, and the dialect's spellings.
const C_HEAD: &str = r#"#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE
#endif
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#endif
/* How C spells what the dialects spell differently (see `cfamily::prelude`). */
#define SDF_FN static inline
#define SDF_COLD static __attribute__((noinline, cold))
#define SDF_STATE static _Thread_local
#define SDF_SET_FLAG() (sdf_error_flag = 1)
#define SDF_CLAIM() (sdf_err.failed ? 0 : (sdf_err.failed = 1))
/* The calling thread's record, addressed once per function: thread-local storage in a
   shared library costs a call per access, and the compiler would recompute the address
   at every use; the empty asm makes the pointer a value it keeps. */
#define SDF_ERR_PTR() __extension__({ sdf_err_t* sdf_p_ = &sdf_err; __asm__("" : "+r"(sdf_p_)); sdf_p_; })
#define SDF_ADD_OVF(a, b, r) __builtin_add_overflow(a, b, r)
#define SDF_SUB_OVF(a, b, r) __builtin_sub_overflow(a, b, r)
#define SDF_MUL_OVF(a, b, r) __builtin_mul_overflow(a, b, r)

"#;

/// C's clock.
const C_TAIL: &str = r#"/* A program-owned array of n elements of s bytes, zeroed; *mapped is 0, or the length
   of the mapping `sdf_array_free` unmaps. From 2 MiB on it is a mapping of its own,
   aligned to the huge page size and marked for huge pages (as NumPy marks its arrays): a
   map that gathers through a grid-sized transient then misses the TLB less. Its pages
   are first touched by the threads that write them, not here. */
SDF_FN void* sdf_array_alloc(int64_t n, size_t s, size_t* mapped) {
    size_t k = (size_t)(n > 0 ? n : 1);
    *mapped = 0;
    if (k > SIZE_MAX / s) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t h = (size_t)2 << 20;
    if (k * s >= h && k * s <= SIZE_MAX / 2) {
        size_t r = (k * s + h - 1) / h * h;
        char* p = (char*)mmap(NULL, r + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == (char*)MAP_FAILED) return NULL;
        char* a = (char*)(((uintptr_t)p + h - 1) & ~(uintptr_t)(h - 1));
        if (a > p) munmap(p, (size_t)(a - p));
        if (p + r + h > a + r) munmap(a + r, (size_t)(p + r + h - (a + r)));
        (void)madvise(a, r, MADV_HUGEPAGE);
        *mapped = r;
        return a;
    }
#endif
    return calloc(k, s);
}

SDF_FN void sdf_array_free(void* p, size_t mapped) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (mapped) { munmap(p, mapped); return; }
#endif
    (void)mapped;
    free(p);
}
/* A clock in nanoseconds (C11 `timespec_get`): differences time a region. */
SDF_FN int64_t sdf_wall_ns(void) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec; }
"#;
