/* The allocation seam: every allocation a running runtime makes goes
 * through it, so that a test can make one fail (tdm__fail_allocation), as
 * SQLite's fault-injection seams do; and the public tdm_malloc. */
#include "support.h"
#include "../objects.h"

#include <stdlib.h>
#include <string.h>

static bool injected_failure(tdm_runtime *rt) {
  if (!rt) /* the virtual-time driver's coherence: no runtime */
    return false;
  /* relaxed: a test seam; the countdown is armed before the calls it
   * is meant to affect, from the same thread */
  if (atomic_load_explicit(&rt->faults.alloc_countdown, memory_order_relaxed) < 0)
    return false;
  if (atomic_fetch_sub_explicit(&rt->faults.alloc_countdown, 1, memory_order_relaxed) != 0)
    return false;
  tdm__log(rt, TDM_LOG_DEBUG, "allocation failure injected");
  return true;
}

void tdm__fail_allocation(tdm_runtime *rt, long n) {
  atomic_store_explicit(&rt->faults.alloc_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}

void *tdm__malloc(tdm_runtime *rt, size_t size) {
  return injected_failure(rt) ? NULL : malloc(size);
}

void *tdm__calloc(tdm_runtime *rt, size_t n, size_t size) {
  return injected_failure(rt) ? NULL : calloc(n, size);
}

void *tdm__realloc(tdm_runtime *rt, void *p, size_t size) {
  return injected_failure(rt) ? NULL : realloc(p, size);
}

void *tdm__zalloc_aligned(size_t align, size_t size) {
  if (align < sizeof(void *))
    align = sizeof(void *);
  size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple */
  void *p = aligned_alloc(align, size ? size : align);
  if (p)
    memset(p, 0, size);
  return p;
}

void *tdm__aligned_alloc(tdm_runtime *rt, size_t align, size_t size) {
  return injected_failure(rt) ? NULL : aligned_alloc(align, size);
}

/* Memory aligned for devices that share the host's memory: OpenCL
 * implementations use CL_MEM_USE_HOST_PTR memory in place when it is
 * page-aligned and its size a multiple of a cache line (Intel requires
 * 4096 and 64 bytes); a whole number of pages satisfies both. */
void *tdm_malloc(size_t size) {
  const size_t page = 4096;
  if (size == 0 || size > SIZE_MAX - page)
    return NULL;
  return aligned_alloc(page, (size + page - 1) / page * page);
}

void tdm_free(void *ptr) {
  free(ptr);
}
