"""isotax: measure the isolation tax of containers, sandboxes and VMs against native."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from isotax.version import __version__

__all__ = ["__version__", "load"]


def load(run_or_bundle: str | Path, results: str | Path | None = None,
         store: str | None = None) -> pd.DataFrame:
    """A run as a pandas DataFrame: one row per cell x metric, every parameter its own column
    (param_<name>), repetition, warm-up flag, status (isotax.data.load has the details).

    run_or_bundle: a run id in the store under `results` (default $ISOTAX_RESULTS, else
    /var/lib/isotax/results) or at the PostgreSQL URL `store`, or a bundle file from
    `isotax export`. Needs pandas: pip install 'isotax[data]'."""
    # Imported here for start-up speed alone: every isotax command imports this package first
    # (for __version__), and the store and analysis behind load() are not for them to pay.
    from isotax.data import load as load_run

    return load_run(run_or_bundle, results, store)
