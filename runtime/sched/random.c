/*
 * random: a worker drawn uniformly among those that can run the task
 * (each class weighted by its number of workers). A baseline that knows
 * nothing: the others should do better.
 */
#include "sched.h"

static void place(tdm_sched *s, tdm_task *t) {
  unsigned n = 0;
  for (unsigned c = 0; c < s->nclasses; c++)
    if (s->drv->runs(s, c, t))
      n += s->cls[c].workers;
  unsigned pick = (unsigned)(tdm__sched_random(s) % (n ? n : 1));
  for (unsigned c = 0; c < s->nclasses; c++) {
    if (!s->drv->runs(s, c, t))
      continue;
    if (pick < s->cls[c].workers) {
      s->drv->send(s, t, c);
      return;
    }
    pick -= s->cls[c].workers;
  }
  s->drv->share(s, t, true); /* not reached: some class runs it */
}

const tdm_policy_ops tdm__policy_random = {
    .name = "random",
    .place = place,
};
