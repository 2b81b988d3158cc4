"""Simulated schedules against the closed forms of the papers that define them.

Oracles (B = input-gradient backward, W = weight gradient, full backward = B + W):
* GPipe and 1F1B: every rank idles (p-1)(F + B + W) (Narayanan et al. 2021, section 2.2);
  GPipe holds m micro-batches, 1F1B p;
* interleaved 1F1B: idle / busy = (p-1) / (v m) (ibid., section 2.2.2);
* ZB-H1: idle (p-1)(F + B - W), i.e. (p-1)(F + B_full - 2W) in DualPipe's table, with 1F1B's memory;
  ZB-H2: only the (p-1) F of the start (Qi et al. 2023, section 3);
* DualPipe: idle (p/2 - 1)(F&B + B_full - 3W) and p + 1 micro-batches of activations; DualPipeV:
  the same with per-chunk times on 2p chunks (DeepSeek-V3 report, Table 2; DualPipe README).
  These hold when the forward and the input-gradient backward take the same time, the case the
  formula is derived for; with F != B the simulation departs from it (see the last test).
"""

import pytest
from hypothesis import given, settings, strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.pipeline.schedules import build
from gpuplan.pipeline.simulate import Costs, simulate

times = st.floats(0.2, 3.0)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 9), m=st.integers(1, 24), f=times, b=times, w=times)
def test_gpipe_and_1f1b_idle_p_minus_1_stage_times_and_hold_m_or_p(p, m, f, b, w):
    g, o = (simulate(build(n, p, m), Costs(f, b, w)) for n in ("gpipe", "1f1b"))
    for t in (g, o):
        assert max(t.idle_s) == pytest.approx((p - 1) * (f + b + w))
        assert t.busy_s[0] == pytest.approx(m * (f + b + w))
    assert max(g.peak_activations) == m
    assert max(o.peak_activations) == min(p, m)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), k=st.integers(1, 4), v=st.integers(2, 4), f=times, b=times, w=times)
def test_interleaving_divides_the_bubble_by_v(p, k, v, f, b, w):
    m = k * p
    t = simulate(build("interleaved", p, m, v), Costs(f, b, w))
    assert max(t.idle_s) / t.busy_s[0] == pytest.approx((p - 1) / (v * m))


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 9), extra=st.integers(0, 16), f=times, b=times, w=times)
def test_zb_h1_idles_p_minus_1_times_f_plus_b_minus_w_with_1f1b_memory(p, extra, f, b, w):
    m = p + extra  # ZB-H1's steady state needs m >= p
    w = min(w, b, f)  # the closed form holds while W fits the gaps F and B leave (exactly then, by simulation)
    t = simulate(build("zb-h1", p, m), Costs(f, b, w))
    assert max(t.idle_s) == pytest.approx((p - 1) * (f + (b + w) - 2 * w))
    assert max(t.peak_activations) == p


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), extra=st.integers(0, 16), f=times, b=times, w=times)
def test_zb_h2_leaves_only_the_warm_up_and_never_loses_to_zb_h1(p, extra, f, b, w):
    m = 2 * p + extra
    t = simulate(build("zb-h2", p, m), Costs(f, b, w))
    h1 = simulate(build("zb-h1", p, m), Costs(f, b, w))
    assert max(t.idle_s) <= max(h1.idle_s) + 1e-9
    assert max(t.peak_activations) == 2 * p - 1
    equal = simulate(build("zb-h2", p, m), Costs(f, f, f))  # the paper's F = B = W
    assert max(equal.idle_s) == pytest.approx((p - 1) * f)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_zb_h2_refuses_fewer_micro_batches_than_its_warm_up_and_never_loses_to_zb_h1_above(p):
    # rank 0 runs 2(p - 1) forwards before its first backward: with fewer micro-batches the
    # warm-up cannot fill and H2 ran longer than H1 (8 stages, 8 micro-batches: 34 vs 31)
    from gpuplan.errors import GpuplanError

    least = 2 * (p - 1)
    if least > 1:
        with pytest.raises(GpuplanError, match=f"needs at least {least} micro-batches"):
            build("zb-h2", p, least - 1)
    for m in range(max(1, least), least + 3):
        for c in (Costs(1, 1, 1), Costs(1, 2, 1), Costs(1, 1.5, 0.2)):
            assert simulate(build("zb-h2", p, m), c).makespan_s <= simulate(build("zb-h1", p, m), c).makespan_s + 1e-9


@settings(max_examples=60, deadline=None)
@given(
    half=st.integers(1, 5),
    extra=st.integers(0, 8),
    fb=st.floats(0.3, 2.0),
    w_frac=st.floats(0.1, 1.0),
    ov_frac=st.floats(0.0, 1.0),
    v=st.booleans(),
)
def test_dualpipe_and_dualpipev_idle_pp_half_minus_1_times_fb_plus_b_minus_3w(half, extra, fb, w_frac, ov_frac, v):
    f = b = fb  # forward and input-gradient backward equal, as the formula assumes
    w = w_frac * f
    lo = max(f, b + w)  # an overlapped pair takes at least its longer part ...
    overlap = lo + ov_frac * (f + b + w - lo)  # ... and at most both run back to back
    if v:
        p = half + 1
        m = 2 * p + extra
        t = simulate(build("dualpipev", p, m), Costs(f, b, w, overlap))
        chunk = 0.5  # the closed form counts PP = 2p chunks of half a stage
        expected = (2 * p / 2 - 1) * chunk * (overlap + (b + w) - 3 * w)
        assert max(t.peak_activations) == pytest.approx(p + 0.5)
    else:
        p = 2 * half
        m = 2 * p + 2 * extra
        t = simulate(build("dualpipe", p, m), Costs(f, b, w, overlap))
        expected = (p / 2 - 1) * (overlap + (b + w) - 3 * w)
        assert max(t.peak_activations) == p + 1
        assert t.schedule.param_copies == 2
    assert max(t.idle_s) == pytest.approx(expected, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 12), extra=st.integers(0, 20), f=st.sampled_from([0.5, 1.0, 1.7]))
def test_zb_v_idles_only_while_the_first_micro_batch_reaches_the_last_rank_at_equal_costs(p, extra, f):
    # Qi et al. 2023, section 6: zero bubble at F = B = W; what is left is the ramp-up of the V,
    # (p - 1) chunk forwards of F / 2, whatever the number of micro-batches (>= 2p - 1)
    t = simulate(build("zb-v", p, 2 * p - 1 + extra), Costs(f, f, f))
    assert max(t.idle_s) == pytest.approx((p - 1) * f / 2, abs=1e-9)
    assert max(t.peak_activations) == p  # 1F1B's memory (rank 0's), on every rank


def test_zb_v_beats_zb_h1_and_zb_h2_on_equal_costs():
    for p, m in ((4, 8), (4, 16), (8, 16), (8, 32)):
        v, h1, h2 = (simulate(build(n, p, m), Costs(1, 1, 1)) for n in ("zb-v", "zb-h1", "zb-h2"))
        assert max(v.idle_s) < min(max(h1.idle_s), max(h2.idle_s))


def test_zb_v_with_fewer_micro_batches_than_its_warm_up_still_runs_each_once():
    t = simulate(build("zb-v", 4, 3), Costs(1, 1, 1))
    assert sum(len(a) for a in t.schedule.actions) == 3 * 8 * 3  # F, B, W of 8 chunks x 3 micro-batches


def test_with_unequal_forward_and_backward_dualpipe_departs_from_its_closed_form():
    t = simulate(build("dualpipe", 4, 8), Costs(2, 1, 1))
    assert max(t.idle_s) == pytest.approx(4.0)  # the closed form says (2-1)(4 + 2 - 3) = 3


def test_every_rank_runs_each_micro_batch_once_in_dependency_order():
    for name, kw in (("dualpipe", {}), ("dualpipev", {}), ("interleaved", {"vp": 2}), ("zb-v", {}), ("zb-h2", {})):
        s = build(name, 4, 16, **kw)
        t = simulate(s, Costs(1.0, 1.2, 0.8, p2p_s=0.1))
        done = {}
        for e in sorted(t.events, key=lambda e: e.end):
            for op in e.action.ops:
                key = (op.kind, op.stream, op.stage, op.mb)
                assert key not in done
                done[key] = e
        n_chunks = s.stages * s.streams * (16 // s.streams)
        assert sum(1 for k in done if k[0] == "F") == n_chunks
        for (kind, stream, stage, mb), e in done.items():
            if kind == "F" and stage > 0:
                prev = done[("F", stream, stage - 1, mb)]
                assert e.start >= prev.end + (0.1 if prev.rank != e.rank else 0) - 1e-9


@pytest.mark.parametrize(
    "name,p,m,field",
    [
        ("dualpipe", 3, 12, "stages"),
        ("dualpipe", 4, 6, "microbatches"),
        ("dualpipev", 4, 7, "microbatches"),
        ("interleaved", 4, 6, "microbatches"),
        ("nope", 4, 8, "schedule"),
        ("1f1b", 0, 8, "stages"),
    ],
)
def test_impossible_parameters_are_refused_naming_the_field(name, p, m, field):
    with pytest.raises(GpuplanError) as e:
        build(name, p, m, 2)
    assert e.value.field == field


def test_negative_times_are_refused():
    with pytest.raises(GpuplanError) as e:
        simulate(build("1f1b", 4, 8), Costs(1, -1, 1))
    assert e.value.field == "b"
