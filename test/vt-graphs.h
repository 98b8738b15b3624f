/*
 * Task graphs for the virtual-time driver (runtime/sched/policy.h), shared by
 * test-vtime and bench-sched: a builder that infers dependencies from the
 * data accesses as Tandem does (RAW, WAR, WAW), a tiled GEMM and a tiled
 * Cholesky. Header-only.
 */
#ifndef TDM_VT_GRAPHS_H
#define TDM_VT_GRAPHS_H

#include <string.h>

#include "sched/policy.h"

enum { GEMM, SMALL, POTRF, TRSM, SYRK };

/* A graph builder: tasks with their data and dependencies. */
typedef struct builder {
  tdm_vt_task tasks[4096];
  unsigned deps[4096][16];
  unsigned ntasks;
  uint64_t bytes[1024];
  unsigned ndata;
  /* the last writer of each data item, and its readers since */
  int writer[1024];
  unsigned readers[1024][64], nreaders[1024];
} builder;

static inline unsigned data(builder *b, uint64_t bytes) {
  b->bytes[b->ndata] = bytes;
  b->writer[b->ndata] = -1;
  b->nreaders[b->ndata] = 0;
  return b->ndata++;
}

/* Adds a task; its dependencies follow from the accesses, as Tandem
 * infers them (RAW, WAR, WAW). */
static inline unsigned task(builder *b, unsigned codelet, double cpu_time, unsigned n,
                     const unsigned *items, const uint8_t *modes) {
  unsigned id = b->ntasks++;
  tdm_vt_task *t = &b->tasks[id];
  memset(t, 0, sizeof *t);
  t->codelet = codelet;
  t->cpu_time = cpu_time;
  t->nbuf = n;
  t->deps = b->deps[id];
  for (unsigned i = 0; i < n; i++) {
    unsigned d = items[i];
    t->data[i] = d;
    t->modes[i] = modes[i];
    if (b->writer[d] >= 0)
      b->deps[id][t->ndeps++] = (unsigned)b->writer[d];
    if (modes[i] & TDM_W) {
      for (unsigned k = 0; k < b->nreaders[d] && t->ndeps < 16; k++)
        if (b->readers[d][k] != id)
          b->deps[id][t->ndeps++] = b->readers[d][k];
      b->writer[d] = (int)id;
      b->nreaders[d] = 0;
    } else if (b->nreaders[d] < 64) {
      b->readers[d][b->nreaders[d]++] = id;
    }
  }
  return id;
}

static inline tdm_vt_graph graph(const builder *b) {
  return (tdm_vt_graph){b->ntasks, b->tasks, b->ndata, b->bytes};
}

static const double TILE_GEMM = 10e-3; /* seconds of one core for a tile's gemm */
static const uint64_t TILE_BYTES = 2u << 20;

static inline void tiled_gemm(builder *b, unsigned nt) {
  memset(b, 0, sizeof *b);
  unsigned A[8][8], B[8][8], C[8][8];
  for (unsigned i = 0; i < nt; i++)
    for (unsigned j = 0; j < nt; j++) {
      A[i][j] = data(b, TILE_BYTES);
      B[i][j] = data(b, TILE_BYTES);
      C[i][j] = data(b, TILE_BYTES);
    }
  for (unsigned i = 0; i < nt; i++)
    for (unsigned j = 0; j < nt; j++)
      for (unsigned k = 0; k < nt; k++)
        task(b, GEMM, TILE_GEMM, 3, (unsigned[]){A[i][k], B[k][j], C[i][j]},
             (uint8_t[]){TDM_R, TDM_R, TDM_RW});
}

/* Right-looking tiled Cholesky (Buttari et al., "A class of parallel tiled
 * linear algebra algorithms for multicore architectures", 2009): potrf,
 * trsm, syrk and gemm on the lower triangle of tiles. */
static inline void tiled_cholesky(builder *b, unsigned nt) {
  memset(b, 0, sizeof *b);
  unsigned A[8][8];
  for (unsigned i = 0; i < nt; i++)
    for (unsigned j = 0; j <= i; j++)
      A[i][j] = data(b, TILE_BYTES);
  for (unsigned k = 0; k < nt; k++) {
    task(b, POTRF, TILE_GEMM / 6, 1, (unsigned[]){A[k][k]}, (uint8_t[]){TDM_RW});
    for (unsigned i = k + 1; i < nt; i++)
      task(b, TRSM, TILE_GEMM / 2, 2, (unsigned[]){A[k][k], A[i][k]},
           (uint8_t[]){TDM_R, TDM_RW});
    for (unsigned i = k + 1; i < nt; i++) {
      task(b, SYRK, TILE_GEMM / 2, 2, (unsigned[]){A[i][k], A[i][i]},
           (uint8_t[]){TDM_R, TDM_RW});
      for (unsigned j = k + 1; j < i; j++)
        task(b, GEMM, TILE_GEMM, 3, (unsigned[]){A[i][k], A[j][k], A[i][j]},
             (uint8_t[]){TDM_R, TDM_R, TDM_RW});
    }
  }
}

#endif
