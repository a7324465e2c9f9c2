"""Study files: every shipped study validates; bad files exit 2 naming file, key path and range."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dse.cli.commands import main
from dse.errors import SpecError, SpecErrors
from dse.study import load_study

STUDIES = sorted((Path(__file__).parent.parent / "studies").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_studies_validate_and_say_what_they_answer(path):
    s = load_study(path)
    assert s.searched and s.objectives
    assert path.read_text().lstrip().startswith("#"), "a study starts with a comment saying what it answers"


def _write(tmp_path, mutate):
    raw = yaml.safe_load((Path(__file__).parent.parent / "studies" / "quickstart.yaml").read_text())
    mutate(raw)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


@pytest.mark.parametrize("mutate,field,allowed", [
    (lambda r: r.update(bogus=1), "bogus", "unknown key"),
    (lambda r: r["space"]["target_chip"].update(memory_stacks={"low": 8, "high": 2}),
     "space.target_chip.memory_stacks", "empty range"),
    (lambda r: r["space"]["target_chip"].update(memory_stacks={"low": 0, "high": 4}),
     "space.target_chip.memory_stacks.low", "expected an integer in [1, 64]"),
    (lambda r: r["space"]["target_chip"].update(memory=["hbm9"]), "space.target_chip.memory[0]", "expected one of"),
    (lambda r: r["objectives"].append({"metric": "spec_ms_per_tokn", "direction": "minimize"}),
     "objectives[2].metric", "did you mean 'spec_ms_per_token'"),
    (lambda r: r["workload"].update(target="llama-9"), "workload.target", "not in hardware_db/models"),
    (lambda r: r["workload"].update(acceptance={"alpha": 1.5}), "workload.acceptance.alpha", "[0, 1]"),
    (lambda r: r["search"].update(sampler="cmaes"), "search.sampler", "nsga2"),
    (lambda r: r["space"]["target_chip"].update(peak_tflops="fast"), "space.target_chip.peak_tflops", "a number"),
    (lambda r: r["workload"].update(batch=0), "workload.batch", "[1, 1e+06]"),
])
def test_bad_study_names_file_key_and_allowed(tmp_path, mutate, field, allowed):
    p = _write(tmp_path, mutate)
    with pytest.raises((SpecError, SpecErrors)) as e:
        load_study(p)
    msg = str(e.value)
    assert str(p) in msg and field in msg and allowed in msg, msg
    r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_all_errors_reported_together(tmp_path):
    def mutate(r):
        r["search"]["sampler"] = "x"
        r["grid"] = {"points": 1}
    with pytest.raises(SpecErrors) as e:
        load_study(_write(tmp_path, mutate))
    assert "search.sampler" in str(e.value) and "grid" in str(e.value)


def test_malformed_yaml_exit_2(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nworkload: [\n")
    r = CliRunner().invoke(main, ["run", str(p)])
    assert r.exit_code == 2 and "malformed YAML" in r.output and str(p) in r.output


def test_technology_override_is_validated(tmp_path):
    p = _write(tmp_path, lambda r: r.update(technology={"memory": {"hbm3e": {"usd_per_gib": -3}}}))
    with pytest.raises((SpecError, SpecErrors)) as e:
        load_study(p)
    assert "usd_per_gib" in str(e.value)


@pytest.mark.parametrize("mutate,field", [
    (lambda r: (r["workload"].update(acceptance={"per_position": [0.9, 0.8]}), r["space"].update(k={"low": 1, "high": 8})),
     "space.k"),
    (lambda r: r["workload"].update(acceptance={"tau": 5}, k=2), "workload.acceptance.tau"),
    (lambda r: r["workload"].update(draft="medusa:2", k=5), "workload.k"),
    (lambda r: r["workload"].update(tree_nodes=2, k=4), "workload.tree_nodes"),
    (lambda r: r["workload"].update(draft="ngram", tree_nodes=2000), "workload.tree_nodes"),   # > 1024
    (lambda r: r["workload"].update(overlap=True), "workload.overlap"),
    (lambda r: r["space"].update(draft_chip={"enabled": True, "peak_tflops": 50, "link_bw_gb_s": 0}),
     "space.draft_chip.link_bw_gb_s"),
])
def test_workload_cross_checks_match_dse_eval(tmp_path, mutate, field):
    p = _write(tmp_path, mutate)
    with pytest.raises((SpecError, SpecErrors)) as e:
        load_study(p)
    assert field in str(e.value) and str(p) in str(e.value)
