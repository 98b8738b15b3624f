/* A program built out of Tandem's tree against the installed library
 * (pkg-config, CMake) or Tandem as a meson subproject: a task on each
 * element, the result checked, the version and the device workers
 * printed. */
#include <stdio.h>
#include <tandem.h>

static void twice(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  int *v = b[0].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    v[i] *= 2;
}

int main(void) {
  static const tdm_codelet cl = {.name = "twice", .cpu_fn = twice, .nbuffers = 1,
                                 .modes = {TDM_RW}};
  int v[1000];
  for (int i = 0; i < 1000; i++)
    v[i] = i;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "consumer: %s\n", tdm_strerror(st));
    return 1;
  }
  tdm_handle *h;
  st = tdm_register_vector(rt, v, 1000, sizeof v[0], &h);
  for (int k = 0; k < 3 && !st; k++)
    st = tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h}});
  if (!st)
    st = tdm_wait_all(rt);
  if (!st)
    st = tdm_handle_unregister(h);
  unsigned ndev = tdm_runtime_nworkers(rt) - tdm_runtime_ncpu_workers(rt);
  tdm_runtime_destroy(rt);
  for (int i = 0; i < 1000 && !st; i++)
    if (v[i] != 8 * i) {
      fprintf(stderr, "consumer: v[%d] = %d, expected %d\n", i, v[i], 8 * i);
      return 1;
    }
  if (st) {
    fprintf(stderr, "consumer: %s\n", tdm_strerror(st));
    return 1;
  }
  printf("consumer: Tandem %s, %u device worker%s, result right\n", tdm_version(NULL, NULL, NULL),
         ndev, ndev == 1 ? "" : "s");
  return 0;
}
