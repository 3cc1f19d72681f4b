"""The PyTorch layer: the public functions (functional), their custom ops and autograd
(autograd), the nn.Modules (modules), and which path serves eager calls (backend: the Triton
launcher, or librmsnorm through clib and csrc/torch_ext.cpp)."""
