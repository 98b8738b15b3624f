/* The CPU backend: a task's CPU variant runs on the worker thread that
 * picked it, on the application's memory in place (host memory is the only
 * memory node for now). */
#include "../../runtime/internal.h"

void tdm__cpu_run(const tdm_task *t) {
  const tdm_codelet *cl = t->cl;
  if (!cl->cpu_fn)
    return;
  tdm_buffer bufs[TDM_MAX_BUFFERS];
  for (unsigned i = 0; i < t->nbuf; i++)
    bufs[i] = t->handles[i]->buf;
  cl->cpu_fn(bufs, t->args, t->args_size);
}
