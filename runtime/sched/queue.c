/* Queues of placed tasks, in priority order, linked through pool_next:
 * a device's queue, a kind of CPU core's, the shared queue, and the
 * simulated workers' of virtual time. Whoever owns a queue guards it. */
#include "sched.h"

void tdm__queue_put(tdm_task **head, tdm_task **tail, tdm_task *t) {
  t->pool_next = NULL;
  if (!*tail || (*tail)->priority >= t->priority) { /* the usual case: at the end */
    if (*tail)
      (*tail)->pool_next = t;
    else
      *head = t;
    *tail = t;
    return;
  }
  tdm_task **at = head;
  while (*at && (*at)->priority >= t->priority)
    at = &(*at)->pool_next;
  t->pool_next = *at;
  *at = t;
}

void tdm__taskq_put(tdm_taskq *q, tdm_task *t) {
  tdm__queue_put(&q->head, &q->tail, t);
  q->queued++;
}

void tdm__taskq_put_first(tdm_taskq *q, tdm_task *t) {
  t->pool_next = q->head;
  q->head = t;
  if (!q->tail)
    q->tail = t;
  q->queued++;
}

tdm_task *tdm__taskq_pop(tdm_taskq *q) {
  tdm_task *t = q->head;
  if (t) {
    q->head = t->pool_next;
    if (!q->head)
      q->tail = NULL;
    q->queued--;
  }
  return t;
}

tdm_task *tdm__taskq_take_last(tdm_taskq *q, bool (*want)(tdm_task *, void *), void *data) {
  tdm_task *last = q->tail, *prev = NULL;
  if (!last || (want && !want(last, data)))
    return NULL;
  for (tdm_task *t = q->head; t != last; t = t->pool_next)
    prev = t;
  if (prev)
    prev->pool_next = NULL;
  else
    q->head = NULL;
  q->tail = prev;
  q->queued--;
  return last;
}
