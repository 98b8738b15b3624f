/* The README's example: scale a vector in parallel, chunk by chunk. */
#include <stdio.h>
#include <tandem.h>

static void scale(const tdm_buffer *b, const void *args, size_t size) {
  float *x = b[0].ptr, f = *(const float *)args;
  for (size_t i = 0; i < b[0].nx; i++) x[i] *= f;
  (void)size;
}

int main(void) {
  static float v[1 << 20];
  for (size_t i = 0; i < 1 << 20; i++) v[i] = 1.0f;
  tdm_runtime *rt;
  if (tdm_runtime_create(NULL, &rt)) return 1;
  tdm_handle *h[16];
  const tdm_codelet cl = {.name = "scale", .cpu_fn = scale, .nbuffers = 1, .modes = {TDM_RW}};
  float f = 3.0f;
  for (int c = 0; c < 16; c++) {
    tdm_register_vector(rt, v + c * 65536, 65536, sizeof(float), &h[c]);
    tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h[c]}, .args = &f, .args_size = sizeof f});
  }
  for (int c = 0; c < 16; c++) tdm_handle_unregister(h[c]); /* waits */
  printf("v[0] = %g, v[last] = %g on %u workers\n", v[0], v[(1 << 20) - 1], tdm_runtime_nworkers(rt));
  tdm_runtime_destroy(rt);
  return 0;
}
