// The public header compiles as C++ and links with C linkage.
#include "tandem.h"

#include <cstring>

int main() {
  tdm_config cfg;
  tdm_config_init(&cfg);
  return cfg.struct_size == sizeof cfg && std::strcmp(tdm_strerror(TDM_OK), "success") == 0 ? 0 : 1;
}
