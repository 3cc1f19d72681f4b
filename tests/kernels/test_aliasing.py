"""Outputs that share memory with inputs: an output may be an input exactly or share no element
with it; the weight, read by every row, shares nothing with an output. Overlap is decided
element by element, so interleaved views that share no element are accepted. Views with a
negative bit are read as the values they stand for."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import aliasing, ops
from helpers import (assert_close_float64, assert_matches_recipe, assert_same_bits, randn,
                     recipe_rms_norm, seed_of, weight_for)


def check(x, w, y):
    assert_close_float64(y, reference.float64_rms_norm(x, w, 1e-6), x.dtype)
    assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, "llama"))


# --- the weight ------------------------------------------------------------------------


def test_out_holding_the_weight_is_refused(device):
    buf = randn((40, 300), torch.float32, device, seed_of("w-out"))
    x = randn((40, 300), torch.float32, device, seed_of("w-out", 1))
    with pytest.raises(ValueError, match="out overlaps weight, which every row reads"):
        rmsnorm.rms_norm(x, buf[0], out=buf)
    with pytest.raises(ValueError, match="out overlaps weight"):
        rmsnorm.fused_add_rms_norm(x, x.clone(), buf[7], out=buf)


def test_a_residual_updated_in_place_holding_the_weight_is_refused(device):
    buf = randn((40, 300), torch.float32, device, seed_of("w-res"))
    x = randn((40, 300), torch.float32, device, seed_of("w-res", 1))
    with pytest.raises(ValueError, match=r"residual \(updated in place\) overlaps weight"):
        rmsnorm.fused_add_rms_norm(x, buf, buf[3], inplace=True)


def test_residual_out_holding_the_weight_is_refused(device):
    buf = randn((40, 300), torch.float32, device, seed_of("w-rout"))
    x = randn((40, 300), torch.float32, device, seed_of("w-rout", 1))
    with pytest.raises(ValueError, match="residual_out overlaps weight"):
        ops.forward(x, buf[5], residual=x.clone(), residual_out=buf)


def test_dx_out_holding_the_weight_or_rstd_is_refused(device):
    x = randn((40, 300), torch.float32, device, seed_of("w-dx"))
    buf = randn((40, 300), torch.float32, device, seed_of("w-dx", 1))
    _, _, rstd = ops.forward(x, buf[0].clone(), return_rstd=True)
    dy = randn((40, 300), torch.float32, device, seed_of("w-dx", 2))
    with pytest.raises(ValueError, match="dx_out overlaps weight, which the backward reads"):
        ops.backward(dy, x, buf[0], rstd, dx_out=buf)
    flat = torch.empty(40 * 300 + 40, device=device)
    flat[-40:] = rstd
    with pytest.raises(ValueError, match="dx_out overlaps rstd"):
        ops.backward(dy, x, None, flat[-40:], dx_out=flat[:40 * 300 + 39][39:].view(40, 300))


# --- in-place residuals and x ----------------------------------------------------------


def test_a_residual_updated_in_place_partially_overlapping_x_is_refused(device):
    b = randn((41, 300), torch.float32, device, seed_of("res-x"))
    before = b.clone()
    with pytest.raises(ValueError, match=r"residual \(updated in place\) overlaps x; it may "
                                         "alias x exactly or not at all"):
        rmsnorm.fused_add_rms_norm(b[:40], b[1:], inplace=True)
    assert_same_bits(b, before)  # refused before anything was written


def test_the_compiled_in_place_route_refuses_the_same_overlap(device):
    # torch.compile sends in-place calls through the rmsnorm::fwd_into op: it checks too.
    torch._dynamo.reset()
    step = torch.compile(lambda x, r: rmsnorm.fused_add_rms_norm(x, r, inplace=True),
                         fullgraph=True)
    b = randn((41, 64), torch.float32, device, seed_of("res-x-compiled"))
    with torch.no_grad(), pytest.raises(ValueError, match="overlaps x; it may alias x"):
        step(b[:40], b[1:])
    torch._dynamo.reset()


def test_a_residual_updated_in_place_may_be_x_itself(device):
    x = randn((40, 300), torch.bfloat16, device, seed_of("res-is-x"))
    w = weight_for(300, torch.bfloat16, device, seed_of("res-is-x"))
    expected_y, expected_s = rmsnorm.fused_add_rms_norm(x.clone(), x.clone(), w)
    y, s = rmsnorm.fused_add_rms_norm(x, x, w, inplace=True)
    assert s is x
    assert_same_bits(s, expected_s)
    assert_same_bits(y, expected_y)


# --- interleaved views -----------------------------------------------------------------


def test_interleaved_views_that_share_no_element_are_disjoint(device):
    b = randn((64, 16), torch.float32, device, seed_of("interleaved"))
    x, out = b[:, :8], b[:, 8:]
    x0 = x.clone()
    y = rmsnorm.rms_norm(x, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert_same_bits(b[:, :8], x0)
    check(x0, None, y)
    assert_same_bits(y, rmsnorm.rms_norm(x0))


def test_interleaved_views_that_share_elements_are_refused(device):
    b = randn((64, 16), torch.float32, device, seed_of("interleaved-overlap"))
    with pytest.raises(ValueError, match="out overlaps x"):
        rmsnorm.rms_norm(b[:, :8], out=b[:, 4:12])


def test_an_interleaved_in_place_residual_is_disjoint_from_x(device):
    b = randn((64, 600), torch.bfloat16, device, seed_of("interleaved-res"))
    w = weight_for(300, torch.bfloat16, device, seed_of("interleaved-res"))
    x, residual = b[:, :300], b[:, 300:]
    expected_y, expected_s = rmsnorm.fused_add_rms_norm(x.clone(), residual.clone(), w)
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True)
    assert s.data_ptr() == residual.data_ptr()
    assert_same_bits(s, expected_s)
    assert_same_bits(y, expected_y)


def test_views_of_too_many_rows_to_compare_are_refused_saying_why(monkeypatch):
    monkeypatch.setattr(aliasing, "MAX_RUNS", 16)
    b = torch.randn(64, 16)
    with pytest.raises(ValueError, match="not compared element by element"):
        rmsnorm.rms_norm(b[:, :8], out=b[:, 8:])


def test_an_output_whose_elements_share_memory_is_refused():
    x = torch.randn(4, 8)
    rows_overlap = torch.empty(20).as_strided((4, 8), (4, 1))
    with pytest.raises(ValueError, match="out has elements that share memory"):
        rmsnorm.rms_norm(x, out=rows_overlap)


def test_overlap_is_decided_element_by_element():
    b = torch.empty(8, 32)
    assert not aliasing.overlaps(b[:, :16], b[:, 16:])
    assert aliasing.overlaps(b[:, :16], b[:, 15:])
    assert not aliasing.overlaps(b[::2], b[1::2])
    assert aliasing.overlaps(b[::2], b[2::4])
    assert not aliasing.overlaps(b[:4], b[4:])
    heads = b.view(8, 4, 8)
    assert not aliasing.overlaps(heads[:, :2], heads[:, 2:])
    assert aliasing.overlaps(heads[:, :3], heads[:, 2:])
    assert not aliasing.overlaps(b.view(torch.uint8)[:, :64], b[:, 16:])
    assert aliasing.overlaps(b.view(torch.uint8)[:, 63:64], b[:, 15:16])
    assert not aliasing.overlaps_itself(b[:, :16])
    assert aliasing.overlaps_itself(torch.empty(9).as_strided((4, 4), (1, 1)))
    assert aliasing.overlaps_itself(torch.empty(8).expand(3, 8))


# --- negative bits ---------------------------------------------------------------------


def test_negative_views_are_read_as_the_values_they_stand_for(device):
    x = randn((33, 300), torch.float32, device, seed_of("neg"))
    w = weight_for(300, torch.float32, device, seed_of("neg"))
    assert x._neg_view().is_neg()
    assert_same_bits(rmsnorm.rms_norm(x._neg_view(), w), rmsnorm.rms_norm(-x, w))
    assert_same_bits(rmsnorm.rms_norm(x, w._neg_view()), rmsnorm.rms_norm(x, -w))
    y, s = rmsnorm.fused_add_rms_norm(x, (x * 2)._neg_view(), w)
    ref_y, ref_s = rmsnorm.fused_add_rms_norm(x, -(x * 2), w)
    assert_same_bits(y, ref_y)
    assert_same_bits(s, ref_s)


def test_the_imaginary_part_of_a_conjugate_is_read_with_its_sign(device):
    z = torch.complex(randn((8, 64), torch.float32, device, seed_of("conj")),
                      randn((8, 64), torch.float32, device, seed_of("conj", 1)))
    imag = z.conj().imag
    assert imag.is_neg()
    assert_same_bits(rmsnorm.rms_norm(imag), rmsnorm.rms_norm(-z.imag))


def test_the_backward_reads_negative_views_with_their_sign(device):
    x = randn((33, 300), torch.float32, device, seed_of("neg-bwd"))
    w = weight_for(300, torch.float32, device, seed_of("neg-bwd"))
    dy = randn((33, 300), torch.float32, device, seed_of("neg-bwd", 1))
    _, _, rstd = ops.forward(x, w, return_rstd=True)
    dx, dw = ops.backward(dy._neg_view(), x, w, rstd)
    ref_dx, ref_dw = ops.backward(-dy, x, w, rstd)
    assert_same_bits(dx, ref_dx)
    assert_same_bits(dw, ref_dw)


def test_negative_views_cannot_be_written():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"out is a negative view \(is_neg\(\)\)"):
        rmsnorm.rms_norm(x, out=torch.empty(4, 8)._neg_view())
    with pytest.raises(ValueError, match=r"residual \(updated in place\) is a negative view"):
        rmsnorm.fused_add_rms_norm(x, torch.randn(4, 8)._neg_view(), inplace=True)
