// One op at one shape and dtype through librmsnorm's C API: its device tensors allocated and
// filled once, its argument struct built once, so that a call is the library's launch alone.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_resources.hpp"
#include "problem.hpp"
#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_bench {

class Workload {
 public:
    // Allocates and fills the tensors; for bwd also runs rmsnorm_forward once for the rstd the
    // backward reads (as the Python bench saves it once per row). Throws CudaError or
    // rmsnorm::Error.
    Workload(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
             cudaStream_t stream);

    // Enqueues the op on the stream (rmsnorm_forward, rmsnorm_fused_add_forward, or
    // rmsnorm_backward with dw). Throws rmsnorm::Error with the library's message.
    void run() const;

    // bwd only: the same backward with dw NULL, what the backward costs without dw.
    void run_without_dw() const;

    // RMSNORM_LAUNCH_* bits for the calls that follow.
    void set_launch_flags(unsigned flags);

    Op op() const noexcept { return op_; }

 private:
    void set_up_forward(bool fused);
    void set_up_backward();

    Op op_;
    rmsnorm_dtype dtype_;
    Shape shape_;
    rmsnorm_casting_mode mode_;
    cudaStream_t stream_;
    DeviceBuffer x_, weight_, residual_, residual_out_, y_;  // forward
    DeviceBuffer dy_, dx_, rstd_, dw_, workspace_;           // backward (with x_ and weight_)
    rmsnorm_forward_args forward_{};
    rmsnorm_backward_args backward_{};
};

}  // namespace rmsnorm_bench
