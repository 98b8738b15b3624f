/*
 * Tandem in a GLib main loop (GTK applications run one): the GSource of
 * <tandem/glib.h>, attached in one call, watches the runtime's event
 * descriptor and calls tdm_dispatch, so that
 * group progress, completion callbacks and tasks pinned to the
 * application's thread run on the loop's thread, between its other
 * events. Here a group of tasks sums slices of an array on the workers;
 * its progress is printed from the loop, and a task pinned to the loop's
 * thread adds each slice's sum as it comes.
 */
#include <stdio.h>

#include <tandem.h>
#include <tandem/glib.h> /* the GSource, in one call */

/* ---- the work ---------------------------------------------------------------------- */

#define N (1 << 22)
#define SLICES 64

static void sum_slice(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  const double *x = b[0].ptr;
  double s = 0;
  for (size_t i = 0; i < b[0].rows; i++)
    s += x[i];
  *(double *)b[1].ptr = s;
}

static GMainLoop *loop;
static double total;
static int added;

/* Pinned: runs on the loop's thread once its slice is summed (where a GTK
 * program would update a widget); the last one quits the loop. */
static void add_slice(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  total += *(const double *)b[0].ptr;
  if (++added == SLICES)
    g_main_loop_quit(loop);
}

static void on_progress(void *data, const tdm_group_progress *p) {
  (void)data;
  printf("progress: %llu of %llu tasks\n", (unsigned long long)p->ended,
         (unsigned long long)p->submitted);
}

int main(void) {
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "glib-loop: %s\n", tdm_strerror(st));
    return 1;
  }
  double *x = g_new(double, N), sums[SLICES];
  for (size_t i = 0; i < N; i++)
    x[i] = 1.0;
  loop = g_main_loop_new(NULL, FALSE);
  guint src = tdm_glib_attach(rt, NULL);
  tdm_group *g = NULL;
  tdm_group_desc gd = {.name = "sums", .progress_fn = on_progress, .progress_hz = 20,
                       .progress_on_dispatch = 1};
  tdm_handle *hx[SLICES], *hs[SLICES];
  static const tdm_codelet cl_sum = {.name = "sum", .cpu_fn = sum_slice, .nbuffers = 2,
                                     .modes = {TDM_R, TDM_W}};
  static const tdm_codelet cl_add = {.name = "add", .cpu_fn = add_slice, .nbuffers = 1,
                                     .modes = {TDM_R}};
  st = src ? tdm_group_create(rt, &gd, &g) : TDM_ERR_SYSTEM;
  for (int i = 0; i < SLICES && !st; i++) {
    st = tdm_register_vector(rt, x + (size_t)i * (N / SLICES), N / SLICES, sizeof(double),
                             &hx[i]);
    if (!st)
      st = tdm_register_vector(rt, &sums[i], 1, sizeof(double), &hs[i]);
    if (!st)
      st = tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_sum, .handles = {hx[i], hs[i]},
                                           .group = g});
    if (!st)
      st = tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {hs[i]}, .group = g,
                                           .flags = TDM_TASK_MAIN_THREAD});
  }
  if (st) {
    fprintf(stderr, "glib-loop: %s\n", tdm_strerror(st));
    return 1;
  }
  g_main_loop_run(loop); /* until the last add_slice quits it */
  printf("sum = %.0f (expected %d), %d slices added on the loop's thread\n", total, N, added);
  for (int i = 0; i < SLICES; i++) {
    tdm_handle_unregister(hx[i]);
    tdm_handle_unregister(hs[i]);
  }
  tdm_group_release(g);
  g_source_remove(src); /* before tdm_runtime_destroy: the descriptor is the runtime's */
  g_main_loop_unref(loop);
  tdm_runtime_destroy(rt);
  g_free(x);
  return total == N ? 0 : 1;
}
