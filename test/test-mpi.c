/*
 * Tandem over MPI ranks (libtandem-mpi), run by mpirun with 1 to 4 ranks
 * on one machine:
 *
 *   mpirun --oversubscribe -np N test-mpi          the tests below
 *   mpirun -np 1 test-mpi funneled                 the thread level refused
 *
 * A known graph: every message counted exactly (each version a rank
 * needs sent once, none twice), the values right on every rank after a
 * fetch. A matrix whose rows are apart (ld past its columns). A random DAG over handles of random owners, for several seeds:
 * the data on each owner equal to a sequential run of the same
 * submissions (every rank runs it: every rank sees every submission).
 * Tiled GEMM and Cholesky, 2-D block-cyclic and weighted, bit for bit
 * those of the same tile operations run in order on one rank.
 * Refusals. A failed check aborts every rank (MPI_Abort), so that a
 * failure never hangs the others.
 */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem.h"
#include "tandem/mpi.h"
#include "tiles.h"

static int rank = -1, size = 0;

/* ---- MPI calls that overlap --------------------------------------------------- */

/* The MPI calls libtandem-mpi makes, seen through MPI's profiling
 * interface (this program's definitions come first): under
 * MPI_THREAD_SERIALIZED no two may run at once in the process, whatever
 * thread and tdm_mpi make them. */
static _Atomic int in_mpi, overlapped;
static bool widen; /* each call lasts 20 us more: overlaps, if allowed, show */
#define ENTER()                                                                \
  do {                                                                         \
    if (atomic_fetch_add(&in_mpi, 1))                                          \
      atomic_fetch_add(&overlapped, 1);                                        \
    if (widen)                                                                 \
      nanosleep(&(struct timespec){0, 20000}, NULL);                           \
  } while (0)
#define LEAVE() atomic_fetch_sub(&in_mpi, 1)
int MPI_Isend(const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm m, MPI_Request *r) {
  ENTER();
  int rc = PMPI_Isend(b, c, t, d, g, m, r);
  LEAVE();
  return rc;
}
int MPI_Irecv(void *b, int c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Request *r) {
  ENTER();
  int rc = PMPI_Irecv(b, c, t, s, g, m, r);
  LEAVE();
  return rc;
}
int MPI_Testsome(int n, MPI_Request *r, int *k, int *i, MPI_Status *s) {
  ENTER();
  int rc = PMPI_Testsome(n, r, k, i, s);
  LEAVE();
  return rc;
}
int MPI_Comm_dup(MPI_Comm c, MPI_Comm *n) {
  ENTER();
  int rc = PMPI_Comm_dup(c, n);
  LEAVE();
  return rc;
}
int MPI_Comm_free(MPI_Comm *c) {
  ENTER();
  int rc = PMPI_Comm_free(c);
  LEAVE();
  return rc;
}

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond))                                                               \
      fail("%s:%d: %s", __FILE__, __LINE__, #cond);                            \
  } while (0)
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_)                                                              \
      fail("%s:%d: %s is %lld, not %lld", __FILE__, __LINE__, #a, a_, b_);   \
  } while (0)

/* With `devices`, each rank an emulated device with memory of its own
 * (or, on odd ranks, sharing the host's), taking tasks at random: data
 * received goes to the device that runs its reader, and a version a
 * device made comes home before it is sent. */
static bool devices;
/* With `spin`, idle workers look for work (and test messages) 20 ms
 * before they park: while a rank waits for a message, its worker tests
 * it again and again, so some are found complete by it rather than by
 * the progress thread, whatever the load. */
static bool spin;

/* The errors the runtimes logged (libtandem-mpi's among them). */
static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[4096];

static void log_error(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  if (level != TDM_LOG_ERROR)
    return;
  pthread_mutex_lock(&logged_lock);
  size_t used = strlen(logged);
  snprintf(logged + used, sizeof logged - used, "%s\n", msg);
  pthread_mutex_unlock(&logged_lock);
}

static bool was_logged(const char *what) {
  pthread_mutex_lock(&logged_lock);
  bool found = strstr(logged, what) != NULL;
  pthread_mutex_unlock(&logged_lock);
  return found;
}

static tdm_runtime *runtime(void) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.log_fn = log_error;
  cfg.nworkers = 1; /* ranks oversubscribe the machine */
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.devices = "none";
  if (spin)
    cfg.spin_us = 20000;
  if (devices) {
    cfg.devices = NULL;
    cfg.sim = rank % 2 ? "igpu:speedup=2,memory=shared" : "gpu:speedup=2,latency=1us,bandwidth=1G";
    cfg.sim_time_scale = 1;
    cfg.scheduler = "random";
  }
  tdm_runtime *rt = NULL;
  CHECK_EQ(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

/* ---- a known graph -------------------------------------------------------- */

#define W 4 /* words of a handle */

typedef struct {
  int op;
  int64_t k;
} step_args;

/* op 0: b0 = k; 1: b1 = b0 + k (b0 read); 2: b1 += b0; 3: b0 *= k */
static void known_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const step_args *a = args;
  int64_t *x = b[0].ptr, *y = b[1].ptr;
  for (int i = 0; i < W; i++)
    switch (a->op) {
    case 0: x[i] = a->k + i; break;
    case 1: y[i] = x[i] + a->k; break;
    case 2: y[i] += x[i]; break;
    default: x[i] *= a->k; break;
    }
}

static const tdm_codelet set_cl = {.name = "set", .cpu_fn = known_step, .nbuffers = 1,
                                   .modes = {TDM_W}};
static const tdm_codelet make_cl = {.name = "make", .cpu_fn = known_step, .nbuffers = 2,
                                    .modes = {TDM_R, TDM_W}};
static const tdm_codelet add_cl = {.name = "add", .cpu_fn = known_step, .nbuffers = 2,
                                   .modes = {TDM_R, TDM_RW}};
static const tdm_codelet scale_cl = {.name = "scale", .cpu_fn = known_step, .nbuffers = 1,
                                     .modes = {TDM_RW}};

static void submit(tdm_mpi *m, const tdm_codelet *cl, tdm_handle *a, tdm_handle *b, int op,
                   int64_t k) {
  step_args s = {op, k};
  tdm_task_desc d = {.codelet = cl, .handles = {a, b}, .args = &s, .args_size = sizeof s};
  CHECK_EQ(tdm_mpi_submit(m, &d), TDM_OK);
}

static void test_known_graph(void) {
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  CHECK_EQ(tdm_mpi_rank(m), rank);
  CHECK_EQ(tdm_mpi_size(m), size);
  int64_t x[W] = {0}, y[W] = {0};
  tdm_handle *hx, *hy;
  CHECK_EQ(tdm_register_vector(rt, x, W, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, y, W, sizeof y[0], &hy), TDM_OK);
  int ox = 0, oy = size > 1 ? 1 : 0;
  CHECK_EQ(tdm_mpi_register(m, hx, ox, 100), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hy, oy, 101), TDM_OK);
  CHECK_EQ(tdm_mpi_owner(m, hy), oy);
  /* x = 10 + i on 0; y = x + 1 on 1 (x sent: 1); y += x on 1 (x kept);
   * x *= 2 on 0; y += x on 1 (the new x sent: 2); x += y... as make:
   * y's new version read on 0 (sent: 3) */
  submit(m, &set_cl, hx, NULL, 0, 10);
  submit(m, &make_cl, hx, hy, 1, 1);
  submit(m, &add_cl, hx, hy, 2, 0);
  submit(m, &scale_cl, hx, NULL, 3, 2);
  submit(m, &add_cl, hx, hy, 2, 0);
  submit(m, &add_cl, hy, hx, 2, 0); /* x += y, on x's owner */
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  tdm_mpi_counters c = {.struct_size = sizeof c};
  CHECK_EQ(tdm_mpi_get_counters(m, &c), TDM_OK);
  const uint64_t bytes = W * sizeof(int64_t);
  if (size == 1) {
    CHECK_EQ(c.sent + c.received, 0);
    CHECK_EQ(c.tasks_run, 6);
  } else if (rank == 0) {
    CHECK_EQ(c.sent, 2);
    CHECK_EQ(c.received, 1);
    CHECK_EQ(c.bytes_sent, 2 * bytes);
    CHECK_EQ(c.tasks_run, 3);
    CHECK_EQ(c.tasks_skipped, 3);
  } else if (rank == 1) {
    CHECK_EQ(c.sent, 1);
    CHECK_EQ(c.received, 2);
    CHECK_EQ(c.bytes_received, 2 * bytes);
    CHECK_EQ(c.cache_hits, 1);
    CHECK_EQ(c.tasks_run, 3);
  } else {
    CHECK_EQ(c.sent + c.received + c.tasks_run, 0);
  }
  /* y = (10+i)+1 + (10+i) + 2(10+i) = 4(10+i) + 1; x = 2(10+i) + y */
  for (int i = 0; i < W; i++) {
    if (rank == ox)
      CHECK_EQ(x[i], 2 * (10 + i) + 4 * (10 + i) + 1);
    if (rank == oy)
      CHECK_EQ(y[i], 4 * (10 + i) + 1);
  }
  /* every rank gets both: only the versions a rank lacks move */
  CHECK_EQ(tdm_mpi_fetch(m, hx, -1), TDM_OK);
  CHECK_EQ(tdm_mpi_fetch(m, hy, -1), TDM_OK);
  for (int i = 0; i < W; i++) {
    CHECK_EQ(x[i], 2 * (10 + i) + 4 * (10 + i) + 1);
    CHECK_EQ(y[i], 4 * (10 + i) + 1);
  }
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  tdm_mpi_counters c2 = {.struct_size = sizeof c2};
  CHECK_EQ(tdm_mpi_get_counters(m, &c2), TDM_OK);
  /* x to every rank but 0, y to every rank but 0 (which has it) and 1 */
  if (size > 1 && rank == 0)
    CHECK_EQ(c2.sent - c.sent, size - 1);
  if (size > 1 && rank == 1)
    CHECK_EQ(c2.sent - c.sent, size - 2);
  if (rank >= 2)
    CHECK_EQ(c2.received, 2);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hx), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hy), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- a matrix whose rows are apart ------------------------------------------- */

static void row_sums(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  const int64_t *a = b[0].ptr;
  int64_t *s = b[1].ptr;
  for (size_t r = 0; r < b[0].nx; r++) {
    s[r] = 0;
    for (size_t c = 0; c < b[0].ny; c++)
      s[r] += a[r * b[0].ld + c];
  }
}

/* A 3 x 4 matrix with ld 6, on rank 0, read on the last rank: its rows
 * arrive where they belong, the two columns past each row untouched. */
static void test_strided(void) {
  static const tdm_codelet sums_cl = {.name = "row-sums", .cpu_fn = row_sums, .nbuffers = 2,
                                      .modes = {TDM_R, TDM_W}};
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int64_t a[3][6], s[3] = {0};
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 6; c++)
      a[r][c] = c < 4 ? (rank == 0 ? 10 * r + c : -1) : -7;
  tdm_handle *ha, *hs;
  CHECK_EQ(tdm_register_matrix(rt, a, 6, 3, 4, sizeof a[0][0], &ha), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, s, 3, sizeof s[0], &hs), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, ha, 0, 7), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hs, size - 1, 8), TDM_OK);
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &sums_cl, .handles = {ha, hs}}), TDM_OK);
  CHECK_EQ(tdm_mpi_fetch(m, hs, 0), TDM_OK);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  if (rank == 0 || rank == size - 1)
    for (int r = 0; r < 3; r++)
      CHECK_EQ(s[r], 40 * r + 6);
  if (rank == size - 1) /* received: the rows, not the gaps */
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 6; c++)
        CHECK_EQ(a[r][c], c < 4 ? 10 * r + c : -7);
  tdm_mpi_counters k = {.struct_size = sizeof k};
  CHECK_EQ(tdm_mpi_get_counters(m, &k), TDM_OK);
  if (size > 1 && rank == size - 1)
    CHECK_EQ(k.bytes_received, 3 * 4 * sizeof(int64_t));
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(ha), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hs), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- a random DAG ----------------------------------------------------------- */

#define NH 12
#define NT 300
#define MAXB 3

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

typedef struct {
  uint64_t id;
  unsigned nbuf;
  tdm_access modes[MAXB];
} rstep;

/* reads every R/RW buffer, then writes every W/RW buffer from them */
static void apply(const rstep *s, uint64_t *const *b) {
  uint64_t acc = mix(s->id);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_R)
      for (int w = 0; w < W; w++)
        acc = mix(acc ^ b[i][w]);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_W)
      for (int w = 0; w < W; w++)
        b[i][w] = mix(acc + i * W + (unsigned)w);
}

static void run_rstep(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const rstep *s = args;
  uint64_t *bufs[MAXB];
  for (unsigned i = 0; i < s->nbuf; i++)
    bufs[i] = b[i].ptr;
  apply(s, bufs);
}

static void test_random_dag(uint64_t seed) {
  static const tdm_access mode_of[3] = {TDM_R, TDM_W, TDM_RW};
  static tdm_codelet cls[MAXB][27];
  for (unsigned nb = 1; nb <= MAXB; nb++)
    for (unsigned code = 0; code < 27; code++) {
      tdm_codelet *cl = &cls[nb - 1][code];
      cl->name = "step";
      cl->cpu_fn = run_rstep;
      cl->nbuffers = nb;
      for (unsigned i = 0, c = code; i < nb; i++, c /= 3)
        cl->modes[i] = mode_of[c % 3];
    }
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  static uint64_t data[NH][W], ref[NH][W];
  tdm_handle *hs[NH];
  int owner[NH];
  uint64_t r = mix(seed);
  for (int h = 0; h < NH; h++) {
    r = mix(r);
    owner[h] = (int)(r % (uint64_t)size);
    for (int w = 0; w < W; w++)
      data[h][w] = ref[h][w] = rank == owner[h] ? mix(seed * 131 + (uint64_t)(h * W + w)) : 0;
    for (int w = 0; w < W; w++)
      ref[h][w] = mix(seed * 131 + (uint64_t)(h * W + w));
    CHECK_EQ(tdm_register_vector(rt, data[h], W, sizeof data[h][0], &hs[h]), TDM_OK);
    CHECK_EQ(tdm_mpi_register(m, hs[h], owner[h], (uint64_t)h), TDM_OK);
  }
  for (int t = 0; t < NT; t++) {
    r = mix(r);
    rstep s = {.id = r, .nbuf = 1 + (unsigned)(r % MAXB)};
    unsigned hi[MAXB], code = 0;
    int writer = -1;
    for (unsigned i = 0; i < s.nbuf; i++) {
      r = mix(r);
      unsigned mo = (unsigned)((r >> 8) % 5); /* readers more often */
      mo = mo < 3 ? 0 : mo - 2;
      hi[i] = (unsigned)((r >> 20) % NH);
      /* what it writes has one owner (the first written handle's),
       * unless it runs on a rank named (one task in four) */
      if ((mode_of[mo] & TDM_W) && writer != -2) {
        if (writer == -1)
          writer = owner[hi[i]];
        else if (owner[hi[i]] != writer)
          writer = (r >> 40) % 4 ? (mo = 0, writer) : -2;
      }
      s.modes[i] = mode_of[mo];
      code += mo * (i == 0 ? 1 : i == 1 ? 3 : 9);
    }
    tdm_task_desc d = {.codelet = &cls[s.nbuf - 1][code], .args = &s, .args_size = sizeof s};
    uint64_t *bufs[MAXB];
    for (unsigned i = 0; i < s.nbuf; i++) {
      d.handles[i] = hs[hi[i]];
      bufs[i] = ref[hi[i]];
    }
    if (writer == -2 || (r >> 44) % 8 == 0) /* on a rank named */
      CHECK_EQ(tdm_mpi_submit_on(m, &d, (int)((r >> 48) % (uint64_t)size)), TDM_OK);
    else
      CHECK_EQ(tdm_mpi_submit(m, &d), TDM_OK);
    apply(&s, bufs); /* the sequential run, on every rank */
  }
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  for (int h = 0; h < NH; h++) /* home on its owner, from a device */
    CHECK_EQ(tdm_mpi_fetch(m, hs[h], owner[h]), TDM_OK);
  int wrong = 0;
  for (int h = 0; h < NH; h++)
    for (int w = 0; w < W && rank == owner[h]; w++)
      wrong += data[h][w] != ref[h][w];
  tdm_mpi_counters c = {.struct_size = sizeof c};
  CHECK_EQ(tdm_mpi_get_counters(m, &c), TDM_OK);
  int all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all)
    fail("seed %llu: %d words differ from the sequential run (%d here)",
         (unsigned long long)seed, all, wrong);
  CHECK_EQ(c.tasks_run + c.tasks_skipped, NT);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  for (int h = 0; h < NH; h++)
    CHECK_EQ(tdm_handle_unregister(hs[h]), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- tiled GEMM and Cholesky, 2-D block-cyclic ---------------------------------- */

#define NTL 4 /* tiles a side */
#define TB 8 /* elements a tile side */
#define NN (NTL * TB)

/* One task on the tiles named, submitted to m (or run here on the
 * tiles of a local copy when m is NULL: the sequential reference). */
static void tile_task(tdm_mpi *m, const tdm_codelet *cl, tdm_handle *const *t, double *const *ref) {
  if (m) {
    tdm_task_desc d = {.codelet = cl};
    for (unsigned i = 0; i < cl->nbuffers; i++)
      d.handles[i] = t[i];
    CHECK_EQ(tdm_mpi_submit(m, &d), TDM_OK);
    return;
  }
  tdm_buffer b[3];
  for (unsigned i = 0; i < cl->nbuffers; i++)
    b[i] = (tdm_buffer){.ptr = ref[i], .elem_size = sizeof(double), .nx = TB, .ny = TB, .ld = NN};
  cl->cpu_fn(b, NULL, 0);
}

/* The tiled right-looking Cholesky of a's tiles (or of ref's). */
static void cholesky(tdm_mpi *m, tdm_handle *a, double *ref) {
#define TILE(i, j) (m ? tdm_matrix_tile(a, i, j) : NULL)
#define REF(i, j) (ref + (i) * TB * NN + (j) * TB)
  for (size_t k = 0; k < NTL; k++) {
    tile_task(m, &potrf_cl, (tdm_handle *[]){TILE(k, k)}, (double *[]){REF(k, k)});
    for (size_t i = k + 1; i < NTL; i++)
      tile_task(m, &trsm_cl, (tdm_handle *[]){TILE(k, k), TILE(i, k)},
                (double *[]){REF(k, k), REF(i, k)});
    for (size_t j = k + 1; j < NTL; j++)
      for (size_t i = j; i < NTL; i++) /* (i == j: the symmetric update) */
        tile_task(m, &gemm_nt_cl, (tdm_handle *[]){TILE(i, k), TILE(j, k), TILE(i, j)},
                  (double *[]){REF(i, k), REF(j, k), REF(i, j)});
  }
#undef TILE
#undef REF
}

/* C = A B and the Cholesky factor of an SPD matrix, tiles 2-D
 * block-cyclic (or, `weighted`, by weights 1, 2, 3, ... per rank): each
 * owner's tiles equal, bit for bit, the same tile operations run in
 * order here (every rank runs them), and what other ranks hold is never
 * read as data (it starts as NaN). */
static void test_tiled(bool weighted) {
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int p, q, owners[NTL * NTL];
  tdm_mpi_grid(size, &p, &q);
  CHECK_EQ(p * q, size);
  double w[64];
  CHECK_EQ(tdm_mpi_weights(m, rank + 1.0, w), TDM_OK);
  for (int r = 0; r < size; r++)
    CHECK(w[r] == r + 1.0);
  if (weighted)
    CHECK_EQ(tdm_mpi_weighted_owners(w, size, NTL * NTL, owners), TDM_OK);
  else
    for (size_t i = 0; i < NTL; i++)
      for (size_t j = 0; j < NTL; j++)
        owners[i * NTL + j] = tdm_mpi_block_cyclic(p, q, i, j);
  static double A[NN * NN], B[NN * NN], C[NN * NN], S[NN * NN];
  static double rA[NN * NN], rB[NN * NN], rC[NN * NN], rS[NN * NN];
  for (size_t r = 0; r < NN; r++)
    for (size_t c = 0; c < NN; c++) {
      rA[r * NN + c] = (double)((r * 7 + c * 3) % 11) - 5;
      rB[r * NN + c] = (double)((r * 5 + c * 2) % 13) - 6;
      rC[r * NN + c] = (double)((r + c) % 3);
      rS[r * NN + c] = (double)((r * c) % 5) / 8 + (r == c ? NN : 0); /* symmetric, dominant */
    }
  double nan = 0.0 / 0.0;
  for (size_t r = 0; r < NN; r++)
    for (size_t c = 0; c < NN; c++) {
      bool mine = owners[(r / TB) * NTL + c / TB] == rank;
      A[r * NN + c] = mine ? rA[r * NN + c] : nan;
      B[r * NN + c] = mine ? rB[r * NN + c] : nan;
      C[r * NN + c] = mine ? rC[r * NN + c] : nan;
      S[r * NN + c] = mine ? rS[r * NN + c] : nan;
    }
  tdm_handle *h[4];
  double *mem[4] = {A, B, C, S};
  for (int k = 0; k < 4; k++) {
    CHECK_EQ(tdm_register_matrix(rt, mem[k], NN, NN, NN, sizeof(double), &h[k]), TDM_OK);
    CHECK_EQ(tdm_matrix_partition(h[k], TB, TB, 0), TDM_OK);
    CHECK_EQ(tdm_mpi_register_tiles(m, h[k], owners, 1000 * (uint64_t)(k + 1)), TDM_OK);
  }
  for (size_t i = 0; i < NTL; i++)
    for (size_t j = 0; j < NTL; j++)
      for (size_t k = 0; k < NTL; k++) {
        tdm_handle *t[3] = {tdm_matrix_tile(h[0], i, k), tdm_matrix_tile(h[1], k, j),
                            tdm_matrix_tile(h[2], i, j)};
        CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &gemm_nn_cl,
                                                    .handles = {t[0], t[1], t[2]}}), TDM_OK);
        double *ref[3] = {rA + i * TB * NN + k * TB, rB + k * TB * NN + j * TB,
                          rC + i * TB * NN + j * TB};
        tile_task(NULL, &gemm_nn_cl, NULL, ref);
      }
  cholesky(m, h[3], NULL);
  cholesky(NULL, NULL, rS);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  for (size_t i = 0; i < NTL; i++) /* home on their owners, from devices */
    for (size_t j = 0; j < NTL; j++)
      for (int k = 2; k < 4; k++)
        CHECK_EQ(tdm_mpi_fetch(m, tdm_matrix_tile(h[k], i, j), owners[i * NTL + j]), TDM_OK);
  int wrong = 0;
  for (size_t r = 0; r < NN; r++)
    for (size_t c = 0; c < NN; c++)
      if (owners[(r / TB) * NTL + c / TB] == rank) {
        wrong += memcmp(&C[r * NN + c], &rC[r * NN + c], sizeof(double)) != 0;
        /* the factor's tiles: below the diagonal, and the diagonal's */
        if (r / TB >= c / TB)
          wrong += memcmp(&S[r * NN + c], &rS[r * NN + c], sizeof(double)) != 0;
      }
  int all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all)
    fail("tiled %s: %d elements differ from the sequential run (%d here)",
         weighted ? "weighted" : "block-cyclic", all, wrong);
  /* the reference is right: L L^T is the matrix, lower part */
  static double S0[NN * NN];
  for (size_t r = 0; r < NN; r++)
    for (size_t c = 0; c < NN; c++)
      S0[r * NN + c] = (double)((r * c) % 5) / 8 + (r == c ? NN : 0);
  for (size_t r = 0; r < NN; r++)
    for (size_t c = 0; c <= r; c++) {
      double s = 0;
      for (size_t k = 0; k <= c; k++)
        s += rS[r * NN + k] * rS[c * NN + k];
      CHECK(fabs(s - S0[r * NN + c]) < 1e-9 * NN);
    }
  tdm_mpi_counters k = {.struct_size = sizeof k};
  CHECK_EQ(tdm_mpi_get_counters(m, &k), TDM_OK);
  if (rank == 0)
    printf("  tiled %s, %d rank%s: rank 0 ran %llu tasks, sent %llu, received %llu messages\n",
           weighted ? "weighted" : "block-cyclic", size, size == 1 ? "" : "s",
           (unsigned long long)k.tasks_run, (unsigned long long)k.sent,
           (unsigned long long)k.received);
  for (int j = 0; j < 4; j++)
    CHECK_EQ(tdm_mpi_forget_tiles(m, h[j]), TDM_OK);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  for (int j = 0; j < 4; j++) {
    CHECK_EQ(tdm_matrix_unpartition(h[j], 0), TDM_OK);
    CHECK_EQ(tdm_handle_unregister(h[j]), TDM_OK);
  }
  tdm_runtime_destroy(rt);
}

/* The distributions themselves. */
static void test_distributions(void) {
  int p, q;
  tdm_mpi_grid(6, &p, &q);
  CHECK(p == 2 && q == 3);
  tdm_mpi_grid(7, &p, &q);
  CHECK(p == 1 && q == 7);
  tdm_mpi_grid(4, &p, &q);
  CHECK(p == 2 && q == 2);
  CHECK_EQ(tdm_mpi_block_cyclic(2, 2, 3, 1), 3);
  CHECK_EQ(tdm_mpi_block_cyclic(2, 3, 4, 4), 1);
  double w[3] = {1, 2, 5};
  int own[80], count[3] = {0};
  CHECK_EQ(tdm_mpi_weighted_owners(w, 3, 80, own), TDM_OK);
  for (int k = 0; k < 80; k++)
    count[own[k]]++;
  CHECK(count[0] == 10 && count[1] == 20 && count[2] == 50);
  /* spread: any 8 in a row hold 1, 2 and 5 of them, within one */
  for (int k = 0; k + 8 <= 80; k++) {
    int c[3] = {0};
    for (int j = k; j < k + 8; j++)
      c[own[j]]++;
    CHECK(abs(c[0] - 1) <= 1 && abs(c[1] - 2) <= 1 && abs(c[2] - 5) <= 1);
  }
  double bad[2] = {0, 0};
  CHECK_EQ(tdm_mpi_weighted_owners(bad, 2, 4, own), TDM_ERR_INVALID_ARG);
  bad[0] = -1, bad[1] = 2;
  CHECK_EQ(tdm_mpi_weighted_owners(bad, 2, 4, own), TDM_ERR_INVALID_ARG);
}

/* ---- a rank named ---------------------------------------------------------- */

/* x (rank 0's) updated on the last rank: x goes there and its new
 * version comes back at once (one message each way), then a reader on
 * rank 0 finds it home; a task writing x and y (of two owners) on a third
 * rank sends each back to its owner. */
static void test_submit_on(void) {
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int last = size - 1;
  int64_t x[W], y[W] = {0};
  for (int i = 0; i < W; i++)
    x[i] = rank == 0 ? 3 : -1;
  tdm_handle *hx, *hy;
  CHECK_EQ(tdm_register_vector(rt, x, W, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, y, W, sizeof y[0], &hy), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hx, 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hy, last, 2), TDM_OK);
  step_args s3 = {3, 5}; /* x *= 5 */
  CHECK_EQ(tdm_mpi_submit_on(m, &(tdm_task_desc){.codelet = &scale_cl, .handles = {hx},
                                                 .args = &s3, .args_size = sizeof s3}, last),
           TDM_OK);
  CHECK_EQ(tdm_mpi_submit_on(m, &(tdm_task_desc){.codelet = &scale_cl, .handles = {hx}}, size),
           TDM_ERR_INVALID_ARG);
  submit(m, &scale_cl, hx, NULL, 3, 2); /* x *= 2 on rank 0: x is home */
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  tdm_mpi_counters c = {.struct_size = sizeof c};
  CHECK_EQ(tdm_mpi_get_counters(m, &c), TDM_OK);
  if (size > 1 && (rank == 0 || rank == last)) {
    CHECK_EQ(c.sent, 1);
    CHECK_EQ(c.received, 1);
  }
  if (rank == 0)
    for (int i = 0; i < W; i++)
      CHECK_EQ(x[i], 30);
  /* two owners written on rank 1 mod size: y = x + 7, x *= ... (make: R x, W y) */
  static const tdm_codelet both = {.name = "both", .cpu_fn = known_step, .nbuffers = 2,
                                   .modes = {TDM_RW, TDM_W}};
  step_args s1 = {1, 7}; /* y = x + 7 */
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &both, .handles = {hx, hy},
                                              .args = &s1, .args_size = sizeof s1}),
           size > 1 ? TDM_ERR_INVALID_ARG : TDM_OK); /* two owners: a rank must be named */
  if (size > 1)
    CHECK_EQ(tdm_mpi_submit_on(m, &(tdm_task_desc){.codelet = &both, .handles = {hx, hy},
                                                   .args = &s1, .args_size = sizeof s1},
                               1 % size),
             TDM_OK);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  if (rank == last)
    for (int i = 0; i < W; i++)
      CHECK_EQ(y[i], 37);
  if (rank == 0)
    for (int i = 0; i < W; i++)
      CHECK_EQ(x[i], 30);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hx), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hy), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- failures across ranks -------------------------------------------------- */

/* A task that fails (its deferred end says so) on the owner of what it
 * writes. */
static void fail_later(const tdm_buffer *b, const void *args, size_t n) {
  (void)b, (void)args, (void)n;
  tdm_deferred_end(tdm_task_defer(), TDM_ERR_SYSTEM);
}

/* x on rank 0 is read on the last rank (kept there), then a task writing
 * x fails on rank 0, then the last rank reads x again: its receive is
 * told the version is lost, its reader is cancelled, every rank's
 * wait_all says a task failed, no rank waits forever; x acquired is
 * lost on both; a new version (an overwrite) reaches the last rank as
 * usual. */
static void test_lost_version(void) {
  static const tdm_codelet fail_cl = {.name = "fails", .cpu_fn = fail_later, .nbuffers = 1,
                                      .modes = {TDM_RW}};
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int64_t x[W], y[W] = {0};
  for (int i = 0; i < W; i++)
    x[i] = rank == 0 ? 5 : 0;
  tdm_handle *hx, *hy;
  CHECK_EQ(tdm_register_vector(rt, x, W, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, y, W, sizeof y[0], &hy), TDM_OK);
  int last = size - 1;
  CHECK_EQ(tdm_mpi_register(m, hx, 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hy, last, 2), TDM_OK);
  submit(m, &make_cl, hx, hy, 1, 1); /* y = x + 1 on the last rank */
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &fail_cl, .handles = {hx}}), TDM_OK);
  submit(m, &make_cl, hx, hy, 1, 2); /* reads the lost version */
  CHECK_EQ(tdm_mpi_wait_all(m), rank == 0 || rank == last ? TDM_ERR_TASK_FAILED : TDM_OK);
  if (rank == last)
    for (int i = 0; i < W; i++)
      CHECK_EQ(y[i], 6); /* the reader did not run */
  CHECK_EQ(tdm_mpi_fetch(m, hx, -1), TDM_ERR_LOST); /* lost for every rank */
  tdm_mpi_wait_all(m); /* (the fetch's own failures reported) */
  /* an overwrite: a version again, everywhere */
  submit(m, &set_cl, hx, NULL, 0, 30);
  submit(m, &make_cl, hx, hy, 1, 1);
  CHECK_EQ(tdm_mpi_fetch(m, hy, 0), TDM_OK);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK); /* (the owner's y is written once its tasks ran) */
  if (rank == 0 || rank == last)
    for (int i = 0; i < W; i++)
      CHECK_EQ(y[i], 30 + i + 1);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  tdm_handle_unregister(hx); /* (x's memory on other ranks: lost versions) */
  tdm_handle_unregister(hy);
  tdm_runtime_destroy(rt);
}

/* A description the runtime refuses is refused on every rank, and the
 * ranks' counts of versions stay alike: what follows is right. */
static void test_refused_everywhere(void) {
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int64_t x[W] = {0}, y[W] = {0};
  tdm_handle *hx, *hy;
  CHECK_EQ(tdm_register_vector(rt, x, W, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, y, W, sizeof y[0], &hy), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hx, 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hy, size - 1, 2), TDM_OK);
  static const tdm_codelet odd = {.name = "odd", .cpu_fn = known_step, .nbuffers = 2,
                                  .modes = {TDM_R, (tdm_access)7}};
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &odd, .handles = {hx, hy}}),
           TDM_ERR_INVALID_MODE);
  step_args s = {1, 1};
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &make_cl, .handles = {hx, hy},
                                              .args_size = sizeof s}),
           TDM_ERR_INVALID_ARG); /* args NULL */
  CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &make_cl, .handles = {hx, hy},
                                              .flags = 0x80}),
           TDM_ERR_INVALID_ARG);
  submit(m, &set_cl, hx, NULL, 0, 7);
  submit(m, &make_cl, hx, hy, 1, 1);
  CHECK_EQ(tdm_mpi_fetch(m, hy, -1), TDM_OK);
  for (int i = 0; i < W; i++)
    CHECK_EQ(y[i], 7 + i + 1);
  /* a partitioned handle is declared through its tiles */
  int64_t a[4][4];
  tdm_handle *ha;
  CHECK_EQ(tdm_register_matrix(rt, a, 4, 4, 4, sizeof a[0][0], &ha), TDM_OK);
  CHECK_EQ(tdm_matrix_partition(ha, 2, 2, 0), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, ha, 0, 3), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_matrix_unpartition(ha, 0), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(ha), TDM_OK);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hx), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hy), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- with devices: copies home ------------------------------------------------- */

/* Rank 0's x, written by a task that may run on rank 0's emulated device
 * (memory of its own), is read by a CPU task there and then sent to
 * every other rank: each version a device wrote comes home once, and
 * the sends that follow find it there (copies home = tasks the device
 * ran, however many ranks read it); every rank reads the right values. */
static void test_device_copies(void) {
  static const tdm_codelet local_cl = {.name = "local", .cpu_fn = known_step, .nbuffers = 2,
                                       .modes = {TDM_R, TDM_W}};
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int64_t x[W] = {0}, mine[W] = {0};
  tdm_handle *hx, *hm;
  CHECK_EQ(tdm_register_vector(rt, x, W, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, mine, W, sizeof mine[0], &hm), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hx, 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hm, 0, 2), TDM_OK);
  tdm_handle **ys = malloc((size_t)size * sizeof *ys);
  int64_t(*yv)[W] = calloc((size_t)size, sizeof *yv);
  CHECK(ys && yv);
  for (int r = 0; r < size; r++) {
    CHECK_EQ(tdm_register_vector(rt, yv[r], W, sizeof yv[r][0], &ys[r]), TDM_OK);
    CHECK_EQ(tdm_mpi_register(m, ys[r], r, 10 + (uint64_t)r), TDM_OK);
  }
  tdm_device_counters d0 = {.struct_size = sizeof d0}, d1 = {.struct_size = sizeof d1};
  bool device = tdm_runtime_device_counters(rt, 0, &d0) == TDM_OK;
  enum { ROUNDS = 20 };
  for (int round = 0; round < ROUNDS; round++) {
    submit(m, &set_cl, hx, NULL, 0, 100 * round);  /* x = 100 round + i: anywhere on 0 */
    step_args s = {1, 1};                         /* mine = x + 1, on 0's CPU */
    CHECK_EQ(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &local_cl, .handles = {hx, hm},
                                                .args = &s, .args_size = sizeof s,
                                                .flags = TDM_TASK_CPU_ONLY}), TDM_OK);
    for (int r = 1; r < size; r++)
      submit(m, &make_cl, hx, ys[r], 1, r); /* y_r = x + r, on r */
  }
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_OK);
  if (rank == 0 && device)
    CHECK_EQ(tdm_runtime_device_counters(rt, 0, &d1), TDM_OK);
  for (int r = 1; r < size; r++) /* (home from r's device) */
    CHECK_EQ(tdm_mpi_fetch(m, ys[r], r), TDM_OK);
  for (int i = 0; i < W; i++) {
    if (rank == 0)
      CHECK_EQ(mine[i], 100 * (ROUNDS - 1) + i + 1);
    else
      CHECK_EQ(yv[rank][i], 100 * (ROUNDS - 1) + i + rank);
  }
  if (rank == 0 && device) {
    tdm_device_info info = {.struct_size = sizeof info};
    CHECK_EQ(tdm_runtime_device(rt, 0, &info), TDM_OK);
    if (!info.shared_memory) /* (each version the device wrote: home once) */
      CHECK_EQ(d1.copies_to_host - d0.copies_to_host, d1.tasks - d0.tasks);
  }
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  for (int r = 0; r < size; r++)
    CHECK_EQ(tdm_handle_unregister(ys[r]), TDM_OK);
  free(ys);
  free(yv);
  CHECK_EQ(tdm_handle_unregister(hx), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hm), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* ---- ranks that differ ------------------------------------------------------------ */

/* The ways the ranks may not make the same calls: the last rank submits
 * a task the others do not (its input never sent), or one more then
 * fetches what it writes (it would wait on that input forever),
 * declares x with another owner (it runs the reader on its own stale x),
 * or declares x with fewer or more elements (x's message does not fit
 * its memory). Every rank's tdm_mpi_wait_all says TDM_ERR_DIVERGED, and
 * none waits forever; a reader whose message did not fit never runs (its
 * data would be wrong); m refuses work from then on, and its end and
 * the handles' go as usual. */
enum { EXTRA_TASK, EXTRA_THEN_FETCH, OTHER_OWNER, FEWER, MORE };

static _Atomic int readers_run;

static void count_reader(const tdm_buffer *b, const void *args, size_t n) {
  atomic_fetch_add(&readers_run, 1);
  known_step(b, args, n);
}

static void test_diverged(int how) {
  if (size < 2)
    return; /* (one rank cannot differ from another) */
  static const tdm_codelet read_cl = {.name = "read", .cpu_fn = count_reader, .nbuffers = 2,
                                      .modes = {TDM_R, TDM_RW}};
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int last = size - 1;
  bool odd = rank == last;
  int64_t x[2 * W], y[W] = {0};
  for (int i = 0; i < 2 * W; i++)
    x[i] = rank == 0 ? 5 : -1;
  unsigned nx = !odd ? W : how == FEWER ? W / 2 : how == MORE ? 2 * W : W;
  tdm_handle *hx, *hy;
  CHECK_EQ(tdm_register_vector(rt, x, nx, sizeof x[0], &hx), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, y, W, sizeof y[0], &hy), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hx, odd && how == OTHER_OWNER ? last : 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, hy, last, 2), TDM_OK);
  atomic_store(&readers_run, 0);
  pthread_mutex_lock(&logged_lock);
  logged[0] = 0;
  pthread_mutex_unlock(&logged_lock);
  step_args s = {2, 0}; /* y += x, on the last rank */
  tdm_task_desc d = {.codelet = &read_cl, .handles = {hx, hy}, .args = &s, .args_size = sizeof s};
  if (how == EXTRA_TASK || how == EXTRA_THEN_FETCH) {
    if (odd)
      CHECK_EQ(tdm_mpi_submit(m, &d), TDM_OK);
    if (how == EXTRA_THEN_FETCH)
      CHECK_EQ(tdm_mpi_fetch(m, hy, last), odd ? TDM_ERR_DIVERGED : TDM_OK);
  } else {
    CHECK_EQ(tdm_mpi_submit(m, &d), TDM_OK);
  }
  /* (a message that does not fit is found by itself, before any
   * comparison: the reader is cancelled, y lost, as the receive ends) */
  if (odd && (how == FEWER || how == MORE))
    CHECK_EQ(tdm_handle_acquire(hy, TDM_R), TDM_ERR_LOST);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_ERR_DIVERGED);
  if (odd && how != OTHER_OWNER) /* its input never came, or did not fit */
    CHECK_EQ(atomic_load(&readers_run), 0);
  if (odd && how == EXTRA_TASK)
    for (int i = 0; i < W; i++)
      CHECK_EQ(y[i], 0);
  /* said in the log, and why */
  CHECK(was_logged("they did not make the same calls in the same order"));
  if (odd && how == FEWER)
    CHECK(was_logged("is larger than the handle it should fill (16 bytes)"));
  if (odd && how == MORE)
    CHECK(was_logged("is smaller than the handle it should fill (64 bytes)"));
  /* refused from now on, on every rank */
  CHECK_EQ(tdm_mpi_submit(m, &d), TDM_ERR_DIVERGED);
  CHECK_EQ(tdm_mpi_fetch(m, hy, -1), TDM_ERR_DIVERGED);
  CHECK_EQ(tdm_mpi_wait_all(m), TDM_ERR_DIVERGED);
  CHECK_EQ(tdm_mpi_forget(m, hx), TDM_OK);
  CHECK_EQ(tdm_mpi_destroy(m), TDM_ERR_DIVERGED);
  /* (on the last rank, x's receive failed and y's reader was
   * cancelled: their latest versions are lost there) */
  tdm_status lost = odd && how != OTHER_OWNER ? TDM_ERR_LOST : TDM_OK;
  CHECK_EQ(tdm_handle_unregister(hx), lost);
  CHECK_EQ(tdm_handle_unregister(hy), lost);
  CHECK_EQ(tdm_runtime_destroy(rt), TDM_OK);
  MPI_Barrier(MPI_COMM_WORLD); /* (the ranks together again: the next test) */
}

/* ---- side by side ------------------------------------------------------------ */

/* Two runtimes, each with its tdm_mpi (one on MPI_COMM_WORLD, one on a
 * communicator of the application's, freed at once: a duplicate is
 * kept), their submissions interleaved on the same keys: neither sees
 * the other's messages. */
static void test_side_by_side(void) {
  atomic_store(&overlapped, 0);
  spin = true;
  tdm_runtime *rt[2] = {runtime(), runtime()};
  spin = false;
  MPI_Comm mine;
  MPI_Comm_dup(MPI_COMM_WORLD, &mine);
  tdm_mpi *m[2];
  CHECK_EQ(tdm_mpi_create(rt[0], MPI_COMM_WORLD, &m[0]), TDM_OK);
  CHECK_EQ(tdm_mpi_create(rt[1], mine, &m[1]), TDM_OK);
  MPI_Comm_free(&mine);
  int64_t x[2][W], y[2][W];
  tdm_handle *hx[2], *hy[2];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < W; i++)
      x[k][i] = y[k][i] = 0;
    CHECK_EQ(tdm_register_vector(rt[k], x[k], W, sizeof x[k][0], &hx[k]), TDM_OK);
    CHECK_EQ(tdm_register_vector(rt[k], y[k], W, sizeof y[k][0], &hy[k]), TDM_OK);
    CHECK_EQ(tdm_mpi_register(m[k], hx[k], 0, 1), TDM_OK); /* the same keys */
    CHECK_EQ(tdm_mpi_register(m[k], hy[k], size - 1, 2), TDM_OK);
  }
  enum { ROUNDS = 300 };
  for (int round = 0; round < ROUNDS; round++)
    for (int k = 0; k < 2; k++) {
      submit(m[k], &set_cl, hx[k], NULL, 0, 1000 * k + round); /* x = 1000k + round + i */
      submit(m[k], &make_cl, hx[k], hy[k], 1, k + 1);           /* y = x + k + 1 */
    }
  for (int k = 0; k < 2; k++) {
    CHECK_EQ(tdm_mpi_fetch(m[k], hy[k], -1), TDM_OK);
    for (int i = 0; i < W; i++)
      CHECK_EQ(y[k][i], 1000 * k + ROUNDS - 1 + i + k + 1);
  }
  /* the idle workers found messages complete too, not the progress
   * thread alone (some of 1200 messages, on some rank; not while each
   * MPI call is made 20 us longer, the MPI lock then mostly held) */
  tdm_mpi_counters c = {.struct_size = sizeof c};
  CHECK_EQ(tdm_mpi_get_counters(m[0], &c), TDM_OK);
  uint64_t by_workers = 0;
  MPI_Allreduce(&c.by_workers, &by_workers, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (size > 1 && !widen)
    CHECK(by_workers > 0);
  for (int k = 0; k < 2; k++) {
    CHECK_EQ(tdm_mpi_destroy(m[k]), TDM_OK);
    CHECK_EQ(tdm_handle_unregister(hx[k]), TDM_OK);
    CHECK_EQ(tdm_handle_unregister(hy[k]), TDM_OK);
    tdm_runtime_destroy(rt[k]);
  }
  int level;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) /* two progress threads took turns */
    CHECK_EQ(atomic_load(&overlapped), 0);
}

/* ---- creations at once ------------------------------------------------------------ */

/* Under MPI_THREAD_MULTIPLE, two threads of every rank create and destroy
 * a tdm_mpi each, on a communicator each, at once, 100 times (a lock held
 * across the collective duplication would let rank 0 take it for one
 * thread and rank 1 for the other: both hang). */
typedef struct {
  tdm_runtime *rt;
  MPI_Comm comm;
  int st;
} creator;

static void *create_and_destroy(void *arg) {
  creator *c = arg;
  tdm_mpi *m = NULL;
  c->st = tdm_mpi_create(c->rt, c->comm, &m);
  if (!c->st)
    c->st = tdm_mpi_destroy(m);
  return NULL;
}

static void test_created_at_once(void) {
  int level;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return;
  creator c[2];
  for (int k = 0; k < 2; k++) {
    c[k].rt = runtime();
    MPI_Comm_dup(MPI_COMM_WORLD, &c[k].comm);
  }
  for (int round = 0; round < 100; round++) {
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
      CHECK_EQ(pthread_create(&t[k], NULL, create_and_destroy, &c[k]), 0);
    for (int k = 0; k < 2; k++) {
      pthread_join(t[k], NULL);
      CHECK_EQ(c[k].st, TDM_OK);
    }
  }
  for (int k = 0; k < 2; k++) {
    MPI_Comm_free(&c[k].comm);
    tdm_runtime_destroy(c[k].rt);
  }
}

/* ---- refusals ------------------------------------------------------------------ */

static void test_refusals(void) {
  tdm_runtime *rt = runtime();
  tdm_mpi *m;
  CHECK_EQ(tdm_mpi_create(NULL, MPI_COMM_WORLD, &m), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, NULL), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_OK);
  int64_t a[W], b[W];
  tdm_handle *ha, *hb;
  CHECK_EQ(tdm_register_vector(rt, a, W, sizeof a[0], &ha), TDM_OK);
  CHECK_EQ(tdm_register_vector(rt, b, W, sizeof b[0], &hb), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, ha, size, 1), TDM_ERR_INVALID_ARG); /* no such rank */
  CHECK_EQ(tdm_mpi_register(m, ha, -1, 1), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_register(m, ha, 0, 1), TDM_OK);
  CHECK_EQ(tdm_mpi_register(m, ha, 0, 2), TDM_ERR_INVALID_ARG); /* the handle twice */
  CHECK_EQ(tdm_mpi_register(m, hb, 0, 1), TDM_ERR_INVALID_ARG); /* the key twice */
  CHECK_EQ(tdm_mpi_owner(m, hb), -1);
  step_args s = {2, 0};
  tdm_task_desc d = {.codelet = &add_cl, .handles = {ha, hb}, .args = &s, .args_size = sizeof s};
  CHECK_EQ(tdm_mpi_submit(m, &d), TDM_ERR_INVALID_ARG); /* hb not declared */
  CHECK_EQ(tdm_mpi_register(m, hb, size - 1, 2), TDM_OK);
  if (size > 1) { /* written handles of two owners */
    static const tdm_codelet two_w = {.name = "two", .cpu_fn = known_step, .nbuffers = 2,
                                      .modes = {TDM_RW, TDM_W}};
    d.codelet = &two_w;
    CHECK_EQ(tdm_mpi_submit(m, &d), TDM_ERR_INVALID_ARG);
  }
  static const tdm_codelet commute = {.name = "c", .cpu_fn = known_step, .nbuffers = 1,
                                      .modes = {TDM_COMMUTE}};
  d.codelet = &commute;
  CHECK_EQ(tdm_mpi_submit(m, &d), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_fetch(m, ha, size), TDM_ERR_INVALID_ARG);
  /* forgotten: not known any more, its key free again */
  CHECK_EQ(tdm_mpi_forget(m, hb), TDM_OK);
  CHECK_EQ(tdm_mpi_forget(m, hb), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_owner(m, hb), -1);
  CHECK_EQ(tdm_mpi_register(m, hb, 0, 2), TDM_OK);
  /* many declared and forgotten: the others stay found (the table's
   * entries move back over the holes) */
  enum { MANY = 300 };
  static int64_t cells[MANY];
  tdm_handle *many[MANY];
  for (int i = 0; i < MANY; i++) {
    CHECK_EQ(tdm_register_vector(rt, &cells[i], 1, sizeof cells[i], &many[i]), TDM_OK);
    CHECK_EQ(tdm_mpi_register(m, many[i], i % size, 1000 + (uint64_t)i), TDM_OK);
  }
  for (int i = 0; i < MANY; i += 2)
    CHECK_EQ(tdm_mpi_forget(m, many[i]), TDM_OK);
  for (int i = 0; i < MANY; i++)
    CHECK_EQ(tdm_mpi_owner(m, many[i]), i % 2 ? i % size : -1);
  /* a key still declared (many[1]'s) refused, a forgotten one (many[2]'s) free */
  CHECK_EQ(tdm_mpi_register(m, many[0], 0, 1001), TDM_ERR_INVALID_ARG);
  CHECK_EQ(tdm_mpi_register(m, many[0], 0, 1002), TDM_OK);
  CHECK_EQ(tdm_mpi_forget(m, many[0]), TDM_OK);
  for (int i = 0; i < MANY; i += 2)
    CHECK_EQ(tdm_mpi_register(m, many[i], (i + 1) % size, 5000 + (uint64_t)i), TDM_OK);
  for (int i = 0; i < MANY; i++) {
    CHECK_EQ(tdm_mpi_owner(m, many[i]), i % 2 ? i % size : (i + 1) % size);
    CHECK_EQ(tdm_mpi_forget(m, many[i]), TDM_OK);
    CHECK_EQ(tdm_handle_unregister(many[i]), TDM_OK);
  }
  CHECK_EQ(tdm_mpi_destroy(m), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(ha), TDM_OK);
  CHECK_EQ(tdm_handle_unregister(hb), TDM_OK);
  tdm_runtime_destroy(rt);
}

int main(int argc, char **argv) {
  int level;
  bool funneled = argc > 1 && !strcmp(argv[1], "funneled");
  bool serialized = argc > 1 && !strcmp(argv[1], "serialized");
  MPI_Init_thread(&argc, &argv,
                  funneled ? MPI_THREAD_FUNNELED
                           : serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (funneled) { /* below MPI_THREAD_SERIALIZED: refused */
    tdm_runtime *rt = runtime();
    tdm_mpi *m = NULL;
    CHECK_EQ(tdm_mpi_create(rt, MPI_COMM_WORLD, &m), TDM_ERR_INVALID_ARG);
    CHECK(m == NULL);
    tdm_runtime_destroy(rt);
  } else if (serialized) { /* two tdm_mpi taking turns, and the graphs */
    CHECK_EQ(level, MPI_THREAD_SERIALIZED);
    widen = true;
    test_side_by_side();
    widen = false;
    test_known_graph();
    for (uint64_t seed = 30; seed <= 32; seed++)
      test_random_dag(seed);
  } else {
    CHECK(level >= MPI_THREAD_SERIALIZED);
    test_distributions();
    test_known_graph();
    test_strided();
    test_side_by_side();
    test_created_at_once();
    test_submit_on();
    test_lost_version();
    test_refused_everywhere();
    test_tiled(false);
    test_tiled(true);
    for (uint64_t seed = 1; seed <= 8; seed++)
      test_random_dag(seed);
    devices = true;
    for (uint64_t seed = 20; seed <= 23; seed++)
      test_random_dag(seed);
    test_tiled(false);
    test_device_copies();
    devices = false;
    test_refusals();
    for (int how = EXTRA_TASK; how <= MORE; how++)
      test_diverged(how);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    printf("test-mpi: %d rank%s: %s passed\n", size, size == 1 ? "" : "s",
           funneled ? "the refusal" : serialized ? "the serialized tests" : "every test");
  MPI_Finalize();
  return 0;
}
