"""Several "nodes" on one machine, for the multinode tests: each node is a
network namespace with a UTS namespace of its own (so `hostname` inside
node1 says node1), all connected to a Linux bridge that lives in a "switch"
namespace of its own. Addresses (10.77.0.N/24) exist only inside these
namespaces; the root namespace gets no interface and no address, so every
byte the test sends stays between namespaces the test made.

Open MPI is started from inside the head node (node1) with its rsh agent set
to a script that enters the named node's namespaces (nsenter), a hostfile
with slots, TCP between nodes (btl_tcp_if_include / oob_tcp_if_include
eth0), and vader (shared memory) only among the ranks of one node: Open MPI
picks it per pair of processes on the same node, and a node is an orted of
its own here.

    with netns_cluster.Cluster(workdir, ["node1", "node2"]) as cluster:
        p = cluster.mpirun(4, ["ftrain", deck], slots={"node1": 2, "node2": 2})

The namespaces' names carry the test's pid, so two tests (ctest -j2) never
share one; teardown (the `with` block's end, or the SIGTERM ctest sends on a
timeout) kills every process inside them and deletes them. Where namespaces
cannot be made (not root, no `ip netns`, no nsenter or unshare),
Cluster(...) raises Unavailable: the test exits 77 with its reason (fails
instead where FTRAIN_MULTINODE_REQUIRED=1, as in CI).

Python 3 standard library only.
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402

SUBNET = "10.77.0"


class Unavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


def skip(reason):
    """Ends the test as skipped (CTest SKIP_RETURN_CODE 77) with the reason;
    in CI (FTRAIN_MULTINODE_REQUIRED=1), where namespaces must work, fails it."""
    if os.environ.get("FTRAIN_MULTINODE_REQUIRED") == "1":
        ftrain_test.fail(f"network namespaces are required here (FTRAIN_MULTINODE_REQUIRED=1) but {reason}")
    print("SKIP:", reason, flush=True)
    sys.exit(77)


def _ip(*args, check=True):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def _check_can_make_namespaces():
    if os.geteuid() != 0:
        raise Unavailable("network namespaces need root (this test runs as uid %d)" % os.geteuid())
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            raise Unavailable(f"`{tool}` is not installed (iproute2 / util-linux)")


class Cluster:
    """The nodes named in `hosts` (the first is the head, where mpirun runs)
    as namespaces. A context manager: the namespaces exist inside the `with`
    block only. `mpirun` and `mpirun_flags` start Open MPI in the head."""

    def __init__(self, workdir, hosts, mpirun="mpirun", mpirun_flags=("--allow-run-as-root",)):
        _check_can_make_namespaces()
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.nodes = list(hosts)
        self.mpirun_binary = mpirun
        self.mpirun_flags = list(mpirun_flags)
        self.tag = f"ftmn{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.netns = {host: f"{self.tag}-{i + 1}" for i, host in enumerate(self.nodes)}
        self.address = {host: f"{SUBNET}.{i + 1}" for i, host in enumerate(self.nodes)}
        self.holder = {}  # host -> the process holding its UTS namespace (and sitting in its network namespace)
        self._made = []
        self._old_sigterm = None

    # -- setup and teardown --------------------------------------------------

    def __enter__(self):
        # ctest ends a test past its TIMEOUT with SIGTERM: tear down then too.
        self._old_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            self._make()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def _on_sigterm(self, signum, frame):
        self.teardown()
        sys.exit(1)

    def _add_netns(self, name):
        p = _ip("netns", "add", name, check=False)
        if p.returncode != 0:
            raise Unavailable(f"`ip netns add {name}` failed: {p.stderr.strip()}")
        self._made.append(name)

    def _make(self):
        self._add_netns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, host in enumerate(self.nodes):
            ns = self.netns[host]
            self._add_netns(ns)
            port = f"p{i + 1}"
            # Both ends are made inside namespaces: nothing appears in the root one.
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # `ip netns exec` and `unshare` both exec: the pid is the sleeper's,
            # whose namespaces are the node's.
            holder = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                 f"hostname {shlex.quote(host)} && exec sleep 2147483647"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.holder[host] = holder
        for host, holder in self.holder.items():
            deadline = time.monotonic() + 10
            while self.exec(host, ["hostname"]).stdout.strip() != host:
                if holder.poll() is not None:
                    raise Unavailable(f"could not give {host} a UTS namespace (unshare --uts): "
                                      f"{holder.stderr.read().decode().strip()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{host}'s hostname was not set within 10 s")
                time.sleep(0.05)
        self._write_agent()

    def teardown(self):
        """Kills every process in the nodes' namespaces and deletes them.
        Safe to call twice."""
        for ns in reversed(self._made):
            for _ in range(3):
                pids = _ip("netns", "pids", ns, check=False).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
        for holder in self.holder.values():
            try:
                holder.kill()
                holder.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []
        self.holder = {}
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # -- entering nodes ------------------------------------------------------

    def enter_argv(self, host):
        """The command prefix that runs a command inside `host`'s namespaces."""
        return ["nsenter", "-t", str(self.holder[host].pid), "-u", "-n", "--"]

    def exec(self, host, argv, timeout=30):
        return subprocess.run(self.enter_argv(host) + list(argv), capture_output=True, text=True, timeout=timeout)

    def _write_agent(self):
        # Open MPI's rsh agent: called as `AGENT HOST orted-command...` (the
        # command as one or more words that a remote shell would join).
        cases = "\n".join(f"  {shlex.quote(h)}|{self.address[h]}) pid={self.holder[h].pid} ;;" for h in self.nodes)
        self.agent = os.path.join(self.dir, "enter-node.sh")
        with open(self.agent, "w") as f:
            f.write(f"""#!/bin/sh
# Open MPI's rsh agent for the namespace cluster {self.tag}: runs the command
# inside HOST's network and UTS namespaces.
host=$1
shift
case $host in
{cases}
  *) echo "enter-node.sh: no node '$host' in this cluster" >&2; exit 255 ;;
esac
exec nsenter -t "$pid" -u -n -- /bin/sh -c "$*"
""")
        os.chmod(self.agent, 0o755)

    @property
    def head(self):
        return self.nodes[0]

    def hostfile(self, slots):
        """A hostfile giving each host of `slots` ({host: n}) its n slots."""
        path = os.path.join(self.dir, "hostfile-" + "-".join(f"{h}{n}" for h, n in slots.items()))
        with open(path, "w") as f:
            for host, n in slots.items():
                f.write(f"{host} slots={n}\n")
        return path

    def mpirun_argv(self, np, argv, slots, btl="tcp,self,vader", extra=(), env_names=()):
        """mpirun started in the head node: `np` ranks over the hostfile of
        `slots`, TCP between nodes on eth0, `btl` as given."""
        cmd = self.enter_argv(self.head) + [self.mpirun_binary] + self.mpirun_flags + [
            "--hostfile", self.hostfile(slots),
            "--mca", "plm_rsh_agent", self.agent,
            "--mca", "btl", btl,
            "--mca", "btl_tcp_if_include", "eth0",
            "--mca", "oob_tcp_if_include", "eth0",
        ] + list(extra)
        for name in env_names:
            cmd += ["-x", name]
        return cmd + ["-np", str(np)] + list(argv)

    def mpirun(self, np, argv, timeout=120, env=None, expect_ok=False, what=None, **kw):
        environment = dict(os.environ)
        environment.update(env or {})
        cmd = self.mpirun_argv(np, argv, env_names=list(env or {}), **kw)
        return ftrain_test.run(cmd, timeout, cwd=self.dir, env=environment, expect_ok=expect_ok, what=what)

    def popen_mpirun(self, np, argv, log_path, env=None, **kw):
        """mpirun in the background, its output to `log_path`."""
        environment = dict(os.environ)
        environment.update(env or {})
        log = open(log_path, "w")
        proc = subprocess.Popen(self.mpirun_argv(np, argv, env_names=list(env or {}), **kw), cwd=self.dir,
                                env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc

    def unplug(self, host):
        """Takes `host` off the network (its link down): its processes live
        on but nothing reaches them, as when a node's network or power fails."""
        _ip("-n", self.netns[host], "link", "set", "eth0", "down")

    def plug(self, host):
        """Puts `host` back on the network."""
        _ip("-n", self.netns[host], "link", "set", "eth0", "up")

    def kill_jobs(self):
        """SIGKILL to every process in the nodes but the namespace holders
        (what a job left behind: daemons cut off from mpirun, ranks)."""
        holders = {h.pid for h in self.holder.values()}
        for host in self.nodes:
            for pid in _ip("netns", "pids", self.netns[host], check=False).stdout.split():
                if int(pid) in holders:
                    continue
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def pids_on(self, host, executable):
        """Processes inside `host` (its UTS namespace) running `executable`
        (their argv[0]; mpirun, whose arguments name it too, is not one)."""
        mine = os.readlink(f"/proc/{self.holder[host].pid}/ns/uts")
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.holder[host].pid:
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/uts") != mine:
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            if argv0 == executable:
                found.append(int(entry))
        return found
