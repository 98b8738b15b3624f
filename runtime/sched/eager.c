/*
 * eager: one queue that CPU workers and devices take from, first come
 * first served (StarPU's "eager"). A task only devices can run is placed
 * as heft would, among the devices.
 */
#include "sched.h"

static void place(tdm_sched *s, tdm_task *t) {
  if (s->drv->runs(s, 0, t) || !tdm__heft_place(s, t))
    s->drv->share(s, t, true);
}

const tdm_policy_ops tdm__policy_eager = {
    .name = "eager",
    .place = place,
    .done = tdm__policy_release,
};
