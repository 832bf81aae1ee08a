"""The SparseEval anchor MLP and its full-batch trainer.

``k -> 128 -> 64 -> 32 -> 1`` with GELU, dropout 0.1 after every hidden layer and a
sigmoid output, trained by Adam on the mean squared error, full batch, inside one
jitted ``lax.scan``. The best checkpoint on validation models is kept (evaluated
every ``eval_every`` steps), as in the reference protocol.

Everything is a pure function of arrays, so whole trainings vmap over seeds. The
learning rate and weight decay are traced arrays (no recompilation when they change);
step counts are static.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxeval._runner import check_int

__all__ = [
    "AnchorMLP", "MLPFit", "init_mlp", "mlp_apply", "train_mlp", "dropout_keep", "HIDDEN",
    "RES_HIDDEN",
]

#: Hidden widths of the reference architecture.
HIDDEN = (128, 64, 32)

#: Hidden widths of the residual MLP (a correction on top of a linear map).
RES_HIDDEN = (32, 16)


def _check_rate(name: str, rate: object) -> None:
    """Refuse a concrete (Python or NumPy) dropout rate outside ``[0, 1)``: at 1 every
    unit is dropped and the kept ones are divided by 0. A traced rate is not checked."""
    if isinstance(rate, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a rate in [0, 1), got {rate!r}")
    if isinstance(rate, np.ndarray) and rate.ndim == 0 and rate.dtype.kind in "iuf":
        rate = rate.item()
    if isinstance(rate, (int, float, np.integer, np.floating)) and not 0 <= rate < 1:
        raise ValueError(f"{name}: expected a rate in [0, 1), got {rate!r}")


def dropout_keep(key: jax.Array, shape: tuple, rate: float) -> jax.Array:
    """Boolean keep-mask of a dropout layer: each entry kept with probability ``1 - rate``.

    One threefry draw gives a 32-bit seed; each entry is then a cheap counter hash
    (the ``lowbias32`` integer finaliser) of its flat index and that seed, compared
    with ``(1 - rate) * 2**32``. Full-batch training draws a fresh mask for every
    hidden unit of every model at every step, and drawing each of those bits with
    threefry made up about half of a training step on CPU; the hash is ~10x cheaper
    and its masks pass the frequency and independence checks in the tests. (Not for
    cryptography or for anything but masks.)

    Example:
      >>> import jax
      >>> m = dropout_keep(jax.random.key(0), (1000, 64), 0.1)
      >>> bool(abs(float(m.mean()) - 0.9) < 0.01)
      True
    """
    _check_rate("rate", rate)
    if rate <= 0:  # every entry (the largest uint32 threshold would drop hash 2**32 - 1)
        return jnp.ones(shape, bool)
    seed = jax.random.bits(key, (), jnp.uint32)
    x = jax.lax.iota(jnp.uint32, math.prod(shape)) * jnp.uint32(0x9E3779B9) + seed
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    x = x ^ (x >> 16)
    threshold = jnp.uint32(min(int(round((1.0 - rate) * 2.0**32)), 2**32 - 1))
    return (x < threshold).reshape(shape)


class AnchorMLP(eqx.Module):
    """``k -> 128 -> 64 -> 32 -> 1`` GELU MLP with dropout and a sigmoid output.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import AnchorMLP
      >>> net = AnchorMLP(jax.random.key(0), 5)
      >>> net(jnp.ones(5)).shape
      ()
    """

    layers: tuple
    dropout: float = eqx.field(static=True)

    def __init__(
        self, key: jax.Array, k: int, hidden=HIDDEN, dropout: float = 0.1,
        zero_last: bool = False,
    ):
        _check_rate("dropout", dropout)
        sizes = (k, *hidden, 1)
        keys = jax.random.split(key, len(sizes) - 1)
        # float32 whatever jax_enable_x64 says: the same initial weights, hence the same fit
        layers = [eqx.nn.Linear(a, b, key=kk, dtype=jnp.float32)
                  for a, b, kk in zip(sizes[:-1], sizes[1:], keys)]
        if zero_last:  # the network starts as the zero function (residual use)
            last = layers[-1]
            layers[-1] = eqx.tree_at(
                lambda m: (m.weight, m.bias), last,
                (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
            )
        self.layers = tuple(layers)
        self.dropout = dropout

    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """One model's prediction; dropout is active only when ``key`` is given."""
        for i, layer in enumerate(self.layers[:-1]):
            x = jax.nn.gelu(layer(x), approximate=False)
            if key is not None and self.dropout > 0:
                keep = dropout_keep(jax.random.fold_in(key, i), x.shape, self.dropout)
                x = jnp.where(keep, x / (1 - self.dropout), 0.0)
        return jax.nn.sigmoid(self.layers[-1](x)[0])


def init_mlp(
    key: jax.Array, k: int, dropout: float = 0.1, hidden=HIDDEN, zero_last: bool = False
):
    """Split a fresh :class:`AnchorMLP` into (array leaves, static part)."""
    net = AnchorMLP(key, k, hidden=hidden, dropout=dropout, zero_last=zero_last)
    return eqx.partition(net, eqx.is_array)


def _logit(p: jax.Array) -> jax.Array:
    p = jnp.clip(p, 1e-4, 1 - 1e-4)
    return jnp.log(p) - jnp.log1p(-p)


def mlp_apply(
    params, static, x: jax.Array, key: jax.Array | None = None, base: jax.Array | None = None
) -> jax.Array:
    """Batched prediction ``x [m, k] -> [m]``; dropout is active only when ``key`` is given.

    The batch is pushed through the layers as matrix products (one dropout mask per
    layer for the whole batch), which is what makes full-batch training cheap on CPU.
    With ``base [m]`` (a prediction in ``[0, 1]``, e.g. a ridge map's) the network is a
    correction in logit space: ``sigmoid(logit(base) + net(x))``.

    Example: see :func:`train_mlp`.
    """
    net = eqx.combine(params, static)
    h = x
    for i, layer in enumerate(net.layers[:-1]):
        h = jax.nn.gelu(h @ layer.weight.T + layer.bias, approximate=False)
        if key is not None and net.dropout > 0:
            keep = dropout_keep(jax.random.fold_in(key, i), h.shape, net.dropout)
            h = jnp.where(keep, h / (1 - net.dropout), 0.0)
    last = net.layers[-1]
    out = h @ last.weight[0] + last.bias[0]
    if base is not None:
        out = out + _logit(base)
    return jax.nn.sigmoid(out)


class MLPFit(NamedTuple):
    """Result of :func:`train_mlp`.

    Attributes:
      params: array leaves of the best checkpoint (combine with the static part).
      best_val: validation MSE of that checkpoint.
      best_step: its step (int32; 0 = the initialisation).
      final_train: training MSE (no dropout) after the last step.
      val_path: with ``return_path=True``, the validation predictions at every
        checkpoint, ``[checkpoints + 1, m_val]`` (row 0: the initialisation; the
        checkpoint of row ``j`` is step ``j * eval_every``); else None.
    """

    params: object
    best_val: jax.Array
    best_step: jax.Array
    final_train: jax.Array
    val_path: jax.Array | None = None


def train_mlp(
    key: jax.Array,
    x_tr: jax.Array,
    y_tr: jax.Array,
    x_val: jax.Array,
    y_val: jax.Array,
    *,
    num_steps: int,
    eval_every: int = 100,
    learning_rate: float | jax.Array = 5e-4,
    weight_decay: float | jax.Array = 0.0,
    dropout: float = 0.1,
    use_validation: bool = True,
    hidden=HIDDEN,
    base_tr: jax.Array | None = None,
    base_val: jax.Array | None = None,
    return_path: bool = False,
) -> tuple[MLPFit, object]:
    """Full-batch Adam on the MSE, keeping the best checkpoint on validation models.

    Args:
      key: PRNG key (initialisation and dropout).
      x_tr, y_tr: ``[m, k]`` training anchor scores and ``[m]`` targets.
      x_val, y_val: validation anchors and targets (checkpoint choice).
      num_steps: number of Adam steps (static, >= 1; rounded down to a multiple of
        ``eval_every``, and at least ``eval_every``: one checkpoint is always taken).
      eval_every: checkpoint spacing (static, >= 1).
      learning_rate: Adam step size (traced).
      weight_decay: decoupled weight decay (AdamW; traced; 0 = plain Adam).
      dropout: dropout rate in ``[0, 1)`` (static).
      use_validation: when False the last iterate is returned (the proxy rule).
      hidden: hidden widths, each >= 1 (static; the reference's by default).
      base_tr, base_val: optional base predictions ``[m]``; when given the network
        is a residual correction of them (see :func:`mlp_apply`) whose last layer
        starts at zero, so step 0 is the base map itself.
      return_path: also return the validation predictions at every checkpoint
        (``MLPFit.val_path``; static). The training never looks at the validation
        models, so a checkpoint chosen on any subset of them from this path is the
        one a training with that subset as its validation set would keep (up to
        rounding: the earliest best, as here).

    Returns:
      ``(MLPFit, static)``; predict with ``mlp_apply(fit.params, static, x)``.

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> s = jnp.asarray(rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None],
      ...                 jnp.float32)  # 60 models x 40 items
      >>> y, x = s.mean(axis=1), s[:, :8]  # accuracies; the first 8 items as anchors
      >>> from jaxeval.anchors import mlp_apply, train_mlp
      >>> fit, static = train_mlp(jax.random.key(0), x[:40], y[:40], x[40:50], y[40:50],
      ...                         num_steps=200)
      >>> int(fit.best_step), mlp_apply(fit.params, static, x[50:]).shape
      (100, (10,))
    """
    num_steps = check_int("num_steps", num_steps, 1)
    eval_every = check_int("eval_every", eval_every, 1)
    hidden = tuple(check_int(f"hidden[{i}]", h, 1) for i, h in enumerate(hidden))
    _check_rate("dropout", dropout)
    k = x_tr.shape[1]
    kinit, kdrop = jax.random.split(key)
    if (base_tr is None) != (base_val is None):
        raise ValueError("base_tr and base_val: give both or neither")
    residual = base_tr is not None
    params, static = init_mlp(kinit, k, dropout, hidden=hidden, zero_last=residual)
    opt = optax.inject_hyperparams(optax.adamw)(
        learning_rate=learning_rate, weight_decay=weight_decay
    )
    opt_state = opt.init(params)

    def loss_fn(p, dkey):
        pred = mlp_apply(p, static, x_tr, dkey, base_tr)
        return jnp.mean((pred - y_tr) ** 2)

    def val_pred(p):
        return mlp_apply(p, static, x_val, None, base_val)

    def val_mse(pred):
        return jnp.mean((pred - y_val) ** 2)

    def one_step(carry, t):
        p, s = carry
        g = jax.grad(loss_fn)(p, jax.random.fold_in(kdrop, t))
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), None

    n_chunks = max(num_steps // eval_every, 1)

    def chunk(carry, c):
        p, s, best_p, best_v, best_t = carry
        (p, s), _ = jax.lax.scan(one_step, (p, s), c * eval_every + jnp.arange(eval_every))
        pred = val_pred(p) if use_validation or return_path else None
        v = val_mse(pred) if use_validation else jnp.asarray(0.0, x_tr.dtype)
        better = (v <= best_v) if not use_validation else (v < best_v)
        best_p = jax.tree.map(lambda a, b: jnp.where(better, a, b), p, best_p)
        best_v = jnp.where(better, v, best_v)
        best_t = jnp.where(better, (c + 1) * eval_every, best_t).astype(jnp.int32)  # (x64)
        return (p, s, best_p, best_v, best_t), (pred if return_path else None)

    pred0 = val_pred(params) if use_validation or return_path else None
    v0 = val_mse(pred0) if use_validation else jnp.asarray(jnp.inf, x_tr.dtype)
    init = (params, opt_state, params, v0, jnp.asarray(0, jnp.int32))
    (p, _, best_p, best_v, best_t), preds = jax.lax.scan(chunk, init, jnp.arange(n_chunks))
    final_train = jnp.mean((mlp_apply(p, static, x_tr, None, base_tr) - y_tr) ** 2)
    path = jnp.concatenate([pred0[None], preds]) if return_path else None
    return MLPFit(best_p, best_v, best_t.astype(jnp.int32), final_train, path), static
