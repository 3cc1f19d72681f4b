# ctest's rmsnorm_cpp_bench_help: `rmsnorm-cpp-bench --help` prints the usage and exits 0.
#   cmake -DBENCH=<path of rmsnorm-cpp-bench> -P help_test.cmake
execute_process(COMMAND ${BENCH} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "rmsnorm-cpp-bench --help exited with ${rc}:\n${out}${err}")
endif()
if(NOT out MATCHES "^usage: rmsnorm-cpp-bench ")
    message(FATAL_ERROR "rmsnorm-cpp-bench --help printed no usage line:\n${out}${err}")
endif()
