"""isotax fleet: one plan run on every host of an Ansible inventory, each host's run brought
into one store.

Ansible (ansible-core, driven through ansible-runner) does everything on the hosts: it reads
each host's machine identity, installs isotax there from this checkout, starts the run
detached (in a session of its own, so a dropped connection does not end it), polls it, and,
for a SQLite store, exports and fetches its bundle for import. The controller decides the
order (one run per machine at a time, machines in parallel), shows each host's progress, and
keeps the fleet's state file so that `isotax fleet run --resume` picks up only the hosts
that did not finish.

Modules: inventory (the hosts, from `ansible-inventory --list`), machines (which hosts are one
machine), checkout (the tarball installed on the hosts), ansible (ansible-runner and its
events -> outcomes), probe (the host side's look at its run), state (the state file),
progress (what the terminal says), orchestrate (the per-host sequence). The playbooks are
package data in fleet/playbooks/.
"""
