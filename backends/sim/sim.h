/*
 * Emulated devices (sim.c): the backend, and what tests ask of it.
 */
#ifndef TDM_BACKEND_SIM_H
#define TDM_BACKEND_SIM_H

#include "../backend.h"

extern const tdm_backend tdm__sim_backend;

/* For tests: when the emulated devices' clock started (tdm__now_ns;
 * slow_at counts from there), 0 without emulated devices. */
uint64_t tdm__sim_t0(const tdm_runtime *rt);

#endif
