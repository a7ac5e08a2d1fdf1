/* One block of activations quantised to int8 with one float32 scale (llama.cpp's Q8_0 activations):
 * q = rint(x * 127 / max|x|) (ties to even), scale = max|x| / 127. Shared by dot_i8.c and vnni_i8.c,
 * whose int8 paths must quantise alike. With AVX-512 a whole block goes a vector at a time: one float at
 * a time it was ~6% of the int8 draft's 140-token prefill (perf, one core of an AMD EPYC). */
#ifndef SSDBENCH_QUANT_BLOCK_H
#define SSDBENCH_QUANT_BLOCK_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "slot_vec.h"

#define QUANT_BLOCK 32 /* inputs per activation scale */

typedef int8_t quant_bytes __attribute__((vector_size(SLOT_BLOCK))); /* SLOT_BLOCK quantised values */

/* The same steps a lane at a time: blocks shorter than QUANT_BLOCK (a row's tail) and the reference. */
static inline float quantize_block_scalar(const float *x, int8_t *q, int64_t n, int32_t *sum) {
  float top = 0.f;
  for (int64_t i = 0; i < n; i++) { /* not fmaxf, nor lrintf below: library calls without -ffast-math */
    const float a = fabsf(x[i]);
    top = a > top ? a : top;
  }
  const float inv = top > 0.f ? 127.f / top : 0.f;
  int32_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    const int32_t v = (int32_t)rintf(x[i] * inv);
    q[i] = (int8_t)v;
    total += v;
  }
  *sum = total;
  return top / 127.f;
}

/* AVX-512 only: with AVX2's 8 lanes GCC 12 put the int8 results together a byte at a time, and an AVX2
 * build's 140-row projections took 6% longer than with the scalar loops (one core of an AMD EPYC). */
#if defined(__AVX512F__) && SLOT_BLOCK == 16
#include <immintrin.h>
#define ROUND_LANES(v) ((lane_bits)_mm512_cvtps_epi32((__m512)(v)))
#endif

/* x [n] -> q [n] and the sum of q into *sum; returns the block's scale. The maximum is taken per lane
 * and then across lanes, which is the same maximum (a NaN never wins, as in the scalar loop); the
 * conversion rounds to nearest, ties to even (the default rounding mode), as rintf does. */
static inline float quantize_block(const float *x, int8_t *q, int64_t n, int32_t *sum) {
#ifndef ROUND_LANES
  return quantize_block_scalar(x, q, n, sum);
#else
  if (n != QUANT_BLOCK || QUANT_BLOCK % SLOT_BLOCK != 0) return quantize_block_scalar(x, q, n, sum);
  enum { VECS = QUANT_BLOCK / SLOT_BLOCK };
  slot_vec v[VECS];
  lane_bits top_bits = {0}; /* 0.0f */
  const lane_bits magnitude = (lane_bits){0} + 0x7fffffff;
  for (int c = 0; c < VECS; c++) {
    memcpy(&v[c], x + c * SLOT_BLOCK, sizeof v[c]);
    lane_bits a;
    slot_vec a_f, top_f;
    memcpy(&a, &v[c], sizeof a);
    a &= magnitude; /* fabsf */
    memcpy(&a_f, &a, sizeof a_f);
    memcpy(&top_f, &top_bits, sizeof top_f);
    const lane_bits higher = a_f > top_f;
    top_bits = (a & higher) | (top_bits & ~higher);
  }
  slot_vec tops;
  memcpy(&tops, &top_bits, sizeof tops);
  float top = 0.f;
  for (int l = 0; l < SLOT_BLOCK; l++) top = tops[l] > top ? tops[l] : top;
  const float inv = top > 0.f ? 127.f / top : 0.f;
  lane_bits total = {0};
  for (int c = 0; c < VECS; c++) {
    const lane_bits ints = ROUND_LANES(v[c] * inv);
    const quant_bytes bytes = __builtin_convertvector(ints, quant_bytes);
    memcpy(q + c * SLOT_BLOCK, &bytes, sizeof bytes);
    total += ints;
  }
  int32_t s = 0;
  for (int l = 0; l < SLOT_BLOCK; l++) s += total[l];
  *sum = s;
  return top / 127.f;
#endif
}
#endif
