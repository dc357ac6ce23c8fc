"""The mistakes a newcomer makes with a profile and with `tpurl`, in every capacity mode and
in the rehearsal: each is refused through the CLI with exit 2, before anything runs, naming
the field (as a dotted path, the variable, or the --set) and a fix whose fields exist, with
no traceback and no token quoted back.

The profiles are the shipped ones with the user's fields filled in, written to a file as a
user edits a copy (tests/support/profiles.py fills the same fields through --set).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from flows import cli
from flows.common.paths import PROFILES_DIR
from flows.common.yaml_text import load_yaml
from flows.config import ProfileError, load_profile
from flows.config.env_overrides import _leaves, model_in
from flows.config.profile import Profile
from tests.support.profiles import QUOTED_PRICE, TUTORIAL_REQUIRED, fake_hf_token

MODES = ("on-demand", "spot", "reservation", "flex-start", "rehearsal")
GKE_MODES = MODES[:4]


@functools.cache
def _shipped(name: str) -> dict[str, Any]:
    return load_yaml((PROFILES_DIR / f"{name}.yaml").read_text())


def _dump(data: Any) -> str:
    """The file a user's edit leaves, keys in their order (libyaml's emitter: the tests
    write thousands)."""
    return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False)


def base(mode: str) -> dict[str, Any]:
    """The profile a user has filled in for ``mode`` (the rehearsal needs nothing): a fresh
    copy each time (the shipped file is parsed once; the tests edit what they get), without
    the shipped file's ``name`` line: the copy's name is its own file's stem."""
    if mode == "rehearsal":
        return {k: v for k, v in copy.deepcopy(_shipped("rehearsal")).items() if k != "name"}
    data = {k: v for k, v in copy.deepcopy(_shipped("qwen3-30b-a3b-v6e-32")).items()
            if k != "name"}
    gke = {k: v for k, v in data["gke"].items() if v is not None}
    gke.update({k.split(".", 1)[1]: v for k, v in TUTORIAL_REQUIRED.items()}, capacity=mode)
    if mode != "reservation":
        gke.pop("reservation")
    if mode in ("spot", "flex-start"):
        gke["prices"] = {mode: QUOTED_PRICE}
    if mode == "flex-start":
        gke["max_run_hours"] = 12
    data["gke"] = gke
    return data


def paths_in(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key the file has, at every nesting level (not inside MaxText's args)."""
    found = []
    for key, value in data.items():
        found.append((*prefix, key))
        if isinstance(value, dict) and key != "args":
            found += paths_in(value, (*prefix, key))
    return found


def cases(make: Any) -> list[Any]:
    return [pytest.param(mode, path, id=f"{mode}-{'.'.join(path)}")
            for mode in MODES for path in make(mode)]


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Any, *sets: str,
            command: str = "validate", text: str | None = None) -> tuple[int, str]:
    """`tpurl COMMAND FILE --set ...` on a copied profile; exit status and stderr."""
    path = tmp_path / "mine.yaml"
    path.write_text(text if text is not None else _dump(data))
    rc = cli.main([command, str(path), *(a for s in sets for a in ("--set", s))])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def field_exists(dotted: str) -> bool:
    """A dotted path names a field of the profile model (or a key of one of its maps)."""
    model: type[BaseModel] | None = Profile
    parts = dotted.split(".")
    for n, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        if part in ("args", "prices", "estimated_hours", "disabled_patches"):
            return True  # a map: what follows is one of its keys
        model = model_in(annotation)
        if model is None:
            return n == len(parts) - 1
    return True


SECTIONS = sorted(n for n, i in Profile.model_fields.items() if model_in(i.annotation))
NAMED = re.compile(rf"(?<![\w./-])((?:{'|'.join(SECTIONS)})(?:\.[a-z0-9_-]+)+)")
TOP = re.compile(r"--set ([a-z_]+)=")
ENV = re.compile(r"\bTPURL_[A-Z0-9_-]+")


def assert_fix_is_real(fix: str) -> None:
    """Each field a fix names (section.field, --set field=, TPURL_ variable) exists."""
    for dotted in NAMED.findall(fix):
        dotted = dotted.removesuffix(".KEY")
        assert field_exists(dotted), f"{dotted} in fix {fix!r}"
    for top in TOP.findall(fix):
        assert top in Profile.model_fields or top in SECTIONS, f"{top} in fix {fix!r}"
    for variable in ENV.findall(fix):  # TPURL_GKE__ESTIMATED_HOURS__TRAIN: a map's key
        dotted = variable.removeprefix("TPURL_").removesuffix("__KEY").lower().replace("__", ".")
        assert field_exists(dotted), f"{variable} in fix {fix!r}"


def issues_of(data: dict[str, Any], tmp_path: Path, environ: dict[str, str] | None = None,
              **sets: str) -> dict[str, tuple[str, str]]:
    path = tmp_path / "mine.yaml"
    path.write_text(_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path), sets, environ=environ or {})
    for issue in caught.value.issues:
        assert_fix_is_real(issue.fix)
    return {i.field: (i.problem, i.fix) for i in caught.value.issues}


@pytest.mark.parametrize("mode", MODES)
def test_each_filled_in_base_is_valid(mode: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(tmp_path, capsys, base(mode))[0] == 0


@pytest.mark.parametrize(("mode", "path"), cases(lambda m: paths_in(base(m))))
def test_a_misspelt_key_at_any_level_is_named_with_its_path(mode: str, path: tuple[str, ...],
                                                            tmp_path: Path) -> None:
    data = copy.deepcopy(base(mode))
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1] + "x"] = node.pop(path[-1])
    found = issues_of(data, tmp_path)
    named = ".".join((*path[:-1], path[-1] + "x"))
    if "prices" in path[:-1] and len(path) == 3:  # gke.prices.spotx: a map's key, not a field
        named = ".".join(path[:-1])
    assert any(f.startswith(named) for f in found) or named.rsplit(".", 1)[0] in found, found


def scalar_leaves(mode: str) -> list[tuple[str, ...]]:
    other = "gke" if mode == "rehearsal" else "local"
    return [p for p in _leaves(Profile) if p[0] != other
            and p[-1] not in ("args", "prices", "estimated_hours", "disabled_patches",
                              "allowed_uri_prefixes", "train_env", "events",
                              "functions")]  # a list, a map


def put(data: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    data = copy.deepcopy(data)
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return data


@pytest.mark.parametrize(("mode", "path"), cases(scalar_leaves))
def test_a_list_where_a_value_goes_is_refused_naming_the_field(
        mode: str, path: tuple[str, ...], tmp_path: Path) -> None:
    dotted = ".".join(path)
    found = issues_of(put(base(mode), path, ["a", "b"]), tmp_path)
    owner = next(f for f in found if dotted.startswith(f))  # SecretRef: model.hf_token
    assert owner in (dotted, ".".join(path[:-1])), found


@pytest.mark.parametrize(("mode", "section"), [(m, s) for m in MODES for s in
                                               ("model", "image", "train", "eval", "promotion")]
                         + [(m, "gke") for m in GKE_MODES] + [("rehearsal", "local")])
def test_a_list_or_a_value_where_a_section_goes_names_the_section(
        mode: str, section: str, tmp_path: Path) -> None:
    for value in (["a"], "a"):
        found = issues_of(put(base(mode), (section,), value), tmp_path)
        assert section in found, found
        assert f"write {section} as a mapping" in found[section][1]


@pytest.mark.parametrize(("mode", "field"), [(m, f) for m in MODES for f in (
    "flow_timeout_s", "eval.batches", "eval.batch_size")] + [(m, f) for m in GKE_MODES for f in (
    "gke.num_slices", "gke.hf_download_gib", "gke.max_usd_per_run", "gke.train_run_budget_s",
    "gke.queue_budget_s")] + [("rehearsal", f) for f in (
    "local.dataset_rows", "local.step_timeout_s")])
@pytest.mark.parametrize("value", ["abc", "0", "-1"])
def test_a_count_that_is_not_positive_or_not_a_number_is_refused(
        mode: str, field: str, value: str, tmp_path: Path) -> None:
    found = issues_of(base(mode), tmp_path, **{field: value})
    assert field in found, found
    fix = found[field][1]
    # a number out of range names the nearest value it allows; text that is no number cannot
    assert f"--set {field}=" in fix
    # (an open bound of a fraction, flow_timeout_s > 0, has no nearest value to name)
    assert f"give {field} a value" in fix or (
        value != "abc" and re.search(rf"set {re.escape(field)}=\d+ \(the nearest value", fix)), fix


@pytest.mark.parametrize("mode", GKE_MODES)
@pytest.mark.parametrize("stage", ["convert", "train", "export", "evaluate"])
@pytest.mark.parametrize("hours", ["0", "-1"])
def test_an_hour_estimate_must_be_positive(mode: str, stage: str, hours: str,
                                           tmp_path: Path) -> None:
    field = f"gke.estimated_hours.{stage}"
    assert field in issues_of(base(mode), tmp_path, **{field: hours})


@pytest.mark.parametrize("mode", GKE_MODES)
def test_an_unknown_hour_estimate_key_names_the_key_not_pydantics_loc(mode: str,
                                                                      tmp_path: Path) -> None:
    found = issues_of(base(mode), tmp_path, **{"gke.estimated_hours.trian": "1"})
    assert list(found) == ["gke.estimated_hours.trian"], found


def str_leaves(mode: str) -> list[tuple[str, ...]]:
    def is_str(path: tuple[str, ...]) -> bool:
        model: Any = Profile
        for part in path[:-1]:
            model = model_in(model.model_fields[part].annotation)
        annotation = model.model_fields[path[-1]].annotation
        return annotation is str or str in getattr(annotation, "__args__", ())
    return [p for p in scalar_leaves(mode) if is_str(p) and p != ("gke", "zone")]


@pytest.mark.parametrize(("mode", "path"), cases(str_leaves))
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_field_in_the_file_means_unset(mode: str, path: tuple[str, ...], blank: str,
                                               tmp_path: Path) -> None:
    """An empty string is what an empty field and `--set field=` are: unset. Taken as a name, a profile
    named '' would keep its results in tpurl-results/ itself, and local.root '' would put the
    rehearsal's outputs in the repository's root."""
    data = put(base(mode), path, blank)
    dotted = ".".join(path)
    path_file = tmp_path / "mine.yaml"
    path_file.write_text(_dump(data))
    try:
        profile = load_profile(str(path_file), environ={})
    except ProfileError as exc:
        fields = [i.field for i in exc.issues]
        # or, in an optional section written for this field alone (tracking.mlflow), the
        # section's required field beside it, reported missing
        section = dotted.rsplit(".", 1)[0]
        assert any(dotted.startswith(f) or f.rsplit(".", 1)[0] == section
                   for f in fields), fields
        for issue in exc.issues:
            assert_fix_is_real(issue.fix)
        return
    node: Any = profile
    for part in path[:-1]:
        node = getattr(node, part)
    default = type(node).model_fields[path[-1]].default
    assert getattr(node, path[-1]) == default  # the default, never the blank


@pytest.mark.parametrize(("mode", "path"), cases(
    lambda m: [p for p in paths_in(base(m)) if p[0] != "name" and "args" not in p[:-1]]))
def test_leaving_out_one_field_plans_or_names_it(mode: str, path: tuple[str, ...],
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(base(mode))
    node = data
    for part in path[:-1]:
        node = node[part]
    node.pop(path[-1])
    rc, err = run_cli(tmp_path, capsys, data, command="plan")
    if rc != 0:
        assert rc == 2 and re.search(rf"\b{re.escape(path[0])}\b", err), err


@pytest.mark.parametrize("name", ["../elsewhere", "a/b", "-x", ".hidden", "has space"])
def test_a_profile_name_is_one_safe_path_part(name: str, tmp_path: Path) -> None:
    assert "name" in issues_of(base("rehearsal"), tmp_path, name=name)


@pytest.mark.parametrize(("what", "text"), [
    ("not-yaml", "name: [unclosed\n"), ("tab", "\tname: x\n"), ("empty", ""),
    ("list", "- name: x\n"), ("scalar", "rehearsal\n")])
def test_a_file_that_is_no_profile_is_refused(what: str, text: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run_cli(tmp_path, capsys, None, text=text)
    assert rc == 2 and "- profile:" in err and "fix:" in err


@pytest.mark.parametrize("name", ["rehersal", "qwen3-30b", "nothere.yaml", "/"])
def test_a_profile_that_does_not_exist_is_refused_with_the_ones_that_do(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", name]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rehearsal" in err.split("fix:", 1)[1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("item", "named"), [
    ("gke.reservation", "--set gke.reservation"), ("=x", "--set =..."),
    (" =x", "--set =..."), ("gke..zone=x", "--set gke..zone"), (".name=x", "--set .name"),
    ("name.=x", "--set name.")])
def test_a_set_that_names_no_field_is_refused_naming_it(
        mode: str, item: str, named: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run_cli(tmp_path, capsys, base(mode), item)
    assert rc == 2 and f"- {named}:" in err, err
    assert_fix_is_real(err.split("fix:", 1)[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("item", ["gke.projct=x", "model.name=1e3", "foo.bar=1",
                                  "train.argz.x=1", "eval.batchs=2"])
def test_a_set_of_an_unknown_path_names_it(mode: str, item: str, tmp_path: Path) -> None:
    dotted = item.split("=")[0]
    found = issues_of(base(mode), tmp_path, **{dotted: "1"})
    assert any(dotted.startswith(f) for f in found), found


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("field", "value"), [
    ("name", "1e3"), ("name", "no"), ("model.hf_revision", "1.10"), ("description", "yes"),
    ("model.hf_revision", "0x1f")])
def test_a_set_value_yaml_would_retype_is_kept_as_text(mode: str, field: str, value: str,
                                                       tmp_path: Path) -> None:
    path = tmp_path / f"{value if field == 'name' else 'mine'}.yaml"  # a name is the file's
    path.write_text(_dump(base(mode)))
    profile = load_profile(str(path), {field: value}, environ={})
    node: Any = profile
    for part in field.split("."):
        node = getattr(node, part)
    assert node == value


@pytest.mark.parametrize("mode", GKE_MODES)
@pytest.mark.parametrize(("field", "value"), [("gke.zone", "no"), ("gke.region", "off"),
                                              ("gke.capacity", "yes"), ("gke.num_slices", "1e3")])
def test_a_set_value_yaml_reads_as_another_type_is_refused_as_text(
        mode: str, field: str, value: str, tmp_path: Path) -> None:
    found = issues_of(base(mode), tmp_path, **{field: value})
    assert field in found or "gke.zone" in found, found


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("variable", "meant"), [
    ("TPURL_CAPACITY", "TPURL_GKE__CAPACITY"), ("TPURL_DATASET_ROWS", "TPURL_LOCAL__DATASET_ROWS"),
    ("TPURL_MAXTEXT_NAME", "TPURL_MODEL__MAXTEXT_NAME"), ("TPURL_GKE_ZONE", "TPURL_GKE__ZONE"),
    ("TPURL_DESCRIPTON", "TPURL_DESCRIPTION"), ("TPURL_GKE", "TPURL_GKE__PROJECT"),
    ("TPURL_LOCAL", "TPURL_LOCAL__ROOT"), ("TPURL_GKE__", "TPURL_GKE__PROJECT"),
    ("TPURL___ZONE", "TPURL_GKE__PROJECT")])
def test_a_misspelt_variable_is_refused_naming_it_and_the_field_meant(
        mode: str, variable: str, meant: str, tmp_path: Path) -> None:
    """TPURL_CAPACITY=spot (the section left out) and TPURL_GKE=... were ignored: the run
    went on with the capacity the user believed was changed."""
    found = issues_of(base(mode), tmp_path, environ={variable: "x"})
    assert list(found) == [variable] and meant in found[variable][1], found


@pytest.mark.parametrize("mode", MODES)
def test_a_field_a_variable_set_names_the_variable(mode: str, tmp_path: Path) -> None:
    found = issues_of(base(mode), tmp_path, environ={"TPURL_EVAL__BATCHS": "2",
                                                      "TPURL_FLOW_TIMEOUT_S": "-1"})
    assert "(set by TPURL_EVAL__BATCHS)" in found["eval.batchs"][0]
    assert "(set by TPURL_FLOW_TIMEOUT_S)" in found["flow_timeout_s"][0]
    with_set = issues_of(base(mode), tmp_path, environ={"TPURL_FLOW_TIMEOUT_S": "1"},
                         flow_timeout_s="-1")  # the --set won: it is the one in sight
    assert "set by" not in with_set["flow_timeout_s"][0]


@pytest.mark.parametrize(("mode", "path"), cases(str_leaves))
def test_a_token_in_any_text_field_is_never_quoted_back(
        mode: str, path: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    token = fake_hf_token("newcomer")
    rc, err = run_cli(tmp_path, capsys, base(mode), f"{'.'.join(path)}={token}")
    assert rc == 2 and token not in err and token[3:20] not in err


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("field", "value", "flow_fix"), [
    ("eval", [1], '{"eval.KEY": "VALUE"}'), ("flow_timeout_s", "abc", '{"flow_timeout_s": "VALUE"}')])
def test_a_flow_runs_fix_names_what_a_flow_run_can_change(mode: str, field: str, value: object,
                                                          flow_fix: str) -> None:
    """A flow run's user has no --set: the fix names the run's overrides parameter."""
    from flows.config.loading import validate_profile_data

    with pytest.raises(ProfileError) as caught:
        validate_profile_data(put(base(mode), (field,), value), "mine", "flow")
    [issue] = [i for i in caught.value.issues if i.field == field]
    assert flow_fix in issue.fix and "--set" not in issue.fix
    assert_fix_is_real(issue.fix)


def other_section_fields(mode: str) -> list[pytest.ParameterSet]:
    other = "gke" if mode == "rehearsal" else "local"
    return [pytest.param(mode, ".".join(p), id=f"{mode}-{'.'.join(p)}")
            for p in _leaves(Profile) if p[0] == other]


@pytest.mark.parametrize(("mode", "field"), [c for m in MODES for c in other_section_fields(m)])
def test_the_other_backends_variables_in_the_shell_are_not_the_profiles(
        mode: str, field: str, tmp_path: Path) -> None:
    """A shell that exported TPURL_GKE__PROJECT for the tutorial ran `tpurl validate
    rehearsal` into six 'gke.region: is required' errors: the variable made the local
    profile a gke section. The other backend's section is not the profile's; --set still is."""
    from flows.config.env_overrides import env_name

    path = tmp_path / "mine.yaml"
    path.write_text(_dump(base(mode)))
    profile = load_profile(str(path), environ={env_name(field): "1"})
    assert (profile.gke is None) == (mode == "rehearsal")
    with pytest.raises(ProfileError):
        load_profile(str(path), {field: "1"}, environ={})
