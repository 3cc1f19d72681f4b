"""Fixes for Triton's interpreter, each for the versions where it breaks rmsnorm's kernels.

`apply()` installs them on import of rmsnorm, before any kernel runs, and only where the
interpreter is on; the compiled kernels never see them. Each fix keeps results the same: it
makes the interpreter do what the GPU does, not something else.

1. Triton 3.6 with numpy 2.4 and newer (`_index`). While a kernel runs, the interpreter gives
   `tl.tensor` an `__index__` of `int(self.handle.data)` (`_patch_lang_tensor` in
   triton/runtime/interpreter.py), and a scalar there is a numpy array of shape (1,). numpy 2.4
   removed `int()` of arrays with ndim > 0 (deprecated since numpy 1.25), so every `range()`
   whose bound is a runtime value (a kernel argument, such as the row length of the looped
   path) fails with `TypeError('only 0-dimensional arrays can be converted to Python
   scalars')`. The fix converts the one element of such an array (reshaped to 0-d) instead:
   the same Python int. An array of several elements still goes to `int()` and fails as
   before. Triton 3.7 converts it itself.

2. Triton 3.9 (`_splat`). A comparison of scalars (`flag != 0`, a run-time kernel argument)
   gives a handle whose data is bool but whose dtype is the operands' (int32), in every version
   from 3.6 to 3.9; splatting it over a block (`mask & (flag != 0)`) then makes int32 data.
   Up to 3.8 a store took any truthy mask; 3.9's store refuses a mask that is not bool
   (`ValueError('mask has unsupported dtype')`), and with it the quantized forward. The fix
   splats such a scalar as the int1 it is. Installed from 3.9 on, where it matters; the data
   is the same 0s and 1s either way.
"""

import re

import numpy as np

_MARK = "_rmsnorm_compat"


def _version(text):
    """(major, minor) of a version string ("2.5.0rc1" -> (2, 5)); (0, 0) if unreadable."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def _needed(interpret, numpy_version, triton_version):
    """The fixes (by name) that this interpreter, numpy and Triton need."""
    if not interpret:
        return ()
    triton = _version(triton_version)
    fixes = []
    if _version(numpy_version) >= (2, 4) and triton == (3, 6):
        fixes.append("index")
    if triton >= (3, 9):
        fixes.append("splat")
    return tuple(fixes)


def _interpreting():
    try:
        from triton import knobs
    except ImportError:  # a Triton without knobs is older than any rmsnorm supports
        return False
    return knobs.runtime.interpret


def needed():
    """The fixes (by name) where the interpreter is on and numpy and Triton need them."""
    import triton

    return _needed(_interpreting(), np.__version__, triton.__version__)


def _index(self):
    data = self.handle.data
    return int(data.reshape(()) if data.size == 1 else data)


def _install_index(interpreter):
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # Through the scope, so it is undone with the interpreter's own patches.
        scope.set_attr(tensor, "__index__", _index)

    setattr(patch_lang_tensor, _MARK, True)
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


def _splat_of(original, tl, handle_type):
    def create_splat(self, ret_ty, arg):
        data = getattr(arg, "data", None)
        if isinstance(data, np.ndarray) and data.dtype == np.bool_ and \
                not isinstance(arg.dtype, tl.block_type):
            arg = handle_type(data, tl.int1)
        return original(self, ret_ty, arg)

    setattr(create_splat, _MARK, True)
    return create_splat


def _install_splat(interpreter):
    import triton.language as tl

    builder = getattr(interpreter, "InterpreterBuilder", None)
    handle_type = getattr(interpreter, "TensorHandle", None)
    original = getattr(builder, "create_splat", None)
    if original is None or handle_type is None:
        return False
    if not getattr(original, _MARK, False):
        builder.create_splat = _splat_of(original, tl, handle_type)
    return True


_INSTALL = {"index": _install_index, "splat": _install_splat}


def apply():
    """Installs the fixes this Triton needs (once); returns the names of those installed."""
    fixes = needed()
    if not fixes:
        return ()
    from triton.runtime import interpreter

    return tuple(name for name in fixes if _INSTALL[name](interpreter))
