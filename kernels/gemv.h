/* gemv.c's, packed_f32.c's, dot_i8.c's, tiles_i8.c's and vnni_i8.c's projections, for the other kernels built into the same library (decode_layer.c). */
#ifndef SSDBENCH_GEMV_H
#define SSDBENCH_GEMV_H
#include <stdint.h>

void ssdbench_gemv_f32(const float *restrict x, const float *restrict w, const float *restrict b,
                       float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads);
void ssdbench_gemv_i8(const float *restrict x, const int8_t *restrict w, const float *restrict scales,
                      const float *restrict b, float *restrict y, int64_t rows, int64_t in, int64_t out,
                      int32_t threads);
int ssdbench_dot_i8(const float *restrict x, const int8_t *restrict w, const float *restrict scales,
                    const float *restrict bias, float *restrict y, int64_t rows, int64_t in, int64_t out,
                    int32_t threads);
int ssdbench_tiles_i8(const float *restrict x, const int8_t *restrict packed, const int32_t *restrict wsum,
                      const float *restrict scales, const float *restrict bias, float *restrict y, int64_t rows,
                      int64_t in, int64_t out, int32_t threads, int32_t use_tiles);
int ssdbench_vnni_i8(const float *restrict x, const uint8_t *restrict packed, const float *restrict scales,
                     const float *restrict bias, float *restrict y, int64_t rows, int64_t in, int64_t out,
                     int32_t threads);
void ssdbench_packed_f32(const float *restrict x, const float *restrict packed, const float *restrict b,
                         float *restrict y, int64_t rows, int64_t in, int64_t out, int32_t threads);
#endif
