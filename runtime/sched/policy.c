/*
 * What both drivers of the placement policies share (policy.h): the
 * policies' names, and heft's choice among the candidates of a task.
 * HEFT follows Topcuoglu, Hariri and Wu, "Performance-effective and
 * low-complexity task scheduling for heterogeneous computing", IEEE TPDS
 * 13(3), 2002.
 */
#include "policy.h"

#include "../internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tdm__policy_name(tdm_policy p) {
  switch (p) {
  case TDM_POLICY_HEFT:
    return "heft";
  case TDM_POLICY_WS:
    return "ws";
  case TDM_POLICY_EAGER:
    return "eager";
  case TDM_POLICY_RANDOM:
    return "random";
  }
  return "unknown";
}

bool tdm__policy_parse(const char *name, tdm_policy *out) {
  static const tdm_policy all[] = {TDM_POLICY_HEFT, TDM_POLICY_WS, TDM_POLICY_EAGER,
                                   TDM_POLICY_RANDOM};
  for (unsigned i = 0; i < sizeof all / sizeof *all; i++)
    if (!strcmp(name, tdm__policy_name(all[i]))) {
      *out = all[i];
      return true;
    }
  return false;
}

int tdm__heft_pick(const tdm_choice *c, unsigned n, unsigned max_tries, bool *calibrating) {
  int best = -1, cal = -1;
  bool all_known = true;
  double best_end = INFINITY;
  for (unsigned i = 0; i < n; i++) {
    if (!c[i].calibrated) {
      all_known = false;
      if (c[i].trying < max_tries && (cal < 0 || c[i].trying < c[cal].trying))
        cal = (int)i;
    } else if (c[i].exec >= 0 && c[i].start + c[i].exec < best_end) {
      best_end = c[i].start + c[i].exec;
      best = (int)i;
    }
  }
  *calibrating = cal >= 0;
  if (cal >= 0)
    return cal;
  return all_known ? best : -1;
}

/* The model's names: codelet c is "c<c>", a class its name. */
