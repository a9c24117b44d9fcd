"""The isotax installed on the fleet's hosts: this checkout, as a tarball.

The files are git's view of the working tree: tracked files as they are now (uncommitted
changes included, deleted ones left out) and untracked files git does not ignore, so what the
hosts run is what this controller runs, never a .venv, a results store or caches. The tarball
carries `.itx-files`, the list of its files, so that an install over an older one removes the
files the checkout no longer has (a stale plugin module would still be registered).

The digest names the contents (each file's path, mode and bytes), not the tarball's bytes: a
file touched but unchanged gives the same digest and the host's install is skipped. Files keep
their real modification times in the tarball, so Python's bytecode caches see a change.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # src/isotax/fleet/checkout.py -> the checkout
MANIFEST = ".itx-files"


class CheckoutError(Exception):
    """No checkout to install from: one line naming the problem and the fix."""


def checkout_root(root: Path = ROOT) -> Path:
    """The git checkout isotax runs from; CheckoutError where it is not run from one."""
    if not (root / "scripts" / "setup.sh").is_file() or not (root / ".git").exists():
        raise CheckoutError(f"isotax fleet installs isotax on the hosts from its git checkout, "
                            f"and this isotax is not run from one ({root}); run the fleet from "
                            "a clone (git clone ...; bash scripts/setup.sh)")
    return root


def checkout_files(root: Path) -> list[str]:
    """The working tree's files git knows of or would add, sorted; deleted ones left out."""
    try:
        p = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CheckoutError(f"cannot list the checkout's files with git ({e}); install git "
                            "(apt-get install git)") from None
    if p.returncode != 0:
        raise CheckoutError(f"git ls-files failed in {root}: "
                            f"{p.stderr.decode(errors='replace').strip()}")
    names = {n for n in p.stdout.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file() or (root / n).is_symlink())


def pack(root: Path, out: Path) -> str:
    """Write the checkout's tarball (gzip) to `out`; returns its content digest (sha256)."""
    names = checkout_files(root)
    digest = hashlib.sha256()
    with tarfile.open(out, "w:gz") as tar:
        for name in names:
            path = root / name
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            digest.update(f"{name}\0{info.mode:o}\0".encode())
            if info.issym():
                digest.update(info.linkname.encode())
                tar.addfile(info)
            else:
                data = path.read_bytes()
                digest.update(hashlib.sha256(data).digest())
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        listing = ("\n".join(names) + "\n").encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode = len(listing), 0o644
        tar.addfile(info, io.BytesIO(listing))
    return digest.hexdigest()
