"""A stored run's plan read back typed (plan.read_stored_plan, issue 30 item 2): through the
Plan model where it validates, else setting by setting with the model's own defaults, so no
reader of a stored run spells a default again."""

from __future__ import annotations

from isotax.plan import Plan, Verdicts, aa_name_of, parse_plan, read_stored_plan

VALID = """name = "p"
repetitions = 4
aa = true
baseline = "native"
[verdicts]
margin = 0.05
max_repetitions = 9
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
"""


def test_a_valid_plan_reads_as_the_model_says() -> None:
    p = read_stored_plan(VALID)
    model = parse_plan(VALID)
    assert (p.name, p.repetitions, p.baseline, p.aa) == ("p", 4, "native", True)
    assert p.verdicts == model.verdicts and p.verdicts.max_repetitions == 9
    assert p.aa_name == model.aa_name == aa_name_of("native") == "native-aa"
    assert p.canary == "native-aa" and p.workload_names == ("compress",)
    assert p.environments[0]["kind"] == "native"


def test_a_plan_this_isotax_cannot_validate_keeps_what_it_says_and_the_models_defaults(
        ) -> None:
    gone = VALID.replace('name = "compress"', 'name = "a-workload-since-removed"')
    p = read_stored_plan(gone)
    assert (p.repetitions, p.aa, p.verdicts.margin) == (4, True, 0.05)
    assert p.workload_names == ("a-workload-since-removed",)
    bare = read_stored_plan('name = "q"\n[[workloads]]\nname = "gone"\n')
    fields = Plan.model_fields
    assert bare.repetitions == fields["repetitions"].default
    assert bare.baseline == fields["baseline"].default and bare.canary is None
    assert bare.warmup_points == fields["warmup_points"].default
    assert bare.verdicts == Verdicts()
    wrong = read_stored_plan('repetitions = "many"\n[verdicts]\nmargin = "wide"\n')
    assert wrong.repetitions == fields["repetitions"].default and wrong.verdicts == Verdicts()
    assert read_stored_plan("not toml [").repetitions == fields["repetitions"].default
