"""tests/clib.py declares librmsnorm's argument structs and enum codes to ctypes; the C
compiler's own layout of include/rmsnorm/rmsnorm.h is the truth. A small C program prints
every field's offset, every struct's size and the enum values, and they must be clib's."""

import ctypes
import shutil
import subprocess

import pytest
import torch

import clib

from helpers import ROOT

STRUCTS = {"rmsnorm_rows": clib.Rows, "rmsnorm_forward_args": clib.ForwardArgs,
           "rmsnorm_backward_args": clib.BackwardArgs}
ENUMS = {"RMSNORM_F32": clib.DTYPES[torch.float32], "RMSNORM_F16": clib.DTYPES[torch.float16],
         "RMSNORM_BF16": clib.DTYPES[torch.bfloat16], "RMSNORM_LLAMA": clib.MODES["llama"],
         "RMSNORM_GEMMA": clib.MODES["gemma"]}


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """{(struct, field): offset, (struct, "size"): size, ("enum", name): value}, as the C
    compiler lays out rmsnorm.h (one compile for the module's tests)."""
    tmp_path = tmp_path_factory.mktemp("clib_layout")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read rmsnorm.h's layout with")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "rmsnorm/rmsnorm.h"',
             "int main(void) {"]
    for name, struct in STRUCTS.items():
        lines.append(f'    printf("{name} size %zu\\n", sizeof({name}));')
        for field, _ in struct._fields_:
            lines.append(f'    printf("{name} {field} %zu\\n", offsetof({name}, {field}));')
    for name in ENUMS:
        lines.append(f'    printf("enum {name} %d\\n", (int){name});')
    lines += ["    return 0;", "}"]
    source, program = tmp_path / "layout.c", tmp_path / "layout"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", str(ROOT / "cpp" / "include"), str(source), "-o",
                    str(program)], check=True, capture_output=True)
    out = {}
    for line in subprocess.run([str(program)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        *key, value = line.split()
        out[tuple(key)] = int(value)
    return out


def test_every_struct_field_lies_where_the_c_compiler_puts_it(layout):
    for name, struct in STRUCTS.items():
        assert layout[(name, "size")] == ctypes.sizeof(struct), name
        for field, _ in struct._fields_:
            assert layout[(name, field)] == getattr(struct, field).offset, (name, field)


def test_dtype_and_casting_mode_codes_are_the_headers(layout):
    for name, value in ENUMS.items():
        assert layout[("enum", name)] == value, name
