/* Many tasks adding into one handle: a histogram of a large array, one
 * task per piece of it, in three access modes of the histogram:
 *
 *   rw       TDM_RW: each task waits for the one submitted before it, so
 *            the pieces are counted one after another;
 *   commute  TDM_COMMUTE: the tasks run in any order but one at a time
 *            (here the whole task is the update, so it is no faster than
 *            rw; it lets an update whose input is late not hold up the
 *            others);
 *   redux    TDM_REDUX: each task counts into its lane's private
 *            histogram, every lane at once; the lanes are added into the
 *            histogram when it is next read (here, by the acquisition
 *            that checks it), in an order fixed by the submissions.
 *
 * Each round clears the histogram, submits the pieces, reads the
 * histogram back and checks it against a count done here. The rounds of
 * the three modes are interleaved; the median times are printed, and
 * how much faster redux is than rw.
 *
 *   histogram [millions of elements] [rounds]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tandem.h>

#define BINS 256
#define PIECES 64

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* buffers: a piece of the data (read), the histogram (any mode above) */
static void count(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  const uint32_t *x = b[0].ptr;
  uint64_t *bins = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    bins[x[i] >> 24]++;
}

/* the reduction: a lane starts at zero; lanes are added bin by bin */
static void zero(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  memset(b[0].ptr, 0, BINS * sizeof(uint64_t));
}

static void add(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  uint64_t *to = b[0].ptr;
  const uint64_t *from = b[1].ptr;
  for (int i = 0; i < BINS; i++)
    to[i] += from[i];
}

static const tdm_codelet zero_cl = {.name = "zero", .cpu_fn = zero, .nbuffers = 1,
                                    .modes = {TDM_W}};
static const tdm_codelet add_cl = {.name = "add", .cpu_fn = add, .nbuffers = 2,
                                   .modes = {TDM_RW, TDM_R}};

#define MODES 3
static const char *const mode_name[MODES] = {"rw", "commute", "redux"};
static const tdm_codelet count_cl[MODES] = {
    {.name = "count-rw", .cpu_fn = count, .nbuffers = 2, .modes = {TDM_R, TDM_RW}},
    {.name = "count-commute", .cpu_fn = count, .nbuffers = 2, .modes = {TDM_R, TDM_COMMUTE}},
    {.name = "count-redux", .cpu_fn = count, .nbuffers = 2, .modes = {TDM_R, TDM_REDUX}},
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One round in mode m: the seconds it took, or -1 on a failure (told). */
static double round_of(tdm_runtime *rt, int m, tdm_handle *data, tdm_handle *hist,
                       uint64_t *bins, const uint64_t *want) {
  tdm_status st = tdm_handle_acquire(hist, TDM_W);
  if (st) {
    fprintf(stderr, "histogram: acquire: %s\n", tdm_status_name(st));
    return -1;
  }
  memset(bins, 0, BINS * sizeof *bins);
  tdm_handle_release(hist);
  double t0 = now();
  for (size_t p = 0; p < PIECES; p++) {
    tdm_task_desc d = {.codelet = &count_cl[m], .handles = {tdm_vector_piece(data, p), hist}};
    if ((st = tdm_submit(rt, &d))) {
      fprintf(stderr, "histogram: submit: %s\n", tdm_status_name(st));
      return -1;
    }
  }
  /* reading it waits for the tasks (and adds the lanes, in redux) */
  if ((st = tdm_handle_acquire(hist, TDM_R))) {
    fprintf(stderr, "histogram: acquire: %s\n", tdm_status_name(st));
    return -1;
  }
  double t = now() - t0;
  int same = memcmp(bins, want, BINS * sizeof *bins) == 0;
  tdm_handle_release(hist);
  if (!same) {
    fprintf(stderr, "histogram: %s: wrong counts\n", mode_name[m]);
    return -1;
  }
  return t;
}

int main(int argc, char **argv) {
  double millions = argc > 1 ? atof(argv[1]) : 32;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  size_t n = (size_t)(millions * 1e6);
  if (n < PIECES || rounds < 1 || rounds > 100) {
    fprintf(stderr, "usage: histogram [millions of elements, at least %d / 1e6] [rounds, 1-100]\n",
            PIECES);
    return 2;
  }
  n -= n % PIECES;
  uint32_t *x = tdm_malloc(n * sizeof *x);
  uint64_t *bins = tdm_malloc(BINS * sizeof *bins), want[BINS] = {0};
  if (!x || !bins) {
    fprintf(stderr, "histogram: out of memory\n");
    return 1;
  }
  uint64_t s = 88172645463325252ull; /* xorshift64 (Marsaglia, 2003) */
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = (uint32_t)(s >> 32);
    want[x[i] >> 24]++;
  }

  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "histogram: tdm_runtime_create: %s\n", tdm_status_name(st));
    return 1;
  }
  tdm_handle *data, *hist;
  tdm_reduction sum = {.struct_size = sizeof sum, .init = &zero_cl, .combine = &add_cl};
  if ((st = tdm_register_vector(rt, x, n, sizeof *x, &data)) ||
      (st = tdm_register_vector(rt, bins, BINS, sizeof *bins, &hist)) ||
      (st = tdm_handle_set_reduction(hist, &sum)) ||
      (st = tdm_vector_partition(data, n / PIECES, 0))) {
    fprintf(stderr, "histogram: set-up: %s\n", tdm_status_name(st));
    tdm_runtime_destroy(rt);
    return 1;
  }

  double *t[MODES];
  for (int m = 0; m < MODES; m++)
    t[m] = calloc((size_t)rounds, sizeof *t[m]);
  int failed = !t[0] || !t[1] || !t[2];
  for (int r = 0; r < rounds && !failed; r++)
    for (int m = 0; m < MODES && !failed; m++) /* interleaved: the same machine noise */
      failed = (t[m][r] = round_of(rt, m, data, hist, bins, want)) < 0;

  if (!failed) {
    double med[MODES];
    printf("histogram of %zu elements in %d pieces, %u workers, %d rounds (medians):\n", n,
           PIECES, tdm_runtime_nworkers(rt), rounds);
    for (int m = 0; m < MODES; m++) {
      qsort(t[m], (size_t)rounds, sizeof *t[m], cmp_double);
      med[m] = t[m][rounds / 2];
      printf("  %-8s %8.2f ms\n", mode_name[m], med[m] * 1e3);
    }
    printf("counts right in every round; redux %.2fx faster than rw\n", med[0] / med[2]);
  }
  for (int m = 0; m < MODES; m++)
    free(t[m]);
  tdm_vector_unpartition(data, 0);
  tdm_handle_unregister(data);
  tdm_handle_unregister(hist);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(bins);
  return failed;
}
