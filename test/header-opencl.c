/* The OpenCL header compiles alone as strict ISO C11 (-pedantic-errors),
 * and as C++ (header-opencl.cpp includes this file). */
#include "tandem/opencl.h"

int main(void) {
  tdm_opencl_variant v;
  tdm_codelet c;
  v.source = "__kernel void k(void) {}";
  v.kernel = "k";
  c.opencl = &v;
  return c.opencl->kernel[0] == 'k' && tdm_device_class_name(TDM_DEVICE_DISCRETE_GPU)[0] == 'd'
             ? 0
             : 1;
}
