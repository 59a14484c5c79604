"""What the benches print about the machine and the tools they compare:
CPU model, cache sizes (sysfs), load, tool versions, the sizes xferlab
chose (from its JSON result), and the rotation that interleaves tools
from round to round.  Imported by tcp-vs-iperf3 and udp-vs-iperf3."""

import copy
import os
import platform
import re
import shutil
import subprocess
import sys

DEFAULT_IPERF3 = "/usr/bin/iperf3"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_XFERLAB = os.path.join(REPO_ROOT, "target", "release", "xferlab")


class BadTool(Exception):
    """A tool path that cannot be run."""


def first_line(argv):
    try:
        out = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=10).stdout
        return out.decode("utf-8", "replace").strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def help_text(path):
    try:
        return subprocess.run([path, "--help"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=10).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return ""


def find_xferlab(path):
    """The xferlab binary: path if given, else the repo's release build
    (built with cargo when missing)."""
    if path is not None:
        if not os.access(path, os.X_OK):
            raise BadTool("xferlab binary %s is missing or not executable" % path)
        return path
    if not os.access(DEFAULT_XFERLAB, os.X_OK):
        cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
        print("# %s missing: cargo build --release" % DEFAULT_XFERLAB, flush=True)
        try:
            rc = subprocess.run([cargo, "build", "--release"], cwd=REPO_ROOT,
                                stdin=subprocess.DEVNULL, stdout=sys.stderr).returncode
        except OSError as e:
            raise BadTool("cannot run cargo to build xferlab: %s" % e)
        if rc != 0 or not os.access(DEFAULT_XFERLAB, os.X_OK):
            raise BadTool("cargo build --release failed (exit %d)" % rc)
    return DEFAULT_XFERLAB


def find_example(name):
    """The repo's release build of example `name` (crates/xferlab/examples),
    built or brought up to date with cargo first."""
    path = os.path.join(REPO_ROOT, "target", "release", "examples", name)
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    try:
        rc = subprocess.run([cargo, "build", "--release", "--locked", "-q", "-p", "xferlab",
                             "--example", name], cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                            stdout=sys.stderr).returncode
    except OSError as e:
        rc = "not run: %s" % e
    if rc != 0 and not os.access(path, os.X_OK):
        raise BadTool("cargo build --release --example %s failed (%s)" % (name, rc))
    return path


class Tool:
    """One compared program: kind ("xferlab" or "iperf3"), path, version and
    the label rows carry ("iperf3 3.21+" when several iperf3 are compared)."""

    def __init__(self, kind, path):
        if not os.access(path, os.X_OK):
            raise BadTool("%s binary %s is missing or not executable" % (kind, path))
        self.kind = kind
        self.path = path
        self.version = first_line([path, "--version"])
        self.label = kind
        if kind == "iperf3":
            m = re.match(r"iperf (\S+)", self.version)
            self.label = "iperf3-" + (m.group(1) if m else os.path.basename(path))
        self.tag = re.sub(r"[^A-Za-z0-9.+-]", "_", self.label)
        # Extra command-line flags (variants, see variant()).
        self.extra = ()


def variant(tool, suffix, extra):
    """tool run with extra flags, labelled tool.label + suffix."""
    v = copy.copy(tool)
    v.label, v.tag, v.extra = tool.label + suffix, tool.tag + suffix, tuple(extra)
    return v


def iperf3_tools(paths):
    """Tools for the --iperf3 paths given (default: Debian's), one label each."""
    tools = [Tool("iperf3", p) for p in (paths or [DEFAULT_IPERF3])]
    labels = [t.label for t in tools]
    for t in tools:
        if labels.count(t.label) > 1:
            raise BadTool("two --iperf3 binaries report the same version %s" % t.label)
    return tools


def rotate(tools, n):
    """tools rotated by n, so each goes first in turn across rounds."""
    k = n % len(tools)
    return tools[k:] + tools[:k]


def load():
    return " ".join("%.2f" % x for x in os.getloadavg())


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return "unknown"


def caches(cpu=0):
    """{'L1d': '32K', 'L2': '512K', 'L3': '32768K'} from sysfs."""
    found = {}
    base = "/sys/devices/system/cpu/cpu%d/cache" % cpu
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("index"))
    except OSError:
        return found
    for n in names:
        try:
            with open(os.path.join(base, n, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(base, n, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, n, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        found["L%s%s" % (level, "d" if level == "1" else "")] = size
    return found


def print_host():
    c = caches()
    print("# host: %s, %d CPU(s), %s; caches (cpu0, sysfs): %s; load average %s" % (
        platform.release(), os.cpu_count() or 0, cpu_model(),
        ", ".join("%s %s" % kv for kv in sorted(c.items())) or "unknown", load()))


def kib(n):
    return "%dK" % (n // 1024) if n % 1024 == 0 else "%d" % n


def xferlab_choice(doc):
    """What xferlab's senders and receivers chose, from its result, as one line."""
    out = []
    for side in ("client", "server"):
        s = doc.get(side) or {}
        flows = s.get("flows") or []
        recv = next((f["socket"] for f in flows
                     if f.get("role") == "receiver" and (f.get("socket") or {}).get("read_size")),
                    None)
        send = next((f["socket"] for f in flows
                     if f.get("role") == "sender" and (f.get("socket") or {}).get("send_mode")),
                    None)
        if send:
            write = send.get("write_size")
            out.append("%s senders: %s%s" % (
                side, send["send_mode"],
                ", write %s per call (%s)" % (kib(write), send.get("write_size_from"))
                if write else ""))
        if recv:
            low = recv.get("rcvlowat") or 0
            fill = {True: ", filling the buffer", False: ", the whole buffer each call"}.get(
                recv.get("read_fill"), "")
            out.append("%s receivers read %s per call (%s)%s, rcvlowat %s" % (
                side, kib(recv["read_size"]), recv.get("read_size_from"), fill,
                kib(low) if low else "off"))
    return "; ".join(out) or "nothing recorded"
