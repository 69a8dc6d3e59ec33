"""Tensor <-> NumPy without copies, views, dtype conversion, and errors as myriad.Error."""
import numpy as np
import pytest

import myriad


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = myriad.from_numpy(a)
    assert t.shape == [3, 4] and t.dtype == "f32" and t.device == "cpu"
    view = t.numpy()
    assert np.shares_memory(view, a)
    view[1, 2] = -7
    assert a[1, 2] == -7


def test_numpy_view_keeps_storage_alive():
    t = myriad.zeros([1000])
    arr = t.numpy()
    del t
    arr[:] = 3.0  # would crash or corrupt if the storage had been freed
    assert arr.sum() == 3000.0


def test_strided_numpy_input_is_not_copied():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    t = myriad.from_numpy(a)
    assert t.strides == [6, 2]
    assert not t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.contiguous().numpy(), a)


def test_transpose_and_permute_are_views():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = myriad.from_numpy(a)
    np.testing.assert_array_equal(t.permute([2, 0, 1]).numpy(), a.transpose(2, 0, 1))
    assert t.transpose(0, 2).same_storage(t)


def test_bf16_and_f16_conversion(rng):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    t = myriad.from_numpy(a)
    f16 = t.to("f16").numpy()
    assert f16.dtype == np.float16
    np.testing.assert_array_equal(f16, a.astype(np.float16))  # NumPy also rounds to nearest even
    bf16_bits = t.to("bf16").numpy()
    # Reference bf16 rounding: round-to-nearest-even on the upper 16 bits.
    bits = a.view(np.uint32).astype(np.uint64)
    expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bf16_bits, expected)


def test_errors_are_myriad_errors_with_shapes():
    t = myriad.zeros([2, 3])
    with pytest.raises(myriad.Error, match=r"f32\[2, 3\]"):
        t.slice(1, 0, 5)
    with pytest.raises(myriad.Error, match="unsupported NumPy dtype"):
        myriad.from_numpy(np.zeros(3, dtype=np.complex64))


def test_randn_is_split_invariant():
    whole = myriad.randn([8, 5], seed=11, stream=2).numpy()
    assert abs(whole.mean()) < 1.5
    assert whole.std() > 0.3
    again = myriad.randn([8, 5], seed=11, stream=2).numpy()
    np.testing.assert_array_equal(whole, again)
