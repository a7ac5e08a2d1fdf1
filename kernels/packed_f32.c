/* float32 projections for a few rows (a verify, ssd's hit verify, a small batch): y[r, o] = x[r] . w[o] (+ b[o]).
 *
 * gemv.c takes one dot product per (output, row): the weight row comes from L1 for the second and
 * later rows, but every (output, row) pays a horizontal sum of its lanes, which for SmolLM2's
 * 576-wide rows costs about what the multiplies do; a 5-row verify then costs ~1.7x a one-token step.
 * Here the weights are packed once with 16 outputs across each 64-byte line, for every input in
 * turn ([out / 16][in][16]): one input of one row, broadcast, multiplies a line into 16 outputs, and a
 * register tile of MR rows x NV vectors loads each line once for all its rows. No sums across lanes.
 *
 * Each output of each row is one chain of multiply-adds over the inputs in order (y = fma(x_k, w_k, y)),
 * the same whatever the row count and on every vector width: a K+1-token verify gives bitwise the
 * logits a one-token step would, and builds for AVX-512, AVX2 or plain C agree bit for bit.
 * The threads split the outputs in tasks of TILE_OUT; a task's lines stay in L2 for its next MR rows.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gemv.h"

#define LINE_OUT 16  /* outputs per packed line */
#define TILE_OUT 32  /* outputs per thread task: packing pads `out` to a multiple of it */
#if defined(__AVX512F__)
#define LANES 16
#define MR 8 /* 8 rows x 2 vectors: 16 accumulators of AVX-512's 32 registers */
#elif defined(__AVX2__)
#define LANES 8
#define MR 4 /* 4 x 2 of AVX2's 16 */
#else
#define LANES 4
#define MR 4
#endif
#define NV 2 /* vectors of outputs per register tile */

typedef float f32v __attribute__((vector_size(LANES * sizeof(float))));

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

int64_t ssdbench_packed_f32_floats(int64_t in, int64_t out) { return round_up(out, TILE_OUT) * in; }

/* w [out, in] -> packed [out_p / 16][in][16], zeros past `out`. */
void ssdbench_packed_f32_pack(const float *restrict w, float *restrict packed, int64_t in, int64_t out) {
  memset(packed, 0, (size_t)ssdbench_packed_f32_floats(in, out) * sizeof(float));
  for (int64_t o = 0; o < out; o++)
    for (int64_t k = 0; k < in; k++) packed[((o / LINE_OUT) * in + k) * LINE_OUT + o % LINE_OUT] = w[o * in + k];
}

static inline f32v load(const float *p) {
  f32v v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* a * w + acc on each lane with one rounding: the FMA instruction where the compiler targets it (GCC
 * contracts the expression), else fmaf per lane (slow, and the same bits). */
static inline f32v fma_lanes(float a, f32v w, f32v acc) {
#if defined(__FMA__)
  return a * w + acc;
#else
  float wl[LANES], al[LANES];
  memcpy(wl, &w, sizeof wl);
  memcpy(al, &acc, sizeof al);
  for (int l = 0; l < LANES; l++) al[l] = fmaf(a, wl[l], al[l]);
  return load(al);
#endif
}

/* nr rows (constant at each call site) x NV vectors from output o0 (o0 a multiple of NV * LANES). */
static inline __attribute__((always_inline)) void tile_rows(const float *restrict x, const float *restrict packed,
                                                            int64_t in, int64_t o0, int nr, f32v acc[MR][NV]) {
  for (int r = 0; r < nr; r++)
    for (int v = 0; v < NV; v++) acc[r][v] = (f32v){0};
  const float *lines[NV];
  for (int v = 0; v < NV; v++) {
    const int64_t o = o0 + v * LANES;
    lines[v] = packed + (o / LINE_OUT) * in * LINE_OUT + o % LINE_OUT;
  }
  for (int64_t k = 0; k < in; k++) {
    f32v wv[NV];
    for (int v = 0; v < NV; v++) wv[v] = load(lines[v] + k * LINE_OUT);
    for (int r = 0; r < nr; r++) {
      const float xk = x[r * in + k];
      for (int v = 0; v < NV; v++) acc[r][v] = fma_lanes(xk, wv[v], acc[r][v]);
    }
  }
}

/* x [rows, in], packed from ssdbench_packed_f32_pack, b [out] or NULL, y [rows, out]. */
void ssdbench_packed_f32(const float *restrict x, const float *restrict packed, const float *restrict b,
                         float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads) {
  const int64_t tiles = round_up(out, TILE_OUT) / TILE_OUT, per_task = TILE_OUT / (NV * LANES);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tiles; t++)
    for (int64_t part = 0; part < per_task; part++) {
      const int64_t o0 = t * TILE_OUT + part * NV * LANES;
      if (o0 >= out) break;
      for (int64_t r0 = 0; r0 < rows; r0 += MR) {
        const int nr = rows - r0 < MR ? (int)(rows - r0) : MR;
        f32v acc[MR][NV];
        const float *xr = x + r0 * in;
        switch (nr) { /* a constant row count per call: the tile stays in registers */
#if MR >= 8
          case 8: tile_rows(xr, packed, in, o0, 8, acc); break;
          case 7: tile_rows(xr, packed, in, o0, 7, acc); break;
          case 6: tile_rows(xr, packed, in, o0, 6, acc); break;
          case 5: tile_rows(xr, packed, in, o0, 5, acc); break;
#endif
          case 4: tile_rows(xr, packed, in, o0, 4, acc); break;
          case 3: tile_rows(xr, packed, in, o0, 3, acc); break;
          case 2: tile_rows(xr, packed, in, o0, 2, acc); break;
          default: tile_rows(xr, packed, in, o0, 1, acc); break;
        }
        for (int r = 0; r < nr; r++)
          for (int v = 0; v < NV; v++) {
            const int64_t o = o0 + v * LANES, n = out - o < LANES ? out - o : LANES;
            if (n <= 0) continue;
            float lanes[LANES];
            memcpy(lanes, &acc[r][v], sizeof lanes);
            for (int64_t j = 0; j < n; j++) y[(r0 + r) * out + o + j] = b ? lanes[j] + b[o + j] : lanes[j];
          }
      }
    }
}
