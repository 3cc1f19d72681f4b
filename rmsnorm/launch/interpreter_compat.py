"""Triton 3.6's interpreter with numpy 2.4 and newer.

While a kernel runs, the interpreter gives `tl.tensor` an `__index__` of
`int(self.handle.data)` (`_patch_lang_tensor` in triton/runtime/interpreter.py), and a scalar
there is a numpy array of shape (1,). numpy 2.4 removed `int()` of arrays with ndim > 0
(deprecated since numpy 1.25), so every `range()` whose bound is a runtime value (a kernel
argument, such as the row length of the looped path) fails with
`TypeError('only 0-dimensional arrays can be converted to Python scalars')`.

`apply()` wraps `_patch_lang_tensor` so that `__index__` converts the one element of such an
array (reshaped to 0-d) instead: the same Python int, so results are unchanged. Anything else
(an array of several elements) still goes to `int()` and fails as before. It does nothing
unless the interpreter is on, numpy is 2.4 or newer and Triton is 3.6; rmsnorm calls it on
import, before any kernel runs.
"""

import re

import numpy as np

_MARK = "_rmsnorm_numpy_index"


def _version(text):
    """(major, minor) of a version string ("2.5.0rc1" -> (2, 5)); (0, 0) if unreadable."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def _needed(interpret, numpy_version, triton_version):
    return bool(interpret) and _version(numpy_version) >= (2, 4) and \
        _version(triton_version) == (3, 6)


def _interpreting():
    try:
        from triton import knobs
    except ImportError:  # a Triton without knobs is not 3.6: nothing to fix
        return False
    return knobs.runtime.interpret


def needed():
    """True where the interpreter is on and numpy and Triton are the versions that fail."""
    import triton

    return _needed(_interpreting(), np.__version__, triton.__version__)


def _index(self):
    data = self.handle.data
    return int(data.reshape(()) if data.size == 1 else data)


def apply():
    """Installs the fix where needed (once); returns whether it is installed."""
    if not needed():
        return False
    from triton.runtime import interpreter

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
