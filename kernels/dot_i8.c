/* int8 x int8 projections for few rows: y[r, o] = sum_b dx[r, b] * (qx[r, b] . w[o, b]) * s[o] (+ b[o]).
 *
 * gemv.c's int8 path widens every weight to float32 before its multiply: three instructions per
 * eight weights, so a one-token int8 step is bound by those instructions, not by reading the
 * weights (SmolLM2-135M: ~2.6x its bytes' read time). Here the input rows are quantised instead,
 * to int8 in blocks of QBLOCK values with one float32 scale each (symmetric, round to nearest: the
 * activation format of llama.cpp's Q8_0 path), and each block's products are summed in integers:
 * with AVX2, 32 weights per `maddubs`, whatever the row count. A weight block is loaded once for up
 * to ROW_BLOCK rows.
 *
 * Within a block the sum is exact (integers: |w|, |qx| <= 127, so a pair of products fits int16);
 * blocks are summed in float32 in the same order for every row count, so a row's result does not
 * depend on how many rows share the call.
 *
 * Instruction sets: AVX2 (also on AVX-512 machines; AVX-VNNI's dpbusd where the compiler targets
 * it), else a plain loop that is correct and slow (the probe then keeps another kernel).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemv.h"
#include "quant_block.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define QBLOCK QUANT_BLOCK
#define ROW_BLOCK 4

/* Rows are quantised apart (a row's result is the same on any thread): a prefill's many rows on every
 * thread, where serially they were a fixed share of the step that more threads could not shrink. */
#define PARALLEL_ROWS 8

/* x [rows, in] -> qx [rows, in] int8 and dx [rows, blocks]: block b of row r is qx * dx. */
static void quantize_rows(const float *x, int8_t *qx, float *dx, int64_t rows, int64_t in, int32_t threads) {
  const int64_t blocks = (in + QBLOCK - 1) / QBLOCK;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < blocks; b++) {
      const int64_t lo = b * QBLOCK, hi = lo + QBLOCK < in ? lo + QBLOCK : in;
      int32_t sum; /* vnni_i8.c's: not needed here */
      dx[r * blocks + b] = quantize_block(x + r * in + lo, qx + r * in + lo, hi - lo, &sum);
    }
}

/* The integer dot product of one block's n <= QBLOCK values (the tail block, or without AVX2). */
static inline int32_t block_dot(const int8_t *a, const int8_t *w, int64_t n) {
  int32_t s = 0;
  for (int64_t i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)w[i];
  return s;
}

#if defined(__AVX2__)
/* 32 products of one full block, as 8 int32 partial sums: |w| * (qx signed by w), pairs summed. */
static inline __m256i block_products(__m256i abs_w, __m256i w, const int8_t *q) {
  const __m256i signed_q = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q), w);
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), abs_w, signed_q);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, signed_q), _mm256_set1_epi16(1));
#endif
}

static inline float sum8(__m256 v) {
  float s[8];
  memcpy(s, &v, sizeof s);
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
#endif

/* One int8 weight row against nr (constant at each call site) quantised rows; sums[r] before scales. */
static inline __attribute__((always_inline)) void pass_dot(const int8_t *restrict qx, const float *restrict dx,
                                                           const int8_t *restrict wo, int64_t in, int64_t blocks,
                                                           int nr, float *restrict sums) {
  int64_t b = 0;
#if defined(__AVX2__)
  __m256 acc0[ROW_BLOCK], acc1[ROW_BLOCK]; /* even and odd blocks: two chains hide the add latency */
  for (int r = 0; r < nr; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const int64_t full = in / QBLOCK;
  for (; b + 2 <= full; b += 2) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(wo + b * QBLOCK));
    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(wo + (b + 1) * QBLOCK));
    const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
    for (int r = 0; r < nr; r++) {
      const int8_t *q = qx + r * in + b * QBLOCK;
      const __m256 p0 = _mm256_cvtepi32_ps(block_products(a0, w0, q));
      const __m256 p1 = _mm256_cvtepi32_ps(block_products(a1, w1, q + QBLOCK));
      acc0[r] = _mm256_fmadd_ps(p0, _mm256_set1_ps(dx[r * blocks + b]), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(p1, _mm256_set1_ps(dx[r * blocks + b + 1]), acc1[r]);
    }
  }
  if (b < full) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(wo + b * QBLOCK));
    const __m256i a0 = _mm256_sign_epi8(w0, w0);
    for (int r = 0; r < nr; r++) {
      const __m256 p0 = _mm256_cvtepi32_ps(block_products(a0, w0, qx + r * in + b * QBLOCK));
      acc0[r] = _mm256_fmadd_ps(p0, _mm256_set1_ps(dx[r * blocks + b]), acc0[r]);
    }
    b++;
  }
  for (int r = 0; r < nr; r++) sums[r] = sum8(_mm256_add_ps(acc0[r], acc1[r]));
#else
  for (int r = 0; r < nr; r++) sums[r] = 0.f;
#endif
  for (; b < blocks; b++) { /* the tail block (and every block without AVX2) */
    const int64_t lo = b * QBLOCK, n = lo + QBLOCK < in ? QBLOCK : in - lo;
    for (int r = 0; r < nr; r++) /* fmaf: one rounding however the compiler lays out the row loop */
      sums[r] = fmaf(dx[r * blocks + b], (float)block_dot(qx + r * in + lo, wo + lo, n), sums[r]);
  }
}

/* x [rows, in] float32, w int8 [out, in] with its scales [out], b [out] or NULL, y [rows, out].
 * Returns 0, or -1 when scratch memory could not be had. */
int ssdbench_dot_i8(const float *restrict x, const int8_t *restrict w, const float *restrict scales,
                    const float *restrict bias, float *restrict y, int64_t rows, int64_t in, int64_t out,
                    int32_t threads) {
  const int64_t blocks = (in + QBLOCK - 1) / QBLOCK;
  int8_t *qx = malloc((size_t)(rows * in));
  float *dx = malloc((size_t)(rows * blocks) * sizeof(float));
  if (!qx || !dx) {
    free(qx);
    free(dx);
    return -1;
  }
  quantize_rows(x, qx, dx, rows, in, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) {
    const int8_t *wo = w + o * in;
    const float add = bias ? bias[o] : 0.f;
    float sums[ROW_BLOCK];
    for (int64_t r = 0; r < rows; r += ROW_BLOCK) {
      const int64_t nr = rows - r < ROW_BLOCK ? rows - r : ROW_BLOCK;
      const int8_t *q = qx + r * in;
      const float *d = dx + r * blocks;
      switch (nr) {
        case 4: pass_dot(q, d, wo, in, blocks, 4, sums); break;
        case 3: pass_dot(q, d, wo, in, blocks, 3, sums); break;
        case 2: pass_dot(q, d, wo, in, blocks, 2, sums); break;
        default: pass_dot(q, d, wo, in, blocks, 1, sums); break;
      }
      for (int64_t j = 0; j < nr; j++) y[(r + j) * out + o] = fmaf(sums[j], scales[o], add);
    }
  }
  free(qx);
  free(dx);
  return 0;
}
