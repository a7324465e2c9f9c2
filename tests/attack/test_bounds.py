"""Attack suite, fault class "hostile or careless input hangs, floods or crashes" (issue 18 items
3 and 5).

Before the fix: a 1.8 KB YAML alias bomb hung (its value was expanded into the error message);
one bad list of 200,000 elements printed 200,000 lines; the study file was read whatever its
size; `--points` large wrapped an int64 to 0 or raised MemoryError; `dse eval` integers >= 2^63
raised OverflowError; duplicate keys were taken silently; a step larger than its range collapsed a
knob; `ep: .nan` raised; an objective null for every design was accepted. Each now ends with
one line naming the limit, exit 2.
"""

from __future__ import annotations

import pytest
import yaml
from attackkit import DRAFT_CHIP, QUICK, cli, error_lines, one_line, write_study
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.catalog.yamlio import MAX_FILE_BYTES, MAX_LIST_LENGTH, MAX_NODES, load_yaml_text
from dse.errors import SpecError, SpecErrors
from dse.study import parse_study

BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def study_text(tmp_path, text: str, name: str = "h.yaml"):
    p = tmp_path / name
    p.write_text(QUICK.read_text() + text)
    return p


def test_an_alias_bomb_is_refused_by_its_expanded_size(tmp_path):
    """9 levels of 9 aliases: 9^9 = 387 million values from 300 bytes."""
    assert len(BOMB) < 1800
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    line = one_line(*cli("run", p), want=2)
    assert line == (f"error: {p}: f: the document expands to more than {MAX_NODES:,} values (aliases counted each "
                    "time they are used; dse.catalog.yamlio.MAX_NODES)")
    assert load_yaml_text("a: &x [1, 2]\nb: *x\nc: {<<: {d: 1}, e: *x}\n", "ok.yaml") == \
        {"a": [1, 2], "b": [1, 2], "c": {"d": 1, "e": [1, 2]}}          # aliases in use are fine


def test_a_list_of_200000_elements_is_one_line(tmp_path):
    p = tmp_path / "long.yaml"
    p.write_text(QUICK.read_text().replace("  batch: 1\n", "  batch: [" + ",".join(["x"] * 200_000) + "]\n"))
    assert p.stat().st_size < MAX_FILE_BYTES
    line = one_line(*cli("run", p), want=2)
    assert line == (f"error: {p}: workload.batch: a list of 200,000 elements; at most {MAX_LIST_LENGTH:,} are read "
                    "(dse.catalog.yamlio.MAX_LIST_LENGTH)")


def test_many_bad_elements_of_one_list_collapse_into_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    raw = yaml.safe_load(QUICK.read_text())
    raw["workload"]["batch"] = ["x"] * 5000 + [0, -3]
    p.write_text(yaml.safe_dump(raw))
    line = one_line(*cli("run", p), want=2)
    assert line == (f"error: {p}: 5,002 elements of workload.batch are invalid; first: workload.batch[0] = 'x': "
                    "expected an integer in [1, 1e+06]")


def test_errors_of_a_file_are_listed_at_most_twenty_lines():
    errors = [SpecError("s.yaml", f"k{i}", i, "expected x") for i in range(50)]
    lines = str(SpecErrors(errors)).splitlines()
    assert len(lines) == 20 and lines[-1] == "... and 31 more errors" and lines[0] == "s.yaml: k0 = 0: expected x"


def test_a_file_over_the_size_limit_is_not_read(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text(QUICK.read_text() + "#" * MAX_FILE_BYTES)
    line = one_line(*cli("run", p), want=2)
    assert line == (f"error: {p}: study: the file is larger than {MAX_FILE_BYTES:,} bytes "
                    "(dse.catalog.yamlio.MAX_FILE_BYTES); this is not a study or database file")


def test_a_config_json_over_the_size_limit_is_not_read(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{" + " " * MAX_FILE_BYTES + "}")
    line = one_line(*cli("eval", "--hw", "h100-sxm", "--target", p), want=2)
    assert line == (f"error: {p}: model = '{p}': the file is larger than {MAX_FILE_BYTES:,} bytes "
                    "(dse.catalog.yamlio.MAX_FILE_BYTES); a config.json is a few KB")


def test_duplicate_keys_are_refused_naming_both_lines(tmp_path):
    p = study_text(tmp_path, "name: again\n")
    line = one_line(*cli("run", p), want=2)
    n = QUICK.read_text().count("\n")
    first = next(i for i, x in enumerate(QUICK.read_text().splitlines(), 1) if x.startswith("name:"))
    assert line == f"error: {p}: name: key given twice (lines {first} and {n + 1}); keep one"


@pytest.mark.parametrize("knob, value, says", [
    ("memory_stacks", {"low": 1, "high": 2, "step": 5}, "memory_stacks.step = 5: larger than the range (high - low = 1)"),
    ("memory_stacks", {"low": 1, "high": 12, "step": 5}, "memory_stacks.step = 5: does not divide high - low = 11: "
                                                         "the range would end at 11, not at high; give high = 11 or 16"),
    ("peak_tflops", {"low": 100, "high": 100}, "empty range: low < high must hold"),
    ("peak_tflops", {"low": 0, "high": 100, "log": True}, "log ranges need low > 0 and no step"),
    ("sram_mb", {"low": 0, "high": 1, "step": 0.3}, "sram_mb.step = 0.3: does not divide high - low = 1"),
])
def test_degenerate_ranges_are_refused(tmp_path, knob, value, says):
    """Issue 18: a step larger than its range collapsed a knob to one value without a word."""
    p = write_study(tmp_path, **{f"space.target_chip.{knob}": value})
    line = one_line(*cli("run", p, "--storage", ":memory:"), want=2)
    assert says in line and line.startswith(f"error: {p}: space.target_chip.{knob}")


@pytest.mark.parametrize("key, value, says", [
    ("workload.ep", float("nan"), "workload.ep = nan: expected a positive integer"),
    ("workload.ep", float("inf"), "workload.ep = inf: expected a positive integer"),
    ("search.n_trials", 10**30, "search.n_trials = 1000000000000000000000000000000: expected an integer in [1, 1e+07]"),
    ("workload.batch", 10**400, "workload.batch = 1000000000"),
    ("grid.points", 5000, "grid.points = 5000: expected an integer in [2, 1000]"),
    ("objectives", [{"metric": "draft_chip_power_w", "direction": "minimize"}],
     "objectives[0].metric = 'draft_chip_power_w': null for every design: the study has no draft chip"),
    ("constraints", [{"metric": "price_usd", "max": 10}], "constraints[0].metric = 'price_usd': null for every design"),
])
def test_out_of_range_and_null_for_every_design_values_are_one_line(tmp_path, key, value, says):
    p = write_study(tmp_path, **{key: value})
    line = one_line(*cli("run", p, "--storage", ":memory:"), want=2)
    assert says in line, line


@pytest.mark.parametrize("points, says", [
    (10**8, "--points = 100000000: expected an integer in [2, 1000]"),
    (1000, "--points = 1000: the grid would hold 8.64e+11 points (2 x 1000 x 3 x 12 x 3 x 1000 x 4 x 1000 over 8 "
           "knobs), more than 1e+10 (dse.campaign.grid.MAX_GRID_POINTS): lower the points or fix more knobs"),
])
def test_a_grid_too_large_is_refused_before_anything_is_built(tmp_path, points, says):
    """Issue 18: a large --points wrapped an int64 to 0 (a sweep of nothing) or raised MemoryError."""
    line = one_line(*cli("sweep", QUICK, "--points", points, "--out", tmp_path / "sw"), want=2)
    assert line == f"error: {says}"
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("args, says", [
    (("--chunk-size", 0), "--chunk-size = 0: expected an integer in [1, 10,000,000]"),
    (("--chunk-size", 10**12), "--chunk-size = 1000000000000: expected an integer in [1, 10,000,000]"),
])
def test_chunk_sizes_out_of_range_are_refused(tmp_path, args, says):
    """Issue 18: --chunk-size 0 was taken as the default."""
    code, out, err, exc = cli("sweep", DRAFT_CHIP, *args, "--out", tmp_path / "sw", "--quiet")
    assert one_line(code, out, err, exc, want=2) == f"error: {says} (rows per part file; dse.campaign.grid.MAX_CHUNK)"


@pytest.mark.parametrize("flag", ["--batch", "--chips", "--prompt", "--output", "--tree-nodes", "--draft-chips"])
def test_eval_integers_beyond_int64_are_one_line(flag):
    """Issue 18: `dse eval` integers >= 2^63 raised OverflowError."""
    line = one_line(*cli("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", flag, 2**63), want=2)
    assert line.startswith(f"error: {flag} = {2**63}: expected an integer in [")


# --------------------------------------------------------------------------- generated inputs

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.lists(st.one_of(st.integers(-5, 10**9), st.text(max_size=5), st.floats()), max_size=6),
    st.dictionaries(st.sampled_from(["low", "high", "step", "log", "alpha", "x", "metric", "max"]),
                    st.one_of(st.integers(-10, 10**6), st.floats(), st.booleans(), st.text(max_size=4)),
                    max_size=4))

BASE = yaml.safe_load(DRAFT_CHIP.read_text())


def _paths(d, pre=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield pre + (k,)
            yield from _paths(v, pre + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield pre + (i,)
            yield from _paths(v, pre + (i,))


PATHS = sorted(_paths(BASE), key=str)


def _mutate(raw, path, value):
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return raw


def _bounded(exc: BaseException) -> None:
    """A refusal's message: at most 20 lines, each of bounded length, naming the file."""
    text = str(exc)
    lines = text.splitlines()
    assert 1 <= len(lines) <= 20 and all(len(x) < 2000 for x in lines), text[:500]


@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), HOSTILE), min_size=1, max_size=3))
def test_generated_study_values_parse_or_are_refused_in_bounded_lines(edits, db):
    """Any value at any key of a shipped study (several at once): parse_study returns a study or
    raises SpecError / SpecErrors with a bounded message, never another exception."""
    import copy
    raw = copy.deepcopy(BASE)
    for path, value in edits:
        try:
            raw = _mutate(raw, path, value)
        except (KeyError, IndexError, TypeError):
            continue                    # an earlier edit replaced the parent
    try:
        parse_study(raw, "gen.yaml", db=db)
    except (SpecError, SpecErrors) as exc:
        _bounded(exc)


YAML_PIECES = st.sampled_from([
    "a: 1\n", "a: 2\n", "b: &x [1, 2]\n", "c: *x\n", "d: {e: *x, e: 1}\n", "- 1\n", "f: [\n", "g: !!python/object x\n",
    "h: 1e400\n", "i: .nan\n", "j: 0x1F\n", "k: ~\n", "'l': \"m\"\n", "\t- bad\n", "n: &y {o: *y}\n", "p: [*x, *x, *x]\n",
    "q: 'unterminated\n", "<<: *x\n", "r: {<<: {s: 1}, s: 2}\n", "t: " + "[" * 50 + "]" * 50 + "\n", "%YAML 1.1\n---\n",
])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(pieces=st.lists(YAML_PIECES, max_size=8))
def test_generated_yaml_documents_load_or_are_refused_in_one_line(pieces):
    """Any document made of anchors, aliases, merges, duplicate keys, tags, deep nesting and broken
    syntax: a mapping or one SpecError, quickly (a merge key may repeat; a real key may not)."""
    text = "".join(pieces)
    try:
        data = load_yaml_text(text, "gen.yaml")
    except SpecError as exc:
        assert len(str(exc).splitlines()) == 1 and str(exc).startswith("gen.yaml: "), str(exc)
        return
    assert isinstance(data, dict)


EVAL_INTS = st.one_of(st.integers(-3, 70), st.sampled_from([0, 2**31, 2**63 - 1, 2**63, 2**64, 10**30]))
EVAL_FLOATS = st.one_of(st.floats(-1, 2), st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "x", ""]))
EVAL_FLAGS = {"--batch": EVAL_INTS, "--chips": EVAL_INTS, "--prompt": EVAL_INTS, "--output": EVAL_INTS,
              "--tree-nodes": EVAL_INTS, "--k": st.one_of(EVAL_INTS, st.just("auto")), "--alpha": EVAL_FLOATS,
              "--tau": EVAL_FLOATS, "--temperature": EVAL_FLOATS, "--baseline-ms": EVAL_FLOATS,
              "--ep": EVAL_INTS, "--datastore-gb": EVAL_FLOATS,
              "--set": st.sampled_from(["mem_bw_tb_s=nan", "mem_bw_tb_s=1e400", "mem_bw_tb_s=-1", "x=1", "=",
                                        "kernel_launch_us=0", "memory_capacity_gb=0.001", "mem_efficiency=2"]),
              "--dtype": st.sampled_from(["bf16", "fp8", "int4-g128", "nope"]),
              "--draft": st.sampled_from(["llama-3.2-1b", "eagle", "medusa:4", "medusa:0", "ngram", "early-exit:99",
                                          "none", "x"])}


@settings(max_examples=150, derandomize=True, deadline=None)
@given(flags=st.dictionaries(st.sampled_from(sorted(EVAL_FLAGS)), st.just(None), min_size=1, max_size=4),
       data=st.data())
def test_generated_eval_flags_give_a_result_or_one_line_exit_2(flags, data):
    """`dse eval` with any values of any of its flags: a result (exit 0) or one `error:` line, exit
    2; never a traceback or exit 1 (nothing here is a runtime failure)."""
    args = ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b"]
    for flag in flags:
        value = data.draw(EVAL_FLAGS[flag], label=flag)
        args += [flag, str(value)]
    if "--draft" in flags and not any(f in flags for f in ("--alpha", "--tau")):
        args += ["--alpha", "0.7"]
    code, out, err, exc = cli(*args)
    if code == 0:
        assert exc is None and out.startswith("llama-3.1-8b on ")
        assert not {"nan", "inf", "-inf"} & {t.lower().rstrip("x,") for t in out.split()}, out
    else:
        error_lines(code, out, err, exc, want=2)


def test_the_bomb_never_reaches_a_message(tmp_path):
    """The value of an error is shown bounded (reprlib), whatever it is."""
    nested = [["x"] * 9] * 9
    for _ in range(6):
        nested = [nested] * 9
    msg = str(SpecError("s.yaml", "workload.batch", nested, "expected an integer"))
    assert len(msg) < 400

