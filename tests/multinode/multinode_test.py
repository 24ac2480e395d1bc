#!/usr/bin/env python3
"""Multi-node scenarios on one machine, run by CTest (label multinode).

Usage: multinode_test.py SCENARIO --ftrain BIN --prep BIN --placement BIN
                         --mpirun "MPIEXEC FLAGS..." --workdir DIR

The nodes are network namespaces with host names of their own (node1,
node2), joined by a bridge in a namespace of its own; Open MPI runs across
them over TCP, started in node1 (netns_cluster.py). What each rank ran on is
taken from the ranks themselves (`hostname` under the same mpirun mapping),
never from ftrain, and checked against what ftrain reports and does.

Scenarios:
  hybrid_shard  2 nodes x 2 ranks, `fsdp hybrid_shard` (shard group = a
                node): the header's nodes and groups say [0-1] on node1 and
                [2-3] on node2, replicas [0,2] [1,3]; the curve equals the
                one-host run with the same groups (`shard_group_size 2`)
                within 1e-6 and full_shard within 1e-5. Ranks placed round
                robin (mpirun --map-by node: node1 holds 0 and 2) and 3+1
                ranks per node are refused at start-up naming the nodes and
                their ranks (ftrain without that check trains with shard
                groups that cross nodes, or stops with a group size of 3).
  placement     node-local rank, node size and the GPU assign_gpu picks for
                4 (and 2) GPUs per node, per rank, for 2+2, 3+1 and 2+2
                round robin; with only shared memory (btl self,vader) the
                job cannot connect across nodes, so Open MPI uses TCP
                between them and shared memory within one.
  dead_node     SIGKILL to every rank of node2 mid-training: the job ends
                with a non-zero status within the collective timeout (20 s),
                mpirun naming a dead rank and its node.
  lost_node     node2 taken off the network mid-training (its link down;
                its processes live on, unreachable): every rank's
                collective watchdog ends it within collective_timeout (8 s)
                + 5 s, naming the rank and the collective. mpirun with a
                keepalive shorter than that (oob_tcp_keepalive_time 3,
                intvl 1, probes 3) ends the job itself, naming node2.
  reshard       a checkpoint written at step 10 by 2 nodes x 2 ranks
                (hybrid_shard, shard groups of 2) resumed on one node of 4
                (shard group 4, resharded): the steps after it equal the
                uninterrupted one-node run within 1e-5 (the resharding
                tests' tolerance).
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
import netns_cluster  # noqa: E402
from ftrain_test import fail  # noqa: E402

DECK = """\
variable strategy hybrid_shard
variable max_steps 20
variable timeout 60
model llama preset tiny hidden_size 32 intermediate_size 64 num_hidden_layers 2 &
      num_attention_heads 4 num_key_value_heads 2 vocab_size 128
precision fp32
seed 11
data tokens {dir}/train.tok packing on shuffle on
batch micro 2 seq_len 32
optimizer adamw lr 3e-3 weight_decay 0.01
schedule cosine warmup_steps 3 min_lr 1e-4
clip_grad_norm 1.0
max_steps ${{max_steps}}
init random
fsdp ${{strategy}}
log every 1
run_dir ${{run}}
collective_timeout seconds ${{timeout}}
peak_tflops 1
"""

TWO_BY_TWO = {"node1": 2, "node2": 2}
THREE_PLUS_ONE = {"node1": 3, "node2": 1}


class Test:
    def __init__(self, args, cluster):
        self.args = args
        self.cluster = cluster
        self.dir = args.workdir
        self.one_host = ftrain_test.Runner(args.ftrain, args.mpirun, self.dir)
        ftrain_test.run([args.prep, "synthetic", "--out", self.path("train.tok"), "--tokens", "60000", "--vocab",
                         "128", "--seed", "5"], 60, expect_ok=True)
        self.deck = self.one_host.write("train.in", DECK.format(dir=self.dir))

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def ftrain(self, run, extra_lines="", **variables):
        deck = self.deck
        if extra_lines:
            deck = self.one_host.write(f"{run}.in", DECK.format(dir=self.dir) + extra_lines)
        return self.one_host.ftrain_argv(deck, dict(run=self.path(run), **variables))

    def on_cluster(self, run, slots=TWO_BY_TWO, extra=(), expect_ok=True, extra_lines="", **variables):
        np = sum(slots.values())
        return self.cluster.mpirun(np, self.ftrain(run, extra_lines, **variables), slots=slots, extra=extra,
                                   expect_ok=expect_ok, what=f"ftrain {run} on {slots}")

    def on_one_host(self, run, np=4, extra_lines="", **variables):
        return self.one_host.run(np, self.ftrain(run, extra_lines, **variables), expect_ok=True,
                                 what=f"ftrain {run} on one host")

    def hosts_of_ranks(self, slots, extra=()):
        """{rank: hostname} as the ranks themselves see it under this mapping."""
        np = sum(slots.values())
        p = self.cluster.mpirun(np, ["sh", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK $(hostname)"'], slots=slots,
                                extra=extra, expect_ok=True, what="hostname per rank")
        hosts = {int(m.group(1)): m.group(2) for m in re.finditer(r"^rank (\d+) (\S+)$", p.stdout, re.M)}
        if sorted(hosts) != list(range(np)):
            fail(f"hostname per rank: expected ranks 0..{np - 1}, got:\n{p.stdout}")
        return hosts


def losses(path):
    train, evals = ftrain_test.curve(path)
    return {step: loss for step, loss, _, _ in train}


def compare(a_path, b_path, tolerance, steps=None):
    """Largest relative loss difference over `steps` (all of a's); fails past `tolerance`."""
    a, b = losses(a_path), losses(b_path)
    steps = steps or sorted(a)
    if not steps:
        fail(f"{a_path}: no training rows")
    worst = 0.0
    for s in steps:
        if s not in a or s not in b:
            fail(f"step {s} missing from {a_path if s not in a else b_path}")
        worst = max(worst, abs(a[s] - b[s]) / max(abs(b[s]), 1e-12))
    if worst > tolerance:
        fail(f"{a_path} vs {b_path}: loss differs by {worst:.3g} (relative) > {tolerance:g}:\n"
             + "\n".join(f"  step {s}: {a[s]!r} vs {b[s]!r}" for s in steps))
    return worst


def expect_in(text, needle, what):
    if needle not in text:
        fail(f"{what}: expected '{needle}' in:\n{text[-6000:]}")


def scenario_hybrid_shard(t):
    hosts = t.hosts_of_ranks(TWO_BY_TWO)
    if [hosts[r] for r in range(4)] != ["node1", "node1", "node2", "node2"]:
        fail(f"mpirun by slot placed the ranks as {hosts}, expected 0-1 on node1, 2-3 on node2")
    out = t.on_cluster("nodes").stdout
    expect_in(out, "4 rank(s), 2 per node", "header")
    expect_in(out, "nodes: 2 (node1: ranks 0-1, node2: ranks 2-3)", "header")
    expect_in(out, "hybrid_shard: shard groups [0-1] [2-3] (each within one node), replicas [0,2] [1,3]", "header")
    expect_in(out, "ranks             4, shard group 2, replicas 2", "plan")
    t.on_one_host("one_host", strategy="hybrid_shard shard_group_size 2")
    t.on_one_host("full", strategy="full_shard")
    same = compare(t.path("nodes/metrics.jsonl"), t.path("one_host/metrics.jsonl"), 1e-6)
    full = compare(t.path("nodes/metrics.jsonl"), t.path("full/metrics.jsonl"), 1e-5)
    print(f"ok: 2 nodes x 2 ranks hybrid_shard vs one host, same groups: {same:.3g}; vs full_shard: {full:.3g}")

    # Round robin: node1 holds ranks 0 and 2. Shard groups [0-1] [2-3] would
    # each cross the network (and a checkpoint's shards follow rank order).
    hosts = t.hosts_of_ranks(TWO_BY_TWO, extra=["--map-by", "node"])
    if [hosts[r] for r in range(4)] != ["node1", "node2", "node1", "node2"]:
        fail(f"mpirun --map-by node placed the ranks as {hosts}")
    p = t.on_cluster("round_robin", extra=["--map-by", "node"], expect_ok=False)
    if p.returncode == 0:
        fail("hybrid_shard with a node's ranks not consecutive (--map-by node) trained instead of stopping:\n"
             + p.stdout[-6000:])
    expect_in(p.stdout, "fsdp hybrid_shard: its shard group is a node's ranks, which must be consecutive, and node1 "
              "holds ranks 0,2 (node1: ranks 0,2, node2: ranks 1,3)", "round robin refusal")
    if "step 1/" in p.stdout:
        fail("round robin: a step ran before the refusal:\n" + p.stdout[-4000:])

    p = t.on_cluster("uneven", slots=THREE_PLUS_ONE, expect_ok=False)
    if p.returncode == 0:
        fail("hybrid_shard on 3+1 ranks per node trained instead of stopping:\n" + p.stdout[-6000:])
    expect_in(p.stdout, "the nodes hold different numbers of ranks (node1: ranks 0-2, node2: rank 3)",
              "uneven refusal")
    # With an explicit group size the same launch runs, and the header says
    # which groups cross nodes.
    out = t.on_cluster("uneven_groups", slots=THREE_PLUS_ONE, strategy="hybrid_shard shard_group_size 2",
                       max_steps=4).stdout
    expect_in(out, "4 rank(s), 3+1 per node", "header")
    expect_in(out, "hybrid_shard: shard groups [0-1] [2-3] (1 span nodes", "header")
    print("ok: round robin and 3+1 refused naming the nodes; shard_group_size 2 on 3+1 runs, its spanning group said")


def placement_lines(t, slots, devices=4, extra=(), btl="tcp,self,vader", expect_ok=True):
    np = sum(slots.values())
    p = t.cluster.mpirun(np, [t.args.placement, str(devices)], slots=slots, extra=extra, btl=btl,
                         expect_ok=expect_ok, what=f"rank_placement on {slots}")
    rows = {}
    for m in re.finditer(r"^placement (.*)$", p.stdout, re.M):
        fields = dict(kv.split("=", 1) for kv in re.findall(r"(\w+=(?:error:.*$|\S+))", m.group(1)))
        rows[int(fields["rank"])] = fields
    return p, rows


def check_placement(t, slots, devices, extra=()):
    """Each rank's line against the ranks' own host names: node-local rank =
    position among the ranks on the same host, node size = their count."""
    hosts = t.hosts_of_ranks(slots, extra=extra)
    p, rows = placement_lines(t, slots, devices, extra=extra)
    if sorted(rows) != sorted(hosts):
        fail(f"rank_placement on {slots}: lines for ranks {sorted(rows)}, expected {sorted(hosts)}:\n{p.stdout}")
    for rank, host in hosts.items():
        same_host = [r for r in sorted(hosts) if hosts[r] == host]
        want = {"host": host, "node_host": host, "local_rank": str(same_host.index(rank)),
                "local_size": str(len(same_host))}
        local = same_host.index(rank)
        want["device"] = str(local) if len(same_host) <= devices else None
        got = rows[rank]
        for key, value in want.items():
            if value is None:
                if not got["device"].startswith("error:") or f"only {devices} GPU" not in got["device"]:
                    fail(f"{slots} {devices} GPUs: rank {rank} on {host} ({len(same_host)} ranks there) should be "
                         f"refused, got device={got['device']}")
            elif got.get(key) != value:
                fail(f"{slots} {devices} GPUs {' '.join(extra)}: rank {rank} on {host}: {key}={got.get(key)}, "
                     f"expected {value}\n{p.stdout}")
    # Ranks of one node share its node index, ranks of two nodes do not.
    for a in hosts:
        for b in hosts:
            if (hosts[a] == hosts[b]) != (rows[a]["node"] == rows[b]["node"]):
                fail(f"{slots}: ranks {a} ({hosts[a]}) and {b} ({hosts[b]}) have nodes {rows[a]['node']} and "
                     f"{rows[b]['node']}")
    return rows


def scenario_placement(t):
    rows = check_placement(t, TWO_BY_TWO, 4)
    print("ok: 2+2, 4 GPUs:", "; ".join(f"{r}: {v['host']} local {v['local_rank']}/{v['local_size']} device "
                                          f"{v['device']}" for r, v in sorted(rows.items())))
    rows = check_placement(t, THREE_PLUS_ONE, 4)
    print("ok: 3+1, 4 GPUs:", "; ".join(f"{r}: {v['host']} local {v['local_rank']}/{v['local_size']} device "
                                          f"{v['device']}" for r, v in sorted(rows.items())))
    check_placement(t, THREE_PLUS_ONE, 2)
    print("ok: 3+1, 2 GPUs per node: node1's three ranks refused (only 2 GPUs), node2's rank gets device 0")
    rows = check_placement(t, TWO_BY_TWO, 4, extra=["--map-by", "node"])
    print("ok: 2+2 round robin:", "; ".join(f"{r}: {v['host']} local {v['local_rank']}" for r, v in sorted(rows.items())))
    # Only shared memory: ranks on different nodes cannot reach each other.
    p, rows = placement_lines(t, TWO_BY_TWO, btl="self,vader", expect_ok=False)
    if p.returncode == 0 or rows:
        fail("with btl self,vader the ranks of node1 and node2 communicated: they share memory, so the "
             "namespaces are not separate nodes to Open MPI:\n" + p.stdout[-4000:])
    expect_in(p.stdout, "unable to reach each other", "btl self,vader across nodes")
    print("ok: btl self,vader cannot connect node1 and node2 (TCP carries everything between nodes)")


def wait_for_step(proc, log, step, limit_s=120):
    """Until the run's log shows `step`; fails if mpirun ends or the limit passes first."""
    deadline = time.monotonic() + limit_s
    while f"step {step}/" not in open(log).read():
        if proc.poll() is not None or time.monotonic() > deadline:
            fail(f"training did not reach step {step}:\n" + open(log).read()[-6000:])
        time.sleep(0.1)


def scenario_dead_node(t):
    timeout = 20
    log = t.path("dead_node.log")
    argv = t.ftrain("dead", max_steps=1000000, timeout=timeout)
    proc = t.cluster.popen_mpirun(4, argv, log, slots=TWO_BY_TWO)
    try:
        wait_for_step(proc, log, 3)
        victims = t.cluster.pids_on("node2", t.args.ftrain)
        if len(victims) != 2:
            fail(f"expected node2's 2 ranks among its processes, found pids {victims}")
        start = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        while proc.poll() is None and time.monotonic() - start < timeout + 30:
            time.sleep(0.1)
        elapsed = time.monotonic() - start
        if proc.poll() is None:
            fail(f"the job still runs {elapsed:.0f} s after node2's ranks were killed:\n" + open(log).read()[-6000:])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = open(log).read()
    if proc.returncode == 0:
        fail("the job exited 0 after losing node2:\n" + out[-6000:])
    if elapsed > timeout:
        fail(f"the job ended {elapsed:.1f} s after node2 died, past collective_timeout ({timeout} s):\n" + out[-6000:])
    named = re.search(r"process rank ([23]) with PID \d+ on node node2 exited on signal 9", out)
    if not named:
        fail("no message names a dead rank of node2:\n" + out[-6000:])
    print(f"ok: node2's ranks (pids {victims}) killed; the job ended in {elapsed:.1f} s with status "
          f"{proc.returncode}: '{named.group(0)}'")


def keepalive(seconds_idle, interval, probes):
    """mpirun's settings for how soon it notices a daemon it can no longer reach."""
    return ["--mca", "oob_tcp_keepalive_time", str(seconds_idle), "--mca", "oob_tcp_keepalive_intvl", str(interval),
            "--mca", "oob_tcp_keepalive_probes", str(probes)]


def unplug_node2_mid_training(t, run, timeout, mpirun_extra, wait_s):
    """Trains on 2 x 2, takes node2 off the network at step 3 (its link
    down: its processes live on, unreachable) and waits up to `wait_s` for
    mpirun. Returns (mpirun's status or None, seconds, log, ftrain processes
    still alive on each node once mpirun ended or the wait was over)."""
    log = t.path(run + ".log")
    proc = t.cluster.popen_mpirun(4, t.ftrain(run, max_steps=1000000, timeout=timeout), log, slots=TWO_BY_TWO,
                                  extra=mpirun_extra)
    try:
        wait_for_step(proc, log, 3)
        t.cluster.unplug("node2")
        start = time.monotonic()
        left = None
        while proc.poll() is None and time.monotonic() - start < wait_s:
            time.sleep(0.1)
            if left is not None and time.monotonic() - start > left[0] + 3:
                break  # the ranks are gone; mpirun's own wait is not ftrain's
            if left is None:
                alive = {h: t.cluster.pids_on(h, t.args.ftrain) for h in ("node1", "node2")}
                if not any(alive.values()):
                    left = (time.monotonic() - start, alive)
        return proc.poll(), time.monotonic() - start, left, open(log).read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        t.cluster.kill_jobs()
        t.cluster.plug("node2")


def scenario_lost_node(t):
    # ftrain's side: the ranks' collectives stall, each rank's watchdog ends
    # it within collective_timeout naming the rank and the collective (with
    # mpirun's default keepalive, 300 s + 9 x 20 s, mpirun alone would wait).
    timeout = 8
    status, seconds, ranks_gone, out = unplug_node2_mid_training(t, "unplugged", timeout, keepalive(30, 5, 3), 25)
    named = re.search(r"rank (\d): .* has not completed after %d s \(collective_timeout %d s\)" % (timeout, timeout), out)
    if not named:
        fail(f"no rank's collective watchdog fired within {seconds:.0f} s of node2 leaving the network:\n" + out[-6000:])
    if ranks_gone is None:
        fail(f"ftrain ranks still alive {seconds:.0f} s after node2 left the network (collective_timeout {timeout} s):"
             "\n" + out[-6000:])
    if ranks_gone[0] > timeout + 5:
        fail(f"the last rank ended {ranks_gone[0]:.1f} s after node2 left, past collective_timeout {timeout} s + 5 s")
    print(f"ok: node2 unplugged: every rank ended {ranks_gone[0]:.1f} s later (collective_timeout {timeout} s), "
          f"'{named.group(0)[:120]}'; mpirun " + (f"exited {status}" if status is not None else
                                                 f"still waited for node2's daemon {seconds:.0f} s after (killed)"))
    # mpirun's side: a keepalive shorter than the collective timeout ends
    # the job from mpirun, naming the lost node.
    status, seconds, _, out = unplug_node2_mid_training(t, "unplugged_keepalive", 60, keepalive(3, 1, 3), 30)
    if status is None:
        fail(f"mpirun with a 6 s keepalive still ran {seconds:.0f} s after node2 left the network:\n" + out[-6000:])
    if status == 0 or "ORTE has lost communication with a remote daemon" not in out or \
            not re.search(r"Remote daemon: .* on node node2", out):
        fail(f"mpirun exited {status} without naming node2 as lost:\n" + out[-6000:])
    print(f"ok: with oob_tcp_keepalive 3 s + 3 x 1 s mpirun ended the job {seconds:.1f} s after node2 left "
          f"(status {status}), naming node2")


def scenario_reshard(t):
    t.on_one_host("full")  # uninterrupted, 1 node x 4 ranks: hybrid_shard's group is the node's 4
    out = t.on_cluster("res", extra_lines="checkpoint every 5 dir {} stop_after 10\n".format(t.path("ck"))).stdout
    expect_in(out, "ranks             4, shard group 2, replicas 2", "the 2 x 2 run's plan")
    if not os.path.isdir(t.path("ck", "step_10")):
        fail("the 2 x 2 run wrote no ck/step_10:\n" + out[-4000:])
    out = t.on_one_host("res", extra_lines="checkpoint every 5 dir {}\nresume auto\n".format(t.path("ck"))).stdout
    expect_in(out, "resharded", "the resume on one node")
    worst = compare(t.path("res/metrics.jsonl"), t.path("full/metrics.jsonl"), 1e-5, steps=list(range(11, 21)))
    print(f"ok: 2 x 2 checkpoint at step 10 resumed on 1 x 4 (resharded): steps 11-20 within {worst:.3g} "
          "of the uninterrupted run")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["hybrid_shard", "placement", "dead_node", "lost_node", "reshard"])
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--placement", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    for name in ("workdir", "ftrain", "prep", "placement"):  # mpirun runs in the work dir
        setattr(args, name, os.path.abspath(getattr(args, name)))
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    mpirun = shlex.split(args.mpirun)
    try:
        cluster = netns_cluster.Cluster(args.workdir, ["node1", "node2"], mpirun=mpirun[0],
                                        mpirun_flags=["--allow-run-as-root"])
        with cluster:
            test = Test(args, cluster)
            globals()["scenario_" + args.scenario](test)
    except netns_cluster.Unavailable as e:
        netns_cluster.skip(str(e))
    print("PASS")


if __name__ == "__main__":
    main()
