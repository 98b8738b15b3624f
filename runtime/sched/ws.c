/*
 * ws: a ready task stays where it was released: on the queue of the
 * device whose task released it, else in the CPU workers' deques. Idle
 * devices take tasks from the CPU workers' deques and from each other's
 * queues, idle CPU workers from the devices' queues (work stealing, as
 * Blumofe and Leiserson's scheduler, across kinds of worker). A task only
 * devices can run, released by a CPU worker, is placed as heft would.
 */
#include "sched.h"

static void place(tdm_sched *s, tdm_task *t) {
  int k = s->drv->current(s);
  if (k >= 0 && s->drv->runs(s, (unsigned)k, t)) {
    s->drv->send(s, t, (unsigned)k);
  } else if (s->drv->runs(s, 0, t)) {
    s->drv->to_cpu(s, t);
    s->drv->kick_devices(s); /* they may take it */
  } else if (!tdm__heft_place(s, t)) {
    s->drv->share(s, t, true); /* no device known yet */
  }
}

static tdm_task *idle_cpu(tdm_sched *s, unsigned c) {
  return tdm__policy_take_queued(s, c, true);
}

static tdm_task *idle_device(tdm_sched *s, unsigned c) {
  tdm_task *t = tdm__policy_take_queued(s, c, true);
  return t ? t : s->drv->steal_cpu(s, c);
}

static void work_shown(tdm_sched *s) {
  s->drv->kick_devices(s); /* idle devices may take some */
}

const tdm_policy_ops tdm__policy_ws = {
    .name = "ws",
    .place = place,
    .idle_cpu = idle_cpu,
    .idle_device = idle_device,
    .done = tdm__policy_release,
    .work_shown = work_shown,
};
