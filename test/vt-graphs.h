/*
 * Task graphs for the virtual-time driver (runtime/sched/policy.h), shared by
 * test-vtime and bench-sched: a builder that infers dependencies from the
 * data accesses as Tandem does (RAW, WAR, WAW), a tiled GEMM and a tiled
 * Cholesky. Header-only.
 */
#ifndef TDM_VT_GRAPHS_H
#define TDM_VT_GRAPHS_H

#include <stdio.h>
#include <string.h>

#include "sched/policy.h"

enum { GEMM, SMALL, POTRF, TRSM, SYRK };

/* A graph builder: tasks with their data and dependencies (large: keep
 * it static). Up to 32x32 tiles (GEMM: 32,768 tasks). */
#define VT_MAX_TILES 32
#define VT_MAX_TASKS (VT_MAX_TILES * VT_MAX_TILES * VT_MAX_TILES)
#define VT_MAX_DATA 4096
typedef struct builder {
  tdm_vt_task tasks[VT_MAX_TASKS];
  unsigned deps[VT_MAX_TASKS][16];
  unsigned ntasks;
  uint64_t bytes[VT_MAX_DATA];
  unsigned ndata;
  /* the last writer of each data item, and its readers since */
  int writer[VT_MAX_DATA];
  unsigned readers[VT_MAX_DATA][64], nreaders[VT_MAX_DATA];
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
  unsigned A[VT_MAX_TILES][VT_MAX_TILES], B[VT_MAX_TILES][VT_MAX_TILES],
      C[VT_MAX_TILES][VT_MAX_TILES];
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
  unsigned A[VT_MAX_TILES][VT_MAX_TILES];
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

/* nt * nt * nt independent gemm-sized tasks, each on a tile of its own
 * (width: no dependency at all). */
static inline void independent(builder *b, unsigned nt) {
  memset(b, 0, sizeof *b);
  unsigned n = nt * nt * nt, ndata = n < VT_MAX_DATA ? n : VT_MAX_DATA;
  for (unsigned i = 0; i < ndata; i++)
    data(b, TILE_BYTES);
  for (unsigned i = 0; i < n; i++) /* tiles shared only by readers */
    task(b, GEMM, TILE_GEMM, 1, (unsigned[]){i % ndata}, (uint8_t[]){TDM_R});
}

/* A 1-D stencil: nt * nt cells (tiles), nt steps; cell i at step s reads
 * cells i-1, i, i+1 of step s-1 and writes cell i of step s (two
 * generations of tiles, as a double buffer). */
static inline void stencil(builder *b, unsigned nt) {
  memset(b, 0, sizeof *b);
  unsigned w = nt * nt, gen[2][VT_MAX_TILES * VT_MAX_TILES];
  for (unsigned g = 0; g < 2; g++)
    for (unsigned i = 0; i < w; i++)
      gen[g][i] = data(b, TILE_BYTES);
  for (unsigned s = 0; s < nt; s++) {
    const unsigned *in = gen[s % 2], *out = gen[(s + 1) % 2];
    for (unsigned i = 0; i < w; i++)
      task(b, GEMM, TILE_GEMM, 4,
           (unsigned[]){in[i ? i - 1 : i], in[i], in[i + 1 < w ? i + 1 : i], out[i]},
           (uint8_t[]){TDM_R, TDM_R, TDM_R, TDM_W});
  }
}

/* The graphs of bench-sched's table (test-vtime asserts targets on them). */
typedef struct vt_graph_def {
  const char *name;
  void (*build)(builder *, unsigned);
} vt_graph_def;

static const vt_graph_def vt_graphs[] = {{"tiled GEMM", tiled_gemm},
                                         {"tiled Cholesky", tiled_cholesky},
                                         {"independent tasks", independent},
                                         {"1-D stencil", stencil}};
#define VT_NGRAPHS (sizeof vt_graphs / sizeof vt_graphs[0])

/* The machines of bench-sched's table (test-vtime asserts targets on
 * some): a CPU of `cpus` cores, efficiency cores, an integrated GPU,
 * discrete GPUs of the given speeds on links of 10 us and 10 GB/s, one
 * per GPU or one per `per_link` GPUs, copying between each other
 * through the host or, with `peer`, straight (peer to peer, as GPUs
 * behind one PCIe switch do, or two GPUs of one OpenCL context). */
typedef struct vt_machine_def {
  const char *name;
  unsigned cpus;
  unsigned ecores;       /* efficiency cores (a hybrid chip), 0.6x a core */
  unsigned igpus, dgpus; /* of each kind */
  double dgpu_scale[8];  /* speed of each discrete GPU against the reference */
  unsigned per_link;     /* discrete GPUs behind one PCIe link (0, 1: each its own) */
  double peer;           /* bytes/s of copies straight between GPUs; 0: through the host */
} vt_machine_def;

static const vt_machine_def vt_machines[] = {
    {"2 CPU cores", 2, 0, 0, 0, {0}, 0, 0},
    {"2 cores + integrated GPU", 2, 0, 1, 0, {0}, 0, 0},
    {"2 cores + discrete GPU", 2, 0, 0, 1, {1}, 0, 0},
    {"2 cores + 2 discrete GPUs (1x, 0.5x)", 2, 0, 0, 2, {1, 0.5}, 0, 0},
    {"4 P + 8 E cores + integrated GPU", 4, 8, 1, 0, {0}, 0, 0},
    {"16 cores + discrete GPU", 16, 0, 0, 1, {1}, 0, 0},
    {"64 cores + 8 dGPUs, own links", 64, 0, 0, 8, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 0},
    {"64 cores + 8 dGPUs, a link per pair", 64, 0, 0, 8, {1, 1, 1, 1, 1, 1, 1, 1}, 2, 0},
    {"64 cores + 8 dGPUs, pairs, GPU to GPU", 64, 0, 0, 8, {1, 1, 1, 1, 1, 1, 1, 1}, 2, 10e9},
};

#define VT_NMACHINES (sizeof vt_machines / sizeof vt_machines[0])

static inline tdm_vt_machine vt_machine(const vt_machine_def *d) {
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nnodes = 1;
  m.classes[0] = (struct tdm_vt_class){.name = "CPU cores", .workers = d->cpus, .node = 0};
  for (int k = 0; k < 8; k++)
    m.classes[0].speedup[k] = 1;
  m.nclasses = 1;
  if (d->ecores) {
    struct tdm_vt_class *c = &m.classes[m.nclasses++];
    *c = (struct tdm_vt_class){.name = "E cores", .workers = d->ecores, .node = 0};
    for (int k = 0; k < 8; k++)
      c->speedup[k] = 0.6;
  }
  static const double ref[8] = {[GEMM] = 10, [SMALL] = 0.5, [POTRF] = 2, [TRSM] = 8, [SYRK] = 8};
  if (d->igpus) {
    struct tdm_vt_class *c = &m.classes[m.nclasses++];
    *c = (struct tdm_vt_class){.name = "integrated GPU", .workers = d->igpus, .node = 0};
    for (int k = 0; k < 8; k++)
      c->speedup[k] = ref[k] / 3;
  }
  unsigned first = m.nnodes;
  for (unsigned g = 0; g < d->dgpus; g++) {
    struct tdm_vt_class *c = &m.classes[m.nclasses++];
    /* a GPU of another speed has another name, as a real device would */
    *c = (struct tdm_vt_class){.workers = 1, .node = m.nnodes};
    snprintf(c->name, sizeof c->name, "discrete GPU %gx", d->dgpu_scale[g]);
    for (int k = 0; k < 8; k++)
      c->speedup[k] = ref[k] * d->dgpu_scale[g];
    m.latency[m.nnodes] = 10e-6;
    m.bandwidth[m.nnodes] = 10e9;
    m.peer[m.nnodes] = d->peer;
    if (d->per_link > 1 && g % d->per_link) /* behind the first GPU's link */
      m.link_of[m.nnodes] = first + g - g % d->per_link;
    m.nnodes++;
  }
  return m;
}

#endif
