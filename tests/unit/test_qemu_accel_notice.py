"""What QEMU will use here, said in advance (no boot): `isotax envs`, `doctor` and a run's
first lines say "TCG here, because ..." instead of "KVM or TCG" (issue 15)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from isotax.environments.vm.qemu_accel import (
    PROBE_FORMAT,
    UNDECIDED,
    Expectation,
    Probe,
    expected_accelerator,
    kvm_modules,
    probe_inputs,
    proven_accelerator,
    with_pvm_reason,
)
from isotax.facts import Facts, Reach
from isotax.image.artifacts import ImageArtifacts
from isotax.run.lines import emulation_notice

KERNEL, QEMU = "6.1.0-test", "7.2.22 (test)"


def _host(tmp_path: Path, modules: tuple[str, ...] = ("kvm", "kvm_intel"),
          proc: str | None = None, device: bool = True) -> dict[str, Path]:
    """A fake /sys/module (one directory per module), /proc/modules and /dev/kvm."""
    sysmod = tmp_path / "sys_module"
    sysmod.mkdir()
    for m in modules:
        (sysmod / m / "parameters").mkdir(parents=True)
    procmod = tmp_path / "proc_modules"
    if proc is not None:
        procmod.write_text(proc)
    dev = tmp_path / "kvm"
    if device:
        dev.write_text("")  # opens read-write, as /dev/kvm does for root
    return {"device": dev, "sys_module": sysmod, "proc_modules": procmod}


def _expect(tmp_path: Path, host: Mapping[str, Path], recipe_hash: str | None = "abc"
            ) -> Expectation:
    return expected_accelerator(recipe_hash, tmp_path / "cache", host_kernel=KERNEL,
                                qemu=QEMU, **host)


def _cache_probe(tmp_path: Path, accel: str, reason: str, recipe_hash: str = "abc") -> None:
    key, inputs = probe_inputs(recipe_hash, KERNEL, QEMU)
    probes = tmp_path / "cache" / "probes"
    probes.mkdir(parents=True, exist_ok=True)
    (probes / f"qemu-accel-{key}.json").write_text(json.dumps(
        {"format": PROBE_FORMAT, "accel": accel, "reason": reason, "probe_s": 4.2,
         "cached": False, "inputs": inputs}))


def test_no_dev_kvm_is_tcg_with_the_reason(tmp_path: Path) -> None:
    e = _expect(tmp_path, _host(tmp_path, modules=(), device=False))
    assert e.accel == "tcg" and not e.proven
    assert e.words().startswith(f"TCG here, because there is no {tmp_path / 'kvm'} (")


def test_dev_kvm_that_cannot_be_opened_is_tcg(tmp_path: Path) -> None:
    host = _host(tmp_path)
    host["device"] = tmp_path  # a directory: opening it read-write fails (EISDIR)
    e = _expect(tmp_path, host)
    assert e.accel == "tcg"
    assert e.words().startswith(f"TCG here, because {tmp_path} cannot be opened (")


@pytest.mark.parametrize("where", ["sys", "proc"])
def test_kvm_pvm_is_tcg_because_it_needs_a_pvm_guest_kernel(tmp_path: Path, where: str) -> None:
    host = (_host(tmp_path, modules=("kvm", "kvm_pvm")) if where == "sys" else
            _host(tmp_path, modules=(), proc="kvm_pvm 65536 0 - Live 0x0\nkvm 1 1 kvm_pvm, "
                                             "Live 0x0\n"))
    assert kvm_modules(host["sys_module"], host["proc_modules"]) == {"kvm", "kvm_pvm"}
    e = _expect(tmp_path, host)
    assert e.accel == "tcg" and not e.proven
    assert e.words().startswith("TCG here, because /dev/kvm is kvm_pvm")
    assert "PVM kernel" in e.words() and "\n" not in e.words()


def test_kvm_pvm_beside_a_hardware_kvm_module_is_left_to_the_probe(tmp_path: Path) -> None:
    e = _expect(tmp_path, _host(tmp_path, modules=("kvm", "kvm_intel", "kvm_pvm")))
    assert e.accel == "" and e.words() == UNDECIDED


def test_hardware_kvm_without_a_probe_is_undecided(tmp_path: Path) -> None:
    host = _host(tmp_path)
    e = _expect(tmp_path, host)
    assert e == Expectation("", UNDECIDED)
    assert e.words() == ("KVM opens here; a probe boot at the first run decides (cached "
                         "afterwards)")
    assert _expect(tmp_path, host, None) == e  # no image to look a probe up for


def test_a_cached_probe_gives_its_answer(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _cache_probe(tmp_path, "kvm", "a probe boot under KVM reached ITX-READY in 1.9 s")
    e = _expect(tmp_path, host)
    assert e.proven and e.words() == ("KVM here, because a probe boot under KVM reached "
                                      "ITX-READY in 1.9 s (cached probe)")
    # another image (or kernel, or QEMU) has no probe yet
    assert _expect(tmp_path, host, "other").words() == UNDECIDED
    assert expected_accelerator("abc", tmp_path / "cache", host_kernel="6.2", qemu=QEMU,
                                **host).words() == UNDECIDED


def test_a_cached_failed_probe_on_kvm_pvm_says_why_in_short(tmp_path: Path) -> None:
    host = _host(tmp_path, modules=("kvm", "kvm_pvm"))
    _cache_probe(tmp_path, "tcg", "a probe boot under KVM failed (guest crashed while booting: "
                                  "KVM internal error), so QEMU uses TCG")
    e = _expect(tmp_path, host)
    assert e.accel == "tcg" and e.proven
    assert e.words() == ("TCG here, because /dev/kvm is kvm_pvm, a paravirtual KVM that runs "
                         "only guests with a PVM kernel, and the image's kernel failed a probe "
                         "boot under it (cached probe)")
    # not kvm_pvm: the probe's own reason, error included
    other = tmp_path / "other"
    other.mkdir()
    e = _expect(tmp_path, _host(other))
    assert e.words() == ("TCG here, because a probe boot under KVM failed (guest crashed while "
                         "booting: KVM internal error) (cached probe)")


def test_a_failed_probe_on_kvm_pvm_leads_with_what_the_kvm_is() -> None:
    failed = Probe("tcg", "a probe boot under KVM failed (QEMU exited with status -6 while "
                          "connecting QMP: kvm_buf_set_msrs: Assertion failed.), so QEMU uses "
                          "TCG", 0.2)
    assert with_pvm_reason(failed, False) == failed
    told = with_pvm_reason(failed, True)
    assert told.reason == ("/dev/kvm is kvm_pvm, a paravirtual KVM that runs only guests with "
                           "a PVM kernel, and a probe boot of the image's kernel under it failed "
                           "(QEMU exited with status -6 while connecting QMP: kvm_buf_set_msrs: "
                           "Assertion failed.), so QEMU uses TCG")
    assert with_pvm_reason(told, True) == told  # once only
    ok = Probe("kvm", "a probe boot under KVM reached ITX-READY in 1.0 s", 1.0)
    assert with_pvm_reason(ok, True) == ok


def test_an_unreadable_cached_probe_is_ignored(tmp_path: Path) -> None:
    host = _host(tmp_path)
    key, _ = probe_inputs("abc", KERNEL, QEMU)
    (tmp_path / "cache" / "probes").mkdir(parents=True)
    (tmp_path / "cache" / "probes" / f"qemu-accel-{key}.json").write_text("{not json")
    assert _expect(tmp_path, host).words() == UNDECIDED


def test_proven_accelerator_without_a_built_image_gives_the_advance_words(
        tmp_path: Path) -> None:
    e = proven_accelerator(ImageArtifacts("abc", tmp_path / "image"), tmp_path / "cache")
    assert e.words() == expected_accelerator("abc", tmp_path / "cache").words()


def test_qemu_kinds_say_their_accelerator_in_available() -> None:
    from isotax.protocols import environments

    for kind in ("qemu", "microvm", "vm9p"):
        cls = environments()[kind]
        assert "KVM or TCG" not in cls.description
        a = cls().available()
        if a.ok:  # root with QEMU installed: the note says what QEMU will use, and why
            assert a.reason.startswith(("TCG here, because", "KVM here, because",
                                        "KVM opens here;")), a.reason


# -- the run says so at once -----------------------------------------------------------------

def test_emulation_notice_reads_the_facts() -> None:
    f = Facts("qemu", Reach.TAP, emulated=True, accelerator="tcg",
              accelerator_reason="a probe boot under KVM failed (x), so QEMU uses TCG")
    assert emulation_notice("vm", f) == (
        "vm: runs under TCG software emulation (emulated): a probe boot under KVM failed (x), "
        "so QEMU uses TCG; its ratios will measure the emulator, not the overhead of hardware "
        "virtualisation")
    assert emulation_notice("vm", dataclasses.replace(f, emulated=False)) == ""
    assert emulation_notice("native", Facts("native", Reach.HOST)) == ""
