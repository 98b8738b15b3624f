/* The README's example, with its error checks: scale a vector in
 * parallel, chunk by chunk. */
#include <stdio.h>
#include <tandem.h>

static void scale(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  float *x = b[0].ptr, f = *(const float *)args;
  for (size_t i = 0; i < b[0].rows; i++)
    x[i] *= f;
}

#define N (1 << 20)
#define CHUNKS 16

int main(void) {
  static float v[N];
  for (size_t i = 0; i < N; i++)
    v[i] = 1.0f;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    return 1;
  }
  const tdm_codelet cl = {.name = "scale", .cpu_fn = scale, .nbuffers = 1, .modes = {TDM_RW}};
  tdm_handle *h[CHUNKS];
  float f = 3.0f;
  for (int c = 0; c < CHUNKS; c++) {
    st = tdm_register_vector(rt, v + c * (N / CHUNKS), N / CHUNKS, sizeof(float), &h[c]);
    if (!st)
      st = tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h[c]}, .args = &f,
                                            .args_size = sizeof f});
    if (st) {
      fprintf(stderr, "chunk %d: %s\n", c, tdm_strerror(st));
      tdm_runtime_destroy(rt);
      return 1;
    }
  }
  for (int c = 0; c < CHUNKS; c++)
    tdm_handle_unregister(h[c]); /* waits for the chunk's tasks */
  printf("v[0] = %g, v[%d] = %g, on %u workers\n", v[0], N - 1, v[N - 1],
         tdm_runtime_nworkers(rt));
  tdm_runtime_destroy(rt);
  return v[0] == 3.0f && v[N - 1] == 3.0f ? 0 : 1;
}
