//! The helpers every generated translation unit starts with (wrapping and floored
//! integer arithmetic, checked symbolic arithmetic, saturating conversions, float
//! modulo, IEEE min/max, the error flag and record): the text both dialects of the C
//! family share.
//!
//! What the dialects spell differently is named by a few macros each dialect's head
//! defines first (`cpu::dialect`, `cuda::dialect`) — `SDF_FN` (a helper function),
//! `SDF_COLD` (one kept out of line, for a failure path),
//! `SDF_STATE` (the error state: thread-local in C, a device global in CUDA),
//! `SDF_SET_FLAG` and `SDF_CLAIM` (setting the flag, claiming the record: atomically on a
//! device), `SDF_ERR_PTR`, and `SDF_ADD_OVF`/`SDF_SUB_OVF`/`SDF_MUL_OVF` (overflow checks:
//! compiler builtins in C, exact helpers on a device) — so that no dialect rewrites the
//! other's text. Each dialect then adds its clock and, for CUDA, the atomic
//! write-conflict resolutions ([`super::dialect::Dialect::prelude`]). Integer division by
//! zero yields 0 and raises the error flag, which `run` returns as status 2.

/// What both dialects share, in the spellings their heads define.
pub const COMMON: &str = r#"/* Raised by integer division by zero: per thread in C, so concurrent calls of the same
   library never see each other's errors (`run` gathers it from its threads); one per
   module on a CUDA device, set atomically. */
SDF_STATE int sdf_error_flag = 0;
SDF_FN void sdf_fail(void) { SDF_SET_FLAG(); }
/* The first checked failure (of the calling thread, in C): its site, two values and the map
   parameters the checked loops recorded (`sdf_pv`); `run` keeps the program's first
   and `sdflow_error` hands it to the caller, who turns it into the message. */
#define SDF_MAXP 16
typedef struct { int64_t failed, site, v0, v1, p[SDF_MAXP]; } sdf_err_t;
SDF_STATE sdf_err_t sdf_err;
SDF_STATE int64_t sdf_pv[SDF_MAXP];
SDF_FN int sdf_raise(int64_t site, int64_t v0, int64_t v1) {
    if (!SDF_CLAIM()) return 0;
    sdf_err.site = site; sdf_err.v0 = v0; sdf_err.v1 = v1;
    memcpy(sdf_err.p, sdf_pv, sizeof sdf_pv); return 1; }
/* A failure in loops that record no map parameters as they run: the parameters of the
   enclosing maps (`n` of them, at most four, from position `first`) come with it. */
SDF_FN void sdf_raise_at(int64_t site, int64_t v0, int64_t v1, int64_t first, int64_t n,
                                int64_t p0, int64_t p1, int64_t p2, int64_t p3) {
    if (!sdf_raise(site, v0, v1)) return;
    const int64_t p[4] = {p0, p1, p2, p3};
    for (int64_t k = 0; k < n && k < 4 && first + k < SDF_MAXP; k++) sdf_err.p[first + k] = p[k]; }
SDF_FN int sdf_err_before(const sdf_err_t* a, const sdf_err_t* b) {
    if (a->site != b->site) return a->site < b->site;
    for (int k = 0; k < SDF_MAXP; k++) if (a->p[k] != b->p[k]) return a->p[k] < b->p[k];
    return 0; }
/* An index checked against its extent: a bad one raises and reads index 0. */
SDF_FN int64_t sdf_ck(int64_t i, int64_t n, int64_t site) {
    if (i >= 0 && i < n) return i;
    sdf_raise(site, i, n); return 0; }
/* The indices s, s+st, ... below e against extent n, as the interpreter checks a range:
   a step that is not positive, else the first index outside [0, n), raises. */
SDF_FN void sdf_pts(int64_t s, int64_t e, int64_t st, int64_t n, int64_t site, int64_t step_site) {
    if (st <= 0) { sdf_raise(step_site, st, 0); return; }
    if (s >= e) return;
    if (s < 0 || s >= n) { sdf_raise(site, s, n); return; }
    __int128 i = (__int128)s + (((__int128)n - s + st - 1) / st) * st;
    if (i < e) sdf_raise(site, (int64_t)i, n); }
/* The next value of a map parameter; past the largest integer, the end. */
SDF_FN int64_t sdf_next(int64_t i, int64_t st, int64_t e) {
    return (i > INT64_MAX - st) ? e : i + st; }
/* Symbolic arithmetic with the interpreter's errors: `sdf_s*` raise a site, `sdf_q*`
   set the caller's flag (a condition that cannot be evaluated does not hold). */
#define SDF_SYM_OPS(P, FAIL, ARG, ...)                                                    \
SDF_FN int64_t sdf_##P##add(int64_t a, int64_t b, ARG) {                                  \
    int64_t r; if (SDF_ADD_OVF(a, b, &r)) { FAIL; return 0; } return r; }                 \
SDF_FN int64_t sdf_##P##sub(int64_t a, int64_t b, ARG) {                                  \
    int64_t r; if (SDF_SUB_OVF(a, b, &r)) { FAIL; return 0; } return r; }                 \
SDF_FN int64_t sdf_##P##mul(int64_t a, int64_t b, ARG) {                                  \
    int64_t r; if (SDF_MUL_OVF(a, b, &r)) { FAIL; return 0; } return r; }                 \
SDF_FN int64_t sdf_##P##neg(int64_t a, ARG) {                                             \
    if (a == INT64_MIN) { FAIL; return 0; } return -a; }
SDF_SYM_OPS(s, sdf_raise(site, 0, 0), int64_t site)
SDF_SYM_OPS(q, *q = 1, int* q)
SDF_FN int64_t sdf_sfloordiv(int64_t a, int64_t b, int64_t site, int64_t dsite) {
    if (b == 0) { sdf_raise(dsite, 0, 0); return 0; }
    if (a == INT64_MIN && b == -1) { sdf_raise(site, 0, 0); return 0; }
    int64_t q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
SDF_FN int64_t sdf_smod(int64_t a, int64_t b, int64_t site, int64_t dsite) {
    (void)site;
    if (b == 0) { sdf_raise(dsite, 0, 0); return 0; }
    if (b == -1) return 0;
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
SDF_FN int64_t sdf_qfloordiv(int64_t a, int64_t b, int* q) {
    if (b == 0 || (a == INT64_MIN && b == -1)) { *q = 1; return 0; }
    int64_t d = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? d - 1 : d; }
SDF_FN int64_t sdf_qmod(int64_t a, int64_t b, int* q) {
    if (b == 0) { *q = 1; return 0; }
    if (b == -1) return 0;
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
/* An index-table value plus its offset; overflow raises. */
SDF_FN int64_t sdf_tadd(int64_t v, int64_t o, int64_t site) {
    int64_t r; if (SDF_ADD_OVF(v, o, &r)) { sdf_raise(site, v, o); return 0; } return r; }
#define SDF_AT_PARAMS int64_t first, int64_t n, int64_t p0, int64_t p1, int64_t p2, int64_t p3
#define SDF_RAISE_AT(site, v0, v1) sdf_raise_at(site, v0, v1, first, n, p0, p1, p2, p3)
#define SDF_INT_OPS(W, T, UT, MIN)                                                        \
SDF_FN T sdf_add##W(T a, T b) { return (T)((UT)a + (UT)b); }                              \
SDF_FN T sdf_sub##W(T a, T b) { return (T)((UT)a - (UT)b); }                              \
SDF_FN T sdf_mul##W(T a, T b) { return (T)((UT)a * (UT)b); }                              \
SDF_FN T sdf_neg##W(T a) { return (T)((UT)0 - (UT)a); }                                   \
SDF_FN T sdf_div##W(T a, T b) {                                                           \
    if (b == 0) { sdf_fail(); return 0; }                                                 \
    if (a == MIN && b == -1) return MIN;                                                  \
    return a / b; }                                                                       \
SDF_FN T sdf_mod##W(T a, T b) {                                                           \
    if (b == 0) { sdf_fail(); return 0; }                                                 \
    if (b == -1) return 0;                                                                \
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; }              \
SDF_FN T sdf_floordiv##W(T a, T b) {                                                      \
    if (b == 0) { sdf_fail(); return 0; }                                                 \
    if (a == MIN && b == -1) return MIN;                                                  \
    T q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; }        \
SDF_FN T sdf_div##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {                           \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_div##W(a, b); }        \
SDF_FN T sdf_mod##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {                           \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_mod##W(a, b); }        \
SDF_FN T sdf_floordiv##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {                      \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_floordiv##W(a, b); }   \
SDF_FN T sdf_abs##W(T a) { return a < 0 ? sdf_neg##W(a) : a; }                            \
SDF_FN T sdf_min##W(T a, T b) { return a < b ? a : b; }                                   \
SDF_FN T sdf_max##W(T a, T b) { return a > b ? a : b; }
SDF_INT_OPS(32, int32_t, uint32_t, INT32_MIN)
SDF_INT_OPS(64, int64_t, uint64_t, INT64_MIN)
/* A value read from an index table, checked against the extent it indexes. */
SDF_FN int64_t sdf_ind(int64_t v, int64_t n) {
    if (v < 0 || v >= n) { sdf_fail(); return 0; }
    return v; }
/* The same, raising at an error site (the index, the extent). */
SDF_FN int64_t sdf_inds(int64_t v, int64_t ext, int64_t site, SDF_AT_PARAMS) {
    if (v < 0 || v >= ext) { SDF_RAISE_AT(site, v, ext); return 0; }
    return v; }
/* The raise of a bad table value after which the function ends at once, out of line. */
SDF_COLD void sdf_raise_exit(int64_t site, int64_t v, int64_t ext, SDF_AT_PARAMS) {
    SDF_RAISE_AT(site, v, ext); }
SDF_FN int32_t sdf_f2i32(double x) {
    if (x != x) return 0;
    if (x <= -2147483648.0) return INT32_MIN;
    if (x >= 2147483647.0) return INT32_MAX;
    return (int32_t)x; }
SDF_FN int64_t sdf_f2i64(double x) {
    if (x != x) return 0;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)x; }
SDF_FN double sdf_fmod_double(double a, double b) { return a - floor(a / b) * b; }
/* Float min and max: a NaN operand yields the other, -0.0 is below +0.0 (IEEE 754-2019
   minimumNumber / maximumNumber, as the interpreter). Selects, so that loops over them
   vectorize (x86: a compare and a blend, `minpd`, a compare and a masked AND per
   vector): a NaN `b` is replaced by `a` first; `a < c ? a : c` is then one instruction
   (`minsd`), which yields `c` for a NaN `a`; where the result compares equal to `a` it
   can differ from `a` only as +0.0 and -0.0 do, and the bitwise OR of the two (min:
   -0.0 if either is) or AND (max: +0.0 if either is) is the result. Two NaNs yield `a`. */
#define SDF_FMINMAX(NAME, T, U, CMP, BITOP)                                               \
SDF_FN T NAME(T a, T b) {                                                                 \
    T c = b != b ? a : b; T r = a CMP c ? a : c;                                          \
    U x, y; memcpy(&x, &a, sizeof x); memcpy(&y, &r, sizeof y); x = x BITOP y;            \
    T z; memcpy(&z, &x, sizeof z);                                                        \
    return a == r ? z : r; }
SDF_FMINMAX(sdf_fmin, double, uint64_t, <, |)
SDF_FMINMAX(sdf_fmax, double, uint64_t, >, &)
SDF_FMINMAX(sdf_fminf, float, uint32_t, <, |)
SDF_FMINMAX(sdf_fmaxf, float, uint32_t, >, &)
/* fma whose result the compiler cannot see into: GCC turns -(fma(a, b, c)) into one
   fused negate-multiply-subtract, -(a*b) - c, which is +0.0 where the negated +0.0 sum
   is -0.0. An empty asm that may change the value stops that; the fma itself stays
   one instruction. */
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && (defined(__x86_64__) || defined(__i386__))
#define SDF_OPAQUE(v) __asm__("" : "+x"(v))
#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && defined(__aarch64__)
#define SDF_OPAQUE(v) __asm__("" : "+w"(v))
#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define SDF_OPAQUE(v) __asm__("" : "+m"(v))
#else
#define SDF_OPAQUE(v) ((void)0)
#endif
SDF_FN double sdf_fma(double a, double b, double c) {
    double r = fma(a, b, c); SDF_OPAQUE(r); return r; }
SDF_FN float sdf_fmaf(float a, float b, float c) {
    float r = fmaf(a, b, c); SDF_OPAQUE(r); return r; }
/* Float comparisons, as functions: GCC 12's front end folds `(a && x < y) || x >= y`
   into `a || x >= y`, as if `x >= y` were `!(x < y)`, which a NaN makes false. Inlined,
   they are the plain comparisons. */
#define SDF_FCMP(T)                                                                       \
SDF_FN bool sdf_lt_##T(T a, T b) { return a < b; }                                        \
SDF_FN bool sdf_le_##T(T a, T b) { return a <= b; }                                       \
SDF_FN bool sdf_gt_##T(T a, T b) { return a > b; }                                        \
SDF_FN bool sdf_ge_##T(T a, T b) { return a >= b; }                                       \
SDF_FN bool sdf_eq_##T(T a, T b) { return a == b; }                                       \
SDF_FN bool sdf_ne_##T(T a, T b) { return a != b; }
SDF_FCMP(double)
SDF_FCMP(float)
/* The cube root, by exactly the interpreter's operations (`interp::value::cbrt`). */
SDF_FN double sdf_cbrt(double x) {
    if (x == 0.0 || !isfinite(x)) return x;
    double a = fabs(x), scale = 1.0;
    if (a < 2.2250738585072014e-308) { a *= 18014398509481984.0; scale = 1.0 / 262144.0; }
    uint64_t b; memcpy(&b, &a, sizeof b); b = b / 3 + 0x2AA0000000000000ULL;
    double t; memcpy(&t, &b, sizeof t);
    for (int k = 0; k < 6; k++) t += (a / (t * t) - t) / 3.0;
    double r = t * scale;
    return x < 0.0 ? -r : r; }
SDF_FN float sdf_cbrtf(float x) { return (float)sdf_cbrt((double)x); }
/* A NaN made the canonical quiet NaN: what outputs, resolutions and reductions store. */
SDF_FN double sdf_canon(double x) { return x != x ? (double)NAN : x; }
SDF_FN float sdf_canonf(float x) { return x != x ? (float)NAN : x; }
/* The same in a loop that stays scalar: GCC compiles the conditional to a branch per
   value there, a compare and a blend cost two instructions and no branch. */
#if defined(__AVX__) && defined(__GNUC__) && defined(__x86_64__)
SDF_FN double sdf_canon_blend(double x) {
    double m, r; const double n = (double)NAN;
    __asm__("vcmpunordsd %2, %2, %1\n\tvblendvpd %1, %3, %2, %0" : "=x"(r), "=&x"(m) : "x"(x), "x"(n));
    return r; }
SDF_FN float sdf_canonf_blend(float x) {
    float m, r; const float n = (float)NAN;
    __asm__("vcmpunordss %2, %2, %1\n\tvblendvps %1, %3, %2, %0" : "=x"(r), "=&x"(m) : "x"(x), "x"(n));
    return r; }
#else
SDF_FN double sdf_canon_blend(double x) { return sdf_canon(x); }
SDF_FN float sdf_canonf_blend(float x) { return sdf_canonf(x); }
#endif
SDF_FN float sdf_fmod_float(float a, float b) { return a - floorf(a / b) * b; }
"#;
