# The AOT step: python -m rmsnorm.aot compiles every kernel specialization for
# RMSNORM_CUDA_ARCHS into ${RMSNORM_AOT_DIR} and generates kernels.cpp, which embeds them.
# Sets RMSNORM_AOT_SOURCE and RMSNORM_CUDA_INCLUDE.

find_path(RMSNORM_CUDA_INCLUDE cuda.h
          HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include /usr/local/cuda/include)
if(NOT RMSNORM_CUDA_INCLUDE)
    message(FATAL_ERROR "rmsnorm: cuda.h not found (set CUDA_HOME or RMSNORM_CUDA_INCLUDE), or "
                        "configure with -DRMSNORM_GPU=OFF for the CPU reference alone")
endif()

if(RMSNORM_PYTHON)
    set(_rmsnorm_python ${RMSNORM_PYTHON})
else()
    find_program(_rmsnorm_python NAMES python3 python REQUIRED)
endif()
get_filename_component(_rmsnorm_repo ${CMAKE_CURRENT_SOURCE_DIR} DIRECTORY)
execute_process(
    COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${_rmsnorm_repo}
            ${_rmsnorm_python} -c "import triton, rmsnorm.aot"
    RESULT_VARIABLE _rmsnorm_probe OUTPUT_QUIET ERROR_VARIABLE _rmsnorm_probe_err)
if(NOT _rmsnorm_probe EQUAL 0)
    message(FATAL_ERROR "rmsnorm: ${_rmsnorm_python} cannot import triton and rmsnorm.aot "
                        "(set RMSNORM_PYTHON, or -DRMSNORM_GPU=OFF):\n${_rmsnorm_probe_err}")
endif()

set(RMSNORM_AOT_DIR ${CMAKE_CURRENT_BINARY_DIR}/aot)
set(RMSNORM_AOT_SOURCE ${RMSNORM_AOT_DIR}/kernels.cpp)
set(_rmsnorm_blobs)
set(_rmsnorm_ptx OFF)
foreach(arch IN LISTS RMSNORM_CUDA_ARCHS)
    list(APPEND _rmsnorm_blobs ${RMSNORM_AOT_DIR}/kernels_sm${arch}.bin)
    if(arch LESS 90 AND NOT _rmsnorm_ptx)
        list(APPEND _rmsnorm_blobs ${RMSNORM_AOT_DIR}/kernels_ptx${arch}.bin)
        set(_rmsnorm_ptx ON)
    endif()
endforeach()
file(GLOB _rmsnorm_aot_inputs ${_rmsnorm_repo}/rmsnorm/kernels/*.py)
list(APPEND _rmsnorm_aot_inputs ${_rmsnorm_repo}/rmsnorm/configs.py
     ${_rmsnorm_repo}/rmsnorm/aot.py ${_rmsnorm_repo}/rmsnorm/aot_emit.py)
string(REPLACE ";" " " _rmsnorm_archs "${RMSNORM_CUDA_ARCHS}")
separate_arguments(_rmsnorm_archs)
# kernels.cpp and the blobs are rewritten only when their content changes (restat): the
# stamp says the step ran.
add_custom_command(
    OUTPUT ${RMSNORM_AOT_DIR}/aot.stamp
    BYPRODUCTS ${RMSNORM_AOT_SOURCE} ${_rmsnorm_blobs}
    COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${_rmsnorm_repo} TRITON_INTERPRET=0
            ${_rmsnorm_python} -m rmsnorm.aot --out ${RMSNORM_AOT_DIR}
            --archs ${_rmsnorm_archs} --jobs ${RMSNORM_AOT_JOBS}
    COMMAND ${CMAKE_COMMAND} -E touch ${RMSNORM_AOT_DIR}/aot.stamp
    DEPENDS ${_rmsnorm_aot_inputs}
    COMMENT "rmsnorm: compiling the Triton kernels for sm_${RMSNORM_CUDA_ARCHS}"
    VERBATIM)
add_custom_target(rmsnorm_aot DEPENDS ${RMSNORM_AOT_DIR}/aot.stamp)
set_source_files_properties(${RMSNORM_AOT_SOURCE} PROPERTIES GENERATED TRUE
                            OBJECT_DEPENDS "${RMSNORM_AOT_DIR}/aot.stamp;${_rmsnorm_blobs}")
