"""The ahead-of-time compiler of librmsnorm's kernels (`python -m rmsnorm.aot`, build): the
specializations and their compilation, the generated C++ that embeds them (emit), the launch
ABI the C++ runtime reads (abi) and a build's kernels carried to a GPU machine (carry)."""
