"""Which Debian release the workload image is built from, and why.

Native runs use the host's installed packages; every other environment runs the image. The
two are the same bits only where the image is built from the host's own release, so the
default is the host's release (its /etc/os-release) when it is one isotax builds, else
FALLBACK. A plan (`[image] distribution`) or `isotax image build --distribution` chooses
another; the run records which (run meta "image"), and the report says so.

Every package isotax declares (BASE_PACKAGES, each workload's `packages` and
`client_packages`) has the same name in bookworm and trixie: checked against each release's
real `apt-cache policy` in tests/data/image (test_image_distribution.py), which fails the
day a declared name is missing from one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from isotax.parsers.os_release import parse_os_release

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"


@dataclass(frozen=True)
class Distribution:
    """A Debian release the image can be built from: its suites as a Debian host has them
    in its sources (the release, its -updates, its -security), so the image's tools are the
    versions the host's apt gives native runs."""

    codename: str
    version: str  # Debian's release number, as os-release's VERSION_ID
    # netperf lives in non-free on the same mirror, in both releases.
    components: tuple[str, ...] = ("main", "non-free")

    @property
    def update_suites(self) -> tuple[str, ...]:
        return (f"{self.codename}-updates",)

    @property
    def security(self) -> str:
        """The security suite as a sources.list line has it: "URI SUITE"."""
        return f"{SECURITY_MIRROR} {self.codename}-security"

    def words(self) -> str:
        """"Debian 13 (trixie)", as os-release's PRETTY_NAME says it."""
        return f"Debian {self.version} ({self.codename})"


# The releases isotax builds, oldest first. A new one is one line here, once every declared
# package is found in it (tests/data/image/apt-policy-<codename>.txt).
DISTRIBUTIONS: dict[str, Distribution] = {d.codename: d for d in (
    Distribution("bookworm", "12"),
    Distribution("trixie", "13"),
)}
# The image's release on a host that is no Debian release isotax builds (Ubuntu, Fedora, an
# older or newer Debian): the one every earlier isotax image was built from.
FALLBACK = "bookworm"


@dataclass(frozen=True)
class Choice:
    """The image's release for this command, and why it is that one (for the run's record
    and its first lines)."""

    codename: str
    why: str  # "plan", "option", "host" or "fallback"
    host: str  # the host's release as isotax knows it ("" when it is none of DISTRIBUTIONS)
    host_words: str  # the host's PRETTY_NAME, or "unknown"

    @property
    def distribution(self) -> Distribution:
        return DISTRIBUTIONS[self.codename]

    @property
    def same_as_host(self) -> bool:
        return self.codename == self.host

    def words(self) -> str:
        """One line: which release and why, e.g. "Debian 13 (trixie), the plan's [image]
        distribution; the host is Debian GNU/Linux 12 (bookworm)"."""
        because = {
            "plan": "chosen by the plan's [image] distribution",
            "option": "chosen by --distribution",
            "host": "the host's own release",
            "fallback": f"isotax's default: the host ({self.host_words}) is no release it "
                        f"builds ({', '.join(DISTRIBUTIONS)})",
        }[self.why]
        where = "" if self.why in ("host", "fallback") else f"; the host is {self.host_words}"
        return f"{self.distribution.words()}, {because}{where}"

    def meta(self) -> dict[str, str]:
        """What the run records beside the image's hash (run meta "image")."""
        return {"distribution": self.codename, "version": self.distribution.version,
                "chosen_by": self.why, "host_distribution": self.host,
                "host_os": self.host_words}

    def native_differs(self) -> str:
        """"" where the image is the host's release; else one line saying native's tools
        will not be the image's versions, and the fix."""
        if self.same_as_host:
            return ""
        fix = (f'[image] distribution = "{self.host}" in the plan (or leave it out: the '
               "host's release is the default)" if self.host else
               "run native cells on a host of a release isotax builds "
               f"({', '.join(DISTRIBUTIONS)})")
        return (f"the image is {self.distribution.words()} but this host is "
                f"{self.host_words}: native runs use the host's packages, so their tool "
                f"versions will differ from the image's (the report names each); for the same "
                f"bits: {fix}")


def host_release(os_release: Mapping[str, str]) -> str:
    """The codename of a parsed os-release when it is a Debian release isotax builds (by
    VERSION_CODENAME, else VERSION_ID); "" otherwise (Ubuntu, which is ID_LIKE=debian
    but has its own packages; Debian testing/sid; an unknown release). Pure."""
    if os_release.get("ID") != "debian":
        return ""
    name = os_release.get("VERSION_CODENAME", "")
    if name in DISTRIBUTIONS:
        return name
    if name:  # a codename isotax does not build (forky, sid): not guessed from VERSION_ID
        return ""
    return next((d.codename for d in DISTRIBUTIONS.values()
                 if d.version == os_release.get("VERSION_ID")), "")


def choose(requested: str | None, os_release_text: str, why: str = "plan") -> Choice:
    """The image's release: `requested` (a plan's or an option's, `why` says which) when
    given, else the host's own release when isotax builds it, else FALLBACK. ValueError
    names a requested release isotax does not build, and the ones it does. Pure."""
    parsed = parse_os_release(os_release_text)
    host = host_release(parsed)
    words = parsed.get("PRETTY_NAME") or parsed.get("NAME") or "unknown"
    if requested is not None:
        check(requested)
        return Choice(requested, why, host, words)
    return Choice(host, "host", host, words) if host else Choice(FALLBACK, "fallback", host, words)


def check(requested: str) -> str:
    """`requested` when it is a release isotax builds, else ValueError with the fix."""
    if requested not in DISTRIBUTIONS:
        raise ValueError(f"{requested!r} is not a Debian release isotax builds the image "
                         f"from; give one of {', '.join(DISTRIBUTIONS)} (or leave it out: "
                         "the host's own release when it is one of them)")
    return requested


def read_os_release(root: Path = Path("/")) -> str:
    """The host's os-release text: /etc/os-release, else /usr/lib/os-release (os-release(5));
    "" when neither can be read."""
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            return (root / rel).read_text()
        except OSError:
            continue
    return ""


def host_choice(requested: str | None = None, why: str = "plan") -> Choice:
    """choose() for this host."""
    return choose(requested, read_os_release(), why)
