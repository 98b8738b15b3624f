/* <tandem/glib.h> compiles alone as strict ISO C11 and as C++
 * (header-glib.cpp), and gives no source for a NULL runtime. */
#include "tandem/glib.h"

int main(void) {
  return tdm_glib_source_new(NULL) == NULL && tdm_glib_attach(NULL, NULL) == 0 ? 0 : 1;
}
