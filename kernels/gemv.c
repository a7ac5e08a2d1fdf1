/* Row-streaming projections for few rows: y[r, o] = x[r, :] . w[o, :] (* s[o]) (+ b[o]).
 *
 * Decoding one token reads every weight once and does two flops per weight, so it is bound
 * by memory bandwidth. Library GEMMs are tuned for many rows: they repack or tile the weight
 * and reach a fraction of the read bandwidth for one row. Here each output's weight row
 * [in] is read once, front to back, and multiplied into every input row while it sits in
 * registers (up to ROW_BLOCK input rows per pass); the threads split the outputs.
 *
 * Two weight formats: float32, and int8 with one float32 scale per output (weight-only
 * quantisation: a quarter of the bytes, each int8 widened to float32 in registers).
 *
 * Each output's sum is accumulated in the same order whatever the row count (a row's
 * arithmetic never depends on its neighbours), so a row's result does not depend on how many
 * rows share the call: a K+1-token verify gives bitwise the logits a one-token step would.
 *
 * Written with GCC/Clang vector extensions, not intrinsics: compiled on the machine that runs
 * it (gemv.py: -O3 -march=native -fopenmp), a 16-float vector becomes one AVX-512 register,
 * two AVX2 registers or four SSE ones. Loaded after torch, so its OpenMP regions use torch's
 * own thread pool (the same libgomp).
 */
#include <stdint.h>
#include <string.h>

#define LANES 16
#define ROW_BLOCK 4 /* input rows sharing one pass over a weight row: 8 accumulators live */

typedef float f32v __attribute__((vector_size(LANES * sizeof(float))));
typedef int8_t i8v __attribute__((vector_size(LANES)));

static inline f32v load_f32(const float *p) {
  f32v v;
  memcpy(&v, p, sizeof v); /* an unaligned vector load */
  return v;
}

static inline f32v load_i8(const int8_t *p) {
  i8v v;
  memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, f32v); /* exact: every int8 is a float32 */
}

static inline float lane_sum(f32v v) {
  float s = 0.f;
  for (int l = 0; l < LANES; l++) s += v[l]; /* fixed order */
  return s;
}

/* One weight row against `nr` input rows (nr a compile-time constant at each call site, so
 * the accumulators stay in registers). Two accumulators per row hide the add latency. */
#define DEFINE_ROW_PASS(NAME, WTYPE, LOAD_W)                                                         \
  static inline __attribute__((always_inline)) void NAME(const float *restrict x, const WTYPE *restrict wo, \
                                                         int64_t in, int nr, float *restrict sums) {  \
    f32v acc0[ROW_BLOCK], acc1[ROW_BLOCK];                                                         \
    for (int r = 0; r < nr; r++) acc0[r] = acc1[r] = (f32v){0};                                    \
    int64_t i = 0;                                                                                 \
    for (; i + 2 * LANES <= in; i += 2 * LANES) {                                                  \
      const f32v w0 = LOAD_W(wo + i), w1 = LOAD_W(wo + i + LANES);                                 \
      for (int r = 0; r < nr; r++) {                                                               \
        acc0[r] += load_f32(x + r * in + i) * w0;                                                  \
        acc1[r] += load_f32(x + r * in + i + LANES) * w1;                                          \
      }                                                                                            \
    }                                                                                              \
    if (i + LANES <= in) {                                                                         \
      const f32v w0 = LOAD_W(wo + i);                                                              \
      for (int r = 0; r < nr; r++) acc0[r] += load_f32(x + r * in + i) * w0;                       \
      i += LANES;                                                                                  \
    }                                                                                              \
    for (int r = 0; r < nr; r++) {                                                                 \
      float s = lane_sum(acc0[r] + acc1[r]);                                                       \
      for (int64_t j = i; j < in; j++) s += x[r * in + j] * (float)wo[j];                          \
      sums[r] = s;                                                                                 \
    }                                                                                              \
  }

DEFINE_ROW_PASS(pass_f32, float, load_f32)
DEFINE_ROW_PASS(pass_i8, int8_t, load_i8)

/* Every input row against one weight row, ROW_BLOCK rows per pass:
 * y[r * out] = sums[r] * scale + bias for each row r (y points at this output's column). */
#define DEFINE_ALL_ROWS(NAME, PASS, WTYPE)                                                          \
  static inline void NAME(const float *restrict x, const WTYPE *restrict wo, int64_t rows, int64_t in, \
                          float *restrict y, int64_t out, float scale, float bias) {               \
    float sums[ROW_BLOCK];                                                                         \
    for (int64_t r = 0; r < rows; r += ROW_BLOCK) {                                                \
      const int64_t nr = rows - r < ROW_BLOCK ? rows - r : ROW_BLOCK;                              \
      switch (nr) {                                                                                \
        case 4: PASS(x + r * in, wo, in, 4, sums); break;                                          \
        case 3: PASS(x + r * in, wo, in, 3, sums); break;                                          \
        case 2: PASS(x + r * in, wo, in, 2, sums); break;                                          \
        default: PASS(x + r * in, wo, in, 1, sums); break;                                         \
      }                                                                                            \
      for (int64_t j = 0; j < nr; j++) y[(r + j) * out] = sums[j] * scale + bias;                  \
    }                                                                                              \
  }

DEFINE_ALL_ROWS(all_rows_f32, pass_f32, float)
DEFINE_ALL_ROWS(all_rows_i8, pass_i8, int8_t)

/* x [rows, in], w [out, in], b [out] or NULL, y [rows, out]; all contiguous. */
void ssdbench_gemv_f32(const float *restrict x, const float *restrict w, const float *restrict b,
                       float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) all_rows_f32(x, w + o * in, rows, in, y + o, out, 1.f, b ? b[o] : 0.f);
}

/* As above with w int8 [out, in] and its scales [out]: y = (x . w[o]) * scales[o] + b[o]. */
void ssdbench_gemv_i8(const float *restrict x, const int8_t *restrict w, const float *restrict scales,
                      const float *restrict b, float *restrict y, int64_t rows, int64_t in, int64_t out,
                      int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) all_rows_i8(x, w + o * in, rows, in, y + o, out, scales[o], b ? b[o] : 0.f);
}
