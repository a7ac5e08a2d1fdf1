/* int8 projections on AMX tiles for many rows: y[r, o] = s[r] * (q[r] . w[o]) * scales[o] (+ b[o]).
 *
 * dot_i8.c streams each row past each weight: a 16-branch tree step or a prefill pays its
 * per-weight instructions once per row, and the bf16 GEMM that serves many rows instead reads a
 * widened (two-byte) copy of the weights. Intel's AMX multiplies a 16x64 tile of unsigned bytes by
 * a 64x16 tile of signed bytes into 16x16 int32 sums in one instruction (`tdpbusd`), so here the
 * weights are read once, as int8, for up to 16 rows at a time, and the arithmetic is nearly free.
 *
 * Activations: each row is divided by its largest magnitude and rounded to 15 bits, q in
 * [-16383, 16383]; q + 16384 is held as two unsigned bytes (hi, lo), and
 *   q . w = 256 * (hi . w) + (lo . w) - 16384 * sum(w),
 * each term an exact integer. So a row's result depends on nothing but the row itself: not on the
 * rows beside it, nor on which path summed it (the tiles or the plain loop below, bit for bit).
 *
 * Weights are packed once (`ssdbench_tiles_i8_pack`) in the tiles' layout: per block of 16
 * outputs and chunk of 64 inputs, a 1 KiB tile whose row i holds inputs 4i..4i+3 of each of the
 * 16 outputs; outputs padded to 32 (two blocks per pass), inputs to 64, with zeros.
 *
 * Where the compiler does not target AMX, or the kernel (Linux) refuses the tile state, only the
 * plain loop runs (correct and slow: the probe then keeps another kernel).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemv.h"
#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#define HAVE_TILES 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

#define KCHUNK 64      /* inputs per tile row of activations */
#define NBLOCK 16      /* outputs per weight tile */
#define MBLOCK 16      /* activation rows per tile */
#define TILE_BYTES 1024
#define OFFSET 16384   /* q + OFFSET is in [1, 32767]: two unsigned bytes */
#define QMAX 16383.f

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

int64_t ssdbench_tiles_i8_packed_bytes(int64_t in, int64_t out) { return round_up(out, 2 * NBLOCK) * round_up(in, KCHUNK); }

/* w int8 [out, in] -> packed (ssdbench_tiles_i8_packed_bytes) and wsum [out] = sum of each output's weights. */
void ssdbench_tiles_i8_pack(const int8_t *restrict w, int8_t *restrict packed, int32_t *restrict wsum, int64_t in,
                            int64_t out) {
  const int64_t chunks = round_up(in, KCHUNK) / KCHUNK, blocks = round_up(out, 2 * NBLOCK) / NBLOCK;
  memset(packed, 0, (size_t)ssdbench_tiles_i8_packed_bytes(in, out));
  for (int64_t o = 0; o < out; o++) {
    int32_t s = 0;
    for (int64_t k = 0; k < in; k++) s += w[o * in + k];
    wsum[o] = s;
  }
  for (int64_t nb = 0; nb < blocks; nb++)
    for (int64_t c = 0; c < chunks; c++) {
      int8_t *tile = packed + (nb * chunks + c) * TILE_BYTES;
      for (int64_t n = 0; n < NBLOCK; n++) {
        const int64_t o = nb * NBLOCK + n;
        if (o >= out) continue;
        for (int64_t j = 0; j < KCHUNK && c * KCHUNK + j < in; j++) tile[(j / 4) * 64 + n * 4 + j % 4] = w[o * in + c * KCHUNK + j];
      }
    }
}

/* Rows are quantised apart (a row's result is the same on any thread): a prefill's many rows on every
 * thread, where serially they were a fixed share of the step that more threads could not shrink. */
#define PARALLEL_ROWS 8

/* x [rows, in] -> hi, lo [rows_p, in_p] (q + OFFSET's two bytes; padding rows and inputs hold zeros)
 * and each row's scale. */
static void quantize_rows(const float *x, uint8_t *hi, uint8_t *lo, float *scale, int64_t rows, int64_t in,
                          int64_t in_p, int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++) {
    float top = 0.f;
    for (int64_t k = 0; k < in; k++) { /* not fmaxf, nor lrintf below: library calls without -ffast-math */
      const float a = fabsf(x[r * in + k]);
      top = a > top ? a : top;
    }
    const float inv = top > 0.f ? QMAX / top : 0.f;
    scale[r] = top / QMAX;
    for (int64_t k = 0; k < in; k++) {
      const int32_t u = (int32_t)rintf(x[r * in + k] * inv) + OFFSET; /* to nearest, ties to even */
      hi[r * in_p + k] = (uint8_t)(u >> 8);
      lo[r * in_p + k] = (uint8_t)(u & 255);
    }
  }
}

/* One output: the exact integer q . w (from the two digit sums), scaled. The same for both paths. */
static inline float finish(int32_t sum_hi, int32_t sum_lo, int32_t wsum, float row_scale, float out_scale,
                           const float *bias, int64_t o) {
  const int64_t dot = 256 * (int64_t)sum_hi + (int64_t)sum_lo - (int64_t)OFFSET * wsum;
  const float step = row_scale * out_scale;
  return bias ? fmaf((float)dot, step, bias[o]) : (float)dot * step; /* fmaf: one rounding on every path */
}

/* The plain loop: the digit sums from the packed tiles, one output at a time. */
static void plain_rows(const uint8_t *hi, const uint8_t *lo, const float *row_scale, const int8_t *packed,
                       const int32_t *wsum, const float *scales, const float *bias, float *y, int64_t rows,
                       int64_t in_p, int64_t out, int32_t threads) {
  const int64_t chunks = in_p / KCHUNK;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) {
    const int8_t *tiles = packed + (o / NBLOCK) * chunks * TILE_BYTES;
    const int64_t n = o % NBLOCK;
    for (int64_t r = 0; r < rows; r++) {
      int32_t sh = 0, sl = 0;
      for (int64_t k = 0; k < in_p; k++) {
        const int32_t wk = tiles[(k / KCHUNK) * TILE_BYTES + ((k % KCHUNK) / 4) * 64 + n * 4 + k % 4];
        sh += hi[r * in_p + k] * wk;
        sl += lo[r * in_p + k] * wk;
      }
      y[r * out + o] = finish(sh, sl, wsum[o], row_scale[r], scales[o], bias, o);
    }
  }
}

#ifdef HAVE_TILES
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

static int tiles_permitted(void) {
  static int state = 0; /* 0 unknown, 1 granted, -1 refused */
  if (state == 0) state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
  return state == 1;
}

/* Eight tiles of 16 rows x 64 bytes for this thread. GCC does not see that ldtilecfg reads the
 * configuration, and at -O3 dropped the stores of its rows and widths (seen: only the palette
 * byte written, then a fault): the empty asm that reads it keeps them. */
static void load_tile_config(void) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.rows[t] = MBLOCK;
    cfg.colsb[t] = 64;
  }
  __asm__ volatile("" : : "m"(cfg) : "memory");
  _tile_loadconfig(&cfg);
}

/* Tiles 0-3: sums (hi, block 0), (lo, block 0), (hi, block 1), (lo, block 1); 4, 5: hi, lo rows; 6, 7: weights. */
static void tile_rows(const uint8_t *hi, const uint8_t *lo, const float *row_scale, const int8_t *packed,
                      const int32_t *wsum, const float *scales, const float *bias, float *y, int64_t rows,
                      int64_t rows_p, int64_t in_p, int64_t out, int32_t threads) {
  const int64_t chunks = in_p / KCHUNK, pairs = round_up(out, 2 * NBLOCK) / (2 * NBLOCK);
#pragma omp parallel num_threads(threads)
  {
    load_tile_config();
    int32_t sums[4][MBLOCK][NBLOCK];
#pragma omp for schedule(static)
    for (int64_t p = 0; p < pairs; p++) {
      const int8_t *b0 = packed + 2 * p * chunks * TILE_BYTES, *b1 = b0 + chunks * TILE_BYTES;
      for (int64_t rb = 0; rb < rows_p; rb += MBLOCK) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t c = 0; c < chunks; c++) {
          _tile_loadd(4, hi + rb * in_p + c * KCHUNK, in_p);
          _tile_loadd(5, lo + rb * in_p + c * KCHUNK, in_p);
          _tile_loadd(6, b0 + c * TILE_BYTES, 64);
          _tile_loadd(7, b1 + c * TILE_BYTES, 64);
          _tile_dpbusd(0, 4, 6);
          _tile_dpbusd(1, 5, 6);
          _tile_dpbusd(2, 4, 7);
          _tile_dpbusd(3, 5, 7);
        }
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        _tile_stored(2, sums[2], 64);
        _tile_stored(3, sums[3], 64);
        for (int64_t m = 0; m < MBLOCK && rb + m < rows; m++)
          for (int half = 0; half < 2; half++)
            for (int64_t n = 0; n < NBLOCK; n++) {
              const int64_t o = (2 * p + half) * NBLOCK + n;
              if (o < out)
                y[(rb + m) * out + o] = finish(sums[2 * half][m][n], sums[2 * half + 1][m][n], wsum[o],
                                               row_scale[rb + m], scales[o], bias, o);
            }
      }
    }
    _tile_release();
  }
}
#endif

/* The tiles' int8 peak, for benchmarks' floors: `iterations` rounds of 4 independent tile multiplies
 * (16 x 16 x 64 multiply-adds each) on data already in the tiles; returns the multiply-adds done (the
 * caller times the call), 0 where the tiles cannot run. */
int64_t ssdbench_tiles_i8_peak(int64_t iterations) {
#ifdef HAVE_TILES
  if (!tiles_permitted()) return 0;
  static uint8_t data[TILE_BYTES];
  load_tile_config();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data, 64);
  _tile_loadd(6, data, 64);
  _tile_loadd(7, data, 64);
  for (int64_t it = 0; it < iterations; it++) {
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 5, 6);
    _tile_dpbusd(2, 4, 7);
    _tile_dpbusd(3, 5, 7);
  }
  _tile_release();
  return iterations * 4 * MBLOCK * NBLOCK * KCHUNK;
#else
  (void)iterations;
  return 0;
#endif
}

/* 1 where this library runs the tiles (compiled for AMX and the tile state granted), else 0. */
int ssdbench_tiles_i8_ready(void) {
#ifdef HAVE_TILES
  return tiles_permitted();
#else
  return 0;
#endif
}

/* x [rows, in] float32, packed and wsum from ssdbench_tiles_i8_pack, scales [out], bias [out] or NULL,
 * y [rows, out]. use_tiles 0 runs the plain loop. Returns 0; -1 without scratch memory; -3 when
 * tiles were asked for and cannot run here. */
int ssdbench_tiles_i8(const float *restrict x, const int8_t *restrict packed, const int32_t *restrict wsum,
                      const float *restrict scales, const float *restrict bias, float *restrict y, int64_t rows,
                      int64_t in, int64_t out, int32_t threads, int32_t use_tiles) {
  if (use_tiles && !ssdbench_tiles_i8_ready()) return -3;
  const int64_t in_p = round_up(in, KCHUNK), rows_p = round_up(rows, MBLOCK);
  uint8_t *hi = calloc((size_t)(rows_p * in_p), 1), *lo = calloc((size_t)(rows_p * in_p), 1);
  float *row_scale = malloc((size_t)rows * sizeof(float));
  int status = 0;
  if (!hi || !lo || !row_scale) {
    status = -1;
    goto done;
  }
  quantize_rows(x, hi, lo, row_scale, rows, in, in_p, threads);
#ifdef HAVE_TILES
  if (use_tiles) {
    tile_rows(hi, lo, row_scale, packed, wsum, scales, bias, y, rows, rows_p, in_p, out, threads);
    goto done;
  }
#endif
  plain_rows(hi, lo, row_scale, packed, wsum, scales, bias, y, rows, in_p, out, threads);
done:
  free(hi);
  free(lo);
  free(row_scale);
  return status;
}
