/* Tile kernels of dense linear algebra in plain C, for the tests and
 * benchmarks of tiled algorithms (test-mpi, bench-mpi): a tile is a
 * tdm_buffer of doubles, rows ld apart. */
#ifndef TDM_TEST_TILES_H
#define TDM_TEST_TILES_H

#include <math.h>
#include <stddef.h>

#include "tandem.h"

#define AT(b, r, c) (((double *)(b).ptr)[(r) * (b).ld + (c)])

/* C += A B (gemm_nn), or C -= A B^T (gemm_nt) */
static inline void gemm_nn(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  for (size_t r = 0; r < b[2].nx; r++)
    for (size_t c = 0; c < b[2].ny; c++) {
      double s = 0;
      for (size_t k = 0; k < b[0].ny; k++)
        s += AT(b[0], r, k) * AT(b[1], k, c);
      AT(b[2], r, c) += s;
    }
}
static inline void gemm_nt(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  for (size_t r = 0; r < b[2].nx; r++)
    for (size_t c = 0; c < b[2].ny; c++) {
      double s = 0;
      for (size_t k = 0; k < b[0].ny; k++)
        s += AT(b[0], r, k) * AT(b[1], c, k);
      AT(b[2], r, c) -= s;
    }
}
/* the lower Cholesky factor in place (the upper part zeroed) */
static inline void potrf(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  for (size_t j = 0; j < b[0].nx; j++) {
    double d = AT(b[0], j, j);
    for (size_t k = 0; k < j; k++)
      d -= AT(b[0], j, k) * AT(b[0], j, k);
    d = sqrt(d);
    AT(b[0], j, j) = d;
    for (size_t i = j + 1; i < b[0].nx; i++) {
      double s = AT(b[0], i, j);
      for (size_t k = 0; k < j; k++)
        s -= AT(b[0], i, k) * AT(b[0], j, k);
      AT(b[0], i, j) = s / d;
      AT(b[0], j, i) = 0;
    }
  }
}
/* X L^T = A: A (buffer 1) overwritten by X, L (buffer 0) lower */
static inline void trsm(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  for (size_t r = 0; r < b[1].nx; r++)
    for (size_t c = 0; c < b[1].ny; c++) {
      double s = AT(b[1], r, c);
      for (size_t k = 0; k < c; k++)
        s -= AT(b[1], r, k) * AT(b[0], c, k);
      AT(b[1], r, c) = s / AT(b[0], c, c);
    }
}

/* Their codelets (CPU variants), by the buffers' modes. */
static const tdm_codelet gemm_nn_cl = {.name = "gemm", .cpu_fn = gemm_nn, .nbuffers = 3,
                                       .modes = {TDM_R, TDM_R, TDM_RW}};
static const tdm_codelet gemm_nt_cl = {.name = "gemm-nt", .cpu_fn = gemm_nt, .nbuffers = 3,
                                       .modes = {TDM_R, TDM_R, TDM_RW}};
static const tdm_codelet potrf_cl = {.name = "potrf", .cpu_fn = potrf, .nbuffers = 1,
                                     .modes = {TDM_RW}};
static const tdm_codelet trsm_cl = {.name = "trsm", .cpu_fn = trsm, .nbuffers = 2,
                                    .modes = {TDM_R, TDM_RW}};

#endif
