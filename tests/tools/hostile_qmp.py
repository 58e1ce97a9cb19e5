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

  hostile_qmp.py plain NVCPUS READY ARGS...
      a well-behaved monitor (the vCPUs it holds, stable) on the socket
      $HQ_SOCK, whatever else its command line says (a megabyte of -mon
      and -chardev).
  hostile_qmp.py hist NVCPUS READY ARGS...
      on $HQ_SOCK, a vCPU schema of two linear histograms of 65535
      buckets, with values for the first vCPU only, beside one bad
      descriptor of each kind (a linear histogram without bucket-size,
      a name listed twice, an out-of-range exponent) and good stats
      (exits, halt_wait_hist). With $HQ_WIDE=1: eight 256-bucket
      histograms per vCPU instead.
  hostile_qmp.py arrays NVCPUS READY ARGS...
      on $HQ_SOCK, a query-stats of the vCPUs whose value is
      "[[],[],...]" of $HQ_BYTES bytes (a reply within the byte budget);
      with $HQ_COMMENT=1 after a comment holding a quote, '/*"*/'.
  hostile_qmp.py laggard NVCPUS READY -qmp unix:SOCK,server=on
      a well-behaved monitor (as plain) whose main loop is busy right
      after every $HQ_LAG_EVERY-th client (10) hangs up: for $HQ_LAG
      seconds (1.5) it neither closes that connection nor accepts the
      next, as QEMU running a long device_add from another monitor. Each
      lag is logged to stderr ("lag N").
  hostile_qmp.py hoarder NVCPUS READY -qmp unix:SOCK,server=on
      connects to its own SOCK $HQ_HOARD times (50), accepts each and
      closes the client's end, keeping its own: finished connections
      never closed, as a QEMU slow to close them would show them. Then
      it accepts nobody.
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
import resource
import socket
import struct
import sys
import threading
import time

AT_FDCWD = -100
RENAME_EXCHANGE = 2
KVM_CREATE_VM = 0xAE01
KVM_CREATE_VCPU = 0xAE41
KVM_CHECK_EXTENSION = 0xAE03
KVM_CAP_MAX_VCPUS = 66
NEW_PER_POLL = 500


def make_vm(nvcpus):
    kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    # No more than this KVM allows (a lab's nested KVM may allow fewer).
    most = fcntl.ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS)
    if most > 0 and nvcpus > most:
        sys.stderr.write("hostile_qmp.py: %d vCPUs, KVM's most\n" % most)
        nvcpus = most
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

    def raw(self, cmd):
        return None

    def serve(self, conn):
        conn.sendall(GREETING)
        for cmd in commands(conn):
            raw = self.raw(cmd)
            if raw is not None:
                conn.sendall(raw)
                continue
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


class Plain(Monitor):
    def __init__(self, nvcpus):
        super().__init__()
        self.cpus = ["/machine/unattached/device[%d]" % i for i in range(nvcpus)]

    def vcpu_stats(self):
        self.polls += 1
        return [{"provider": "kvm", "qom-path": p, "stats": [
            {"name": "exits", "value": self.polls},
            {"name": "halt_wait_hist", "value": [self.polls] * 32}]}
            for p in self.cpus]

    def cpus_fast(self):
        return [{"qom-path": p, "cpu-index": i, "thread-id": os.getpid()}
                for i, p in enumerate(self.cpus)]


HIST_BUCKETS = 65535
HIST_SCHEMAS = [SCHEMAS[0], {"provider": "kvm", "target": "vcpu", "stats": [
    {"name": "exits", "type": "cumulative"},
    {"name": "halt_wait_hist", "type": "log2-histogram", "unit": "seconds",
     "exponent": -9, "base": 10},
    {"name": "big_a", "type": "linear-histogram", "bucket-size": 1},
    {"name": "big_b", "type": "linear-histogram", "bucket-size": 1},
    {"name": "bad_linear", "type": "linear-histogram"},
    {"name": "exits", "type": "instant"},
    {"name": "bad_exponent", "type": "cumulative", "unit": "seconds",
     "exponent": 7},
    {"name": "io_exits", "type": "cumulative"}]}]


WIDE = 8
WIDE_SCHEMAS = [SCHEMAS[0], {"provider": "kvm", "target": "vcpu", "stats": [
    {"name": "exits", "type": "cumulative"}] + [
    {"name": "wide_%d" % i, "type": "log2-histogram"} for i in range(WIDE)]}]


class Hist(Plain):
    """With $HQ_WIDE: eight 256-bucket histograms per vCPU instead, every
    one kept (the most a schema may hold), for the exporter's cap."""
    wide = bool(os.environ.get("HQ_WIDE"))

    def answer(self, cmd):
        if cmd.get("execute") == "query-stats-schemas":
            return WIDE_SCHEMAS if self.wide else HIST_SCHEMAS
        return super().answer(cmd)

    def vcpu_stats(self):
        if self.wide:
            return [{"provider": "kvm", "qom-path": p, "stats": [
                {"name": "exits", "value": i}] + [
                {"name": "wide_%d" % k, "value": [1] * 256} for k in range(WIDE)]}
                for i, p in enumerate(self.cpus)]
        self.polls += 1
        big = [self.polls] * HIST_BUCKETS
        out = []
        for i, p in enumerate(self.cpus):
            st = [{"name": "exits", "value": 1000 + i},
                  {"name": "io_exits", "value": 7}]
            if not i:
                st += [{"name": "halt_wait_hist", "value": [1] * 32},
                       {"name": "big_a", "value": big},
                       {"name": "big_b", "value": big},
                       {"name": "bad_linear", "value": [1] * 4},
                       {"name": "bad_exponent", "value": 1}]
            out.append({"provider": "kvm", "qom-path": p, "stats": st})
        return out


class Arrays(Plain):
    def __init__(self, nvcpus):
        super().__init__(nvcpus)
        n = max(1, (int(os.environ.get("HQ_BYTES", "17800000")) - 200) // 3)
        self.blob = ("[" + ",".join(["[]"] * n) + "]").encode()
        if os.environ.get("HQ_COMMENT"):
            # A quote in a comment: a lenient parser takes the comment,
            # a scan that does not know comments sees a string begin.
            self.blob = b'/*"*/' + self.blob

    def raw(self, cmd):
        args = cmd.get("arguments") or {}
        if cmd.get("execute") != "query-stats" or args.get("target") != "vcpu":
            return None
        return (b'{"return": [{"provider": "kvm", "qom-path": "' +
                self.cpus[0].encode() + b'", "stats": [{"name": "exits", '
                b'"value": ' + self.blob + b'}]}], "id": ' +
                json.dumps(cmd.get("id")).encode() + b'}\n')


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
    # A VMM of 1024 vCPUs holds more fds than a soft limit of 1024 (the
    # lab's init gives that): up to the hard limit, as QEMU would need.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < nvcpus + 64 and (hard == resource.RLIM_INFINITY or hard > soft):
        want = nvcpus + 64 if hard == resource.RLIM_INFINITY else min(hard, nvcpus + 64)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    held = make_vm(nvcpus)
    nvcpus = len(held[2])
    if mode == "deputy":
        open(ready, "w").close()
        drop_to_nobody()
        while True:
            time.sleep(3600)
    # Ready only once it can answer at once (Arrays builds its reply).
    mon = {"plain": Plain, "laggard": Plain, "hist": Hist,
           "arrays": Arrays}.get(
        mode, lambda n: Monitor())(nvcpus)
    path = os.environ.get("HQ_SOCK") or sys.argv[5][len("unix:"):].split(",")[0]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(16)
    if mode == "swap":
        os.chown(path, 65534, 65534)
    if mode == "hoarder":
        kept = []
        for _ in range(int(os.environ.get("HQ_HOARD", "50"))):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            kept.append(sock.accept()[0])
            c.close()
        open(ready, "w").close()
        while True:
            time.sleep(3600)
    open(ready, "w").close()
    if mode in ("mute", "error"):
        stall_forever(sock, mode)
    if mode == "swap":
        drop_to_nobody()
        threading.Thread(target=swap_forever, args=(path, sys.argv[6]),
                         daemon=True).start()
    lag = float(os.environ.get("HQ_LAG", "1.5"))
    lag_every = int(os.environ.get("HQ_LAG_EVERY", "10"))
    clients = lags = 0
    while True:
        conn, _ = sock.accept()
        clients += 1
        if mode == "swap":
            peer = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            with open(path + ".log", "a") as f:
                f.write("%d\n" % peer)
        try:
            mon.serve(conn)
        except OSError:
            pass
        if mode == "laggard" and clients % lag_every == 0:
            lags += 1
            sys.stderr.write("lag %d\n" % lags)
            sys.stderr.flush()
            time.sleep(lag)
        conn.close()
    return held


if __name__ == "__main__":
    main()
