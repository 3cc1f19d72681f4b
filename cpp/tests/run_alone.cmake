# Read by ctest after the discovered tests are defined (TEST_INCLUDE_FILES, in this order).
# Tests that take most of the GPU's memory run with no other test beside them: under
# `ctest -j 16` on an 80 GB H100 the 72 GiB of the 2^31-row forward made every test that
# started a CUDA context at the same time fail with cudaErrorMemoryAllocation.
set_tests_properties(GpuTest.AForwardOfMoreThan2To31RowsCoversEveryRow PROPERTIES RUN_SERIAL TRUE)
