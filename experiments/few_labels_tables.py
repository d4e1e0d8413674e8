"""Summaries of the few-labels CSVs (experiments/results/few_labels_*.csv) as markdown
tables for notes/few_labels.md: python experiments/few_labels_tables.py [section ...]."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import few_labels_lib as L  # noqa: E402

R = L.RESULTS


def ms(v, pct=True, nd=1):
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "-"
    f = 100 if pct else 1
    if v.size == 1:
        return f"{v[0] * f:.{nd}f}"
    return f"{v.mean() * f:.{nd}f} ± {v.std(ddof=1) * f:.{nd}f}"


def baselines():
    b = pd.read_csv(os.path.join(R, "few_labels_baselines.csv"))
    return b


def evidence(sets=("mnist", "swiss5", "torus4", "moons2"), ks=(1, 2, 3)):
    """Mean EP log evidence and error against t (heat, A = 1), gamma = 1 and 0."""
    out = []
    for name in sets:
        df = pd.read_csv(os.path.join(R, f"few_labels_sweep_{name}.csv"))
        df = df[(df.family == "heat") & (df.A == 1.0)]
        for k in ks:
            g = df[df.k == k]
            for const in (1.0, 0.0):
                h = g[g.const == const].groupby("t").agg(ev=("log_ev", "mean"),
                                                         err=("err", "mean"))
                ts = h.index.values
                sel = np.unique(np.linspace(0, ts.size - 1, 8).round().astype(int))
                out.append(f"| {name} | {k} | {const:g} | " + " | ".join(
                    f"{ts[i]:.3g}: {h.ev.values[i]:.1f} / {100 * h.err.values[i]:.0f}%"
                    for i in sel) + " |")
    print("| set | k | γ | t: mean log evidence / mean error (8 of the 16 grid values) |")
    print("| --- | --- | --- | --- |")
    print("\n".join(out))


def default_emulation(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6")):
    """Where the current default lands (heat, gamma = 1, A = 1, evidence alone)."""
    print("| set | k | t chosen (median, range) | at range bottom | κ (LOO) | error % | "
          "evidence range over t, γ=1 / γ=0 (nats) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in sets:
        df = pd.read_csv(os.path.join(R, f"few_labels_sweep_{name}.csv"))
        lam, _ = L.eigen(name)
        lo, _ = L.t_range(lam)
        for k, g in df.groupby("k"):
            rows, r0, r1 = [], [], []
            for d, gd in g.groupby("draw"):
                s = gd[(gd.family == "heat") & (gd.const == 1) & (gd.A == 1)].dropna(
                    subset=["log_ev"])
                rows.append(s.loc[s.log_ev.idxmax()])
                r1.append(s.log_ev.max() - s.log_ev.min())
                s0 = gd[(gd.family == "heat") & (gd.const == 0) & (gd.A == 1)]
                r0.append(s0.log_ev.max() - s0.log_ev.min())
            t = np.array([r.t for r in rows])
            print(f"| {name} | {k} | {np.median(t):.3g} ({t.min():.3g}-{t.max():.3g}) | "
                  f"{np.sum(t <= lo * 1.01)}/{t.size} | "
                  f"{np.median([r.kappa for r in rows]):.2f} | {ms([r.err for r in rows])} | "
                  f"{np.median(r1):.1f} / {np.median(r0):.1f} |")


def hindsight(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6")):
    """Best-in-hindsight error per family (gamma = 0, any A) vs the evidence's pick."""
    print("| set | k | heat | Matérn ν=1 | Matérn ν=2 | pseudo-inverse | evidence over all "
          "families (γ=0) | family it picks | Poisson |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    b = baselines()
    for name in sets:
        df = pd.read_csv(os.path.join(R, f"few_labels_sweep_{name}.csv"))
        df["nu"] = df.nu.fillna(0)
        for k, g in df.groupby("k"):
            best = {}
            pick, fams = [], []
            for d, gd in g.groupby("draw"):
                g0 = gd[gd.const == 0]
                for fam, nu in (("heat", 0), ("matern", 1), ("matern", 2), ("green", 0)):
                    best.setdefault((fam, nu), []).append(
                        g0[(g0.family == fam) & (g0.nu == nu)].err.min())
                s = g0.dropna(subset=["log_ev"])
                r = s.loc[s.log_ev.idxmax()]
                pick.append(r.err)
                fams.append(f"{r.family}{'' if r.nu == 0 else int(r.nu)}")
            pb = b[(b.set == name) & (b.k == k) & (b.method == "poisson")
                   & (b.draw < g.draw.nunique())].err
            vc = pd.Series(fams).value_counts()
            print(f"| {name} | {k} | " + " | ".join(ms(v) for v in best.values()) +
                  f" | {ms(pick)} | {', '.join(f'{i} {c}' for i, c in vc.items())} | "
                  f"{ms(pb)} |")


def representation():
    r = pd.read_csv(os.path.join(R, "few_labels_repr.csv"))
    r["s"] = r.s.fillna(0).astype(int)
    b = baselines()
    print("| basis | s | M | r | k=1 heat, best t (mean curve) | k=1 pseudo-inverse | "
          "k=10 heat | k=10 pseudo-inverse |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for key, g in r.groupby(["basis", "s", "M", "r"], sort=False):
        cells = []
        for k in (1, 10):
            for fam in ("heat", "green"):
                gg = g[(g.k == k) & (g.family == fam)]
                m = gg.groupby("t", dropna=False).err.mean()
                if fam == "heat":
                    cells.append(f"{100 * m.min():.1f} (t={m.idxmin():.3g})")
                else:
                    cells.append(f"{100 * m.min():.1f}")
        print(f"| {key[0]} | {key[1] or '-'} | {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
    for k in (1, 10):
        pb = b[(b.set == "mnist") & (b.k == k) & (b.method == "poisson")
               & (b.draw < (10 if k == 1 else 3))].err
        print(f"\nPoisson learning, same draws, k={k}: {ms(pb)} %")


def rules(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6"), names=None):
    b = baselines()
    for name in sets:
        path = os.path.join(R, f"few_labels_rules_{name}.csv")
        if not os.path.exists(path):
            continue
        df = pd.read_csv(path)
        names_ = names or list(dict.fromkeys(df.rule))
        print(f"\n**{name}** (error % mean ± sd over draws / ECE / NLL)\n")
        ks = sorted(df.k.unique())
        print("| rule | " + " | ".join(f"k={k}" for k in ks) + " |")
        print("| --- | " + " | ".join("---" for _ in ks) + " |")
        for meth in ("poisson", "laplace"):
            cells = []
            for k in ks:
                nd = df[df.k == k].draw.nunique()
                v = b[(b.set == name) & (b.k == k) & (b.method == meth) & (b.draw < nd)].err
                cells.append(ms(v))
            print(f"| {meth} learning | " + " | ".join(cells) + " |")
        for rule in names_:
            cells = []
            for k in ks:
                g = df[(df.k == k) & (df.rule == rule)]
                if g.empty:
                    cells.append("-")
                    continue
                cells.append(f"{ms(g.err)} / {g.ece.mean():.3f} / {g.nll.mean():.2f}")
            print(f"| {rule} | " + " | ".join(cells) + " |")


def calibration(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6")):
    print("| set | k | ECE κ=1 | κ class-preserving LOO (median) | ECE with it | oracle κ "
          "(median) | oracle ECE |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in sets:
        path = os.path.join(R, f"few_labels_rules_{name}.csv")
        if not os.path.exists(path):
            continue
        df = pd.read_csv(path)
        g0 = df[df.rule == "prior"]
        for k, g in g0.groupby("k"):
            print(f"| {name} | {k} | {g.ece_k1.mean():.3f} | {g.kappa.median():.2f} | "
                  f"{g.ece.mean():.3f} | {g.oracle_kappa.median():.1f} | "
                  f"{g.oracle_ece.mean():.3f} |")


def aggregate(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6")):
    """Each rule's error and ECE per k, averaged over the data sets (equal weight)."""
    frames = []
    for name in sets:
        path = os.path.join(R, f"few_labels_rules_{name}.csv")
        if os.path.exists(path):
            frames.append(pd.read_csv(path))
    df = pd.concat(frames)
    per = df.groupby(["rule", "set", "k"]).agg(err=("err", "mean"), ece=("ece", "mean"))
    agg = per.groupby(["rule", "k"]).mean()
    nset = per.groupby(["rule", "k"]).size()
    ks = sorted(df.k.unique())
    print("| rule (sets) | " + " | ".join(f"k={k}: error % / ECE" for k in ks) + " |")
    print("| --- | " + " | ".join("---" for _ in ks) + " |")
    for rule in dict.fromkeys(df.rule):
        cells = []
        for k in ks:
            if (rule, k) in agg.index:
                a = agg.loc[(rule, k)]
                cells.append(f"{100 * a.err:.1f} / {a.ece:.3f}")
            else:
                cells.append("-")
        print(f"| {rule} ({nset.loc[rule].min()}) | " + " | ".join(cells) + " |")


def prior_sensitivity(sets=("mnist", "swiss5", "torus4", "moons2", "helix6", "circles6")):
    """MAP t under evidence x log-normal prior, from the sweep grid (heat, gamma = 0, A = 1;
    error of the latent-mean argmax): mean error over the sets against the prior's sd
    and its centre exp(-drop) = g(λ_C)."""
    rows = []
    for name in sets:
        df = pd.read_csv(os.path.join(R, f"few_labels_sweep_{name}.csv"))
        df = df[(df.family == "heat") & (df.const == 0) & (df.A == 1.0)].dropna(subset=["log_ev"])
        lam, _ = L.eigen(name)
        y = np.load(os.path.join(L.CACHE, f"{name}_y.npy"))
        C = int(y.max()) + 1
        for off in (0, 1):
            for drop in (1.0, 2.0, 4.0):
                tc = L.t_center(lam, C, "heat", None, drop, off)
                for sd in (0.5, 1.0, 2.0, 3.0, np.inf):
                    for (k, d), g in df.groupby(["k", "draw"]):
                        lp = g.log_ev - 0.5 * ((np.log(g.t) - np.log(tc)) / sd) ** 2
                        rows.append((name, off, drop, sd, k, d, g.loc[lp.idxmax()].err))
    r = pd.DataFrame(rows, columns=["set", "off", "drop", "sd", "k", "draw", "err"])
    per = r.groupby(["off", "drop", "sd", "set", "k"]).err.mean().groupby(
        ["off", "drop", "sd", "k"]).mean()
    ks = sorted(r.k.unique())
    print("| eigenvalue | g(λ) = e^-drop | prior sd (log t) | " +
          " | ".join(f"k={k}" for k in ks) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |")
    for off in (0, 1):
        for drop in (1.0, 2.0, 4.0):
            for sd in (0.5, 1.0, 2.0, 3.0, np.inf):
                if sd == np.inf and (drop != 2.0 or off):
                    continue
                print(f"| {'-' if sd == np.inf else ('λ_C' if off == 0 else 'λ_C+1')} | "
                      f"{'-' if sd == np.inf else f'{drop:g}'} | "
                      f"{'flat' if sd == np.inf else f'{sd:g}'} | " +
                      " | ".join(f"{100 * per.loc[(off, drop, sd, k)]:.1f}" for k in ks) + " |")


if __name__ == "__main__":
    sections = sys.argv[1:] or ["evidence", "default_emulation", "hindsight", "aggregate",
                                "representation", "rules", "calibration"]
    for s in sections:
        print(f"\n### {s}\n")
        globals()[s]()
