/* Row-streaming projections for few rows: y[r, o] = x[r, :] . w[o, :] (* s[o]) (+ b[o]).
 *
 * Decoding one token reads every weight once and does two flops per weight, so it is bound
 * by memory bandwidth. Library GEMMs are tuned for many rows: they repack or tile the weight
 * and reach a fraction of the read bandwidth for one row. Here each output's weight row
 * [in] is read once, front to back; the threads split the outputs.
 *
 * Two weight formats:
 * - float32: each weight vector loaded once for up to ROW_BLOCK input rows (a verify's rows share
 *   the loads; the weight row stays in L1 cache for the next ROW_BLOCK);
 * - int8 with one float32 scale per output (weight-only quantisation, a quarter of the
 *   bytes): each block of LANES int8 is widened to float32 in registers once and multiplied
 *   into up to ROW_BLOCK input rows.
 *
 * Each output's sum is accumulated in the same order whatever the row count (a row's
 * arithmetic never depends on its neighbours), so a row's result does not depend on how many
 * rows share the call: a K+1-token verify gives bitwise the logits a one-token step would.
 *
 * Compiled on the machine that runs it (gemv.py: -O3 -march=native -fopenmp): the vector code
 * is GCC/Clang vector extensions one register wide (LANES floats: 16 with AVX-512, 8 with
 * AVX2, 4 otherwise); only the int8 widening names AVX-512/AVX2/SSE4.1 instructions, behind the
 * compiler's own feature macros, with a plain loop elsewhere. Loaded after torch, so its
 * OpenMP regions use torch's own thread pool (the same libgomp).
 */
#include <stdint.h>
#include <string.h>

#include "gemv.h"
#if defined(__SSE4_1__)
#include <immintrin.h>
#endif

/* One vector register of floats: 16 with AVX-512, 8 with AVX2, 4 otherwise. Vectors wider than
 * the registers are split by the compiler, but it spills the accumulators that do not fit
 * (measured: 34 ms against 6 ms for SmolLM2's int8 projections on AVX2), so the width follows
 * the instruction set. */
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX2__)
#define LANES 8
#else
#define LANES 4
#endif
#define ROW_BLOCK 4 /* input rows sharing one weight block: 8 accumulators, AVX2 fits them */

typedef float f32v __attribute__((vector_size(LANES * sizeof(float))));

static inline f32v load_f32(const float *p) {
  f32v v;
  memcpy(&v, p, sizeof v); /* an unaligned vector load */
  return v;
}

/* LANES int8 widened to floats (exact: every int8 is a float32). GCC turns neither a vector
 * conversion nor a loop into the sign-extend-and-convert instructions, so where the compiler
 * targets AVX-512, AVX2 or SSE4.1 those are named; elsewhere the plain loop is correct, only
 * slower (4x the SSE4.1 path's time on SmolLM2's projections; the probe then keeps torch's kernel). */
static inline f32v load_i8(const int8_t *p) {
#if defined(__AVX512F__)
  return (f32v)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
#elif defined(__AVX2__)
  return (f32v)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
#elif defined(__SSE4_1__)
  int32_t four;
  memcpy(&four, p, sizeof four);
  return (f32v)_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four)));
#else
  float f[LANES];
  for (int l = 0; l < LANES; l++) f[l] = (float)p[l];
  return load_f32(f);
#endif
}

/* The lanes' sum in a fixed order, halving: lane l += lane l + w for w = LANES/2, ..., 1. */
static inline float lane_sum(f32v v) {
  float s[LANES];
  memcpy(s, &v, sizeof s);
  for (int w = LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) s[l] += s[l + w];
  return s[0];
}

/* One float32 weight row against `nr` input rows (a compile-time constant at each call site): each
 * weight vector is loaded once for all of them, so a K+1-token verify does not load every weight
 * K+1 times. Two accumulators per row hide the add latency; a row's arithmetic is the same whatever nr. */
static inline __attribute__((always_inline)) void pass_f32(const float *restrict x, const float *restrict wo,
                                                           int64_t in, int nr, float *restrict sums) {
  f32v acc0[ROW_BLOCK], acc1[ROW_BLOCK];
  for (int r = 0; r < nr; r++) acc0[r] = acc1[r] = (f32v){0};
  int64_t i = 0;
  for (; i + 2 * LANES <= in; i += 2 * LANES) {
    const f32v w0 = load_f32(wo + i), w1 = load_f32(wo + i + LANES);
    for (int r = 0; r < nr; r++) {
      acc0[r] += load_f32(x + r * in + i) * w0;
      acc1[r] += load_f32(x + r * in + i + LANES) * w1;
    }
  }
  if (i + LANES <= in) {
    const f32v w0 = load_f32(wo + i);
    for (int r = 0; r < nr; r++) acc0[r] += load_f32(x + r * in + i) * w0;
    i += LANES;
  }
  for (int r = 0; r < nr; r++) {
    float s = lane_sum(acc0[r] + acc1[r]);
    for (int64_t j = i; j < in; j++) s += x[r * in + j] * wo[j];
    sums[r] = s;
  }
}

/* One int8 weight row against `nr` input rows (a compile-time constant at each call site, so
 * the accumulators stay in registers): each int8 block is widened once for all of them. Two
 * accumulators per row hide the add latency; a row's arithmetic is the same whatever nr. */
static inline __attribute__((always_inline)) void pass_i8(const float *restrict x, const int8_t *restrict wo,
                                                          int64_t in, int nr, float *restrict sums) {
  f32v acc0[ROW_BLOCK], acc1[ROW_BLOCK];
  for (int r = 0; r < nr; r++) acc0[r] = acc1[r] = (f32v){0};
  int64_t i = 0;
  for (; i + 2 * LANES <= in; i += 2 * LANES) {
    const f32v w0 = load_i8(wo + i), w1 = load_i8(wo + i + LANES);
    for (int r = 0; r < nr; r++) {
      acc0[r] += load_f32(x + r * in + i) * w0;
      acc1[r] += load_f32(x + r * in + i + LANES) * w1;
    }
  }
  if (i + LANES <= in) {
    const f32v w0 = load_i8(wo + i);
    for (int r = 0; r < nr; r++) acc0[r] += load_f32(x + r * in + i) * w0;
    i += LANES;
  }
  for (int r = 0; r < nr; r++) {
    float s = lane_sum(acc0[r] + acc1[r]);
    for (int64_t j = i; j < in; j++) s += x[r * in + j] * (float)wo[j];
    sums[r] = s;
  }
}

/* The core's float32 multiply-add peak at this build's vector width, for benchmarks' floors: `iterations`
 * rounds of 12 independent vector FMAs on registers; returns the multiply-adds done (the caller times it). */
int64_t ssdbench_f32_peak(int64_t iterations, float seed) {
  f32v acc[12];
  const f32v m = (f32v){0} + seed;
  for (int i = 0; i < 12; i++) acc[i] = (f32v){0} + (float)i;
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) acc[i] = acc[i] * m + m;
  float total = 0.f;
  for (int i = 0; i < 12; i++) total += lane_sum(acc[i]);
  return total == 42.f ? 0 : iterations * 12 * LANES; /* the sum keeps the loop alive */
}

/* Reads n floats with 8 independent vector sums (loads, not arithmetic, bound it): the read bandwidth a
 * kernel streaming weights can have, for benchmarks' floors. Returns the sum so nothing is elided. */
float ssdbench_read_f32(const float *p, int64_t n) {
  f32v acc[8];
  for (int i = 0; i < 8; i++) acc[i] = (f32v){0};
  int64_t i = 0;
  for (; i + 8 * LANES <= n; i += 8 * LANES)
    for (int j = 0; j < 8; j++) acc[j] += load_f32(p + i + j * LANES);
  float total = 0.f;
  for (int j = 0; j < 8; j++) total += lane_sum(acc[j]);
  for (; i < n; i++) total += p[i];
  return total;
}

/* x [rows, in], w [out, in], b [out] or NULL, y [rows, out]; all contiguous. */
void ssdbench_gemv_f32(const float *restrict x, const float *restrict w, const float *restrict b,
                       float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) {
    const float *wo = w + o * in;
    const float bias = b ? b[o] : 0.f;
    float sums[ROW_BLOCK];
    for (int64_t r = 0; r < rows; r += ROW_BLOCK) {
      const int64_t nr = rows - r < ROW_BLOCK ? rows - r : ROW_BLOCK;
      switch (nr) {
        case 4: pass_f32(x + r * in, wo, in, 4, sums); break;
        case 3: pass_f32(x + r * in, wo, in, 3, sums); break;
        case 2: pass_f32(x + r * in, wo, in, 2, sums); break;
        default: pass_f32(x + r * in, wo, in, 1, sums); break;
      }
      for (int64_t j = 0; j < nr; j++) y[(r + j) * out + o] = sums[j] + bias;
    }
  }
}

/* x [rows, in] float32, w int8 [out, in] with its scales [out], b [out] or NULL, y [rows, out]:
 * y = (x . w[o]) * scales[o] + b[o]. */
void ssdbench_gemv_i8(const float *restrict x, const int8_t *restrict w, const float *restrict scales,
                      const float *restrict b, float *restrict y, int64_t rows, int64_t in, int64_t out,
                      int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) {
    const int8_t *wo = w + o * in;
    const float bias = b ? b[o] : 0.f;
    float sums[ROW_BLOCK];
    for (int64_t r = 0; r < rows; r += ROW_BLOCK) {
      const int64_t nr = rows - r < ROW_BLOCK ? rows - r : ROW_BLOCK;
      switch (nr) {
        case 4: pass_i8(x + r * in, wo, in, 4, sums); break;
        case 3: pass_i8(x + r * in, wo, in, 3, sums); break;
        case 2: pass_i8(x + r * in, wo, in, 2, sums); break;
        default: pass_i8(x + r * in, wo, in, 1, sums); break;
      }
      for (int64_t j = 0; j < nr; j++) y[(r + j) * out + o] = sums[j] * scales[o] + bias;
    }
  }
}
