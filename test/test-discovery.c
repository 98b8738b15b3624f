/* OpenCL device classification and deduplication on fabricated device
 * records, and the loader's failures: not found, not an OpenCL loader. */
#include "common.h"

#include "devices.h"
#include "internal.h"

static tdm_device_record dev(uint64_t type, bool unified, uint64_t svm) {
  tdm_device_record d;
  memset(&d, 0, sizeof d);
  d.type = type;
  d.host_unified = unified;
  d.svm_caps = svm;
  return d;
}

static void test_classification(void **state) {
  (void)state;
  tdm_device_record igpu = dev(TDM_CL_TYPE_GPU, true, 0);
  tdm_device_record igpu_svm = dev(TDM_CL_TYPE_GPU, false, 1u << 2);
  tdm_device_record dgpu = dev(TDM_CL_TYPE_GPU, false, 1u << 0); /* coarse SVM only */
  tdm_device_record cpu = dev(TDM_CL_TYPE_CPU, true, 0);
  tdm_device_record acc = dev(TDM_CL_TYPE_ACCELERATOR, false, 0);
  tdm_device_record custom = dev(TDM_CL_TYPE_CUSTOM, false, 0);
  tdm_device_record *all[] = {&igpu, &igpu_svm, &dgpu, &cpu, &acc, &custom};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    tdm__classify_device(all[i]);
  assert_int_equal(igpu.cls, TDM_CLASS_INTEGRATED_GPU);
  assert_int_equal(igpu_svm.cls, TDM_CLASS_INTEGRATED_GPU);
  assert_int_equal(dgpu.cls, TDM_CLASS_DISCRETE_GPU);
  assert_int_equal(cpu.cls, TDM_CLASS_CPU_DEVICE);
  assert_int_equal(acc.cls, TDM_CLASS_ACCELERATOR);
  assert_int_equal(custom.cls, TDM_CLASS_ACCELERATOR);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    assert_true(all[i]->reason[0] != 0); /* every class says why */
  assert_string_equal(tdm__device_class_name(TDM_CLASS_DISCRETE_GPU), "discrete GPU");
}

static void test_dedupe(void **state) {
  (void)state;
  tdm_device_record d[6];
  d[0] = dev(TDM_CL_TYPE_GPU, false, 0); /* dGPU on platform 0 */
  d[0].has_pci = true;
  d[0].pci_bus = 3;
  d[1] = dev(TDM_CL_TYPE_GPU, true, 0); /* iGPU, no ids */
  d[2] = d[0];                          /* the same dGPU through platform 1 */
  d[2].platform = 1;
  d[3] = dev(TDM_CL_TYPE_GPU, false, 0); /* another dGPU: other bus */
  d[3].has_pci = true;
  d[3].pci_bus = 4;
  d[4] = dev(TDM_CL_TYPE_GPU, false, 0); /* known by UUID */
  d[4].has_uuid = true;
  memset(d[4].uuid, 0xab, 16);
  d[5] = d[4]; /* and seen again */
  d[5].platform = 2;
  tdm__dedupe_devices(d, 6);
  assert_int_equal(d[0].duplicate_of, -1);
  assert_int_equal(d[1].duplicate_of, -1);
  assert_int_equal(d[2].duplicate_of, 0);
  assert_int_equal(d[3].duplicate_of, -1);
  assert_int_equal(d[4].duplicate_of, -1);
  assert_int_equal(d[5].duplicate_of, 4);
  /* devices reporting no identity, or a zero UUID, are never merged */
  tdm_device_record z[2] = {dev(TDM_CL_TYPE_GPU, false, 0), dev(TDM_CL_TYPE_GPU, false, 0)};
  z[0].has_uuid = z[1].has_uuid = true;
  tdm__dedupe_devices(z, 2);
  assert_int_equal(z[1].duplicate_of, -1);
}

static void expect_no_opencl(const char *path) {
  test_log log;
  tdm_runtime *rt = test_runtime(1, &log);
  tdm_device_record *recs = (tdm_device_record *)1;
  unsigned n = 99;
  unsigned before = test_log_count(&log);
  assert_int_equal(tdm__discover_opencl(rt, path, &recs, &n), TDM_ERR_NO_OPENCL);
  assert_null(recs);
  assert_int_equal(n, 0);
  assert_true(test_log_count(&log) > before); /* it says why */
  tdm_runtime_destroy(rt);
}

static void test_loader_not_found(void **state) {
  (void)state;
  expect_no_opencl("/nonexistent/libOpenCL.so.1");
}

static void test_loader_not_opencl(void **state) {
  (void)state;
  expect_no_opencl("libm.so.6"); /* loads, but has no clGetPlatformIDs */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classification),
      cmocka_unit_test(test_dedupe),
      cmocka_unit_test(test_loader_not_found),
      cmocka_unit_test(test_loader_not_opencl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
