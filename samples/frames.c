/* A recorded graph: the same tasks every frame, recorded once and
 * launched frame after frame (tdm_graph_*).
 *
 * A rod of N cells, in TILES tiles, diffuses heat: each frame, the task
 * of a tile reads its tile and its neighbours' edges from one buffer and
 * writes its tile of the other. Two frames (there and back) are recorded
 * once; each launch is those two frames, ordered after the launch before
 * by the handles, as if the tasks were submitted again. Between launches
 * the application reads the middle tile (an acquisition, ordered with
 * the launches like a task), and halfway it changes the diffusion rate
 * (tdm_graph_set_args). The result is checked against the same
 * computation done here, one cell after another; the time of the
 * launches is printed beside that of submitting the same tasks.
 *
 *   frames [frames]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tandem.h>

#define N 4096
#define TILES 16
#define T (N / TILES)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* buffers: left neighbour, own tile, right neighbour (read), next tile
 * (written); args: the rate */
static void diffuse(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  double k = *(const double *)args;
  const double *l = b[0].ptr, *c = b[1].ptr, *r = b[2].ptr;
  double *out = b[3].ptr;
  for (size_t i = 0; i < T; i++) {
    double left = i ? c[i - 1] : (l == c ? c[0] : l[T - 1]);
    double right = i + 1 < T ? c[i + 1] : (r == c ? c[T - 1] : r[0]);
    out[i] = c[i] + k * (left - 2 * c[i] + right);
  }
}

/* The same frame, cell by cell. */
static void frame_here(const double *in, double *out, double k) {
  for (size_t i = 0; i < N; i++) {
    double left = in[i ? i - 1 : 0], right = in[i + 1 < N ? i + 1 : N - 1];
    out[i] = in[i] + k * (left - 2 * in[i] + right);
  }
}

static const tdm_codelet diffuse_cl = {
    .name = "diffuse", .cpu_fn = diffuse, .nbuffers = 4, .modes = {TDM_R, TDM_R, TDM_R, TDM_W}};

/* One frame's tasks from buffer `from` to the other, each through `add`
 * (tdm_submit, or recording into a graph). */
static tdm_status frame_tasks(tdm_handle *h[2][TILES], int from, double k,
                              tdm_status (*add)(void *, const tdm_task_desc *), void *to) {
  for (int t = 0; t < TILES; t++) {
    int l = t ? t - 1 : t, r = t + 1 < TILES ? t + 1 : t;
    tdm_task_desc d = {.codelet = &diffuse_cl,
                       .handles = {h[from][l], h[from][t], h[from][r], h[1 - from][t]},
                       .args = &k,
                       .args_size = sizeof k};
    tdm_status st = add(to, &d);
    if (st)
      return st;
  }
  return TDM_OK;
}

static tdm_status submit(void *rt, const tdm_task_desc *d) {
  return tdm_submit(rt, d);
}
static tdm_status record(void *g, const tdm_task_desc *d) {
  return tdm_graph_add(g, d, NULL);
}

static int fail(tdm_runtime *rt, const char *what, tdm_status st) {
  fprintf(stderr, "frames: %s: %s\n", what, tdm_strerror(st));
  tdm_runtime_destroy(rt);
  return 1;
}

int main(int argc, char **argv) {
  int frames = argc > 1 ? atoi(argv[1]) : 2000;
  if (frames < 4 || frames % 2) {
    fprintf(stderr, "usage: frames [frames: even, at least 4]\n");
    return 2;
  }
  static double rod[2][N], ref[2][N];
  for (int i = 0; i < N; i++)
    rod[0][i] = ref[0][i] = (i > N / 3 && i < 2 * N / 3) ? 100.0 : 0.0;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "frames: tdm_runtime_create: %s\n", tdm_strerror(st));
    return 1;
  }
  tdm_handle *h[2][TILES];
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < TILES; t++)
      if ((st = tdm_register_vector(rt, &rod[b][t * T], T, sizeof(double), &h[b][t])))
        return fail(rt, "tdm_register_vector", st);

  /* Record two frames once: 0 -> 1, then 1 -> 0. */
  double k = 0.25;
  tdm_graph *two;
  if ((st = tdm_graph_create(rt, &two)) || (st = frame_tasks(h, 0, k, record, two)) ||
      (st = frame_tasks(h, 1, k, record, two)))
    return fail(rt, "recording", st);

  /* Launch them frame after frame; look at the middle between launches. */
  double probe = 0, t0 = now();
  for (int f = 0; f < frames; f += 2) {
    if (f == frames / 2) { /* a new rate for the rest: every task's arguments */
      k = 0.1;
      for (size_t n = 0; n < tdm_graph_size(two); n++)
        if ((st = tdm_graph_set_args(two, n, &k, sizeof k)))
          return fail(rt, "tdm_graph_set_args", st);
    }
    if ((st = tdm_graph_launch(two)))
      return fail(rt, "tdm_graph_launch", st);
    if (f % 200 == 0) { /* waits for this launch's writers of that tile only */
      tdm_handle *mid = h[0][TILES / 2];
      if ((st = tdm_handle_acquire(mid, TDM_R)))
        return fail(rt, "tdm_handle_acquire", st);
      probe = rod[0][TILES / 2 * T];
      tdm_handle_release(mid);
    }
  }
  if ((st = tdm_wait_all(rt)))
    return fail(rt, "tdm_wait_all", st);
  double launched = now() - t0;

  /* The same frames submitted, for the time, onward from there. */
  t0 = now();
  for (int f = 0; f < frames; f += 2)
    if ((st = frame_tasks(h, 0, k, submit, rt)) || (st = frame_tasks(h, 1, k, submit, rt)))
      return fail(rt, "tdm_submit", st);
  if ((st = tdm_wait_all(rt)))
    return fail(rt, "tdm_wait_all", st);
  double submitted = now() - t0;

  for (int b = 0; b < 2; b++)
    for (int t = 0; t < TILES; t++)
      tdm_handle_unregister(h[b][t]);
  tdm_graph_destroy(two);
  tdm_runtime_destroy(rt);

  /* Here: frames at 0.25 then at 0.1 (the launches), then frames at 0.1
   * (the submissions). */
  for (int f = 0; f < 2 * frames; f++)
    frame_here(ref[f % 2], ref[1 - f % 2], f < frames / 2 ? 0.25 : 0.1);
  double worst = 0;
  for (int i = 0; i < N; i++)
    worst = fmax(worst, fabs(rod[0][i] - ref[0][i]));
  printf("%d frames of %d tasks, launched: %.1f us a frame; submitted: %.1f us a frame; "
         "last probe %.3f; largest difference from the sequential run %g\n",
         frames, TILES, launched / frames * 1e6, submitted / frames * 1e6, probe, worst);
  return worst == 0 ? 0 : 1;
}
