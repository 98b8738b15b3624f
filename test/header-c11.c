/* The public header compiles alone as strict ISO C11 (-pedantic-errors). */
#include "tandem.h"

#include <string.h>

int main(void) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  return cfg.struct_size == sizeof cfg && strcmp(tdm_status_name(TDM_OK), "OK") == 0 ? 0 : 1;
}
