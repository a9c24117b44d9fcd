"""The image's Debian release: os-release parsing (real files of bookworm and trixie), the
choice and its default, the recipe's suites, the hashes that keep the releases' images apart
in the cache, and every declared package name against each release's real apt-cache policy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from isotax import protocols
from isotax.image.distribution import (
    DISTRIBUTIONS,
    FALLBACK,
    choose,
    host_release,
    read_os_release,
)
from isotax.image.recipe import BASE_PACKAGES, Recipe, image_hash
from isotax.parsers.os_release import parse_os_release
from isotax.plan import PlanError, parse_plan

DATA = Path(__file__).resolve().parent.parent / "data" / "image"
BOOKWORM = (DATA / "os-release-bookworm").read_text()
TRIXIE = (DATA / "os-release-trixie").read_text()
# Ubuntu 24.04's os-release (ID_LIKE=debian, but its own packages).
UBUNTU = ('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
          'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\n'
          "ID_LIKE=debian\nUBUNTU_CODENAME=noble\n")
# Debian testing as it says itself (no VERSION_ID).
FORKY = ('PRETTY_NAME="Debian GNU/Linux forky/sid"\nNAME="Debian GNU/Linux"\n'
         "VERSION_CODENAME=forky\nID=debian\n")


def test_parse_real_os_release_files() -> None:
    b, t = parse_os_release(BOOKWORM), parse_os_release(TRIXIE)
    assert b["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)"
    assert (b["ID"], b["VERSION_ID"], b["VERSION_CODENAME"]) == ("debian", "12", "bookworm")
    assert t["PRETTY_NAME"] == "Debian GNU/Linux 13 (trixie)"
    assert (t["ID"], t["VERSION_ID"], t["VERSION_CODENAME"]) == ("debian", "13", "trixie")
    assert t["HOME_URL"] == "https://www.debian.org/"


def test_parse_quoting_comments_and_junk() -> None:
    text = ("# a comment\n\nNAME='Single quoted'\nX=\"a \\\"quoted\\\" word\"\n"
            "not an assignment\n9BAD=x\nBROKEN=\"unbalanced\nEMPTY=\n")
    got = parse_os_release(text)
    assert got["NAME"] == "Single quoted"
    assert got["X"] == 'a "quoted" word'
    assert got["BROKEN"] == "unbalanced"
    assert got["EMPTY"] == ""
    assert "9BAD" not in got and "not an assignment" not in " ".join(got)


def test_host_release_only_for_debian_releases_isotax_builds() -> None:
    assert host_release(parse_os_release(BOOKWORM)) == "bookworm"
    assert host_release(parse_os_release(TRIXIE)) == "trixie"
    assert host_release(parse_os_release(UBUNTU)) == ""
    assert host_release(parse_os_release(FORKY)) == ""  # testing: not guessed
    # An os-release without a codename: by VERSION_ID.
    assert host_release({"ID": "debian", "VERSION_ID": "13"}) == "trixie"
    assert host_release({"ID": "debian", "VERSION_ID": "11"}) == ""
    assert host_release({}) == ""


def test_choice_defaults_to_the_hosts_release_else_bookworm() -> None:
    assert choose(None, TRIXIE).codename == "trixie"
    assert choose(None, TRIXIE).why == "host" and choose(None, TRIXIE).same_as_host
    assert choose(None, BOOKWORM).codename == "bookworm"
    for other in (UBUNTU, FORKY, ""):
        c = choose(None, other)
        assert (c.codename, c.why, c.host) == (FALLBACK, "fallback", "")
        assert not c.same_as_host
    assert "Ubuntu 24.04.1 LTS" in choose(None, UBUNTU).words()
    assert choose(None, "").host_words == "unknown"


def test_a_requested_release_wins_and_says_why() -> None:
    c = choose("trixie", BOOKWORM, "plan")
    assert (c.codename, c.why, c.host) == ("trixie", "plan", "bookworm")
    assert c.words() == ("Debian 13 (trixie), chosen by the plan's [image] distribution; the "
                         "host is Debian GNU/Linux 12 (bookworm)")
    assert c.meta() == {"distribution": "trixie", "version": "13", "chosen_by": "plan",
                        "host_distribution": "bookworm",
                        "host_os": "Debian GNU/Linux 12 (bookworm)"}
    assert choose("bookworm", BOOKWORM, "option").native_differs() == ""
    line = c.native_differs()
    assert "Debian 13 (trixie)" in line and "Debian GNU/Linux 12 (bookworm)" in line
    assert '[image] distribution = "bookworm"' in line
    # On a host of no release isotax builds, the fix is another host, not a plan setting.
    assert "[image]" not in choose("trixie", UBUNTU).native_differs()
    with pytest.raises(ValueError, match=r"'sid' is not a Debian release .*bookworm, trixie"):
        choose("sid", BOOKWORM)


def test_read_os_release_falls_back_to_usr_lib(tmp_path: Path) -> None:
    assert read_os_release(tmp_path) == ""
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text(TRIXIE)
    assert read_os_release(tmp_path) == TRIXIE
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text(BOOKWORM)
    assert read_os_release(tmp_path) == BOOKWORM


def test_recipe_takes_the_release_suites_and_components() -> None:
    t = protocols.image_recipe("trixie")
    assert (t.suite, t.distribution) == ("trixie", "trixie")
    assert t.update_suites == ("trixie-updates",)
    assert t.security == "http://deb.debian.org/debian-security trixie-security"
    assert "non-free" in t.components and "main" in t.components  # netperf is in non-free
    b = protocols.image_recipe("bookworm")
    assert (b.suite, b.update_suites) == ("bookworm", ("bookworm-updates",))
    assert b.security == "http://deb.debian.org/debian-security bookworm-security"
    assert b.packages == t.packages and b.hooks == t.hooks  # one recipe, two releases
    # A plain Recipe is bookworm's, as every image before the choice was: its hash is the
    # one the cache already holds.
    assert Recipe(packages=b.packages, hooks=b.hooks).base_hash() == b.base_hash()
    # Settings given beside the release still win (a test's, a mirror's).
    assert protocols.image_recipe("trixie", components=("main",)).components == ("main",)


def test_releases_have_their_own_hashes_side_by_side() -> None:
    guest = {"itx-time.c": b"int main(void){return 0;}\n"}
    b, t = protocols.image_recipe("bookworm"), protocols.image_recipe("trixie")
    assert b.base_hash() != t.base_hash()
    assert image_hash(b, guest) != image_hash(t, guest)
    assert t.base_inputs()["suite"] == "trixie"
    assert t.base_inputs()["update_suites"] == ["trixie-updates"]


def test_default_recipe_follows_this_hosts_release() -> None:
    want = choose(None, read_os_release()).codename
    assert protocols.image_recipe().suite == want


def _candidates(text: str) -> dict[str, str]:
    """{package: candidate version} from `apt-cache policy NAME...` output."""
    out: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if m := re.match(r"^(\S+):$", line):
            name = m.group(1)
        elif name and (m := re.match(r"^\s+Candidate: (\S+)", line)):
            out[name] = m.group(1)
    return out


@pytest.mark.parametrize("release", sorted(DISTRIBUTIONS))
def test_every_declared_package_exists_in_each_release(release: str) -> None:
    """Captured with `apt-cache policy` on each release with its suites and components (the
    file's first line says where): a name missing from one release, or renamed there, fails
    here; declare the package per release, or recapture after checking it."""
    found = _candidates((DATA / f"apt-policy-{release}.txt").read_text())
    declared = {*BASE_PACKAGES, "xz-utils"}
    for cls in protocols.workloads().values():
        declared |= {*cls.packages, *cls.client_packages}
    missing = sorted(p for p in declared if found.get(p, "(none)") == "(none)")
    assert not missing, f"{release} has no candidate for {missing}"


def test_plan_image_distribution() -> None:
    base = ('name = "p"\n[[environments]]\nname = "native"\nkind = "native"\n'
            '[[workloads]]\nname = "compress"\n')
    assert parse_plan(base).image.distribution is None
    assert parse_plan(base + '[image]\ndistribution = "trixie"\n').image.distribution == "trixie"
    with pytest.raises(PlanError, match=r"image\.distribution: 'buster' is not a Debian "
                                        r"release isotax builds"):
        parse_plan(base + '[image]\ndistribution = "buster"\n')
    with pytest.raises(PlanError, match=r"image\.suite: is not a plan setting"):
        parse_plan(base + '[image]\nsuite = "trixie"\n')


def test_cli_refuses_an_unknown_distribution_in_one_line() -> None:
    from isotax.cli import main

    got = CliRunner().invoke(main, ["image", "build", "--distribution", "sid"])
    assert got.exit_code == 2
    assert got.output.strip().splitlines() == [
        "isotax: 'sid' is not a Debian release isotax builds the image from; give one of "
        "bookworm, trixie (or leave it out: the host's own release when it is one of them)"]


def test_show_images_names_each_layers_release_and_current_per_release(
        tmp_path: Path) -> None:
    from isotax.image.build import show_images
    from isotax.image.recipe import default_guest_dir, guest_files

    b, t = protocols.image_recipe("bookworm"), protocols.image_recipe("trixie")
    guest = guest_files(default_guest_dir())
    for r in (b, t):
        d = tmp_path / "images" / image_hash(r, guest)
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"recipe": r.to_dict(), "packages": {}}))
        base = tmp_path / "base" / r.base_hash()
        base.mkdir(parents=True)
        (base / "base.json").write_text(json.dumps({"inputs": r.base_inputs()}))
    shown = show_images([b, t], tmp_path)
    assert sorted((e["layer"], e["distribution"], e["current"]) for e in shown) == [
        ("base", "bookworm", True), ("base", "trixie", True),
        ("image", "bookworm", True), ("image", "trixie", True)]
    # Told only one release's recipe, the other's layers are not current.
    assert {e["distribution"] for e in show_images(t, tmp_path) if e["current"]} == {"trixie"}


def test_the_built_image_must_say_the_recipes_release(tmp_path: Path) -> None:
    from isotax.image.build import ImageError, _release

    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text(TRIXIE)
    assert _release(tmp_path, protocols.image_recipe("trixie")) == {
        "codename": "trixie", "version": "13", "pretty_name": "Debian GNU/Linux 13 (trixie)"}
    with pytest.raises(ImageError, match=r"says 'Debian GNU/Linux 13 \(trixie\)', not bookworm"):
        _release(tmp_path, protocols.image_recipe("bookworm"))


def test_a_run_records_its_image_and_warns_when_native_cannot_match(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from isotax.cli.run import _record_image
    from isotax.image.artifacts import ImageArtifacts
    from isotax.store.run_meta import RunMeta
    from isotax.store.sqlite import SQLiteStore

    art = ImageArtifacts("0123456789abcdef", tmp_path / "img")
    art.root.mkdir()
    art.manifest_path.write_text(json.dumps({"kernel": {"version": "6.12.57+deb13-amd64"}}))
    store = SQLiteStore(tmp_path / "isotax.db")
    text = ('name = "p"\n[image]\ndistribution = "trixie"\n[[environments]]\n'
            'name = "native"\nkind = "native"\n[[environments]]\nname = "runc"\n'
            'kind = "runc"\n[[workloads]]\nname = "compress"\n')
    plan = parse_plan(text)
    store.create_run("r1", "p", text, 1, {})
    _record_image(store, "r1", plan, choose(plan.image.distribution, BOOKWORM), art)
    err = capsys.readouterr().err
    assert "0123456789abcdef: Debian 13 (trixie), chosen by the plan's [image]" in err
    assert "warning: the image is Debian 13 (trixie) but this host is Debian GNU/Linux 12 " \
           "(bookworm)" in " ".join(err.split())
    image = RunMeta(store.run_meta("r1")).image
    assert image is not None and image.hash == "0123456789abcdef"
    assert (image.distribution, image.chosen_by, image.host_distribution) == (
        "trixie", "plan", "bookworm")
    assert image.kernel == "6.12.57+deb13-amd64"
    # A resumed run keeps what its first start recorded; the host's release: no warning.
    _record_image(store, "r1", plan, choose(None, BOOKWORM), art)
    assert "warning" not in capsys.readouterr().err
    assert RunMeta(store.run_meta("r1")).image.distribution == "trixie"  # type: ignore[union-attr]
