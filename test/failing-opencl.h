/* The failing OpenCL driver's controls (failing-opencl.c). */
#ifndef TDM_TEST_FAILING_OPENCL_H
#define TDM_TEST_FAILING_OPENCL_H

enum {
  FAILCL_RETURN = 1, /* the call returns an error */
  FAILCL_EVENT,      /* its event fails; what waits for it runs */
  FAILCL_CALLBACK,   /* only its callbacks say it failed */
  FAILCL_STALL,      /* its event fails; what waits for it never runs */
  FAILCL_NEVER,      /* it never completes */
};

void failcl_set(const char *entry, int mode, unsigned onset, unsigned count);
unsigned failcl_calls(void);
unsigned failcl_failed(void);

#endif
