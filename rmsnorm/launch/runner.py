"""Launching a Triton kernel with less host time than `kernel[grid](...)`.

Triton's JIT launch binds and specializes every argument on every call (about 15-20 us of
host time on the H200's host), longer than the kernels themselves for small inputs. A
`Prepared` launch fixes everything known from the tensors' metadata (grid, constexprs,
warps); its first call per pointer-alignment class goes through the JIT (compiling or finding
the kernel), and later calls hand the arguments straight to the compiled kernel's launcher.

What Triton specializes a compiled kernel on must be in the key of that reuse: integer
arguments (their value 1 and divisibility by 16) come from shapes and strides, which the
callers' metadata caches already key on; pointer alignment (16 bytes) is keyed here. Floats
are not specialized.
"""

import threading
import warnings

import numpy as np

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - every supported triton has it
    InterpretedFunction = ()

from rmsnorm.launch.configs import compile_options

# Triton's interpreter patches the triton.language module for the duration of a launch (and
# restores it after) and keeps the program's index in one global builder, so two threads in it
# at once see each other's half-patched functions ("Did you forget to add @triton.jit ?") and
# grids: interpreted launches run one at a time.
_INTERPRETER = threading.Lock()


class Prepared:
    def __init__(self, kernel, grid, n_pointers, constexprs, num_warps, ints_divisible,
                 max_registers=0):
        self.kernel = kernel
        self.grid = (grid,)
        self.n_pointers = n_pointers
        self.constexprs = constexprs  # name -> value, in the kernel's parameter order
        self.num_warps = num_warps
        # The specialized int arguments (n, strides) all multiples of 16: with 16-byte aligned
        # pointers, the JIT compiles a vectorised kernel (rmsnorm.launch.configs.compile_options).
        self.ints_divisible = ints_divisible
        self.max_registers = max_registers  # configs.Launch.max_registers
        self.compiled = {}
        self.direct = not isinstance(kernel, InterpretedFunction)

    def __call__(self, *args):
        """args: the kernel's runtime arguments in order, the n_pointers tensors first."""
        if not self.direct:
            _interpret(self.kernel, self.grid, args, self.constexprs, self.num_warps)
            return
        aligned = tuple(t.data_ptr() % 16 == 0 for t in args[:self.n_pointers])
        launch = self.compiled.get(aligned)
        if launch is not None:
            launch(*args, *self.constexprs.values())
            return
        options = compile_options(self.ints_divisible and all(aligned), self.max_registers)
        compiled = self.kernel[self.grid](*args, **self.constexprs, num_warps=self.num_warps,
                                          **options)
        if hasattr(compiled, "packed_metadata"):  # a CompiledKernel, not a wrapper's result
            # CompiledKernel[grid] launches on the current device's current stream, as the
            # JIT does; it takes every parameter, constexprs included, in order.
            self.compiled[aligned] = compiled[(self.grid[0], 1, 1)]


def _interpret(kernel, grid, args, constexprs, num_warps):
    """One launch under Triton's interpreter. It computes a tile's masked-off lanes too, on
    numpy arrays (a division by zero, an fp8 cast of a NaN, a max of an all-NaN slice): numpy's
    warnings of those are about lanes no result keeps, and are not shown."""
    with _INTERPRETER, np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning,
                                module=r"triton\.runtime\.interpreter")
        kernel[grid](*args, **constexprs, num_warps=num_warps)
