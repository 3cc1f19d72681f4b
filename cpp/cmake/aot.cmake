# The AOT step: python -m rmsnorm.aot compiles every kernel specialization for
# RMSNORM_CUDA_ARCHS into ${RMSNORM_AOT_DIR} and generates kernels.cpp, which embeds them.
# Sets RMSNORM_AOT_SOURCE and RMSNORM_CUDA_INCLUDE, and defines the target rmsnorm_aot, which
# runs the step: whatever compiles kernels.cpp depends on it.

find_path(RMSNORM_CUDA_INCLUDE cuda.h
          HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include /usr/local/cuda/include)
if(NOT RMSNORM_CUDA_INCLUDE)
    message(FATAL_ERROR "rmsnorm: cuda.h not found (set CUDA_HOME or RMSNORM_CUDA_INCLUDE), or "
                        "configure with -DRMSNORM_GPU=OFF for the CPU reference alone")
endif()

# The package's build (the top-level CMakeLists.txt) has found the Python already.
if(NOT _rmsnorm_python)
    if(RMSNORM_PYTHON)
        set(_rmsnorm_python ${RMSNORM_PYTHON})
    else()
        find_program(_rmsnorm_python NAMES python3 python REQUIRED)
    endif()
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

# Each arch costs a full AOT pass (minutes): by default build the local GPUs' archs alone,
# where a GPU is visible (nvidia-smi, else torch in that Python), and the whole list elsewhere.
# Decided on the first configure; the cache keeps it.
set(_rmsnorm_all_archs 80 89 90 100)
if(NOT DEFINED CACHE{RMSNORM_CUDA_ARCHS})
    set(_rmsnorm_local_archs)
    find_program(_rmsnorm_nvidia_smi nvidia-smi)
    if(_rmsnorm_nvidia_smi)
        execute_process(
            COMMAND ${_rmsnorm_nvidia_smi} --query-gpu=compute_cap --format=csv,noheader
            RESULT_VARIABLE _rmsnorm_rc OUTPUT_VARIABLE _rmsnorm_caps ERROR_QUIET TIMEOUT 30)
        if(_rmsnorm_rc EQUAL 0)
            string(REGEX MATCHALL "[0-9]+\\.[0-9]" _rmsnorm_caps "${_rmsnorm_caps}")
            string(REPLACE "." "" _rmsnorm_local_archs "${_rmsnorm_caps}")
        endif()
    endif()
    if(NOT _rmsnorm_local_archs)
        execute_process(
            COMMAND ${_rmsnorm_python} -c
                    "import torch; c = torch.cuda; print(*{'%d%d' % c.get_device_capability(i) for i in range(c.device_count())})"
            RESULT_VARIABLE _rmsnorm_rc OUTPUT_VARIABLE _rmsnorm_caps ERROR_QUIET TIMEOUT 60)
        if(_rmsnorm_rc EQUAL 0)
            string(REGEX MATCHALL "[0-9]+" _rmsnorm_local_archs "${_rmsnorm_caps}")
        endif()
    endif()
    list(REMOVE_DUPLICATES _rmsnorm_local_archs)
    list(SORT _rmsnorm_local_archs COMPARE NATURAL)
    if(_rmsnorm_local_archs)
        string(CONCAT _rmsnorm_why ": the local GPU's arch (RMSNORM_CUDA_ARCHS chooses others, "
                                   "e.g. \"80;89;90;100\")")
        set(_rmsnorm_default ${_rmsnorm_local_archs})
    else()
        string(CONCAT _rmsnorm_why ": no GPU visible, so the whole default list, a full AOT "
                                   "pass per arch (-DRMSNORM_CUDA_ARCHS=90 builds one)")
        set(_rmsnorm_default ${_rmsnorm_all_archs})
    endif()
    set(RMSNORM_CUDA_ARCHS "${_rmsnorm_default}" CACHE STRING
        "GPU archs (compute capability x 10) to compile the kernels for; sm_80 also brings PTX for newer GPUs")
else()
    set(_rmsnorm_why " (RMSNORM_CUDA_ARCHS)")
endif()
string(REPLACE ";" ", sm_" _rmsnorm_list "${RMSNORM_CUDA_ARCHS}")
message(STATUS "rmsnorm: kernels for sm_${_rmsnorm_list}${_rmsnorm_why}")

# In the top build folder, whether cpp/ is built alone or as part of the package.
set(RMSNORM_AOT_DIR ${CMAKE_BINARY_DIR}/aot)
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
file(GLOB _rmsnorm_aot_inputs ${_rmsnorm_repo}/rmsnorm/kernels/*.py
     ${_rmsnorm_repo}/rmsnorm/launch/tables/*.py)
list(APPEND _rmsnorm_aot_inputs ${_rmsnorm_repo}/rmsnorm/launch/configs.py
     ${_rmsnorm_repo}/rmsnorm/aot/build.py ${_rmsnorm_repo}/rmsnorm/aot/emit.py
     ${_rmsnorm_repo}/rmsnorm/aot/abi.py ${_rmsnorm_repo}/cpp/src/generated/kernel_abi.hpp)
string(REPLACE ";" " " _rmsnorm_archs "${RMSNORM_CUDA_ARCHS}")
separate_arguments(_rmsnorm_archs)
# kernels.cpp and the blobs are rewritten only when their content changes (restat): the
# stamp says the step ran, dated to when it began (an input edited during it reruns it).
# USES_TERMINAL: Ninja holds a command's output until it ends, and this one runs for up to half
# an hour; in the console pool its progress lines reach the build's output as they come.
add_custom_command(
    OUTPUT ${RMSNORM_AOT_DIR}/aot.stamp
    BYPRODUCTS ${RMSNORM_AOT_SOURCE} ${_rmsnorm_blobs}
    COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${_rmsnorm_repo} TRITON_INTERPRET=0
            ${_rmsnorm_python} -m rmsnorm.aot --out ${RMSNORM_AOT_DIR}
            --archs ${_rmsnorm_archs} --jobs ${RMSNORM_AOT_JOBS}
            --stamp ${RMSNORM_AOT_DIR}/aot.stamp
    DEPENDS ${_rmsnorm_aot_inputs}
    COMMENT "rmsnorm: compiling the Triton kernels for sm_${RMSNORM_CUDA_ARCHS}"
    USES_TERMINAL VERBATIM)
add_custom_target(rmsnorm_aot DEPENDS ${RMSNORM_AOT_DIR}/aot.stamp)
set_source_files_properties(${RMSNORM_AOT_SOURCE} PROPERTIES GENERATED TRUE
                            OBJECT_DEPENDS "${RMSNORM_AOT_DIR}/aot.stamp;${_rmsnorm_blobs}")
