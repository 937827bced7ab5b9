"""The update rules for pushes applied one at a time (pure): their factors,
DC-ASGD's correction against a float64 reference, and the cases where each
must be the plain rule bit for bit."""
import numpy as np
import pytest

from mpips.paradigms.async_rules import ASYNC_RULES, DC_EPS, AsyncRule


def rng_arrays(n=257, seed=0):
    g = np.random.default_rng(seed)
    push, now, read = (g.standard_normal(n).astype(np.float32) for _ in range(3))
    return push, now, read


def test_factors_follow_the_papers():
    staleness, adaptive = AsyncRule("staleness", 8), AsyncRule("delay-adaptive", 8)
    assert [staleness.factor(t) for t in (0, 1, 2, 8, 40)] == [1.0, 1.0, 0.5, 0.125, 0.025]
    assert [adaptive.factor(t) for t in (0, 7, 8, 16, 80)] == [1.0, 1.0, 1.0, 0.5, 0.1]
    for kind in ("none", "dc", "dc-adaptive"):
        assert AsyncRule(kind, 8).factor(40) == 1.0


def test_a_factor_multiplies_the_push_and_a_factor_of_one_leaves_it_alone():
    push, now, read = rng_arrays()
    rule = AsyncRule("staleness", 4)
    out, done = rule.apply(push, tau=4, scale=0.25, now=now, read=None)
    assert np.array_equal(out, push * np.float32(0.25)) and done.factor == 0.25 and done.tau == 4
    assert done.gradient == pytest.approx(np.linalg.norm(push.astype(np.float64)) / 0.25, rel=1e-6)
    assert np.isnan(done.compensation)
    out, done = rule.apply(push, tau=1, scale=0.25, now=now, read=None)
    assert out is push and done.factor == 1.0


@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_dc_adds_lambda_g_g_times_the_move_in_the_push_s_scale(scale):
    push, now, read = rng_arrays(seed=1)
    push *= np.float32(scale)
    out, done = AsyncRule("dc", 8, dc_lambda=0.04).apply(push, tau=3, scale=scale, now=now, read=read)
    g = push.astype(np.float64) / scale
    correction = 0.04 * g * g * (now.astype(np.float64) - read)
    assert np.allclose(out, push + scale * correction, rtol=1e-5, atol=1e-7)
    assert done.compensation == pytest.approx(np.linalg.norm(correction), rel=1e-5)
    assert done.factor == 1.0 and done.tau == 3


def test_dc_adaptive_divides_lambda0_by_the_root_of_the_mean_square():
    rule = AsyncRule("dc-adaptive", 8, dc_lambda0=2.0, dc_decay=0.95)
    pushes = [rng_arrays(seed=s) for s in range(3)]
    ms = np.zeros(pushes[0][0].size)
    for push, now, read in pushes:
        out, done = rule.apply(push, tau=2, scale=1.0, now=now, read=read)
        g = push.astype(np.float64)
        ms = 0.95 * ms + 0.05 * g * g
        correction = 2.0 / np.sqrt(ms + DC_EPS) * g * g * (now.astype(np.float64) - read)
        assert np.allclose(out, g + correction, rtol=1e-4, atol=1e-6)
    assert np.allclose(rule.mean_square, ms, rtol=1e-5)
    copy = AsyncRule("dc-adaptive", 8)
    copy.load_state(rule.state())
    assert np.array_equal(copy.mean_square, rule.mean_square)


@pytest.mark.parametrize("clip", [1.0, 4.0])
def test_dc_clip_bounds_each_elements_correction_by_its_gradient(clip):
    """dc_clip: the correction within +-clip x |g| element by element, the
    rest of the rule as it was (elements within the bound are unchanged)."""
    push, now, read = rng_arrays(seed=4)
    push *= np.float32(0.5)
    rule, unbounded = AsyncRule("dc-adaptive", 8, dc_clip=clip), AsyncRule("dc-adaptive", 8)
    out, done = rule.apply(push, tau=3, scale=0.5, now=now, read=read)
    free, _ = unbounded.apply(push, tau=3, scale=0.5, now=now, read=read)
    g = push.astype(np.float64) / 0.5
    correction, free_correction = (out - push) / 0.5, (free - push) / 0.5
    bound = clip * np.abs(g)
    assert (np.abs(correction) <= bound * (1 + 1e-5) + 1e-6).all()
    clipped = np.abs(free_correction) > bound * (1 + 1e-3)
    assert clipped.sum() > 10 and (~clipped).sum() > 10   # both kinds of element are there
    np.testing.assert_array_equal(out[~clipped], free[~clipped])
    assert np.allclose(np.abs(correction[clipped]), bound[clipped], rtol=1e-4)
    assert np.array_equal(np.sign(correction[clipped]), np.sign(free_correction[clipped]))
    assert done.compensation == pytest.approx(np.linalg.norm(np.clip(free_correction, -bound, bound)), rel=1e-4)


@pytest.mark.parametrize("kind, options", [("dc", {"dc_lambda": 0.0}), ("dc-adaptive", {"dc_lambda0": 0.0})])
def test_dc_with_lambda_zero_is_the_push_bit_for_bit(kind, options):
    push, now, read = rng_arrays(seed=2)
    push[:4] = [-0.0, 0.0, -0.0, 0.0]   # zeros of both signs stay as they are
    out, done = AsyncRule(kind, 8, **options).apply(push, tau=5, scale=0.5, now=now, read=read)
    assert out.tobytes() == push.tobytes() and done.compensation == 0.0


@pytest.mark.parametrize("kind", ASYNC_RULES)
def test_a_fresh_push_on_unmoved_parameters_is_the_plain_rule_bit_for_bit(kind):
    """One worker: tau 0 and w_now = w_read, so every rule is the plain one."""
    push, now, _ = rng_arrays(seed=3)
    push[:2] = [-0.0, 0.0]
    out, done = AsyncRule(kind, 1).apply(push, tau=0, scale=1.0, now=now, read=now.copy())
    assert out.tobytes() == push.tobytes() and done.factor == 1.0


def test_dc_needs_the_read_parameters():
    push, now, _ = rng_arrays()
    with pytest.raises(ValueError, match="read at"):
        AsyncRule("dc", 4).apply(push, tau=1, scale=1.0, now=now, read=None)
