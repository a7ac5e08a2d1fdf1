/* One decoder layer of a one-token decode step, in one call: norms, projections (gemv.c), RoPE,
 * the KV-cache write, attention over the row's own chain and the MLP.
 *
 * A one-token step on a CPU does little arithmetic per weight, and launching its ~20 small
 * tensor operations per layer from Python cost about as much as reading the weights (a
 * SmolLM2-135M int8 draft step: 12.0 ms, of which ~6 ms int8 projections; fused, 8.4 ms). Here
 * the layer runs as plain loops; the projections are gemv.c's, so they read the weights as fast
 * as ever.
 *
 * Only the case the Python path handles with no mask: each of B rows decodes one token at its
 * own slot and sees every slot up to it (a causal chain). Trees, verifies and prefills keep the
 * Python path (llama.py). float32 throughout; the projections' weights float32 or int8.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemv.h"

/* A projection as the Python side hands it over: int8 when scales is not NULL. */
typedef struct {
  const void *w;        /* [out, in], float32 or int8 */
  const float *scales;  /* [out] (int8) or NULL (float32) */
  const float *bias;    /* [out] or NULL */
  int64_t in, out;
} projection;

static void project(const projection *p, const float *x, float *y, int64_t rows, int32_t threads) {
  if (p->scales)
    ssdbench_gemv_i8(x, (const int8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  else
    ssdbench_gemv_f32(x, (const float *)p->w, p->bias, y, rows, p->in, p->out, threads);
}

/* y = x / sqrt(mean(x^2) + eps) * w over n values. */
static void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

/* RoPE with sign-folded sin (llama.py's tables): x[i] * cos[i] + x[(i + d/2) % d] * sin[i]. */
static void rope(float *x, const float *cos_t, const float *sin_t, int64_t d) {
  float tmp[1024];
  const int64_t half = d / 2;
  for (int64_t i = 0; i < d; i++) tmp[i] = x[i] * cos_t[i] + x[(i + half) % d] * sin_t[i];
  memcpy(x, tmp, (size_t)d * sizeof(float));
}

typedef struct {
  int64_t rows, hidden, heads, kv_heads, head_dim, max_len;
  float eps, scale;
  int32_t threads;
} layer_dims;

/* Attention of one row's heads over slots [0, slot]: out [H, D]. k, v: this row's cache [Hkv, S_max, D]. */
static void attend_row(const float *q, const float *k, const float *v, float *out, int64_t slot,
                       const layer_dims *s, float *scores) {
  const int64_t group = s->heads / s->kv_heads, d = s->head_dim;
  for (int64_t h = 0; h < s->heads; h++) {
    const float *qh = q + h * d;
    const float *kh = k + (h / group) * s->max_len * d, *vh = v + (h / group) * s->max_len * d;
    float top = -INFINITY;
    for (int64_t j = 0; j <= slot; j++) {
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; i++) dot += qh[i] * kh[j * d + i];
      scores[j] = dot * s->scale;
      if (scores[j] > top) top = scores[j];
    }
    float total = 0.f;
    for (int64_t j = 0; j <= slot; j++) total += (scores[j] = expf(scores[j] - top));
    float *oh = out + h * d;
    memset(oh, 0, (size_t)d * sizeof(float));
    for (int64_t j = 0; j <= slot; j++) {
      const float p = scores[j] / total;
      for (int64_t i = 0; i < d; i++) oh[i] += p * vh[j * d + i];
    }
  }
}

/* x [B, hidden] (the residual stream, updated in place); cos, sin [B, D] at each row's position;
 * k_cache, v_cache: this layer's [B, Hkv, S_max, D]; slots [B]. q_norm, k_norm [D] or NULL.
 * Returns 0, or -1 when scratch memory could not be had. */
int ssdbench_decode_layer(float *x, const float *attn_norm, const float *mlp_norm, const projection *qkv,
                          const projection *o, const projection *gate_up, const projection *down,
                          const float *q_norm, const float *k_norm, const float *cos_t, const float *sin_t,
                          float *k_cache, float *v_cache, const int64_t *slots, const layer_dims *s) {
  const int64_t b = s->rows, hid = s->hidden, d = s->head_dim, h = s->heads, hkv = s->kv_heads;
  const int64_t width = (h + 2 * hkv) * d, inter = gate_up->out / 2;
  if (d > 1024) return -1;
  float *normed = malloc((size_t)(b * hid) * sizeof(float));
  float *proj = malloc((size_t)(b * (width > 2 * inter ? width : 2 * inter)) * sizeof(float));
  float *attn = malloc((size_t)(b * (h * d > inter ? h * d : inter)) * sizeof(float));
  float *delta = malloc((size_t)(b * hid) * sizeof(float));
  float *scores = malloc((size_t)s->max_len * sizeof(float));
  int status = 0;
  if (!normed || !proj || !attn || !delta || !scores) {
    status = -1;
    goto done;
  }
  for (int64_t r = 0; r < b; r++) rms_norm(x + r * hid, attn_norm, normed + r * hid, hid, s->eps);
  project(qkv, normed, proj, b, s->threads); /* [B, (H + 2 Hkv) D] */
  for (int64_t r = 0; r < b; r++) {
    float *row = proj + r * width; /* q [H, D], k [Hkv, D], v [Hkv, D] */
    const float *c = cos_t + r * d, *sn = sin_t + r * d;
    for (int64_t n = 0; n < h + hkv; n++) {
      float *head = row + n * d;
      const float *norm = n < h ? q_norm : k_norm;
      if (norm) rms_norm(head, norm, head, d, s->eps);
      rope(head, c, sn, d);
    }
    const int64_t slot = slots[r];
    for (int64_t g = 0; g < hkv; g++) {
      const int64_t at = ((r * hkv + g) * s->max_len + slot) * d;
      memcpy(k_cache + at, row + (h + g) * d, (size_t)d * sizeof(float));
      memcpy(v_cache + at, row + (h + hkv + g) * d, (size_t)d * sizeof(float));
    }
    const int64_t row_cache = r * hkv * s->max_len * d;
    attend_row(row, k_cache + row_cache, v_cache + row_cache, attn + r * h * d, slot, s, scores);
  }
  project(o, attn, delta, b, s->threads); /* [B, hidden] */
  for (int64_t i = 0; i < b * hid; i++) x[i] += delta[i];
  for (int64_t r = 0; r < b; r++) rms_norm(x + r * hid, mlp_norm, normed + r * hid, hid, s->eps);
  project(gate_up, normed, proj, b, s->threads); /* [B, 2 I]: gate, then up */
  for (int64_t r = 0; r < b; r++)
    for (int64_t i = 0; i < inter; i++) {
      const float gate = proj[r * 2 * inter + i], up = proj[r * 2 * inter + inter + i];
      attn[r * inter + i] = gate / (1.f + expf(-gate)) * up;
    }
  project(down, attn, delta, b, s->threads); /* [B, hidden] */
  for (int64_t i = 0; i < b * hid; i++) x[i] += delta[i];
done:
  free(normed);
  free(proj);
  free(attn);
  free(delta);
  free(scores);
  return status;
}
