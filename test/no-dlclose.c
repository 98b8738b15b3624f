/* Preloaded by the MPI tests under AddressSanitizer (test/meson.build):
 * libraries stay loaded, so that LeakSanitizer's report at exit names the
 * frames of Open MPI's components, which MPI_Finalize would dlclose(),
 * and mpi-lsan.supp can match them. */
int dlclose(void *handle);
int dlclose(void *handle) {
  (void)handle;
  return 0;
}
