"""The launch layer: from tensors to a kernel launch. The launch table (tables/, read through
configs), the row plan of strided tensors (layout), validation of arguments and outputs
(validation, aliasing), the launcher itself (ops) and its cheap re-launch (runner)."""
