"""Bad input gets a clear exception naming the argument, before anything is launched."""

import pytest
import torch

import rmsnorm


@pytest.fixture
def x():
    return torch.randn(4, 8)


def test_weight_of_wrong_shape(x):
    with pytest.raises(ValueError, match=r"weight has shape \(7,\), expected \(8,\)"):
        rmsnorm.rms_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match="weight has shape"):
        rmsnorm.rms_norm(x, torch.ones(1, 8))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float8_e4m3fn, torch.complex64])
def test_unsupported_dtypes_name_the_argument(x, dtype):
    with pytest.raises(TypeError, match=r"x has dtype"):
        rmsnorm.rms_norm(x.to(dtype))
    with pytest.raises(TypeError, match=r"weight has dtype"):
        rmsnorm.rms_norm(x, torch.ones(8).to(dtype))
    with pytest.raises(TypeError, match=r"residual has dtype"):
        rmsnorm.fused_add_rms_norm(x, x.to(dtype))


def test_float64_cannot_be_mixed_with_other_dtypes(x):
    with pytest.raises(TypeError, match=r"x float64 but weight \(torch.float32\)"):
        rmsnorm.rms_norm(x.double(), torch.ones(8))
    with pytest.raises(TypeError, match="float64"):
        rmsnorm.fused_add_rms_norm(x, x.double())


def test_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        rmsnorm.rms_norm([1.0, 2.0])
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        rmsnorm.fused_add_rms_norm([1.0, 2.0], torch.ones(2))


def test_zero_width_rows(x):
    with pytest.raises(ValueError, match=r"N must be >= 1"):
        rmsnorm.rms_norm(torch.empty(4, 0))


def test_scalar_input():
    with pytest.raises(ValueError, match="at least one dimension"):
        rmsnorm.rms_norm(torch.tensor(1.0))


@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf"), 1e39, -1e39])
def test_eps_must_be_non_negative_and_finite_in_fp32(x, eps):
    # 1e39 is a finite Python float, but the kernels take eps as fp32, where it is inf.
    with pytest.raises(ValueError, match="eps must be >= 0 and finite in fp32"):
        rmsnorm.rms_norm(x, eps=eps)


def test_eps_just_below_fp32_overflow_is_accepted(x):
    largest = torch.finfo(torch.float32).max
    rmsnorm.rms_norm(x, eps=largest)
    with pytest.raises(ValueError, match="eps must be"):
        rmsnorm.rms_norm(x, eps=2.0 ** 128 - 2.0 ** 103)  # rounds to inf in fp32


@pytest.mark.parametrize("eps", ["1e-6", None, True, torch.tensor(1e-6)])
def test_eps_must_be_a_real_number(x, eps):
    with pytest.raises(TypeError, match="eps must be a real number"):
        rmsnorm.rms_norm(x, eps=eps)


@pytest.mark.parametrize("offset", [float("nan"), float("inf"), 1e39])
def test_offset_must_be_finite_in_fp32(x, offset):
    with pytest.raises(ValueError, match="offset must be finite in fp32"):
        rmsnorm.rms_norm(x, torch.ones(8), offset=offset)


@pytest.mark.parametrize("offset", ["1", None, torch.tensor(1.0)])
def test_offset_must_be_a_real_number(x, offset):
    with pytest.raises(TypeError, match="offset must be a real number"):
        rmsnorm.rms_norm(x, torch.ones(8), offset=offset)


def test_offset_without_weight(x):
    with pytest.raises(ValueError, match="offset=1.0 is added to the weight, but weight is "
                                         "None"):
        rmsnorm.rms_norm(x, None, offset=1.0)


def test_unknown_casting_mode(x):
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        rmsnorm.rms_norm(x, casting_mode="hf")
    with pytest.raises(TypeError, match="casting_mode must be a str"):
        rmsnorm.rms_norm(x, casting_mode=1)


def test_fused_add_needs_a_residual_tensor(x):
    with pytest.raises(TypeError, match="residual must be a torch.Tensor, got NoneType"):
        rmsnorm.fused_add_rms_norm(x, None)
    with pytest.raises(TypeError, match="residual must be a torch.Tensor, got list"):
        rmsnorm.fused_add_rms_norm(x, [1.0] * 8)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")  # torch's own
def test_sparse_tensors_are_refused_by_name(x):
    with pytest.raises(TypeError, match="x has layout torch.sparse_coo"):
        rmsnorm.rms_norm(x.to_sparse())
    with pytest.raises(TypeError, match="weight has layout torch.sparse_coo"):
        rmsnorm.rms_norm(x, torch.ones(8).to_sparse())
    with pytest.raises(TypeError, match="residual has layout torch.sparse_csr"):
        rmsnorm.fused_add_rms_norm(x, x.to_sparse_csr())


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")  # torch's own
def test_nested_tensors_are_refused_by_name(x):
    nested = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    with pytest.raises(TypeError, match="x is a nested tensor"):
        rmsnorm.rms_norm(nested)
    jagged = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)],
                                        layout=torch.jagged)
    with pytest.raises(TypeError, match="x is a nested tensor"):
        rmsnorm.rms_norm(jagged)


@pytest.mark.parametrize("hidden_size", [64.0, "64", None, True])
def test_module_hidden_size_must_be_an_int(hidden_size):
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        rmsnorm.RMSNorm(hidden_size)


@pytest.mark.parametrize("hidden_size", [0, -4])
def test_module_hidden_size_must_be_positive(hidden_size):
    with pytest.raises(ValueError, match="hidden_size must be >= 1"):
        rmsnorm.RMSNorm(hidden_size)
    with pytest.raises(ValueError, match="hidden_size must be >= 1"):
        rmsnorm.GemmaRMSNorm(hidden_size)


def test_module_scalars_are_checked_when_it_is_built():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        rmsnorm.RMSNorm(8, eps=-1.0)
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        rmsnorm.RMSNorm(8, casting_mode="bert")
    with pytest.raises(ValueError, match="offset must be finite in fp32"):
        rmsnorm.RMSNorm(8, offset=float("inf"))
    with pytest.raises(TypeError, match="eps must be a real number"):
        rmsnorm.GemmaRMSNorm(8, eps="1e-6")


def test_residual_of_wrong_shape(x):
    with pytest.raises(ValueError, match=r"residual has shape \(4, 9\)"):
        rmsnorm.fused_add_rms_norm(x, torch.randn(4, 9))


def test_out_of_wrong_shape_or_dtype(x):
    with pytest.raises(ValueError, match=r"out has shape \(4, 9\)"):
        rmsnorm.rms_norm(x, out=torch.empty(4, 9))
    with pytest.raises(TypeError, match="out has dtype torch.bfloat16, expected torch.float32"):
        rmsnorm.rms_norm(x, out=torch.empty(4, 8, dtype=torch.bfloat16))
    # llama promotes bf16 x with an fp32 weight to fp32: a bf16 out is wrong.
    with pytest.raises(TypeError, match="out has dtype torch.bfloat16, expected torch.float32"):
        rmsnorm.rms_norm(x.bfloat16(), torch.ones(8), out=torch.empty(4, 8).bfloat16())


def test_out_that_cannot_be_written_element_by_element(x):
    with pytest.raises(ValueError, match="out has a broadcast"):
        rmsnorm.rms_norm(x, out=torch.empty(1, 8).expand(4, 8))
    with pytest.raises(ValueError, match="out must have a contiguous last dimension"):
        rmsnorm.rms_norm(x, out=torch.empty(4, 16)[:, ::2])


def test_out_partially_overlapping_an_input(x):
    buf = torch.randn(5, 8)
    with pytest.raises(ValueError, match="out overlaps x; it may alias x exactly"):
        rmsnorm.rms_norm(buf[:4], out=buf[1:])


def test_out_overlapping_a_residual_updated_in_place(x):
    residual = torch.randn(4, 8)
    with pytest.raises(ValueError, match="out overlaps residual"):
        rmsnorm.fused_add_rms_norm(x, residual, inplace=True, out=residual)


def test_inplace_needs_a_residual(x):
    with pytest.raises(ValueError, match="inplace=True needs a residual"):
        rmsnorm.launch.ops.forward(x, inplace=True)


def test_inplace_residual_must_be_writable(x):
    with pytest.raises(ValueError, match=r"residual \(updated in place\) has a broadcast"):
        rmsnorm.fused_add_rms_norm(x, torch.randn(1, 8).expand(4, 8), inplace=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for two devices")
def test_tensors_on_different_devices(x):
    with pytest.raises(ValueError, match="weight is on cpu but x is on cuda"):
        rmsnorm.rms_norm(x.cuda(), torch.ones(8))
    with pytest.raises(ValueError, match="residual is on cpu but x is on cuda"):
        rmsnorm.fused_add_rms_norm(x.cuda(), x)
    with pytest.raises(ValueError, match="out is on cpu but x is on cuda"):
        rmsnorm.rms_norm(x.cuda(), out=x)


def test_tensors_on_different_devices_meta():
    # Runs without a GPU: the meta device stands in for "another device".
    with pytest.raises(ValueError, match="weight is on meta but x is on cpu"):
        rmsnorm.rms_norm(torch.randn(4, 8), torch.ones(8, device="meta"))


def test_meta_tensors_give_meta_outputs_of_the_contracts_shape_and_dtype():
    x = torch.randn(4, 8, device="meta", dtype=torch.bfloat16)
    y = rmsnorm.rms_norm(x, torch.ones(8, device="meta"))
    assert (y.device.type, y.shape, y.dtype) == ("meta", (4, 8), torch.float32)
    y, s = rmsnorm.fused_add_rms_norm(x, x.float(), casting_mode="gemma")
    assert (y.dtype, s.dtype, s.shape) == (torch.float32, torch.float32, (4, 8))


def test_out_is_refused_when_an_input_requires_grad(x):
    with pytest.raises(RuntimeError, match="out= is not differentiable"):
        rmsnorm.rms_norm(x.requires_grad_(), out=torch.empty_like(x))
    with torch.no_grad():
        rmsnorm.rms_norm(x, out=torch.empty_like(x))  # inference is fine


def test_the_autograd_path_names_bad_scalars(x):
    with pytest.raises(ValueError, match="eps must be"):
        rmsnorm.rms_norm(x.requires_grad_(), eps=-1.0)
    with pytest.raises(ValueError, match="casting_mode must be"):
        rmsnorm.fused_add_rms_norm(x, x.detach(), casting_mode="bert")


def test_dx_out_must_fit_the_gradient(x):
    from rmsnorm.launch import ops
    _, _, rstd = ops.forward(x, return_rstd=True)
    buf = torch.randn(x.numel() + 1)
    dy, shifted = buf[:-1].view(x.shape), buf[1:].view(x.shape)
    with pytest.raises(TypeError, match="dx_out has dtype"):
        ops.backward(dy, x, None, rstd, dx_out=torch.empty_like(x, dtype=torch.float64))
    with pytest.raises(ValueError, match="dx_out overlaps dy; it may alias dy exactly"):
        ops.backward(dy, x, None, rstd, dx_out=shifted)
    with pytest.raises(ValueError, match="dx_out overlaps x"):
        ops.backward(dy, x, None, rstd, dx_out=x)


# Each public function's parameters, with a value of a type none of them takes (a list): the
# error is a TypeError that names the parameter, raised before any op sees the call (whose
# own message would name its schema's parameter: "Expected a value of type 'Tensor' for
# argument 'y'").
PUBLIC_CALLS = {
    "rms_norm": lambda x, **kw: rmsnorm.rms_norm(x, torch.ones(8), **kw),
    "fused_add_rms_norm": lambda x, **kw: rmsnorm.fused_add_rms_norm(
        x, x.clone(), torch.ones(8), **kw),
    "rms_norm_quant": lambda x, **kw: rmsnorm.rms_norm_quant(x, torch.ones(8), **kw),
    "fused_add_rms_norm_quant": lambda x, **kw: rmsnorm.fused_add_rms_norm_quant(
        x, x.clone(), torch.ones(8), **kw),
}


def _keyword_parameters():
    import inspect
    out = []
    for name in PUBLIC_CALLS:
        for p in inspect.signature(getattr(rmsnorm, name)).parameters.values():
            if p.name not in ("x", "residual", "weight"):  # positional: test_not_a_tensor
                out.append((name, p.name))
    return out


@pytest.mark.parametrize("function,parameter", _keyword_parameters(), ids=str)
def test_every_keyword_of_a_wrong_type_is_a_type_error_naming_it(x, function, parameter):
    with pytest.raises(TypeError, match=rf"^{parameter} must be "):
        PUBLIC_CALLS[function](x, **{parameter: [1]})
