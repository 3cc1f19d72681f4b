#include "workload.hpp"

#include <stdexcept>

#include "cuda_check.hpp"
#include "fill.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace rmsnorm_bench {
namespace {

constexpr float kEps = 1e-6f;  // the Python bench's EPS

// Different seeds per tensor, as the Python bench draws them from one generator: x and
// residual must not be equal, or the sum would be 2x and say nothing new.
enum Seed : uint64_t { kSeedX = 1, kSeedWeight, kSeedResidual, kSeedDy };

size_t tensor_bytes(Shape s, rmsnorm_dtype dtype) {
    return static_cast<size_t>(s.m) * static_cast<size_t>(s.n) * dtype_size(dtype);
}

// Contiguous rows: the layout the Python bench's tensors have.
rmsnorm_rows rows_of(const DeviceBuffer& buffer, Shape s, rmsnorm_dtype dtype) {
    return rmsnorm_rows{buffer.get(), s.n, dtype};
}

}  // namespace

Workload::Workload(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                   cudaStream_t stream)
    : op_(op), dtype_(dtype), shape_(shape), mode_(mode), stream_(stream) {
    const int64_t elements = shape.m * shape.n;
    x_ = DeviceBuffer(tensor_bytes(shape, dtype));
    fill_normal(x_.get(), elements, dtype, kSeedX);
    // The Python bench's weight: randn * 0.5 + 1, away from zero like a trained one.
    weight_ = DeviceBuffer(static_cast<size_t>(shape.n) * dtype_size(dtype));
    fill_normal(weight_.get(), shape.n, dtype, kSeedWeight, 1.0f, 0.5f);
    if (op == Op::kBackward) {
        set_up_backward();
    } else {
        set_up_forward(op == Op::kAdd);
    }
}

void Workload::set_up_forward(bool fused) {
    forward_ = rmsnorm::forward_args();
    forward_.rows = shape_.m;
    forward_.n = shape_.n;
    forward_.x = rows_of(x_, shape_, dtype_);
    forward_.weight = weight_.get();
    forward_.weight_dtype = dtype_;
    forward_.eps = kEps;
    forward_.casting_mode = mode_;
    y_ = DeviceBuffer(tensor_bytes(shape_, dtype_));
    forward_.y = rows_of(y_, shape_, dtype_);
    if (fused) {
        // The sum goes to its own tensor (the Python bench's default, inplace=False): written
        // in place, the residual would grow by x with every repeat.
        residual_ = DeviceBuffer(tensor_bytes(shape_, dtype_));
        fill_normal(residual_.get(), shape_.m * shape_.n, dtype_, kSeedResidual);
        residual_out_ = DeviceBuffer(tensor_bytes(shape_, dtype_));
        forward_.residual = rows_of(residual_, shape_, dtype_);
        forward_.residual_out = rows_of(residual_out_, shape_, dtype_);
    }
    // rstd stays NULL: inference does not save it, nor does the Python bench's forward.
}

void Workload::set_up_backward() {
    dy_ = DeviceBuffer(tensor_bytes(shape_, dtype_));
    fill_normal(dy_.get(), shape_.m * shape_.n, dtype_, kSeedDy);
    dx_ = DeviceBuffer(tensor_bytes(shape_, dtype_));
    rstd_ = DeviceBuffer(static_cast<size_t>(shape_.m) * sizeof(float));
    dw_ = DeviceBuffer(static_cast<size_t>(shape_.n) * dtype_size(dtype_));

    // The forward's rstd, computed once; its y goes to dx, which the backward overwrites, so
    // that the row costs no extra tensor of M x N.
    rmsnorm_forward_args fwd = rmsnorm::forward_args();
    fwd.rows = shape_.m;
    fwd.n = shape_.n;
    fwd.x = rows_of(x_, shape_, dtype_);
    fwd.weight = weight_.get();
    fwd.weight_dtype = dtype_;
    fwd.y = rows_of(dx_, shape_, dtype_);
    fwd.rstd = rstd_.as<float>();
    fwd.eps = kEps;
    fwd.casting_mode = mode_;
    rmsnorm::check(rmsnorm_forward(&fwd, stream_));
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (rstd)");

    backward_ = rmsnorm::backward_args();
    backward_.rows = shape_.m;
    backward_.n = shape_.n;
    backward_.dy = rows_of(dy_, shape_, dtype_);
    backward_.x = rows_of(x_, shape_, dtype_);
    backward_.dx = rows_of(dx_, shape_, dtype_);
    backward_.rstd = rstd_.as<const float>();
    backward_.weight = weight_.get();
    backward_.weight_dtype = dtype_;
    backward_.dw = dw_.get();
    backward_.casting_mode = mode_;
    size_t workspace_bytes = 0;
    rmsnorm::check(rmsnorm_backward_workspace_size(&backward_, &workspace_bytes));
    workspace_ = DeviceBuffer(workspace_bytes);
}

void Workload::run() const {
    switch (op_) {
        case Op::kForward:
            rmsnorm::check(rmsnorm_forward(&forward_, stream_));
            return;
        case Op::kAdd:
            rmsnorm::check(rmsnorm_fused_add_forward(&forward_, stream_));
            return;
        case Op::kBackward:
            rmsnorm::check(
                rmsnorm_backward(&backward_, workspace_.get(), workspace_.bytes(), stream_));
            return;
    }
}

void Workload::set_launch_flags(unsigned flags) {
    forward_.launch_flags = flags;
    backward_.launch_flags = flags;
}

void Workload::run_without_dw() const {
    if (op_ != Op::kBackward) throw std::logic_error("run_without_dw: not a backward workload");
    rmsnorm_backward_args args = backward_;
    args.dw = nullptr;  // no dw: no workspace either
    rmsnorm::check(rmsnorm_backward(&args, nullptr, 0, stream_));
}

}  // namespace rmsnorm_bench
