/* Row-streaming dense projection for few rows: y[r, o] = x[r, :] . w[o, :] (+ b[o]), float32.
 *
 * Decoding one token reads every weight once and does two flops per weight, so it is bound
 * by memory bandwidth. Library GEMMs are tuned for many rows: they repack or tile the weight
 * and reach a fraction of the read bandwidth for one row. Here each output's weight row
 * [in] is read once, front to back, as one dot product per input row; the threads split
 * the outputs. Each output's sum is accumulated in the same order whatever the row count,
 * so a row's result does not depend on how many rows share the call (a K+1-token verify
 * gives bitwise the logits a one-token step would).
 *
 * Compiled on the machine that runs it (gemv.py: -O3 -march=native -fopenmp), so the
 * vector width is whatever this CPU has (AVX-512, AVX2, ...), and loaded after torch, so
 * its OpenMP regions use torch's own thread pool (the same libgomp).
 */
#include <stdint.h>

static float dot(const float *restrict x, const float *restrict w, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += x[i] * w[i];
  return s;
}

/* x [rows, in], w [out, in], b [out] or NULL, y [rows, out]; all contiguous. */
void ssdbench_gemv_f32(const float *restrict x, const float *restrict w, const float *restrict b,
                       float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t o = 0; o < out; o++) {
    const float *wo = w + o * in;
    const float bias = b ? b[o] : 0.f;
    for (int64_t r = 0; r < rows; r++) y[r * out + o] = dot(x + r * in, wo, in) + bias;
  }
}
