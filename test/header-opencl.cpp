// The OpenCL header as C++.
#include "header-opencl.c"
