"""Emulation, explained once per report: the Markdown and the HTML report say what "emulated"
means at the top, before the first place that marks an environment so ("qemu (emulated)" in
the tables, EMULATED in Environments), and their Warnings then point back to it instead of
explaining it again. results.json and the terminal keep the emulated warning whole: there it
is the only explanation."""

from __future__ import annotations

from isotax.analysis.report_data import ReportData
from isotax.analysis.report_warnings import ReportWarning, Warned

# The warning a report lists under its note: what ran emulated, and where it is explained.
POINTER = "{env} ran under TCG software emulation (explained at the top of the report)."


def emulated(d: ReportData) -> list[str]:
    """The environments that ran emulated, in the run's order."""
    return [e.name for e in d.environments if e.available and d.emulated(e.name)]


def note(d: ReportData) -> str:
    """The one full explanation, in the shared blocks' inline markup; "" when nothing ran
    emulated."""
    names = emulated(d)
    if not names:
        return ""
    return (f"**Emulated (TCG software emulation, not KVM): {', '.join(names)}.** Their ratios "
            "measure the emulator, not a hypervisor's overhead; run on a host with hardware "
            "KVM for VM overhead figures. Below they are only marked emulated.")


def report_warnings(d: ReportData) -> list[str]:
    """d.warnings as a report lists them under its note: an emulated environment's warning
    cut to a pointer to the note (when the note was written), every other one whole."""
    if not note(d):
        return list(d.warnings)
    return [POINTER.format(env=w.subject)
            if isinstance(w, Warned) and w.kind is ReportWarning.EMULATED else w
            for w in d.warnings]
