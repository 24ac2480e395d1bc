#!/usr/bin/env python3
"""Plot ftrain runs' metrics.jsonl as PNG: loss and eval loss, learning rate,
throughput, memory.

    share/scripts/plot_metrics.py runs/llama7b                      # -> runs/llama7b/metrics.png
    share/scripts/plot_metrics.py runs/a runs/b --labels bf16 fp8 -o compare.png
    share/scripts/plot_metrics.py runs/a/metrics.jsonl --smooth 20 --separate -o plots/a.png

Each argument is a run directory (its metrics.jsonl is read) or a
metrics.jsonl file. Several runs are drawn on the same axes, one colour per
run, so runs can be compared (bf16 against fp8, 8 ranks against 16).

The file (written by rank 0, one JSON object per line; share/doc/getting-started.md):
  training rows  {"step", "loss", "lr", "tokens_per_s", "samples_per_s",
                  "peak_rss_mib_max_rank", "mfu", ...} every `log every N` steps
  eval rows      {"step", "eval_loss", "eval_tokens"}
  resume rows    {"step", "resumed_from", "world_size", "global_batch"}: a run
                 continued from a checkpoint after that step (dotted lines)
A resumed run keeps the rows up to its checkpoint and continues, so each
step appears once; should a step appear twice anyway (a copied file), the
later row wins. Rows that do not parse (a line being written) are skipped.

Panels: loss (training, thin; --smooth N adds an N-row moving average) with
eval loss as markers; learning rate; throughput in tokens/s (images/s for
runs that report no tokens, e.g. ViT); peak resident memory of the largest
rank, MiB. A panel with no data in any run says so instead of being empty.
--separate also writes each panel to its own PNG (NAME-loss.png, ...).

Needs matplotlib (Debian: python3-matplotlib, installed by
share/scripts/install-deps.sh, for /usr/bin/python3). When the interpreter
that runs the script lacks it (`python3` on the PATH is often pyenv's or
conda's), the script runs itself again with /usr/bin/python3 if that one has
matplotlib, and otherwise says which interpreters it tried. Draws off-screen
(Agg): no display needed.
"""
import argparse
import json
import os
import subprocess
import sys


def load_run(path):
    """Returns (train rows by step, eval rows by step) of one metrics.jsonl."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"plot_metrics: {path}: no such file (give a run directory or a metrics.jsonl)")
    train, evals, resumes = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict) or "step" not in row:
                continue
            if "resumed_from" in row:
                resumes[row["step"]] = row
            elif "eval_loss" in row:
                evals[row["step"]] = row
            elif "loss" in row:
                train[row["step"]] = row
    if not train and not evals:
        raise SystemExit(f"plot_metrics: {path}: no metrics rows")
    return path, [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)], sorted(resumes)


def short_labels(dirs):
    """The fewest trailing path components that tell the run directories apart."""
    parts = [d.strip(os.sep).split(os.sep) for d in dirs]
    for n in range(1, max(len(p) for p in parts) + 1):
        labels = [os.path.join(*p[-n:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return dirs


def moving_average(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def draw_loss(ax, runs, smooth):
    drawn = False
    for (label, train, evals), color in runs:
        x, y = series(train, "loss")
        if x:
            ax.plot(x, y, color=color, alpha=0.35 if smooth > 1 else 1.0, linewidth=1,
                    label=f"{label} train" + (" (raw)" if smooth > 1 else ""))
            if smooth > 1:
                ax.plot(x, moving_average(y, smooth), color=color, linewidth=1.8, label=f"{label} train (avg {smooth})")
            drawn = True
        x, y = series(evals, "eval_loss")
        if x:
            ax.plot(x, y, color=color, marker="o", linestyle="--", linewidth=1, label=f"{label} eval")
            drawn = True
    ax.set_title("loss")
    ax.set_ylabel("cross-entropy (nats)")
    return drawn


def draw_key(ax, runs, key, title, ylabel, scale=1.0, fallback=None):
    drawn = False
    for (label, train, _), color in runs:
        x, y = series(train, key)
        name = key
        if not x and fallback:
            x, y = series(train, fallback[0])
            name = fallback[0]
        if x:
            ax.plot(x, [v * scale for v in y], color=color, linewidth=1.2,
                    label=label if name == key else f"{label} ({fallback[1]})")
            drawn = True
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    return drawn


PANELS = [
    ("loss", lambda ax, runs, a: draw_loss(ax, runs, a.smooth)),
    ("lr", lambda ax, runs, a: draw_key(ax, runs, "lr", "learning rate", "lr")),
    ("throughput", lambda ax, runs, a: draw_key(ax, runs, "tokens_per_s", "throughput", "tokens/s (all ranks)",
                                                fallback=("samples_per_s", "samples/s"))),
    ("memory", lambda ax, runs, a: draw_key(ax, runs, "peak_rss_mib_max_rank", "memory",
                                            "peak RSS of the largest rank (MiB)")),
]


def mark_resumes(ax, resumes):
    """A dotted vertical line where a run continued from a checkpoint."""
    labelled = False
    for steps, color in resumes:
        for step in steps:
            ax.axvline(step, color=color, linestyle=":", linewidth=1.2, label=None if labelled else "resumed")
            labelled = True


DEBIAN_PYTHON = "/usr/bin/python3"


def rerun_with_matplotlib(argv):
    """Runs this script again under Debian's interpreter when it has
    matplotlib and is not the one running now (no return then)."""
    if os.environ.get("FTRAIN_PLOT_REEXEC") or not os.path.exists(DEBIAN_PYTHON):
        return
    if os.path.realpath(sys.executable) == os.path.realpath(DEBIAN_PYTHON):
        return
    if subprocess.run([DEBIAN_PYTHON, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        return
    print(f"plot_metrics: {sys.executable} has no matplotlib; running with {DEBIAN_PYTHON}", file=sys.stderr)
    sys.stderr.flush()
    os.environ["FTRAIN_PLOT_REEXEC"] = "1"
    args = sys.argv[1:] if argv is None else list(argv)
    os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__), *args])


def finish_axes(ax, drawn):
    ax.set_xlabel("optimizer step")
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")


def save_figure(fig, path, dpi):
    """A failed write (full disk, read-only directory) is an error naming the file, not a traceback."""
    try:
        fig.savefig(path, dpi=dpi, format="png")
    except OSError as e:
        raise SystemExit(f"plot_metrics: cannot write {path}: {e.strerror or e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="see the module docstring (head share/scripts/plot_metrics.py) for details")
    ap.add_argument("runs", nargs="+", help="run directories or metrics.jsonl files")
    ap.add_argument("-o", "--out", help="output PNG (default: metrics.png beside the first run's metrics.jsonl)")
    ap.add_argument("--labels", nargs="+", help="one legend label per run (default: the run directory names)")
    ap.add_argument("--smooth", type=int, default=1, help="moving-average window over training loss rows (default 1: none)")
    ap.add_argument("--separate", action="store_true", help="also write one PNG per panel: OUT-loss.png, ...")
    ap.add_argument("--title", help="figure title")
    ap.add_argument("--dpi", type=int, default=110)
    a = ap.parse_args(argv)
    if a.smooth < 1:
        ap.error("--smooth must be at least 1")
    if a.labels and len(a.labels) != len(a.runs):
        ap.error(f"--labels has {len(a.labels)} entries for {len(a.runs)} runs")

    try:
        import matplotlib
    except ImportError:
        rerun_with_matplotlib(argv)
        raise SystemExit(f"plot_metrics: matplotlib is missing in {sys.executable} and in {DEBIAN_PYTHON} "
                         "(Debian: apt-get install python3-matplotlib, which share/scripts/install-deps.sh "
                         "installs for /usr/bin/python3; or pip install matplotlib for this interpreter)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded = [load_run(p) for p in a.runs]
    labels = a.labels or short_labels([os.path.dirname(os.path.abspath(p)) for p, _, _, _ in loaded])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    runs = [((labels[i], train, evals), colors[i % len(colors)]) for i, (_, train, evals, _) in enumerate(loaded)]
    resumes = [(steps, colors[i % len(colors)]) for i, (_, _, _, steps) in enumerate(loaded)]
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(loaded[0][0])), "metrics.png")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (_, draw) in zip(axes.flat, PANELS):
        drawn = draw(ax, runs, a)
        mark_resumes(ax, resumes)
        finish_axes(ax, drawn)
    fig.suptitle(a.title or "ftrain: " + ", ".join(labels))
    fig.tight_layout()
    save_figure(fig, out, a.dpi)
    plt.close(fig)
    written = [out]
    if a.separate:
        stem = out[:-4] if out.lower().endswith(".png") else out
        for name, draw in PANELS:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            drawn = draw(ax, runs, a)
            mark_resumes(ax, resumes)
            finish_axes(ax, drawn)
            fig.tight_layout()
            path = f"{stem}-{name}.png"
            save_figure(fig, path, a.dpi)
            plt.close(fig)
            written.append(path)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
