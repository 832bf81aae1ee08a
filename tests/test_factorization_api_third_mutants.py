"""Third mutation review of the factorization's public layer: what the first two
(test_factorization_api_mutants.py, test_factorization_api_deep_mutants.py) and
test_factorization.py left open: a warm start with a single non-finite entry, an online
``rho`` that must reach the Newton update on both of its paths (until converged, or a
given number of steps), and the seed a fit records when given a PRNG key."""

import jax
import numpy as np
import pytest
from test_factorization_api_deep_mutants import _coins
from test_factorization_api_mutants import small  # noqa: F401  (fixture)

import jaxeval


def test_a_warm_start_with_one_non_finite_entry_is_refused(small):  # noqa: F811
    """Every entry of ``u_init`` must be finite, not only some of them."""
    lr, S = small
    u0 = np.zeros((4, 2))
    u0[2, 1] = np.inf
    with pytest.raises(ValueError, match="u_init: the warm start has non-finite values"):
        lr.update(S, u_init=u0, num_newton=1)


def test_a_given_online_rho_is_used_and_a_larger_one_pulls_towards_u_mean(small):  # noqa: F811
    """``rho`` given to ``update`` replaces ``online_rho`` in the Newton update itself:
    a stronger prior leaves the factors closer to ``u_mean``, a weaker one farther, both
    when run until converged and for a given number of Newton steps."""
    lr, S = small
    m = np.zeros(S.shape, bool)
    m[:, ::2] = True
    for steps in (None, 20):
        dist = {}
        for rho in (None, 0.05, 50.0):
            u, _ = lr.update(S, m, rho=rho, num_newton=steps)
            dist[rho] = np.linalg.norm(u - lr.u_mean, axis=1)
        assert (dist[50.0] < dist[None]).all() and (dist[None] < dist[0.05]).all(), steps


def test_a_fit_seeded_with_a_key_records_key_as_its_seed():
    """``info['seed']`` is the int seed, or ``"key"`` for a PRNG key (no number to keep)."""
    S = _coins(12, 8)
    lr = jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=2, seed=jax.random.key(4))
    assert lr.info["seed"] == "key"
    assert jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=2, seed=4).info["seed"] == 4
