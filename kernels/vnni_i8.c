/* int8 projections for 1 to a few hundred rows without AMX: y[r, o] = s[o] * sum_b dx[r, b] * (q[r, b] . w[o, b]) (+ b[o]).
 *
 * dot_i8.c streams each row past each weight row and sums 8 lanes of one output per vector, so a
 * 16-row tree step pays ~5 instructions per 32 products per row, and the per-output horizontal sums
 * on top. Here the outputs lie across the vector: weights are packed once so that one 64-byte line
 * holds 4 consecutive inputs of 16 outputs, and `vpdpbusd` multiplies it by 4 activation bytes of one
 * row broadcast to every lane: 64 products summed into 16 int32 outputs per instruction. A register
 * tile of MR rows x NV vectors of outputs loads each weight line once for MR rows; the threads split
 * the outputs, and a tile's weights (32 outputs x in bytes) stay in L1/L2 for the next MR rows, so
 * the weights are read from memory once per call for all rows.
 *
 * Activations: each row is quantised in blocks of QBLOCK inputs to int8 with one float32 scale per
 * block (symmetric, to nearest, ties to even: llama.cpp's Q8_0 activations, as dot_i8.c's), so a
 * draft on this kernel proposes as one on int8_dot does. A block's products are summed exactly in
 * int32, then scaled and added in float32, block after block, in the same order on every path:
 *   acc = fmaf((float)S_b, dx[r, b], acc);  y = fmaf(acc, s[o], bias[o])
 * so a row's result depends on nothing but the row (not its neighbours, not the row count), and the
 * instruction-set paths below agree bit for bit.
 *
 * Overflow: no int32 sum spans more than one block. With the VNNI paths' unsigned weights
 * (w + 128, at most 255) a block's sum is at most 32 * 255 * 127 = 1,036,320 in magnitude (2^31 is
 * 2,147,483,648), and it converts to float exactly (below 2^24); so any input width is safe.
 *
 * Paths, by what the compiler targets (gemv.py builds for this CPU):
 * - 3: AVX-512 VNNI (+BW): 16 outputs per vector, `vpdpbusd` on zmm; 4 rows x 2 vectors a tile, or up to
 *   FEW_ROWS rows x 1 vector (line_passes).
 * - 2: AVX-VNNI (or AVX-512 VNNI with VL but no zmm use): `vpdpbusd` on ymm, 8 outputs a vector.
 *   `vpdpbusd` multiplies unsigned bytes by signed ones, so these paths pack the weights as w + 128
 *   and start each block's sums at -128 * sum(q) over the block (one integer per row and block,
 *   found while quantising): the sum is q . w exactly, and nothing but the int8 weights is read.
 * - 1: AVX2: `vpmaddubsw` of |w| and q signed by w (a pair is at most 2 * 127 * 127, no int16
 *   saturation), `vpmaddwd` to int32; signed weights, sums start at 0.
 * Inputs are padded to a multiple of 4 (the last block may be shorter), outputs to TILE_OUT.
 * - 0: plain loops, correct and slow (the probe then keeps another kernel).
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

#define QBLOCK QUANT_BLOCK /* inputs per activation scale */
#define GROUP 4       /* inputs per 32-bit lane of vpdpbusd */
#define LINE_OUT 16   /* outputs per packed 64-byte line */
#define TILE_OUT 32   /* outputs per thread task: packing pads `out` to a multiple of it */

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define VNNI_PATH 3
#define VEC_OUT 16
#define MR 4
#define FEW_ROWS 6
#elif (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))) && defined(__FMA__)
#define VNNI_PATH 2
#define VEC_OUT 8
#define MR 3
#define FEW_ROWS 5
#elif defined(__AVX2__) && defined(__FMA__) /* the ymm paths scale their block sums with vfmadd */
#define VNNI_PATH 1
#define VEC_OUT 8
#define MR 2
#define FEW_ROWS 4
#else
#define VNNI_PATH 0
#define VEC_OUT 1
#define MR 1
#define FEW_ROWS 1
#endif
#define NV (TILE_OUT / VEC_OUT > 2 ? 2 : TILE_OUT / VEC_OUT) /* output vectors per register tile */
/* Register tiles hold 2 sums per row and vector (int32 within a block, float32 across blocks) beside the
 * weight vectors: MR x NV (many rows, in passes) or up to FEW_ROWS x 1 (a few rows, one pass). */
#define TILE_ROWS (FEW_ROWS > MR ? FEW_ROWS : MR)
#define LINE_PASSES_FROM 16 /* rows above it go to line_passes as a few rows do */
#define UNSIGNED_WEIGHTS (VNNI_PATH >= 2)

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* Which path this build runs (3, 2, 1 or 0, as above). */
int ssdbench_vnni_i8_path(void) { return VNNI_PATH; }

int64_t ssdbench_vnni_i8_packed_bytes(int64_t in, int64_t out) { return round_up(out, TILE_OUT) * round_up(in, GROUP); }

/* w int8 [out, in] -> packed [out_p / 16][in_p / 4][16][4], zeros past out and in; + 128 on the VNNI paths. */
void ssdbench_vnni_i8_pack(const int8_t *restrict w, uint8_t *restrict packed, int64_t in, int64_t out) {
  const int64_t in_p = round_up(in, GROUP), out_p = round_up(out, TILE_OUT), groups = in_p / GROUP;
  const int32_t zero = UNSIGNED_WEIGHTS ? 128 : 0;
  memset(packed, zero, (size_t)(out_p * in_p));
  for (int64_t o = 0; o < out; o++) {
    const int64_t line = o / LINE_OUT, n = o % LINE_OUT;
    for (int64_t k = 0; k < in; k++)
      packed[((line * groups + k / GROUP) * LINE_OUT + n) * GROUP + k % GROUP] = (uint8_t)(w[o * in + k] + zero);
  }
}

/* Rows are quantised apart (a row's result is the same on any thread): a prefill's many rows on every
 * thread, where serially they were a fixed share of the step that more threads could not shrink. */
#define PARALLEL_ROWS 8

/* x [rows, in] -> q int8 [rows, in_p] (zeros past in), dx [rows, blocks] and, for the VNNI paths, qsum
 * [rows, blocks]: -128 * each block's sum of q, where those paths start the block's sums. */
static void quantize_rows(const float *x, int8_t *q, float *dx, int32_t *qsum, int64_t rows, int64_t in,
                          int64_t in_p, int32_t threads) {
  const int64_t blocks = (in_p + QBLOCK - 1) / QBLOCK;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < blocks; b++) {
      const int64_t lo = b * QBLOCK, hi = lo + QBLOCK < in ? lo + QBLOCK : in;
      const int64_t end = lo + QBLOCK < in_p ? lo + QBLOCK : in_p;
      int32_t sum;
      dx[r * blocks + b] = quantize_block(x + r * in + lo, q + r * in_p + lo, hi - lo, &sum);
      memset(q + r * in_p + hi, 0, (size_t)(end - hi));
      qsum[r * blocks + b] = -128 * sum;
    }
}

#if VNNI_PATH >= 1
#if VNNI_PATH == 3
typedef __m512i ivec;
typedef __m512 fvec;
#define LOAD_I(p) _mm512_loadu_si512((const void *)(p))
#define CVT(v) _mm512_cvtepi32_ps(v)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define MUL(a, b) _mm512_mul_ps(a, b)
#define SET1_F(v) _mm512_set1_ps(v)
#define LOAD_F(p) _mm512_loadu_ps(p)
#define STORE_F(p, v) _mm512_storeu_ps(p, v)
#define ZERO_I() _mm512_setzero_si512()
#define ZERO_F() _mm512_setzero_ps()
#define SET1_I(v) _mm512_set1_epi32(v)
/* acc += w (unsigned: w + 128) . the 4 signed bytes a4 in every lane. In asm, accumulating in place: with the
 * intrinsic GCC 12 copied every accumulator before and after each vpdpbusd (two register moves per product
 * instruction, which share its ports: 150 of the core's 235 GMAC/s with the weights in L1). */
static inline __attribute__((always_inline)) __m512i dot4_zmm(__m512i acc, int32_t a4, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(_mm512_set1_epi32(a4)));
  return acc;
}
#define DOT4(acc, a4, w) dot4_zmm(acc, a4, w)
/* acc += w . the 4 signed bytes at p in every lane, broadcast by the instruction from memory: a separate
 * vpbroadcastd per row and group took a vector-unit slot beside each product on an AMD EPYC (Zen 4). */
static inline __attribute__((always_inline)) __m512i dot4_zmm_at(__m512i acc, const int8_t *p, __m512i w) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
  return acc;
}
#define DOT4_AT(acc, p, w) dot4_zmm_at(acc, p, w)
#else
typedef __m256i ivec;
typedef __m256 fvec;
#define LOAD_I(p) _mm256_loadu_si256((const __m256i *)(p))
#define CVT(v) _mm256_cvtepi32_ps(v)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define MUL(a, b) _mm256_mul_ps(a, b)
#define SET1_F(v) _mm256_set1_ps(v)
#define LOAD_F(p) _mm256_loadu_ps(p)
#define STORE_F(p, v) _mm256_storeu_ps(p, v)
#define ZERO_I() _mm256_setzero_si256()
#define ZERO_F() _mm256_setzero_ps()
#define SET1_I(v) _mm256_set1_epi32(v)
#if VNNI_PATH == 2 && defined(__AVXVNNI__)
#define DOT4(acc, a4, w) _mm256_dpbusd_avx_epi32(acc, w, _mm256_set1_epi32(a4))
#elif VNNI_PATH == 2
#define DOT4(acc, a4, w) _mm256_dpbusd_epi32(acc, w, _mm256_set1_epi32(a4))
#else
/* acc + the 8 lanes' 4-product sums of q (signed) and w: |w| times q signed by w, pairs in int16. */
static inline __m256i dot4_avx2(__m256i acc, int32_t a4, __m256i w) {
  const __m256i signed_q = _mm256_sign_epi8(_mm256_set1_epi32(a4), w);
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), signed_q);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#define DOT4(acc, a4, w) dot4_avx2(acc, a4, w)
#endif
#endif

static inline int32_t four_bytes(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
#ifndef DOT4_AT
#define DOT4_AT(acc, p, w) DOT4(acc, four_bytes(p), w)
#endif

/* The address of output vector v (VEC_OUT outputs from tile output o0 + v * VEC_OUT) at input group g. */
static inline const uint8_t *line_at(const uint8_t *packed, int64_t groups, int64_t o, int64_t g) {
  return packed + ((o / LINE_OUT) * groups + g) * (LINE_OUT * GROUP) + (o % LINE_OUT) * GROUP;
}

/* A one-token step has no rows to share a weight load with: it keeps twice a tile's vectors of sums in
 * flight instead (more loads under way, which a memory-bound call needs). A one-row draft step pinned to
 * int8_vnni on an AMD EPYC (Zen 4): 1.93-2.13x its bandwidth floor, against 2.11-2.19x before (3 runs each). */
#define WIDE (2 * NV)

/* nr rows x nv output vectors (both constant at each call site; nr <= TILE_ROWS, nv <= WIDE) from output o0:
 * acc[r][v], before s[o]. `ahead` >= 0: the outputs whose weights to prefetch meanwhile (see multiply). */
static inline __attribute__((always_inline)) void tile_rows(const int8_t *restrict q, const float *restrict dx,
                                                            const int32_t *restrict qsum,
                                                            const uint8_t *restrict packed, int64_t in_p, int64_t o0,
                                                            int nr, int nv, int64_t ahead, fvec acc[TILE_ROWS][WIDE]) {
  const int64_t groups = in_p / GROUP, blocks = (in_p + QBLOCK - 1) / QBLOCK;
  for (int r = 0; r < nr; r++)
    for (int v = 0; v < nv; v++) acc[r][v] = ZERO_F();
  for (int64_t b = 0; b < blocks; b++) {
    ivec sums[TILE_ROWS][WIDE];
    for (int r = 0; r < nr; r++) {
#if UNSIGNED_WEIGHTS
      const ivec start = SET1_I(qsum[r * blocks + b]);
#else
      const ivec start = ZERO_I();
      (void)qsum;
#endif
      for (int v = 0; v < nv; v++) sums[r][v] = start;
    }
    const int64_t g_end = (b + 1) * (QBLOCK / GROUP) < groups ? (b + 1) * (QBLOCK / GROUP) : groups;
    for (int64_t g = b * (QBLOCK / GROUP); g < g_end; g++) {
      ivec wv[WIDE];
      for (int v = 0; v < nv; v++) wv[v] = LOAD_I(line_at(packed, groups, o0 + v * VEC_OUT, g));
      if (ahead >= 0)
        for (int v = 0; v < nv; v++) __builtin_prefetch(line_at(packed, groups, ahead + v * VEC_OUT, g), 0, 2);
      for (int r = 0; r < nr; r++) {
        const int8_t *a4 = q + r * in_p + g * GROUP;
        for (int v = 0; v < nv; v++) sums[r][v] = DOT4_AT(sums[r][v], a4, wv[v]);
      }
    }
    for (int r = 0; r < nr; r++) {
      const fvec d = SET1_F(dx[r * blocks + b]);
      for (int v = 0; v < nv; v++) acc[r][v] = FMA(CVT(sums[r][v]), d, acc[r][v]);
    }
  }
}

/* acc's outputs [o0, o0 + VEC_OUT) of one row into y_row, scaled (and biased), those below `out` only. */
static inline void store_outputs(fvec acc, const float *scales, const float *bias, float *y_row, int64_t o0,
                                 int64_t out) {
  float scale_pad[VEC_OUT], bias_pad[VEC_OUT], got[VEC_OUT];
  const int64_t n = out - o0 < VEC_OUT ? out - o0 : VEC_OUT;
  if (n <= 0) return;
  if (n == VEC_OUT) {
    const fvec y = bias ? FMA(acc, LOAD_F(scales + o0), LOAD_F(bias + o0)) : MUL(acc, LOAD_F(scales + o0));
    STORE_F(y_row + o0, y);
    return;
  }
  memset(scale_pad, 0, sizeof scale_pad);
  memset(bias_pad, 0, sizeof bias_pad);
  memcpy(scale_pad, scales + o0, (size_t)n * sizeof(float));
  if (bias) memcpy(bias_pad, bias + o0, (size_t)n * sizeof(float));
  const fvec y = bias ? FMA(acc, LOAD_F(scale_pad), LOAD_F(bias_pad)) : MUL(acc, LOAD_F(scale_pad));
  STORE_F(got, y);
  memcpy(y_row + o0, got, (size_t)n * sizeof(float));
}

/* One row: each thread a run of whole tasks (TILE_OUT outputs), WIDE vectors of outputs at a time, a tile's
 * NV where fewer are left in its run. Runs of tasks rather than spans of WIDE: a 576-output projection
 * is 9 spans, 5 and 4 on two threads, but 18 tasks, 9 and 9. */
static void one_row(const int8_t *q, const float *dx, const int32_t *qsum, const uint8_t *packed,
                    const float *scales, const float *bias, float *y, int64_t in_p, int64_t out, int32_t threads) {
  const int64_t span = WIDE * VEC_OUT, tasks = round_up(out, TILE_OUT) / TILE_OUT;
  const int64_t runs = threads < tasks ? threads : tasks;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < runs; t++)
    for (int64_t o0 = t * tasks / runs * TILE_OUT, end = (t + 1) * tasks / runs * TILE_OUT; o0 < end;) {
      const int nv = o0 + span <= end ? WIDE : NV;
      fvec acc[TILE_ROWS][WIDE];
      if (nv == WIDE)
        tile_rows(q, dx, qsum, packed, in_p, o0, 1, WIDE, -1, acc);
      else
        tile_rows(q, dx, qsum, packed, in_p, o0, 1, NV, -1, acc);
      for (int v = 0; v < nv; v++) store_outputs(acc[0][v], scales, bias, y, o0 + v * VEC_OUT, out);
      o0 += nv * VEC_OUT;
    }
}

/* Rows in passes of up to FEW_ROWS over one line of weights (16 outputs x in bytes; 24 KiB at most for
 * these models) before the next: the first pass waits on memory, the others find the line in L1.
 * - 2 to FEW_ROWS rows (a verify, a catch-up chunk, a small tree) take one pass. In MR x NV tiles they
 *   took two: the draft's 5-row chunk (int8_vnni, one core of an AMD EPYC) went from 13.7 to 10.5 ms.
 * - A prefill's many rows: a 2-vector tile's weights (in x 32 bytes) outgrow L1 for the MLP's down
 *   projection; the draft's projections for 140 rows went from 126.5 to 121 ms (2 runs each).
 * Between them (7 to 16 rows) the MR x NV tiles cost 3-6% less, and multiply keeps them. */
static void line_passes(const int8_t *q, const float *dx, const int32_t *qsum, const uint8_t *packed,
                        const float *scales, const float *bias, float *y, int64_t rows, int64_t in_p, int64_t out,
                        int32_t threads) {
  const int64_t lines = round_up(out, TILE_OUT) / VEC_OUT;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t line = 0; line < lines; line++) {
    const int64_t o0 = line * VEC_OUT;
    if (o0 >= out) continue;
    for (int64_t r0 = 0; r0 < rows; r0 += FEW_ROWS) {
      const int64_t nr = rows - r0 < FEW_ROWS ? rows - r0 : FEW_ROWS;
      const int64_t blocks = (in_p + QBLOCK - 1) / QBLOCK;
      const int8_t *qr = q + r0 * in_p;
      const float *dr = dx + r0 * blocks;
      const int32_t *sr = qsum + r0 * blocks;
      fvec acc[TILE_ROWS][WIDE];
      switch (nr) { /* a constant row count per call: the tile stays in registers */
#define FEW_CASE(n) case n: tile_rows(qr, dr, sr, packed, in_p, o0, n, 1, -1, acc); break;
#if FEW_ROWS >= 6
        FEW_CASE(6)
#endif
#if FEW_ROWS >= 5
        FEW_CASE(5)
#endif
#if FEW_ROWS >= 4
        FEW_CASE(4) FEW_CASE(3)
#endif
        FEW_CASE(2)
#undef FEW_CASE
        default: tile_rows(qr, dr, sr, packed, in_p, o0, 1, 1, -1, acc); break;
      }
      for (int64_t r = 0; r < nr; r++) store_outputs(acc[r][0], scales, bias, y + (r0 + r) * out, o0, out);
    }
  }
}

static void multiply(const int8_t *q, const float *dx, const int32_t *qsum, const uint8_t *packed,
                     const float *scales, const float *bias, float *y, int64_t rows, int64_t in_p, int64_t out,
                     int32_t threads) {
  const int64_t blocks = (in_p + QBLOCK - 1) / QBLOCK, tiles = round_up(out, TILE_OUT) / TILE_OUT;
  const int64_t per_tile = TILE_OUT / (NV * VEC_OUT); /* register tiles across a task's outputs */
  if (rows == 1) {
    one_row(q, dx, qsum, packed, scales, bias, y, in_p, out, threads);
    return;
  }
  if (rows <= FEW_ROWS || rows > LINE_PASSES_FROM) {
    line_passes(q, dx, qsum, packed, scales, bias, y, rows, in_p, out, threads);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tiles; t++)
    for (int64_t part = 0; part < per_tile; part++) {
      const int64_t o0 = t * TILE_OUT + part * NV * VEC_OUT;
      if (o0 >= out) break;
      for (int64_t r0 = 0; r0 < rows; r0 += MR) {
        const int nr = rows - r0 < MR ? (int)(rows - r0) : MR;
        /* The first pass over a register tile's weights waits on memory, the later ones find them in cache:
         * the second pass fetches the next tile's weights into L2 meanwhile, so no pass is all waiting. */
        const int64_t next = o0 + NV * VEC_OUT, ahead = r0 == MR && next < round_up(out, TILE_OUT) ? next : -1;
        fvec acc[TILE_ROWS][WIDE];
        const int8_t *qr = q + r0 * in_p;
        const float *dr = dx + r0 * blocks;
        const int32_t *sr = qsum + r0 * blocks;
        switch (nr) { /* a constant row count per call: the tile stays in registers */
#if MR >= 4
          case 4: tile_rows(qr, dr, sr, packed, in_p, o0, 4, NV, ahead, acc); break;
#endif
#if MR >= 3
          case 3: tile_rows(qr, dr, sr, packed, in_p, o0, 3, NV, ahead, acc); break;
#endif
          case 2: tile_rows(qr, dr, sr, packed, in_p, o0, 2, NV, ahead, acc); break;
          default: tile_rows(qr, dr, sr, packed, in_p, o0, 1, NV, ahead, acc); break;
        }
        for (int r = 0; r < nr; r++)
          for (int v = 0; v < NV; v++) store_outputs(acc[r][v], scales, bias, y + (r0 + r) * out, o0 + v * VEC_OUT, out);
      }
    }
}
#else
/* The plain loops: the same integer block sums and the same float32 steps, one output at a time. */
static void multiply(const int8_t *q, const float *dx, const int32_t *qsum, const uint8_t *packed,
                     const float *scales, const float *bias, float *y, int64_t rows, int64_t in_p, int64_t out,
                     int32_t threads) {
  const int64_t groups = in_p / GROUP, blocks = (in_p + QBLOCK - 1) / QBLOCK;
  (void)qsum;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++)
    for (int64_t r = 0; r < rows; r++) {
      float acc = 0.f;
      for (int64_t b = 0; b < blocks; b++) {
        int32_t s = 0;
        for (int64_t k = b * QBLOCK; k < (b + 1) * QBLOCK && k < in_p; k++) {
          const int8_t wk = (int8_t)packed[(((o / LINE_OUT) * groups + k / GROUP) * LINE_OUT + o % LINE_OUT) * GROUP + k % GROUP];
          s += (int32_t)q[r * in_p + k] * wk;
        }
        acc = fmaf((float)s, dx[r * blocks + b], acc);
      }
      y[r * out + o] = bias ? fmaf(acc, scales[o], bias[o]) : acc * scales[o];
    }
}
#endif

/* The core's int8 dot-product peak on this path's instruction, for benchmarks' floors: `iterations` rounds of
 * 12 independent vpdpbusd (or AVX2's three-instruction stand-in) on registers; returns the multiply-adds done
 * (the caller times the call). The plain path does scalar multiply-adds. */
int64_t ssdbench_vnni_i8_peak(int64_t iterations, int32_t seed) {
#if VNNI_PATH >= 1
  ivec acc[12], w = LOAD_I(((const int32_t[16]){seed, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  for (int i = 0; i < 12; i++) acc[i] = ZERO_I();
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) acc[i] = DOT4(acc[i], seed + i, w);
  int32_t lanes[sizeof(ivec) / 4], total = 0;
  for (int i = 0; i < 12; i++) {
    memcpy(lanes, &acc[i], sizeof lanes);
    total += lanes[0];
  }
  return total == 42 ? 0 : iterations * 12 * (int64_t)sizeof(ivec); /* the sum keeps the loop alive */
#else
  int32_t acc = 0;
  for (int64_t it = 0; it < iterations; it++) acc += (int32_t)it * seed;
  return acc == 42 ? 0 : iterations;
#endif
}

/* x [rows, in] float32; packed from ssdbench_vnni_i8_pack; scales [out]; bias [out] or NULL; y [rows, out].
 * Returns 0, or -1 when scratch memory could not be had. */
int ssdbench_vnni_i8(const float *restrict x, const uint8_t *restrict packed, const float *restrict scales,
                     const float *restrict bias, float *restrict y, int64_t rows, int64_t in, int64_t out,
                     int32_t threads) {
  if (rows <= 0) return 0;
  const int64_t in_p = round_up(in, GROUP), blocks = (in_p + QBLOCK - 1) / QBLOCK;
  int8_t *q = malloc((size_t)(rows * in_p));
  float *dx = malloc((size_t)(rows * blocks) * sizeof(float));
  int32_t *qsum = malloc((size_t)(rows * blocks) * sizeof(int32_t));
  int status = 0;
  if (!q || !dx || !qsum) {
    status = -1;
    goto done;
  }
  quantize_rows(x, q, dx, qsum, rows, in, in_p, threads);
  multiply(q, dx, qsum, packed, scales, bias, y, rows, in_p, out, threads);
done:
  free(q);
  free(dx);
  free(qsum);
  return status;
}
