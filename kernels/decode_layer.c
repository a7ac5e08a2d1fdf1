/* One decoder layer of a decode step, in one call: norms, projections (gemv.c), RoPE, the
 * KV-cache writes, attention over each token row's visible slots (attention.c), and the MLP.
 *
 * A CPU decode step does little arithmetic per weight; launching its ~20 small tensor operations per
 * layer from Python cost about as much as reading the weights (a SmolLM2-135M int8 draft step: 12.0 ms
 * unfused, 8.4 ms fused). The projections (gemv.c, dot_i8.c, tiles_i8.c, vnni_i8.c) read each weight once
 * per step for all token rows.
 *
 * A step holds N token rows: any number of tokens of any of the cache's B sequences (one token
 * per sequence, a K+1-token verify, ssd's glue chunk, a tree of branches). Every row's K/V is
 * written before any row attends, so rows of one sequence see each other as the Python path's
 * forward does. Row n attends over its sequence's slots [0, span) where mask[n, j] is set, or,
 * with no mask, over the causal chain [0, slots[n]]. float32 throughout; the projections'
 * weights float32 or int8.
 *
 * Threads: projections split outputs (gemv.c); norms, RoPE, SiLU split rows; attention splits (sequence, KV head).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode_layer.h"
#include "gemv.h"
#include "slot_vec.h"

#define MAX_HEAD_DIM 1024

/* A projection as the Python side hands it over: int8 when scales is not NULL. */
typedef struct {
  const void *w;        /* [out, in], float32 or int8 */
  const float *scales;  /* [out] (int8) or NULL (float32) */
  const float *bias;    /* [out] or NULL */
  int64_t in, out;
  int32_t int8_inputs;  /* int8 weights only: 0 widens the weights (gemv.c), 1 quantises the inputs per block
                           (dot_i8.c), 2 per row on AMX tiles (tiles_i8.c: w is its packed layout), 3 per
                           block against vnni_i8.c's packed layout; float32 weights: 0 gemv.c, 4
                           packed_f32.c's packed layout */
  const int32_t *wsum;  /* tiles_i8.c's sum of each output's weights [out], else NULL */
} projection;


static int project(const projection *p, const float *x, float *y, int64_t rows, int32_t threads) {
  if (p->scales && p->int8_inputs == 3)
    return ssdbench_vnni_i8(x, (const uint8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  if (p->scales && p->int8_inputs == 2)
    return ssdbench_tiles_i8(x, (const int8_t *)p->w, p->wsum, p->scales, p->bias, y, rows, p->in, p->out, threads, 1);
  if (p->scales && p->int8_inputs)
    return ssdbench_dot_i8(x, (const int8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  if (!p->scales && p->int8_inputs == 4)
    ssdbench_packed_f32(x, (const float *)p->w, p->bias, y, rows, p->in, p->out, threads);
  else if (p->scales)
    ssdbench_gemv_i8(x, (const int8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  else
    ssdbench_gemv_f32(x, (const float *)p->w, p->bias, y, rows, p->in, p->out, threads);
  return 0;
}

/* y = x / sqrt(mean(x^2) + eps) * w over n values. */
static void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

static void rms_norm_rows(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps,
                          int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows > 1)
  for (int64_t r = 0; r < rows; r++) rms_norm(x + r * n, w, y + r * n, n, eps);
}

/* RoPE with sign-folded sin (llama.py's tables): x[i] * cos[i] + x[(i + d/2) % d] * sin[i]. */
static void rope(float *x, const float *cos_t, const float *sin_t, int64_t d) {
  float tmp[MAX_HEAD_DIM];
  const int64_t half = d / 2;
  /* The two halves apart, with the same terms as x[i] cos + x[(i + half) % d] sin: without the modulo the
   * loops vectorise (rope had been ~4% of the int8 draft's 140-token prefill, one core of an AMD EPYC). */
  for (int64_t i = 0; i < half; i++) tmp[i] = x[i] * cos_t[i] + x[i + half] * sin_t[i];
  for (int64_t i = half; i < d; i++) tmp[i] = x[i] * cos_t[i] + x[i - half] * sin_t[i];
  memcpy(x, tmp, (size_t)d * sizeof(float));
}


/* y = silu(gate) * up over n values: gate / (1 + e^-gate) * up. */
static void silu_times(const float *gate, const float *up, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + SLOT_BLOCK <= n; i += SLOT_BLOCK) {
    slot_vec g, u;
    memcpy(&g, gate + i, sizeof g);
    memcpy(&u, up + i, sizeof u);
    slot_vec e = -g;
    vector_exp(&e);
    g = g / (1.f + e) * u;
    memcpy(y + i, &g, sizeof g);
  }
  for (; i < n; i++) y[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
}
/* x [N, hidden] (the residual stream, updated in place); cos, sin [N, D] at each row's position;
 * k_cache, v_cache: this layer's [B, Hkv, S_max, D]; key_blocks: its keys again in transposed blocks
 * [B, Hkv, S_max / SLOT_BLOCK, D, SLOT_BLOCK] (written here too), or NULL; seq [N]: each row's sequence (cache row);
 * slots [N]: where each row's K/V goes; mask [N, span] (uint8) or NULL for the causal chain.
 * q_norm, k_norm [D] or NULL. Returns 0; -1 when scratch memory could not be had; -2 when a
 * sequence, slot or span lies outside the cache (nothing is written then); -3 when a projection
 * on AMX tiles cannot run here. */
int ssdbench_decode_layer(float *x, const float *attn_norm, const float *mlp_norm, const projection *qkv,
                          const projection *o, const projection *gate_up, const projection *down,
                          const float *q_norm, const float *k_norm, const float *cos_t, const float *sin_t,
                          float *k_cache, float *key_blocks, float *v_cache, const int64_t *seq,
                          const int64_t *slots, const uint8_t *mask, const layer_dims *s) {
  const int64_t n_rows = s->rows, hid = s->hidden, d = s->head_dim, h = s->heads, hkv = s->kv_heads;
  const int64_t width = (h + 2 * hkv) * d, inter = gate_up->out / 2;
  const int32_t threads = s->threads;
  if (d > MAX_HEAD_DIM) return -1;
  if (mask && (s->span < 1 || s->span > s->max_len)) return -2;
  for (int64_t n = 0; n < n_rows; n++) /* the Python path raises on these: never write outside the cache */
    if (seq[n] < 0 || seq[n] >= s->batch || slots[n] < 0 || slots[n] >= s->max_len) return -2;
  float *normed = malloc((size_t)(n_rows * hid) * sizeof(float));
  float *proj = malloc((size_t)(n_rows * (width > 2 * inter ? width : 2 * inter)) * sizeof(float));
  float *attn = malloc((size_t)(n_rows * (h * d > inter ? h * d : inter)) * sizeof(float));
  float *delta = malloc((size_t)(n_rows * hid) * sizeof(float));
  int status = 0;
  if (!normed || !proj || !attn || !delta) {
    status = -1;
    goto done;
  }
  rms_norm_rows(x, attn_norm, normed, n_rows, hid, s->eps, threads);
  if ((status = project(qkv, normed, proj, n_rows, threads)) != 0) goto done; /* [N, (H + 2 Hkv) D] */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n_rows > 1)
  for (int64_t n = 0; n < n_rows; n++) {
    float *row = proj + n * width; /* q [H, D], k [Hkv, D], v [Hkv, D] */
    const float *c = cos_t + n * d, *sn = sin_t + n * d;
    for (int64_t head = 0; head < h + hkv; head++) {
      float *part = row + head * d;
      const float *norm = head < h ? q_norm : k_norm;
      if (norm) rms_norm(part, norm, part, d, s->eps);
      rope(part, c, sn, d);
    }
  }
  for (int64_t n = 0; n < n_rows; n++) /* every row's K/V before any row attends */
    for (int64_t g = 0; g < hkv; g++) {
      const int64_t at = ((seq[n] * hkv + g) * s->max_len + slots[n]) * d;
      const float *key = proj + n * width + (h + g) * d;
      memcpy(k_cache + at, key, (size_t)d * sizeof(float));
      memcpy(v_cache + at, proj + n * width + (h + hkv + g) * d, (size_t)d * sizeof(float));
      if (key_blocks) { /* slot j, dim i at block j / SLOT_BLOCK, [i][j % SLOT_BLOCK] */
        float *block = key_blocks + (seq[n] * hkv + g) * key_block_floats(s) + slots[n] / SLOT_BLOCK * SLOT_BLOCK * d;
        for (int64_t i = 0; i < d; i++) block[i * SLOT_BLOCK + slots[n] % SLOT_BLOCK] = key[i];
      }
    }
  if (ssdbench_attend_rows(proj, k_cache, key_blocks, v_cache, attn, seq, slots, mask, s) != 0) {
    status = -1;
    goto done;
  }
  if ((status = project(o, attn, delta, n_rows, threads)) != 0) goto done; /* [N, hidden] */
  for (int64_t i = 0; i < n_rows * hid; i++) x[i] += delta[i];
  rms_norm_rows(x, mlp_norm, normed, n_rows, hid, s->eps, threads);
  if ((status = project(gate_up, normed, proj, n_rows, threads)) != 0) goto done; /* [N, 2 I]: gate, then up */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n_rows > 1)
  for (int64_t n = 0; n < n_rows; n++) {
    const float *gate = proj + n * 2 * inter; /* gate [I], then up [I] */
    silu_times(gate, gate + inter, attn + n * inter, inter);
  }
  if ((status = project(down, attn, delta, n_rows, threads)) != 0) goto done; /* [N, hidden] */
  for (int64_t i = 0; i < n_rows * hid; i++) x[i] += delta[i];
done:
  free(normed);
  free(proj);
  free(attn);
  free(delta);
  return status;
}
