/* Data handles: host acquisition waits for and holds back tasks;
 * unregister waits; partitioning into tiles and back keeps the order of
 * tasks on the matrix and on the tiles, including uneven and nested tiles. */
#include "common.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct {
  unsigned ms;
  int value;
} fill_args;

/* Sets every element of a matrix (or vector) of int to value, slowly. */
static void fill(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const fill_args *a = args;
  sleep_ms(a->ms);
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      ((int *)b[0].ptr)[r * b[0].ld + c] = a->value;
}

/* Adds value to every element. */
static void add(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const fill_args *a = args;
  sleep_ms(a->ms);
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      ((int *)b[0].ptr)[r * b[0].ld + c] += a->value;
}

static const tdm_codelet cl_fill = {.name = "fill", .cpu_fn = fill,
                                    .nbuffers = 1, .modes = {TDM_W}};
static const tdm_codelet cl_add = {.name = "add", .cpu_fn = add, .nbuffers = 1, .modes = {TDM_RW}};

static void submit(tdm_runtime *rt, const tdm_codelet *cl, tdm_handle *h, unsigned ms, int v) {
  fill_args a = {ms, v};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = cl, .handles = {h},
                                                    .args = &a, .args_size = sizeof a}),
                   TDM_OK);
}

static void test_acquire_waits_for_writers(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int v[8] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 8, sizeof(int), &h), TDM_OK);
  submit(rt, &cl_fill, h, 50, 5);
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  assert_int_equal(v[0], 5);
  assert_int_equal(v[7], 5);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

static void test_acquire_holds_back_later_writers(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int v[4] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 4, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_RW), TDM_OK);
  submit(rt, &cl_add, h, 0, 1); /* must wait for the release */
  sleep_ms(100);
  assert_int_equal(v[0], 0);
  v[0] = 10; /* the host writes under its acquisition */
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(v[0], 11);
  /* a read acquisition lets later readers run, but not writers */
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  submit(rt, &cl_add, h, 0, 1);
  sleep_ms(50);
  assert_int_equal(v[0], 11);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(v[0], 12);
  tdm_runtime_destroy(rt);
}

static void test_destroy_releases_forgotten_acquisition(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  int v[4] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 4, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_RW), TDM_OK);
  submit(rt, &cl_add, h, 0, 3);
  tdm_runtime_destroy(rt); /* warns, releases, runs the task */
  assert_int_equal(v[0], 3);
}

static void test_unregister_waits(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int v[4] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 4, sizeof(int), &h), TDM_OK);
  submit(rt, &cl_fill, h, 30, 1);
  submit(rt, &cl_add, h, 30, 1);
  submit(rt, &cl_add, h, 30, 1);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  for (int i = 0; i < 4; i++)
    assert_int_equal(v[i], 3);
  tdm_runtime_destroy(rt);
}

/* Tile (i, j) of a 10 x 7 matrix cut in 4 x 3 tiles: checks shapes. */
static void test_uneven_tiles(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int m[10 * 9] = {0}; /* ld 9 > 7 columns: the padding must stay 0 */
  tdm_handle *h;
  assert_int_equal(tdm_register_matrix(rt, m, 9, 10, 7, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_matrix_partition(h, 4, 3, 0), TDM_OK);
  size_t ni, nj;
  assert_int_equal(tdm_matrix_tiles(h, &ni, &nj), TDM_OK);
  assert_int_equal(ni, 3);
  assert_int_equal(nj, 3);
  tdm_buffer b;
  assert_int_equal(tdm_handle_buffer(tdm_matrix_tile(h, 2, 2), &b), TDM_OK);
  assert_int_equal(b.nx, 2);
  assert_int_equal(b.ny, 1);
  assert_int_equal(b.ld, 9);
  assert_ptr_equal(b.ptr, &m[8 * 9 + 6]);
  assert_null(tdm_matrix_tile(h, 3, 0));
  for (size_t i = 0; i < ni; i++)
    for (size_t j = 0; j < nj; j++)
      submit(rt, &cl_fill, tdm_matrix_tile(h, i, j), 0, (int)(10 * i + j + 1));
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  for (int r = 0; r < 10; r++)
    for (int c = 0; c < 9; c++)
      assert_int_equal(m[r * 9 + c], c < 7 ? 10 * (r / 4) + c / 3 + 1 : 0);
  tdm_runtime_destroy(rt);
}

/* Order across partition and unpartition: matrix writer -> tiles -> matrix
 * reader, each stage slow enough that a missing dependency shows. */
static void test_partition_keeps_order(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  int m[8 * 8];
  tdm_handle *h;
  assert_int_equal(tdm_register_matrix(rt, m, 8, 8, 8, sizeof(int), &h), TDM_OK);
  submit(rt, &cl_fill, h, 60, 1);              /* before partition */
  assert_int_equal(tdm_matrix_partition(h, 4, 4, 0), TDM_OK);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      submit(rt, &cl_add, tdm_matrix_tile(h, (size_t)i, (size_t)j), 20 * (unsigned)(i + j), 10);
  /* nested: tile (1,1) cut again in 2 x 2 */
  tdm_handle *t11 = tdm_matrix_tile(h, 1, 1);
  assert_int_equal(tdm_matrix_partition(t11, 2, 2, 0), TDM_OK);
  submit(rt, &cl_add, tdm_matrix_tile(t11, 0, 0), 30, 100);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_ERR_BUSY); /* t11 partitioned */
  assert_int_equal(tdm_matrix_unpartition(t11, 0), TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_OK);
  submit(rt, &cl_add, h, 0, 1000);             /* after: waits for every tile */
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 8; c++) {
      int expect = 1 + 10 + 1000 + ((r >= 4 && r < 6 && c >= 4 && c < 6) ? 100 : 0);
      assert_int_equal(m[r * 8 + c], expect);
    }
  tdm_runtime_destroy(rt);
}

/* A vector of 10 in pieces of 4: 4, 4 and 2 elements, each a vector over
 * its part; tasks on the vector before, on the pieces (one cut again),
 * on the vector after, in that order; the calls' errors. */
static void test_vector_pieces(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  int v[12] = {0}; /* v[10], v[11]: outside, must stay 0 */
  tdm_handle *h, *m;
  int mm[4] = {0};
  assert_int_equal(tdm_register_vector(rt, v, 10, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, mm, 2, 2, 2, sizeof(int), &m), TDM_OK);
  submit(rt, &cl_fill, h, 60, 1); /* before the partition */
  assert_int_equal(tdm_vector_partition(h, 4, 0), TDM_OK);
  size_t n = 0;
  assert_int_equal(tdm_vector_pieces(h, &n), TDM_OK);
  assert_int_equal(n, 3);
  static const size_t len[3] = {4, 4, 2};
  for (size_t i = 0; i < n; i++) {
    tdm_buffer b;
    assert_int_equal(tdm_handle_buffer(tdm_vector_piece(h, i), &b), TDM_OK);
    assert_ptr_equal(b.ptr, &v[4 * i]);
    assert_int_equal(b.nx, len[i]);
    assert_int_equal(b.ny, 1);
    submit(rt, &cl_add, tdm_vector_piece(h, i), 20 * (unsigned)i, 10);
  }
  assert_null(tdm_vector_piece(h, 3));
  /* the vector is the pieces' now; a piece is cut again */
  fill_args a = {0, 5};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h},
                                                    .args = &a, .args_size = sizeof a}),
                   TDM_ERR_PARTITIONED);
  tdm_handle *p1 = tdm_vector_piece(h, 1);
  assert_int_equal(tdm_vector_partition(p1, 3, 0), TDM_OK);
  submit(rt, &cl_add, tdm_vector_piece(p1, 1), 30, 100); /* v[7] */
  assert_int_equal(tdm_vector_unpartition(h, 0), TDM_ERR_BUSY); /* p1 partitioned */
  assert_int_equal(tdm_vector_unpartition(p1, 0), TDM_OK);
  /* errors: wrong kinds, zero, flags, twice */
  assert_int_equal(tdm_vector_partition(h, 2, 0), TDM_ERR_PARTITIONED);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_partition(m, 1, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_matrix_partition(h, 1, 1, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_pieces(m, &n), TDM_ERR_NOT_PARTITIONED);
  assert_int_equal(tdm_vector_unpartition(m, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_unpartition(h, 1), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_unpartition(h, 0), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(h, 0), TDM_ERR_NOT_PARTITIONED);
  assert_int_equal(tdm_handle_buffer(p1, &(tdm_buffer){0}), TDM_ERR_STALE_HANDLE);
  submit(rt, &cl_add, h, 0, 1000); /* after: waits for every piece */
  tdm_handle *h2;
  int w[3] = {0};
  assert_int_equal(tdm_register_vector(rt, w, 3, sizeof(int), &h2), TDM_OK);
  assert_int_equal(tdm_vector_partition(h2, 0, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_partition(h2, 3, 1), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_vector_partition(h2, 100, 0), TDM_OK); /* one piece, all of it */
  assert_int_equal(tdm_vector_pieces(h2, &n), TDM_OK);
  assert_int_equal(n, 1);
  submit(rt, &cl_fill, tdm_vector_piece(h2, 0), 0, 9);
  assert_int_equal(tdm_vector_unpartition(h2, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h2), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(m), TDM_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(v[i], 1 + 10 + 1000 + (i == 7 ? 100 : 0));
  assert_int_equal(v[10], 0);
  assert_int_equal(v[11], 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(w[i], 9);
  tdm_runtime_destroy(rt);
}

/* A tile can be acquired like any handle; its matrix cannot be joined
 * back meanwhile. */
static void test_acquire_tile(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int m[4 * 4] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_matrix(rt, m, 4, 4, 4, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_matrix_partition(h, 2, 2, 0), TDM_OK);
  tdm_handle *t = tdm_matrix_tile(h, 1, 0);
  submit(rt, &cl_fill, t, 30, 7);
  assert_int_equal(tdm_handle_acquire(t, TDM_RW), TDM_OK);
  assert_int_equal(m[2 * 4 + 0], 7);
  assert_int_equal(m[3 * 4 + 1], 7);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_ERR_BUSY);
  m[2 * 4 + 0] = 8;
  assert_int_equal(tdm_handle_release(t), TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(m[2 * 4 + 0], 8);
  assert_int_equal(m[0], 0);
  tdm_runtime_destroy(rt);
}

/* Many tiles: 4096 of 4 x 4, one task each, joined back. */
static void test_many_tiles(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(0, NULL);
  enum { N = 256, T = 4 };
  int *m = calloc(N * N, sizeof *m);
  assert_non_null(m);
  tdm_handle *h;
  assert_int_equal(tdm_register_matrix(rt, m, N, N, N, sizeof(int), &h), TDM_OK);
  assert_int_equal(tdm_matrix_partition(h, T, T, 0), TDM_OK);
  for (size_t i = 0; i < N / T; i++)
    for (size_t j = 0; j < N / T; j++)
      submit(rt, &cl_add, tdm_matrix_tile(h, i, j), 0, (int)(i * 1000 + j));
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_OK);
  submit(rt, &cl_add, h, 0, 1);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < N; c++)
      assert_int_equal(m[r * N + c], (r / T) * 1000 + c / T + 1);
  free(m);
  tdm_runtime_destroy(rt);
}

/* ---- registered memory never overlaps -------------------------------------- */

static tdm_status reg_matrix(tdm_runtime *rt, int *base, size_t r0, size_t c0, size_t rows,
                             size_t cols, size_t ld, tdm_handle **h) {
  return tdm_register_matrix(rt, base + r0 * ld + c0, ld, rows, cols, sizeof(int), h);
}

/* Two handles over the same bytes would each keep their own order of
 * tasks: updates through them race and get lost. Refused, whatever the
 * shapes; memory that merely interleaves, touches, was unregistered or
 * belongs to another runtime is taken. */
static void test_overlap_refused(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log), *other = test_runtime(1, NULL);
  static int a[8 * 10];
  tdm_handle *h1, *h2, *h3, *x;
  assert_int_equal(tdm_register_vector(rt, a, 40, sizeof(int), &h1), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, a, 40, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_null(x);
  assert_true(test_log_has(&log, "overlap a registered handle"));
  assert_int_equal(tdm_register_vector(rt, a + 39, 2, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_int_equal(tdm_register_vector(rt, a + 10, 1, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_int_equal(reg_matrix(rt, a, 0, 0, 8, 2, 10, &x), TDM_ERR_OVERLAP);
  /* the same memory in another runtime is another matter */
  assert_int_equal(tdm_register_vector(other, a, 40, sizeof(int), &x), TDM_OK);
  /* touching is not overlapping */
  assert_int_equal(tdm_register_vector(rt, a + 40, 4, sizeof(int), &h2), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h1), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h2), TDM_OK);
  /* the left and right halves of a row-major 8 x 10 matrix (columns 0-3
   * and 4-7) interleave row by row and share no byte; columns 8-9 stay
   * free between their rows */
  assert_int_equal(reg_matrix(rt, a, 0, 0, 8, 4, 10, &h1), TDM_OK);
  assert_int_equal(reg_matrix(rt, a, 0, 4, 8, 4, 10, &h2), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, a + 3 * 10 + 8, 2, sizeof(int), &h3), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, a + 3 * 10 + 7, 2, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_int_equal(tdm_register_vector(rt, a + 7 * 10 + 3, 1, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_int_equal(reg_matrix(rt, a, 2, 3, 2, 2, 10, &x), TDM_ERR_OVERLAP);
  assert_int_equal(reg_matrix(rt, a, 0, 8, 8, 2, 10, &x), TDM_ERR_OVERLAP); /* h3's */
  /* once unregistered, the memory is the application's again */
  assert_int_equal(tdm_handle_unregister(h2), TDM_OK);
  assert_int_equal(reg_matrix(rt, a, 0, 4, 8, 4, 10, &h2), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h1), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h2), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h3), TDM_OK);
  /* tiles of a partitioned matrix are the matrix's, not a clash */
  assert_int_equal(reg_matrix(rt, a, 0, 0, 8, 8, 10, &h1), TDM_OK);
  assert_int_equal(tdm_matrix_partition(h1, 4, 4, 0), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, a + 5, 1, sizeof(int), &x), TDM_ERR_OVERLAP);
  assert_int_equal(tdm_matrix_unpartition(h1, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h1), TDM_OK);
  tdm_runtime_destroy(rt);
  tdm_runtime_destroy(other);
}

/* Sizes whose bytes overflow size_t or the address space are refused. */
static void test_sizes_that_overflow(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(1, &log);
  static int a[4];
  tdm_handle *x;
  assert_int_equal(tdm_register_vector(rt, a, SIZE_MAX / 2, 4, &x), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "overflows"));
  assert_int_equal(tdm_register_vector(rt, a, 3, SIZE_MAX / 2, &x), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_register_matrix(rt, a, SIZE_MAX / 4, 8, 2, 4, &x), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_register_vector(rt, (void *)(UINTPTR_MAX - 8), 4, 8, &x),
                   TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
}

/* Random vectors and matrices registered and unregistered over a small
 * arena: each registration is refused exactly when one of its bytes is
 * already registered (a byte map says). */
static void test_overlap_random(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(1, NULL);
  enum { ARENA = 4096, LIVE = 64 };
  static unsigned char arena[ARENA];
  static int owner[ARENA]; /* slot + 1 of the handle holding a byte, or 0 */
  tdm_handle *h[LIVE] = {NULL};
  memset(owner, 0, sizeof owner);
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  unsigned refused = 0, taken = 0;
  for (int step = 0; step < 20000; step++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    unsigned slot = (unsigned)(rng % LIVE);
    if (h[slot]) {
      assert_int_equal(tdm_handle_unregister(h[slot]), TDM_OK);
      h[slot] = NULL;
      for (int i = 0; i < ARENA; i++)
        if (owner[i] == (int)slot + 1)
          owner[i] = 0;
      continue;
    }
    size_t elem = 1 + (rng >> 8) % 4, rows = 1 + (rng >> 12) % 8, cols = 1 + (rng >> 16) % 8;
    size_t ld = cols + (rng >> 20) % 8, span = ((rows - 1) * ld + cols) * elem;
    size_t at = (rng >> 24) % (ARENA - span);
    bool clash = false;
    for (size_t r = 0; r < rows; r++)
      for (size_t b = 0; b < cols * elem; b++)
        clash = clash || owner[at + r * ld * elem + b];
    tdm_status st = (rng >> 40) % 3 ? tdm_register_matrix(rt, arena + at, ld, rows, cols, elem,
                                                            &h[slot])
                                    : tdm_register_vector(rt, arena + at, rows * cols, elem,
                                                          &h[slot]);
    if ((rng >> 40) % 3 == 0) { /* a vector is contiguous: its own bytes */
      ld = cols = rows * cols;
      rows = 1;
      clash = false;
      for (size_t b = 0; b < cols * elem; b++)
        clash = clash || owner[at + b];
    }
    assert_int_equal(st, clash ? TDM_ERR_OVERLAP : TDM_OK);
    if (st == TDM_OK) {
      taken++;
      for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < cols * elem; b++)
          owner[at + r * ld * elem + b] = (int)slot + 1;
    } else {
      refused++;
      h[slot] = NULL;
    }
  }
  for (unsigned s = 0; s < LIVE; s++)
    if (h[s])
      assert_int_equal(tdm_handle_unregister(h[s]), TDM_OK);
  assert_true(refused > 100 && taken > 100);
  tdm_runtime_destroy(rt);
}

/* Threads registering one region at once: never two at a time (each
 * success is checked against a count of holders), and the others are told
 * TDM_ERR_OVERLAP, nothing else. */
typedef struct {
  tdm_runtime *rt;
  int *region;
  _Atomic int *holders, *broken;
  pthread_barrier_t *start;
  unsigned got;
} racer;

static void *race_for_region(void *arg) {
  racer *r = arg;
  pthread_barrier_wait(r->start);
  for (int i = 0; i < 2000; i++) {
    tdm_handle *h;
    tdm_status st = tdm_register_vector(r->rt, r->region + i % 3, 8, sizeof(int), &h);
    if (st == TDM_OK) {
      if (atomic_fetch_add(r->holders, 1) != 0)
        atomic_store(r->broken, 1); /* two handles over one byte */
      sched_yield();                /* hold it a moment: the others try */
      atomic_fetch_sub(r->holders, 1);
      if (tdm_handle_unregister(h) != TDM_OK)
        atomic_store(r->broken, 1);
      r->got++;
    } else if (st != TDM_ERR_OVERLAP) {
      atomic_store(r->broken, 1);
    }
  }
  return NULL;
}

static void test_overlap_from_threads(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(1, NULL);
  static int region[16];
  _Atomic int holders = 0, broken = 0;
  racer r[4];
  pthread_t th[4];
  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, 4), 0);
  for (int i = 0; i < 4; i++) {
    r[i] = (racer){.rt = rt, .region = region, .holders = &holders, .broken = &broken,
                   .start = &start};
    assert_int_equal(pthread_create(&th[i], NULL, race_for_region, &r[i]), 0);
  }
  unsigned got = 0;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    got += r[i].got;
  }
  pthread_barrier_destroy(&start);
  tdm_runtime_destroy(rt);
  assert_int_equal(atomic_load(&broken), 0);
  printf("%u of 8000 registrations taken, the others refused\n", got);
  assert_true(got > 0 && got < 8000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_acquire_waits_for_writers),
      cmocka_unit_test(test_acquire_holds_back_later_writers),
      cmocka_unit_test(test_destroy_releases_forgotten_acquisition),
      cmocka_unit_test(test_unregister_waits),
      cmocka_unit_test(test_uneven_tiles),
      cmocka_unit_test(test_partition_keeps_order),
      cmocka_unit_test(test_vector_pieces),
      cmocka_unit_test(test_acquire_tile),
      cmocka_unit_test(test_many_tiles),
      cmocka_unit_test(test_overlap_refused),
      cmocka_unit_test(test_sizes_that_overflow),
      cmocka_unit_test(test_overlap_random),
      cmocka_unit_test(test_overlap_from_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
