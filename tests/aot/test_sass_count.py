"""rmsnorm_tools.sass_count reads a kernel's row loop out of its SASS: the body from a backward
branch's target to the branch, the longest such loop when there are several."""

from rmsnorm_tools import sass_count

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/                   FMUL R2, R0, R0 ;
        /*0030*/                   FFMA R3, R2, R2, R0 ;
        /*0040*/                   ISETP.GE.AND P0, PT, R3, 0x10, PT ;
        /*0050*/              @!P0 BRA 0x20 ;
        /*0060*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0070*/              @!P0 BRA 0x60 ;
        /*0080*/                   BRA 0x90 ;
        /*0090*/                   EXIT ;
"""


def test_the_longest_backward_branch_is_the_row_loop():
    instructions = [(a, t) for a, t in (
        (int(m.group(1), 16), m.group(2)) for m in map(sass_count._INSTRUCTION.match,
                                                       SASS.splitlines()) if m)]
    assert len(instructions) == 10
    loop = sass_count.row_loop(instructions)
    assert [t.split()[0] for t in loop] == ["FMUL", "FFMA", "ISETP.GE.AND", "@!P0"]


def test_forward_branches_are_not_loops():
    assert sass_count.row_loop([(0x0, "BRA 0x10"), (0x10, "EXIT")]) == []
