#!/usr/bin/env bash
# Checkpoint I/O of a ~270M-parameter Llama (the fsdp_memory.sh model) on NP
# ranks (default 2): sharded save and load bandwidth next to `dd` on the same
# disk, consolidated (save_final) time, and each rank's memory while the
# consolidated file is written.
#   bash share/bench/checkpoint_io.sh            # NP=4 bash ... for 4 ranks
# Method. A 2-step run checkpoints after step 2 (master + AdamW m, v: 12
# bytes/parameter in all rank files, fsync'ed) and writes save_final (4
# bytes/parameter); their durations are the ones ftrain logs. A sampler reads
# every rank's VmRSS from /proc every 10 ms; "during save_final" is the window
# the log line's duration gives, "before" the last sample ahead of it. Load =
# (before-load -> after-load interval of a run resuming that checkpoint) minus
# (the same interval of a run starting from random init), both timed from the
# log lines. dd writes the same byte count with conv=fsync and reads it back
# (both go through the page cache like ftrain does; nothing drops caches).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
NP="${NP:-2}"
data=$(bench_corpus 32000 200000)
cat > "$WORK/ckpt.in" <<DECK
variable max_steps 2
variable init random
model llama preset tiny vocab_size 32000 hidden_size 1024 intermediate_size 2816 &
      num_hidden_layers 16 num_attention_heads 16 num_key_value_heads 16
data tokens \${data}
batch micro 1 seq_len 32
max_steps \${max_steps}
log every 1
fsdp full_shard
init \${init}
run_dir \${run}
DECK
cat > "$WORK/save.in" <<DECK
include ckpt.in
checkpoint every 1000 dir \${ck}
save_final \${final}
DECK
cat > "$WORK/load.in" <<DECK
include ckpt.in
resume \${ck}/step_2
DECK
MPIRUN_LINE="${MPIRUN[*]}" FTRAIN="$FTRAIN" WORK="$WORK" NP="$NP" DATA="$data" python3 - <<'PY'
import os, re, shlex, subprocess, threading, time

ftrain = os.path.realpath(os.environ["FTRAIN"])
work, np_, data = os.environ["WORK"], int(os.environ["NP"]), os.environ["DATA"]
mpirun = shlex.split(os.environ["MPIRUN_LINE"])


def rank_pids(root):
    """ftrain processes below `root`, by MPI rank."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.path.realpath(f"/proc/{d}/exe") != ftrain:
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
            rank = next(int(e.split(b"=")[1]) for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK="))
            p = int(d)
            while p > 1 and p != root:
                p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            if p == root:
                found[rank] = int(d)
        except (OSError, StopIteration, ValueError, IndexError):
            pass
    return found


def run(deck, **variables):
    cmd = mpirun + ["-np", str(np_), ftrain]
    for k, v in dict(variables, data=data).items():
        cmd += ["-var", k, str(v)]
    cmd.append(os.path.join(work, deck))
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    samples, lines, done = [], [], threading.Event()

    def sample():
        pids = {}
        while not done.is_set():
            if len(pids) < np_:
                pids = rank_pids(proc.pid)
            t = time.monotonic()
            for rank, pid in pids.items():
                try:
                    for line in open(f"/proc/{pid}/status"):
                        if line.startswith("VmRSS:"):
                            samples.append((t, rank, int(line.split()[1]) / 1024))
                except OSError:
                    pass
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    for line in proc.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    proc.wait()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        print("\n".join(l for _, l in lines[-30:]))
        raise SystemExit(f"ftrain {deck} exited {proc.returncode}")
    return lines, samples


def find(lines, pattern):
    for t, l in lines:
        m = re.search(pattern, l)
        if m:
            return t, m
    raise SystemExit("no line matching " + pattern)


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def load_interval(lines):
    return find(lines, r"^memory after load")[0] - find(lines, r"^memory before load")[0]


lines, samples = run("save.in", run="save", ck="ck", final="final.h5")
params = int(find(lines, r"^\s*parameters\s+(\d+)")[1].group(1))
t_ck, m_ck = find(lines, r"^checkpoint step 2 -> (\S+) \(([\d.]+) s\)")
ck_dir, ck_s = os.path.join(work, m_ck.group(1)), float(m_ck.group(2))
ck_bytes = du(ck_dir)
t_fin, m_fin = find(lines, r"^save_final: .* \(([\d.]+) s\)")
fin_s = float(m_fin.group(1))
fin_bytes = os.path.getsize(os.path.join(work, "final.h5"))
start = t_fin - fin_s

rows = []
for r in range(np_):
    mine = [(t, v) for t, rank, v in samples if rank == r]
    before = [v for t, v in mine if t < start]
    during = [v for t, v in mine if start <= t <= t_fin]
    rows.append((r, before[-1] if before else float("nan"), max(during) if during else float("nan"), len(during)))

base = load_interval(run("ckpt.in", run="fresh", max_steps=3)[0])
load_s = load_interval(run("load.in", run="resumed", max_steps=3, ck="ck")[0]) - base

dd_file = os.path.join(work, "dd.bin")
count = max(1, ck_bytes // (16 << 20))
t0 = time.monotonic()
subprocess.run(["dd", "if=/dev/zero", f"of={dd_file}", "bs=16M", f"count={count}", "conv=fsync"], check=True,
               stderr=subprocess.DEVNULL)
dd_write = count * (16 << 20) / (time.monotonic() - t0)
t0 = time.monotonic()
subprocess.run(["dd", f"if={dd_file}", "of=/dev/null", "bs=16M"], check=True, stderr=subprocess.DEVNULL)
dd_read = count * (16 << 20) / (time.monotonic() - t0)
os.remove(dd_file)

largest = 32000 * 1024 * 4
mb = 1e6
print(f"\nmodel: {params/1e6:.1f}M parameters, {np_} rank(s), full_shard")
print(f"{'operation':<34} {'bytes':>12} {'seconds':>9} {'MB/s':>9}")
print(f"{'sharded save (12 B/param, fsync)':<34} {ck_bytes/mb:>10.0f}MB {ck_s:>9.2f} {ck_bytes/ck_s/mb:>9.0f}")
print(f"{'dd write (same size, conv=fsync)':<34} {count*(16<<20)/mb:>10.0f}MB {count*(16<<20)/dd_write:>9.2f} {dd_write/mb:>9.0f}")
print(f"{'sharded load (resume)':<34} {ck_bytes/mb:>10.0f}MB {load_s:>9.2f} {ck_bytes/max(load_s,1e-9)/mb:>9.0f}")
print(f"{'dd read (page cache)':<34} {count*(16<<20)/mb:>10.0f}MB {count*(16<<20)/dd_read:>9.2f} {dd_read/mb:>9.0f}")
print(f"{'consolidated save_final (f32)':<34} {fin_bytes/mb:>10.0f}MB {fin_s:>9.2f} {fin_bytes/fin_s/mb:>9.0f}")
print(f"\nmemory while save_final runs (VmRSS every 10 ms; largest tensor {largest/2**20:.0f} MiB):")
print(f"{'rank':<6} {'before MiB':>11} {'peak during MiB':>16} {'increase MiB':>13} {'samples':>8}")
for r, before, peak, n in rows:
    print(f"{r:<6} {before:>11.0f} {peak:>16.0f} {peak-before:>13.0f} {n:>8}")
PY
