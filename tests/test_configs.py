"""The launch table: one rule per shape class, the path switch, and the grid."""

import pytest

from rmsnorm import configs


@pytest.mark.parametrize("elem_bytes", [2, 4, 8])
@pytest.mark.parametrize("fused", [False, True])
def test_every_n_gets_a_launch_that_covers_the_row(elem_bytes, fused):
    for n in list(range(1, 300)) + [1000, 4096, 5000, 32768, 32769, 65536, 262144, 10**7]:
        launch = configs.forward_launch(n, elem_bytes, fused)
        if launch.path == "tile":
            assert launch.block_n >= n and launch.block_n < 2 * n + 1
            assert launch.block_n <= configs.MAX_TILE[elem_bytes]
        else:
            assert n > configs.MAX_TILE[elem_bytes] and launch.rows == 1
        assert launch.num_warps in (1, 2, 4, 8, 16, 32)
        assert launch.block_n & (launch.block_n - 1) == 0


def test_rows_beyond_the_tile_limit_take_the_looped_path():
    assert configs.forward_launch(32768, 2, False).path == "tile"
    assert configs.forward_launch(32769, 2, False).path == "loop"
    assert configs.forward_launch(16384, 8, False).path == "loop"


def test_pipeline_depth_is_cut_to_the_shared_memory_budget():
    for n in (2048, 8192, 32768):
        for eb in (2, 4):
            launch = configs.forward_launch(n, eb, True, 4)
            per_stage = launch.block_n * (launch.rows * eb * 2 + 4)
            assert (launch.num_stages - 1) * per_stage <= configs.SMEM_BUDGET


def test_max_tile_override_reaches_the_looped_path_and_restores():
    with configs.max_tile(64):
        assert configs.forward_launch(64, 2, False).path == "tile"
        launch = configs.forward_launch(65, 2, False)
        assert launch.path == "loop" and launch.block_n == 64
    assert configs.forward_launch(65, 2, False).path == "tile"
    with pytest.raises(ValueError, match="power of two"):
        with configs.max_tile(48):
            pass


def test_small_rows_are_packed_several_per_program():
    assert configs.forward_launch(128, 2, False).rows > 1
    assert configs.forward_launch(32768, 2, False).rows == 1


def test_persistent_grid_is_capped_by_the_device():
    launch = configs.forward_launch(4096, 2, False)
    assert launch.grid(1, 132) == 1
    assert launch.grid(10**6, 132) == 132 * launch.programs_per_sm
    small = configs.forward_launch(128, 2, False)
    assert small.grid(100, 132) == -(-100 // small.rows)
