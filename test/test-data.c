/* Data handles: host acquisition waits for and holds back tasks;
 * unregister waits; partitioning into tiles and back keeps the order of
 * tasks on the matrix and on the tiles, including uneven and nested tiles. */
#include "common.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_acquire_waits_for_writers),
      cmocka_unit_test(test_acquire_holds_back_later_writers),
      cmocka_unit_test(test_destroy_releases_forgotten_acquisition),
      cmocka_unit_test(test_unregister_waits),
      cmocka_unit_test(test_uneven_tiles),
      cmocka_unit_test(test_partition_keeps_order),
      cmocka_unit_test(test_acquire_tile),
      cmocka_unit_test(test_many_tiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
