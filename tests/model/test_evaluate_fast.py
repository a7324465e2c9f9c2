"""The fast paths of dse.model.evaluate give the same bits as the plain ones: latency terms once
per distinct input row (dedupe), and k = auto stopped by a bound (k_bound)."""

import sys

import numpy as np
import pytest

from dse.api import hardware_arrays
from dse.model import DesignBatch, evaluate
from dse.model.dedupe import NOT_LATENCY_INPUTS, distinct_latency_rows
from dse.workload.spec import Workload, make_acceptance, parse_drafter

E = sys.modules["dse.model.evaluate"]
#: where k = auto is chosen: it reads MIN_ROWS_K_LOOP and K_FIRST and calls k_auto.auto_k
L = sys.modules["dse.model.latency"]
KA = sys.modules["dse.model.k_auto"]
DD = sys.modules["dse.model.dedupe"]


def _same(a, b) -> bool:
    """Bit for bit (NaN where NaN), for every column."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a.view(np.uint64), b.view(np.uint64))
    return np.array_equal(a, b)


def _assert_same(m1, m2):
    c1, c2 = m1.columns(), m2.columns()
    assert list(c1) == list(c2)
    bad = [name for name in c1 if not _same(c1[name], c2[name])]
    assert not bad, bad


def _designs(db, n, rng, *, draft_chip=False, pathological=False, k_choices=(0,), max_batch=16):
    """n designs around an H100 (8B-class target): random bandwidth, FLOP/s, chips, batch,
    prompt and output; with ``draft_chip``, half drafting on a second group over a link ("all":
    every one); with ``pathological``, some groups without bandwidth (infinite times, NaN when
    overlapped)."""
    from dse.catalog.technology import load_technology
    dev, rt, tech = db.device("h100-sxm"), db.runtime("graphs"), load_technology(db.root)

    def group(chips):
        hw = hardware_arrays(dev, rt, chips, "bf16", tech=tech)     # with its energy constants
        bw = rng.uniform(1e12, 8e12, n)
        if pathological:
            bw[rng.random(n) < 0.05] = 0.0
        return type(hw)(**{**{f: getattr(hw, f) for f in hw.__slots__}, "mem_bw_bytes_s": bw,
                           "peak_flop_s": rng.uniform(1e14, 2e15, n), "link_bw_bytes_s": rng.uniform(1e11, 1.8e12, n),
                           "capacity_bytes": rng.uniform(2e10, 2e11, n)})

    t = group(rng.choice([1, 2, 4, 8], n))
    d = group(rng.choice([1, 2], n)) if draft_chip else t
    on = rng.random(n) < (1.0 if draft_chip == "all" else 0.5) if draft_chip else np.zeros(n, bool)
    return DesignBatch(target=t, draft=d, draft_on_chip=on,
                       draft_link_bw_bytes_s=np.minimum(t.link_bw_bytes_s, d.link_bw_bytes_s) if draft_chip else 0.0,
                       draft_link_latency_s=2e-6 if draft_chip else 0.0, batch=rng.integers(1, max_batch + 1, n),
                       prompt_tokens=rng.integers(128, 4096, n), output_tokens=rng.integers(64, 1024, n),
                       k=rng.choice(k_choices, n))


def _workload(db, draft="llama-3.2-1b", target="llama-3.1-8b", **kw):
    tgt = db.model(target)
    acc = kw.pop("acceptance", make_acceptance(0.8))
    return Workload(target=tgt, drafter=parse_drafter(draft, tgt, db), acceptance=acc, **kw)


# ---- dedupe ----

def test_rows_differing_only_in_capacity_share_their_latency_row(db):
    """3,000 rows drawn from 60 designs, each row with its own memory capacity: 60 distinct
    latency inputs (capacity is read by the capacity check only), and every metric, the
    capacity columns and the blanked latencies of rows that do not fit included, is the
    same with and without dedupe."""
    rng = np.random.default_rng(3)
    pool = _designs(db, 60, rng, draft_chip=True)
    batch = pool.take(np.r_[np.arange(60), rng.integers(0, 60, 2940)])
    cap = rng.uniform(5e9, 2e11, batch.n)       # 5-200 GB: some rows fit, some do not
    batch = DesignBatch(**{**{f: getattr(batch, f) for f in batch.__slots__},
                           "target": type(batch.target)(**{**{f: getattr(batch.target, f)
                                                              for f in batch.target.__slots__},
                                                           "capacity_bytes": cap})})
    first, inverse = distinct_latency_rows(batch)
    assert first.size == 60 and inverse.size == 3000
    w = _workload(db, overlap=True)
    fast, plain = evaluate(batch, w), evaluate(batch, w, dedupe=False)
    assert 0 < fast.fits.sum() < batch.n
    assert np.isnan(fast.spec_s_per_token[~fast.fits]).all()
    _assert_same(fast, plain)
    # the same with per-row static power and J/FLOP (silicon area, process node) on both groups: still 60
    # latency rows, and every energy the same bits as without dedupe
    def energy_varied(hw):
        return type(hw)(**{**{f: getattr(hw, f) for f in hw.__slots__}, "idle_w": rng.uniform(20, 200, batch.n),
                           "j_per_flop": rng.uniform(2e-13, 9e-13, batch.n),
                           "attention_j_per_flop": rng.uniform(2e-13, 9e-13, batch.n)})
    batch = DesignBatch(**{**{f: getattr(batch, f) for f in batch.__slots__}, "target": energy_varied(batch.target),
                           "draft": energy_varied(batch.draft)})
    assert distinct_latency_rows(batch)[0].size == 60
    fast, plain = evaluate(batch, w), evaluate(batch, w, dedupe=False)
    _assert_same(fast, plain)
    assert np.unique(fast.energy_j_per_token[fast.fits]).size > 60


def test_a_large_batch_in_blocks_gives_the_bits_of_one_pass(db):
    """More than 2 x block_rows rows are evaluated block_rows at a time (the last block short):
    every metric the same bits as one pass, with a draft chip, auto and fixed k, and rows that
    do not fit or have no bandwidth; and a batch whose drafter shares the target's group."""
    rng = np.random.default_rng(8)
    batch = _designs(db, 2600, rng, draft_chip=True, pathological=True, k_choices=(0, 3, 6))
    small = type(batch.target)(**{**{f: getattr(batch.target, f) for f in batch.target.__slots__},
                                  "capacity_bytes": rng.uniform(5e9, 2e11, batch.n)})   # some do not fit
    batch = DesignBatch(**{**{f: getattr(batch, f) for f in batch.__slots__}, "target": small})
    w = _workload(db, overlap=True)
    one = evaluate(batch, w, block_rows=None)
    blocks = evaluate(batch, w, block_rows=1000)            # 1000 + 1000 + 600
    assert 0 < one.fits.sum() < batch.n and np.isnan(one.spec_s_per_token).any() and len(set(one.k)) >= 3
    _assert_same(blocks, one)
    plain = _designs(db, 2100, rng)
    block = plain.take(slice(0, 700))
    assert plain.draft is plain.target and block.draft is block.target and block.n == 700
    _assert_same(evaluate(plain, w, block_rows=700), evaluate(plain, w, block_rows=None))
    assert E.BLOCK_ROWS == 131_072 and evaluate(plain, w, block_rows=1100).fits.shape == (2100,)


def test_dedupe_is_skipped_when_it_does_not_pay(db):
    """Random continuous designs are all distinct: no dedupe (None), the plain path."""
    batch = _designs(db, 2000, np.random.default_rng(4))
    assert distinct_latency_rows(batch) is None


def test_a_hash_collision_means_no_dedupe_never_a_wrong_row(db, monkeypatch):
    """With the hash's multiplier at 0 every row hashes to 0: one 'distinct' row, which the
    column check refuses; the batch is evaluated row by row, the same bits as without dedupe."""
    rng = np.random.default_rng(5)
    batch = _designs(db, 40, rng).take(rng.integers(0, 40, 1500))
    w = _workload(db)
    plain = evaluate(batch, w, dedupe=False)
    monkeypatch.setattr(DD, "_MIX", np.uint64(0))
    assert distinct_latency_rows(batch) is None
    _assert_same(evaluate(batch, w), plain)


# ---- k = auto with a bound ----

@pytest.fixture
def k_loop(monkeypatch):
    """The k-by-k loop from 256 rows (in production from MIN_ROWS_K_LOOP), counting k evaluations."""
    monkeypatch.setattr(L, "MIN_ROWS_K_LOOP", 256)
    seen = []
    real = L.auto_k

    def spy(terms, K, bound, *rest):
        calls = []
        out = real(lambda kc: calls.append(int(kc[0, 0])) or terms(kc), K, bound, *rest)
        seen.append(calls)
        return out
    monkeypatch.setattr(L, "auto_k", spy)
    return seen


CASES = {
    "chain": dict(),
    "overlap, draft chip": dict(overlap=True, draft_chip=True),
    "sampling, continuous batching": dict(temperature=0.7, continuous=True),
    "low alpha": dict(acceptance=make_acceptance(0.4)),
    "alpha 1": dict(acceptance=make_acceptance(1.0), overlap=True, draft_chip=True),
    "per position": dict(acceptance=make_acceptance(per_position="0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.2")),
    "tau given": dict(acceptance=make_acceptance(tau=3.0)),
    "eagle": dict(draft="eagle"),
    "medusa": dict(draft="medusa:5"),
    "ngram": dict(draft="ngram"),
    "high alpha": dict(acceptance=make_acceptance(0.95)),
    # every row overlapped: the larger k past 8 are let in by the overlapped rows' bound alone
    "high alpha, all overlapped": dict(acceptance=make_acceptance(0.95), overlap=True, draft_chip="all"),
    "high alpha, ngram": dict(draft="ngram", acceptance=make_acceptance(0.95), overlap=False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bounded_k_auto_equals_every_k(db, k_loop, monkeypatch, case):
    """The same k and metrics, bit for bit, as the k-by-k loop without the bound and as the
    broadcast pass over every k; rows without bandwidth (infinite or NaN times, every k tied)
    and fixed-k rows mixed in."""
    kw = dict(CASES[case])
    draft_chip = kw.pop("draft_chip", False)
    w = _workload(db, **kw)
    rng = np.random.default_rng(sum(map(ord, case)))
    batch = _designs(db, 3000, rng, draft_chip=draft_chip, pathological=True, k_choices=(0, 0, 0, 2))
    bounded = evaluate(batch, w, dedupe=False)
    every = evaluate(batch, w, dedupe=False, k_bound=False)
    K = k_loop[1][0]          # k_max (16), or fewer (Medusa: its 5 heads; 8 per-position rates)
    assert k_loop[0][0] == min(K, L.K_FIRST) and k_loop[1] == list(range(K, 0, -1))
    _assert_same(bounded, every)
    monkeypatch.setattr(L, "MIN_ROWS_K_LOOP", 10 ** 9)
    _assert_same(bounded, evaluate(batch, w, dedupe=False))
    assert (~np.isfinite(every.iter_s) & every.fits).any()      # the tied rows are there


def test_the_bound_stops_early_where_large_k_wins(db, k_loop):
    """Llama-3.1-70B (bf16) with a 1B draft at alpha = 0.8, batch 1, on H100-class parts:
    memory-bound verify passes, so every row picks k >= 4 (k = 4 on 11 rows of 8 chips with a slow
    link, 0.10-0.23 TB/s, and fast memory, 6.4-7.9 TB/s: the draft's own all-reduces are dear there). Evaluating k = 8, 7, ... down to 3,
    the bound then rules out k = 1..2 on every row: for k = 2 it is (2 draft steps + a plain
    decode step + t_spec) / tau(2), tau(2) = 1 + 0.8 + 0.64 = 2.44, above each row's best over
    k = 3..8. Upwards, k = 9..15 may still win on some row (the draft costs 1-4% of a target step
    on these parts), k = 16 on none: (16 steps + a decode step) / tau(16) is above every row's
    best. So 13 of the 16 k are evaluated, with the same bits as all 16, and k = 9-11 win on 616
    of the 3,000 rows (the cap of 8 before issue 17 lost them; 617 before the iteration priced its
    verification sampling, dse.model.spec_iteration; 639 with a one-protocol all-reduce, when no row
    took k = 4)."""
    rng = np.random.default_rng(7)
    batch = _designs(db, 3000, rng, max_batch=1)
    w = _workload(db, target="llama-3.1-70b")
    fast = evaluate(batch, w, dedupe=False)
    assert fast.k.min() >= 4 and (fast.k == 4).sum() == 11
    assert k_loop[0] == [8, 7, 6, 5, 4, 3, 9, 10, 11, 12, 13, 14, 15]
    assert (fast.k > 8).sum() == 616 and fast.k.max() == 11
    _assert_same(fast, evaluate(batch, w, dedupe=False, k_bound=False))


def test_a_bound_that_lies_is_caught(db, k_loop, monkeypatch):
    """Planted bug: a bound 10x too high (every smaller k 'ruled out' at once) changes k."""
    rng = np.random.default_rng(8)
    batch = _designs(db, 3000, rng)
    w = _workload(db, target="llama-3.1-70b")
    every = evaluate(batch, w, dedupe=False, k_bound=False)
    for module in (KA, L):          # the k-by-k bound (k_auto) and the bound on the larger k (latency)
        monkeypatch.setattr(module, "BOUND_MARGIN", -9.0)        # lb x (1 - (-9)) = 10 x lb
    wrong = evaluate(batch, w, dedupe=False)
    assert (wrong.k != every.k).any()


def test_every_latency_input_is_in_the_key_and_capacity_is_not(db):
    """Two halves of a batch that differ in one field: two distinct latency rows for every
    field the latency terms read, one for the capacity, the memory reserve and the energy
    constants latency.energy_metrics applies per row after the gather (static power, J/FLOP)."""
    base = _designs(db, 1, np.random.default_rng(9), draft_chip=True).take(np.zeros(2048, dtype=np.int64))
    half = np.arange(2048) >= 1024

    def changed(obj, name):
        v = getattr(obj, name)
        if v.dtype == bool:
            return v ^ half
        return np.where(half, np.where(np.isinf(v), 1.0, v + 1), v)     # inf (no scale-up limit) -> 1

    for group in ("target", "draft", None):
        hw = getattr(base, group) if group else base
        for name in hw.__slots__:
            if name in ("target", "draft"):
                continue
            new = type(hw)(**{**{f: getattr(hw, f) for f in hw.__slots__}, name: changed(hw, name)})
            batch = DesignBatch(**{**{f: getattr(base, f) for f in base.__slots__}, group: new}) if group else new
            got = distinct_latency_rows(batch)
            expect = 1 if name in NOT_LATENCY_INPUTS else 2
            assert got is not None and got[0].size == expect, (group, name)


@pytest.mark.parametrize("alpha", [0.6, 0.95])
def test_k_auto_past_8_in_the_broadcast_pass_and_for_trees(db, alpha):
    """Below MIN_ROWS_K_LOOP rows (and for any tree) k = 1..8 are evaluated at once, then 1..16
    only if the bound lets a larger k (a deeper tree) win on some row: the same bits as every k
    at once. At alpha 0.95 trees of 64 nodes go deeper than 8 on some rows; at 0.6 none does."""
    rng = np.random.default_rng(11)
    batch = _designs(db, 400, rng, k_choices=(0, 0, 3))
    trees = DesignBatch(**{**{f: getattr(batch, f) for f in batch.__slots__},
                           "tree_nodes": rng.choice([0, 16, 64], batch.n)})
    for b in (batch, trees):
        w = _workload(db, draft="eagle", acceptance=make_acceptance(alpha))
        fast, every = evaluate(b, w, dedupe=False), evaluate(b, w, dedupe=False, k_bound=False)
        _assert_same(fast, every)
    assert (every.k > 8).any() == (alpha > 0.9)


# ---- a tree method's tree re-chosen per row ----

@pytest.mark.parametrize("continuous", [False, True])
def test_tree_choice_is_the_least_of_each_size_alone(db, monkeypatch, continuous):
    """An EAGLE-3 workload choosing among a chain and trees of 4-59 nodes (Workload.tree_choices):
    each row's columns, bit for bit, those of the size with the least s/token evaluated alone over
    every row (a chain up to k = 16, a tree up to the published depth 6, the published tree as EAGLE-2's
    code builds it, at its depth: dse.model.framework_trees; the first of equals), with
    the trees skipped where the bound rules them out, stacked in one pass or one pass per size, and
    deduped; rows without bandwidth (infinite or NaN times) and batches 1-128 mixed in; static and
    continuous batching (whose prompt tokens ride in the verify pass: the bound leaves them out)."""
    import dataclasses
    TC = sys.modules["dse.model.tree_choice"]
    w = _workload(db, draft="eagle3", continuous=continuous)
    sizes = w.drafter.tree_choices()
    w = dataclasses.replace(w, tree_nodes=59, tree_choices=sizes)
    batch = _designs(db, 600, np.random.default_rng(7), pathological=True, max_batch=128)
    alone = [evaluate(batch, dataclasses.replace(w, tree_nodes=s, k_max=6 if s else 16, tree_choices=(),
                                                 tree=w.drafter.default_shape().tree if s == 59 else None),
                      dedupe=False).columns() for s in sizes]
    spec = np.stack([c["spec_ms_per_token"] for c in alone])
    pick = np.argmin(np.where(np.isnan(spec), np.inf, spec), axis=0)
    want = {name: np.stack([c[name] for c in alone])[pick, np.arange(600)] for name in alone[0]}
    seen = []
    real = TC.latency_metrics
    monkeypatch.setattr(TC, "latency_metrics", lambda b, wl, kb: seen.append(b.n) or real(b, wl, kb))
    got = evaluate(batch, w, dedupe=False).columns()
    # the latency columns; the capacity check holds the published tree's draft slots (Workload.tree_nodes 59)
    both = want["fits"] & got["fits"]
    bad = [name for name in E.LATENCY_METRICS if not _same(want[name][both], got[name][both])]
    assert not bad and both.mean() > 0.5, bad
    assert seen[0] == 600 and sum(seen[1:]) < 0.8 * 5 * 600        # the chain, then the trees not ruled out
    monkeypatch.setattr(TC, "STACK_ROWS", 0)                          # one pass of at most 600 pairs at a time
    _assert_same(evaluate(batch, w, dedupe=False), evaluate(batch, w, dedupe=False, k_bound=False))
    got0 = evaluate(batch, w, dedupe=False).columns()
    assert all(_same(got[name], got0[name]) for name in got)
    twice = evaluate(batch.take(np.r_[np.arange(600), np.arange(600)]), w)      # 1,200 rows: deduped
    assert all(_same(got[name], twice.take(np.arange(600)).columns()[name]) for name in got)
    won = set(want["tree_nodes"][want["k"] > 0].tolist())
    assert {0, 59} <= won and len(won) >= 4        # the batch decides: several sizes win somewhere
