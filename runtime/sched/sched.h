/*
 * The scheduling layer: placement policies as tables (heft.c, ws.c,
 * eager.c, random.c, what they share in policy.c: policy.h), performance
 * models (perfmodel.c: perfmodel.h), the queues placed tasks wait in
 * (queue.c), the virtual-time driver that runs the policies on a
 * simulated clock (vtime.c), the lower bound (bound.c) and machine
 * descriptions (describe.c). It calls the data layer and below; the
 * driver on the runtime's threads is core's (core/place.c).
 */
#ifndef TDM_SCHED_H
#define TDM_SCHED_H

#include "../data/data.h"
#include "../objects.h"
#include "perfmodel.h"
#include "policy.h"

/* ---- queues of placed tasks (queue.c) -------------------------------------- */

/* Into a queue linked through pool_next (*head .. *tail): after the
 * tasks of the same or a higher priority, before the others. */
void tdm__queue_put(tdm_task **head, tdm_task **tail, tdm_task *t);
/* Lock held: puts t in its place; puts t first (a task that could not
 * start yet); takes the first, or NULL. */
void tdm__taskq_put(tdm_taskq *q, tdm_task *t);
void tdm__taskq_put_first(tdm_taskq *q, tdm_task *t);
tdm_task *tdm__taskq_pop(tdm_taskq *q);
/* Takes the last task of q, not started, if `want` accepts it (NULL:
 * any), else NULL; lock held (or a queue no other thread sees). */
tdm_task *tdm__taskq_take_last(tdm_taskq *q, bool (*want)(tdm_task *, void *), void *data);

#endif
