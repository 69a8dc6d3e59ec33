"""Every op bound in myriad.ops against a float64 NumPy reference; backward passes against
central finite differences of that reference (loss = sum(out * r) for a random r)."""
import numpy as np
import pytest

import myriad
from myriad import ops


def T(a, dtype=np.float32):
    return myriad.from_numpy(np.ascontiguousarray(a, dtype=dtype))


def numeric_grad(f, x, r, eps=1e-6):
    """d/dx sum(f(x) * r) by central differences, float64."""
    x = x.astype(np.float64).copy()
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        plus = np.sum(f(x) * r)
        x[i] = old - eps
        minus = np.sum(f(x) * r)
        x[i] = old
        g[i] = (plus - minus) / (2 * eps)
    return g


def close(actual, expected, tol=2e-5):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=tol, atol=tol)


def ref_layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def ref_rmsnorm(x, w, eps=1e-5):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def ref_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def ref_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_attention(q, k, v, causal=True):
    B, Hq, Tn, D = q.shape
    group = Hq // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((Tn, Tn), bool)), s, -np.inf)
    return ref_softmax(s) @ v


def ref_rope(x, theta=10000.0, offset=0):
    B, Tn, H, D = x.shape
    half = D // 2
    freq = theta ** (-np.arange(half) * 2.0 / D)
    ang = (offset + np.arange(Tn))[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def test_layernorm(rng):
    x, w, b = rng.standard_normal((6, 9)), rng.standard_normal(9), rng.standard_normal(9)
    out, mean, rstd = ops.layernorm_forward(T(x), T(w), T(b))
    close(out.numpy(),
          ref_layernorm(x.astype(np.float32).astype(np.float64), w.astype(np.float32), b.astype(np.float32)), 1e-4)
    r = rng.standard_normal(x.shape)
    gx, gw, gb = ops.layernorm_backward(T(x), T(w), mean, rstd, T(r))
    xf, wf, bf = (a.astype(np.float32).astype(np.float64) for a in (x, w, b))
    close(gx.numpy(), numeric_grad(lambda z: ref_layernorm(z, wf, bf), xf, r), 1e-4)
    close(gw.numpy(), numeric_grad(lambda z: ref_layernorm(xf, z, bf), wf, r), 1e-4)
    close(gb.numpy(), numeric_grad(lambda z: ref_layernorm(xf, wf, z), bf, r), 1e-4)


def test_rmsnorm(rng):
    x, w = rng.standard_normal((5, 8)), rng.standard_normal(8)
    xf, wf = x.astype(np.float32).astype(np.float64), w.astype(np.float32).astype(np.float64)
    out, rstd = ops.rmsnorm_forward(T(x), T(w))
    close(out.numpy(), ref_rmsnorm(xf, wf), 1e-4)
    r = rng.standard_normal(x.shape)
    gx, gw = ops.rmsnorm_backward(T(x), T(w), rstd, T(r))
    close(gx.numpy(), numeric_grad(lambda z: ref_rmsnorm(z, wf), xf, r), 1e-4)
    close(gw.numpy(), numeric_grad(lambda z: ref_rmsnorm(xf, z), wf, r), 1e-4)


def test_gelu_swiglu_softmax_bias(rng):
    x = rng.standard_normal((4, 7)).astype(np.float32).astype(np.float64) * 3
    r = rng.standard_normal(x.shape)
    close(ops.gelu_forward(T(x)).numpy(), ref_gelu(x))
    close(ops.gelu_backward(T(x), T(r)).numpy(), numeric_grad(ref_gelu, x, r), 1e-4)
    up = rng.standard_normal(x.shape).astype(np.float32).astype(np.float64)
    silu = lambda g: g / (1 + np.exp(-g))  # noqa: E731
    close(ops.swiglu_forward(T(x), T(up)).numpy(), silu(x) * up)
    gg, gu = ops.swiglu_backward(T(x), T(up), T(r))
    close(gg.numpy(), numeric_grad(lambda g: silu(g) * up, x, r), 1e-4)
    close(gu.numpy(), numeric_grad(lambda u: silu(x) * u, up, r), 1e-4)
    y = ops.softmax_forward(T(x))
    close(y.numpy(), ref_softmax(x))
    close(ops.softmax_backward(y, T(r)).numpy(), numeric_grad(ref_softmax, x, r), 1e-4)
    bias = rng.standard_normal(7).astype(np.float32).astype(np.float64)
    close(ops.bias_add_forward(T(x), T(bias)).numpy(), x + bias)
    gx, gb = ops.bias_add_backward(T(r), 7)
    close(gx.numpy(), r.astype(np.float32))
    close(gb.numpy(), r.astype(np.float32).astype(np.float64).sum(0), 1e-5)


@pytest.mark.parametrize("Hq,Hkv,Tn", [(2, 2, 9), (4, 2, 17), (4, 1, 5)])
def test_attention_matches_numpy(rng, Hq, Hkv, Tn):
    B, D = 2, 8
    q = rng.standard_normal((B, Hq, Tn, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Tn, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Tn, D)).astype(np.float32)
    out, lse = ops.attention_forward(T(q), T(k), T(v))
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    close(out.numpy(), ref_attention(q64, k64, v64), 1e-5)
    r = rng.standard_normal(q.shape)
    gq, gk, gv = ops.attention_backward(T(q), T(k), T(v), out, lse, T(r))
    close(gq.numpy(), numeric_grad(lambda z: ref_attention(z, k64, v64), q64, r), 1e-4)
    close(gk.numpy(), numeric_grad(lambda z: ref_attention(q64, z, v64), k64, r), 1e-4)
    close(gv.numpy(), numeric_grad(lambda z: ref_attention(q64, k64, z), v64, r), 1e-4)


def test_attention_accepts_permuted_views_without_copy(rng):
    B, Tn, H, D = 1, 12, 2, 8
    qkv = rng.standard_normal((B, Tn, 3, H, D)).astype(np.float32)
    t = myriad.from_numpy(qkv)
    q, k, v = (t.select(2, i).permute([0, 2, 1, 3]) for i in range(3))  # (B, H, T, D) strided views
    assert not q.is_contiguous()
    out, _ = ops.attention_forward(q, k, v)
    ref = ref_attention(*(qkv[:, :, i].transpose(0, 2, 1, 3).astype(np.float64) for i in range(3)))
    close(out.numpy(), ref, 1e-5)


def test_rope(rng):
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32).astype(np.float64)
    close(ops.rope_forward(T(x), position_offset=3).numpy(), ref_rope(x, offset=3), 1e-5)
    r = rng.standard_normal(x.shape)
    close(ops.rope_backward(T(r), position_offset=3).numpy(), numeric_grad(lambda z: ref_rope(z, offset=3), x, r), 1e-4)


def test_embedding_and_cross_entropy(rng):
    V, C = 11, 4
    table = rng.standard_normal((V, C)).astype(np.float32)
    ids = rng.integers(0, V, size=(2, 3)).astype(np.int32)
    out = ops.embedding_forward(T(ids, np.int32), T(table))
    np.testing.assert_array_equal(out.numpy(), table[ids])
    g = rng.standard_normal((2, 3, C)).astype(np.float32)
    grad_table = ops.embedding_backward(T(ids, np.int32), T(g), myriad.zeros([V, C]))
    expected = np.zeros((V, C))
    np.add.at(expected, ids.reshape(-1), g.reshape(-1, C).astype(np.float64))
    close(grad_table.numpy(), expected, 1e-6)
    with pytest.raises(myriad.Error, match="embedding"):
        ops.embedding_forward(T(np.array([[V]]), np.int32), T(table))

    logits = rng.standard_normal((6, V)).astype(np.float32)
    targets = rng.integers(0, V, size=6).astype(np.int32)
    targets[2] = -100
    losses, lse = ops.cross_entropy_forward(T(logits), T(targets, np.int32))
    l64 = logits.astype(np.float64)
    ref_lse = np.log(np.exp(l64 - l64.max(1, keepdims=True)).sum(1)) + l64.max(1)
    ref = ref_lse - l64[np.arange(6), np.maximum(targets, 0)]
    ref[2] = 0.0
    close(losses.numpy(), ref, 1e-5)
    assert ops.count_valid_targets(T(targets, np.int32)) == 5
    grad_losses = np.full(6, 1 / 5, np.float32)
    grad = ops.cross_entropy_backward(T(logits), T(targets, np.int32), lse, T(grad_losses)).numpy()
    onehot = np.zeros_like(l64)
    onehot[np.arange(6), np.maximum(targets, 0)] = 1
    ref_grad = (ref_softmax(l64) - onehot) / 5
    ref_grad[2] = 0
    close(grad, ref_grad, 1e-6)


def test_adamw_matches_numpy(rng):
    p = rng.standard_normal(10).astype(np.float32)
    m, v = np.zeros(10, np.float32), np.zeros(10, np.float32)
    P, M, Vv = p.astype(np.float64), np.zeros(10), np.zeros(10)
    tp, tm, tv = T(p), T(m), T(v)
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.95, 1e-8, 0.1
    for step in range(1, 6):
        g = rng.standard_normal(10).astype(np.float32)
        ops.adamw_update(tp, T(g), tm, tv, lr=lr, weight_decay=wd, step=step)
        P -= lr * wd * P
        M = b1 * M + (1 - b1) * g
        Vv = b2 * Vv + (1 - b2) * g.astype(np.float64) ** 2
        P -= lr * (M / (1 - b1**step)) / (np.sqrt(Vv / (1 - b2**step)) + eps)
    close(tp.numpy(), P, 1e-5)
    assert ops.grad_norm_squared(T(np.array([3.0, 4.0]))) == pytest.approx(25.0)
