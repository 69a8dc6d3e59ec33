"""myriad.ops.matmul against NumPy (float64), including strided views and gradients."""
import numpy as np
import pytest

import myriad


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_forward_backward(rng, ta, tb):
    a = rng.standard_normal((3, 6, 5) if not ta else (3, 5, 6)).astype(np.float32)
    b = rng.standard_normal((5, 4) if not tb else (4, 5)).astype(np.float32)
    op_a = a.swapaxes(-1, -2) if ta else a
    op_b = b.T if tb else b
    out = myriad.ops.matmul_forward(myriad.from_numpy(a), myriad.from_numpy(b), transpose_a=ta, transpose_b=tb)
    expected = op_a.astype(np.float64) @ op_b.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(expected.shape).astype(np.float32)
    ga, gb = myriad.ops.matmul_backward(myriad.from_numpy(a), myriad.from_numpy(b), myriad.from_numpy(g),
                                        transpose_a=ta, transpose_b=tb)
    g64 = g.astype(np.float64)
    d_op_a = g64 @ op_b.astype(np.float64).T
    d_op_b = np.einsum("bmk,bmn->kn", op_a.astype(np.float64), g64)
    np.testing.assert_allclose(ga.numpy(), d_op_a.swapaxes(-1, -2) if ta else d_op_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), d_op_b.T if tb else d_op_b, rtol=1e-5, atol=1e-4)


def test_matmul_shape_mismatch_names_op_and_shapes():
    a = myriad.zeros([4, 3])
    b = myriad.zeros([5, 2])
    with pytest.raises(myriad.Error, match=r"matmul_forward.*\[4, 3\].*\[5, 2\]"):
        myriad.ops.matmul_forward(a, b)
