#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A VMM that a guest owns, for kvmstats' tests: it holds a real KVM VM
(and vCPUs) so that kvmstats takes it for a VMM, and says what it likes.

  hostile_qmp.py deputy NVCPUS READY -qmp unix:PATH,server=on
      creates the VM, then runs as uid/gid 65534 with the PATH it names
      on its command line (a socket it could not reach itself).
  hostile_qmp.py monitor NVCPUS READY -qmp unix:SOCK,server=on
      creates the VM and serves QMP on SOCK, one client at a time, as a
      monitor would, except that every query-stats of the vCPUs names
      500 vCPUs never seen before (and keeps the old ones), with made-up
      cpu-indexes (negative, huge, repeated) and thread-ids.

  hostile_qmp.py swap NVCPUS READY -qmp unix:PATH,server=on VICTIM
      creates the VM, then as uid/gid 65534 serves QMP on PATH (in a
      directory it owns; the pid of every client goes to PATH.log) and,
      as fast as it can, swaps PATH with a symbolic link to VICTIM (a
      socket it cannot reach): renameat2(RENAME_EXCHANGE), so that PATH
      always names one or the other. A reader that checks PATH, then
      connects to it by name, sometimes connects to VICTIM. It stops
      swapping after 120 s.

  hostile_qmp.py mute NVCPUS READY -qmp unix:SOCK,server=on
      creates the VM and, on SOCK, greets every client as QMP does and
      never answers anything: each exchange costs a client its timeout.
  hostile_qmp.py error NVCPUS READY -qmp unix:SOCK,server=on
      the same, but answers every command with an error, 90 ms late:
      a failure just quick enough to have gone unnoticed.

Run it as `exec -a qemu-system-x86_64 python3 hostile_qmp.py ...` so that
its argv[0] looks like QEMU's. READY is created once the VM exists.
"""
import ctypes
import fcntl
import json
import os
import random
import socket
import struct
import sys
import threading
import time

AT_FDCWD = -100
RENAME_EXCHANGE = 2
KVM_CREATE_VM = 0xAE01
KVM_CREATE_VCPU = 0xAE41
NEW_PER_POLL = 500


def make_vm(nvcpus):
    kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    vm = fcntl.ioctl(kvm, KVM_CREATE_VM, 0)
    vcpus = [fcntl.ioctl(vm, KVM_CREATE_VCPU, i) for i in range(nvcpus)]
    return kvm, vm, vcpus


SCHEMAS = [
    {"provider": "kvm", "target": "vm", "stats": [
        {"name": "remote_tlb_flush", "type": "cumulative"}]},
    {"provider": "kvm", "target": "vcpu", "stats": [
        {"name": "exits", "type": "cumulative"},
        {"name": "halt_wait_hist", "type": "log2-histogram", "unit": "seconds",
         "exponent": -9, "base": 10}]},
]


class Monitor:
    def __init__(self):
        self.cpus = []
        self.polls = 0

    def vcpu_stats(self):
        self.polls += 1
        for _ in range(NEW_PER_POLL):
            self.cpus.append("/machine/unattached/device[%d]" % len(self.cpus))
        return [{"provider": "kvm", "qom-path": p, "stats": [
            {"name": "exits", "value": self.polls},
            {"name": "halt_wait_hist", "value": [self.polls] * 32}]}
            for p in self.cpus]

    def cpus_fast(self):
        weird = [-2147483648, -1, 1 << 40, 0, 0, 7]
        return [{"qom-path": p, "cpu-index": random.choice(weird + [i]),
                 "thread-id": random.choice([1, -5, 99999999, os.getpid()])}
                for i, p in enumerate(self.cpus)]

    def answer(self, cmd):
        name = cmd.get("execute")
        args = cmd.get("arguments") or {}
        if name == "query-stats-schemas":
            return SCHEMAS
        if name == "query-stats":
            if args.get("target") == "vm":
                return [{"provider": "kvm", "stats": [
                    {"name": "remote_tlb_flush", "value": self.polls}]}]
            return self.vcpu_stats()
        if name == "query-cpus-fast":
            return self.cpus_fast()
        if name == "query-memory-size-summary":
            return {"base-memory": 1 << 30}
        return {}

    def serve(self, conn):
        conn.sendall(GREETING)
        for cmd in commands(conn):
            reply = {"return": self.answer(cmd)}
            if "id" in cmd:
                reply["id"] = cmd["id"]
            conn.sendall(json.dumps(reply).encode() + b"\n")


GREETING = (b'{"QMP": {"version": {"qemu": {"major": 10, "minor": 0,'
            b' "micro": 2}, "package": ""}, "capabilities": []}}\n')


def commands(conn):
    """Every command a client sends, until it hangs up."""
    buf = b""
    dec = json.JSONDecoder()
    while True:
        data = conn.recv(65536)
        if not data:
            return
        buf += data
        text = buf.decode(errors="replace").lstrip()
        while text:
            try:
                cmd, end = dec.raw_decode(text)
            except ValueError:
                break
            text = text[end:].lstrip()
            yield cmd
        buf = text.encode()


def stall(conn, mode):
    """mute: read and never answer; error: an error for each command."""
    conn.sendall(GREETING)
    for cmd in commands(conn):
        if mode == "mute":
            continue
        time.sleep(0.09)
        reply = {"error": {"class": "GenericError", "desc": "not today"}}
        if isinstance(cmd, dict) and "id" in cmd:
            reply["id"] = cmd["id"]
        conn.sendall(json.dumps(reply).encode() + b"\n")


def stall_forever(sock, mode):
    """Every client at once, each in a thread of its own."""
    while True:
        conn, _ = sock.accept()

        def run(c=conn):
            try:
                stall(c, mode)
            except OSError:
                pass
            c.close()
        threading.Thread(target=run, daemon=True).start()


def swap_forever(path, victim):
    """PATH and a link to VICTIM trade places until 120 s have passed."""
    libc = ctypes.CDLL(None, use_errno=True)
    link = path + ".swap"
    os.symlink(victim, link)
    a, b = path.encode(), link.encode()
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for _ in range(1000):
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE):
                return


def drop_to_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def main():
    mode, nvcpus, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    held = make_vm(nvcpus)
    if mode == "deputy":
        open(ready, "w").close()
        drop_to_nobody()
        while True:
            time.sleep(3600)
    path = sys.argv[5][len("unix:"):].split(",")[0]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(16)
    if mode == "swap":
        os.chown(path, 65534, 65534)
    open(ready, "w").close()
    if mode in ("mute", "error"):
        stall_forever(sock, mode)
    if mode == "swap":
        drop_to_nobody()
        threading.Thread(target=swap_forever, args=(path, sys.argv[6]),
                         daemon=True).start()
    mon = Monitor()
    while True:
        conn, _ = sock.accept()
        if mode == "swap":
            peer = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            with open(path + ".log", "a") as f:
                f.write("%d\n" % peer)
        try:
            mon.serve(conn)
        except OSError:
            pass
        conn.close()
    return held


if __name__ == "__main__":
    main()
