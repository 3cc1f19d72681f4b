"""The one vocabulary of dtype names, used by the launch table (configs.Rule's own-dtype rows),
the Python launcher, the AOT build and its generated C++, and the tools' command lines. Triton
spells its pointer types the same way ("*bf16"). librmsnorm's C enum (rmsnorm_dtype) numbers
the compiled ones in COMPILED's order (rmsnorm.aot.abi generates the codes from it)."""

# The dtypes librmsnorm's kernels are compiled for, in rmsnorm_dtype's order.
COMPILED = ("fp32", "fp16", "bf16")
# Every dtype the launcher serves, by name, and its element size.
BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}
# torch's attribute name of each (torch.bfloat16, ...): the launch table and the AOT build need
# no torch, so the mapping is by name; the launcher keys a dict by the dtypes themselves.
TORCH = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def name_of(dtype):
    """The name of a torch dtype, or None for one the launcher does not serve."""
    return TORCH.get(str(dtype).replace("torch.", "", 1))
