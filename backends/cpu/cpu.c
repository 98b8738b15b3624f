/* The CPU backend: a task's CPU variant, on the worker thread that picked
 * it (or an emulated device's thread), on the buffers given: the
 * application's memory in place, or a device's copies. */
#include "../../runtime/internal.h"

void tdm__cpu_run(const tdm_task *t, const tdm_buffer *bufs) {
  const tdm_codelet *cl = t->codelet;
  if (!cl->cpu_fn)
    return;
  tdm_buffer room[TDM_MAX_BUFFERS];
  if (!bufs) {
    /* (the task's own room past TDM_MAX_BUFFERS: it runs once at a time) */
    tdm_buffer *own = tdm__task_views(t, room);
    tdm_handle *const *hs = tdm__task_handles(t);
    for (unsigned i = 0; i < t->nbuf; i++)
      own[i] = hs[i]->buf;
    bufs = own;
  }
  cl->cpu_fn(bufs, t->args, t->args_size);
}
