"""rmsnorm for PyTorch: the public functions (functional), the op library they call (native:
the C++ ops of csrc/, with triton_ops and fake registered from Python), the nn.Modules
(modules), what serves which call (status)."""
