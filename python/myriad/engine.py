"""myriad.Engine: the C++ engine (`_myriad.Engine`) with Python hooks.

Hooks run on every rank, in the order they were added:
- step hooks: ``fn(metrics)`` after each ``step()`` / ``optimizer_step()`` with the step's
  metrics dict (the metrics.jsonl schema, docs/metrics.md);
- gradient hooks: ``fn(g)`` in every optimizer step once the gradients are reduced over data
  parallelism, before clipping and the update, with ``g`` a :class:`GradientSlice` per owned
  parameter part (its whole parameter at ZeRO 0, its shard at ZeRO >= 1). ``g.grad`` is a
  writable flat NumPy array: modify it in place to change the update (under training.device
  cuda it is a host copy, written back after the hooks). Every replica holding the same
  gradient must modify it the same way, or the replicas drift apart.
"""
import collections
import weakref

from . import _myriad

GradientSlice = collections.namedtuple("GradientSlice", ["name", "grad", "start", "shape"])
GradientSlice.__doc__ = ("Part of one parameter's reduced gradient owned by this rank: grad (flat, writable) holds "
                         "elements [start, start + grad.size) of the parameter of shape `shape` (this rank's share "
                         "under tensor parallelism), row-major.")


class _HookHandle:
    """Returned by add_*_hook; remove() unregisters the hook."""

    def __init__(self, hooks, fn, on_empty=None):
        self._hooks, self._fn, self._on_empty = hooks, fn, on_empty

    def remove(self):
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)
            if not self._hooks and self._on_empty is not None:
                self._on_empty()


class Engine(_myriad.Engine):
    __doc__ = _myriad.Engine.__doc__ + " (with Python step and gradient hooks: myriad/engine.py)"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._step_hooks = []
        self._gradient_hooks = []

    def add_step_hook(self, fn):
        """fn(metrics) after every step() / optimizer_step(); returns a handle with remove()."""
        self._step_hooks.append(fn)
        return _HookHandle(self._step_hooks, fn)

    def add_gradient_hook(self, fn):
        """fn(GradientSlice) for every owned parameter part before each update; returns a handle."""
        if not self._gradient_hooks:
            owner = weakref.ref(self)  # the C++ engine holds the dispatcher: no reference cycle

            def dispatch(slices):
                engine = owner()
                if engine is None:
                    return
                for name, start, shape, grad in slices:
                    part = GradientSlice(name, grad, start, tuple(shape))
                    for hook in list(engine._gradient_hooks):
                        hook(part)

            self._set_gradient_dispatch(dispatch)
        self._gradient_hooks.append(fn)
        return _HookHandle(self._gradient_hooks, fn, lambda: self._set_gradient_dispatch(None))

    def step(self):
        metrics = super().step()
        for hook in list(self._step_hooks):
            hook(metrics)
        return metrics

    def optimizer_step(self, lr=None):
        metrics = super().optimizer_step(lr)
        for hook in list(self._step_hooks):
            hook(metrics)
        return metrics
