// <tandem/glib.h> compiles as C++ (-pedantic-errors): header-glib.c.
#include "header-glib.c"
