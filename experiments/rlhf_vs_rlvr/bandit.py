"""Reward over-optimisation in seconds: a softmax policy over K arms, optimised against the
true reward (the verifier's analogue) or against a Bradley-Terry reward model learned from
noisy pairwise preferences (RLHF's analogue).

    python experiments/rlhf_vs_rlvr/bandit.py [--arms 50] [--pairs 150] [--noise 0.3] [--seeds 5]

The true reward r*(k) ~ N(0, 1). Preference pairs (i, j) are drawn from a reference policy
that rarely plays the best arms (its log-probs fall with r*, as a pretrained model rarely
writes the best answer), labelled by the Bradley-Terry model on r* and flipped with
probability `--noise`. The reward model is one score per arm, fitted by the Bradley-Terry
loss (rlvr_jax/preference.py) with a little L2. For each KL coefficient beta the KL-regularised
optimum is pi(k) ~ pi_ref(k) exp(r(k) / beta) (Rafailov et al. 2023, eq. 4): against r* it
climbs the true reward as beta falls; against the learned r it climbs the proxy, while the true
reward first rises, then falls once the policy piles onto arms the reward model saw rarely and
overrates: over-optimisation (Gao et al. 2022, arXiv:2210.10760). Prints the first seed's
table and one summary line per seed, and writes bandit.png (the first seed's true and proxy
reward against KL(pi || pi_ref)).
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlvr_jax import preference


def fit_reward_model(pairs: np.ndarray, chosen_first: np.ndarray, arms: int,
                     l2: float = 1e-3, steps: int = 2000) -> np.ndarray:
    """Per-arm scores minimising the Bradley-Terry loss (+ l2 |r|^2) by Adam."""
    c = np.where(chosen_first, pairs[:, 0], pairs[:, 1])
    r = np.where(chosen_first, pairs[:, 1], pairs[:, 0])
    loss = lambda s: preference.bradley_terry_loss(s[c], s[r])[0] + l2 * jnp.sum(s * s)
    tx = optax.adam(0.05)
    scores = jnp.zeros(arms)
    state = tx.init(scores)

    @jax.jit
    def step(scores, state):
        g = jax.grad(loss)(scores)
        updates, state = tx.update(g, state)
        return optax.apply_updates(scores, updates), state

    for _ in range(steps):
        scores, state = step(scores, state)
    return np.asarray(scores)


def kl_optimum(log_ref: np.ndarray, reward: np.ndarray, beta: float) -> np.ndarray:
    """argmax_pi E_pi[r] - beta KL(pi || pi_ref) = softmax(log pi_ref + r / beta)."""
    z = log_ref + reward / beta
    p = np.exp(z - z.max())
    return p / p.sum()


def kl(p: np.ndarray, log_q: np.ndarray) -> float:
    return float(np.sum(p * (np.log(np.maximum(p, 1e-30)) - log_q)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=50)
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "bandit.png"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        rows = one_seed(args, seed, verbose=seed == 0)
        peak = rows[np.argmax(rows[:, 4])]
        print(f"seed {seed}: optimising the learned reward, the true reward peaks at "
              f"{peak[4]:.3f} (KL {peak[3]:.2f}) and ends at {rows[-1, 4]:.3f} (KL "
              f"{rows[-1, 3]:.2f}{', after falling' if rows[-1, 4] < peak[4] - 1e-3 else ''})"
              f" while the learned reward rises to {rows[-1, 5]:.3f}; optimising the true "
              f"reward reaches {rows[-1, 2]:.3f}")
        if seed == 0:
            plot(rows, args.out)
    print(f"{time.perf_counter() - t0:.1f} s")


def one_seed(args, seed: int, verbose: bool) -> np.ndarray:
    """Rows (beta, KL and true reward optimising r*, KL, true and learned reward optimising
    the learned r) over falling beta."""
    rng = np.random.default_rng(seed)
    true = rng.normal(size=args.arms)
    log_ref = -1.5 * true  # the reference rarely plays the good arms
    log_ref -= np.log(np.sum(np.exp(log_ref)))
    ref = np.exp(log_ref)
    pairs = rng.choice(args.arms, size=(args.pairs, 2), p=ref)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    p_first = 1 / (1 + np.exp(-(true[pairs[:, 0]] - true[pairs[:, 1]])))
    first = rng.random(len(pairs)) < p_first
    first ^= rng.random(len(pairs)) < args.noise  # label noise
    proxy = fit_reward_model(pairs, first, args.arms)
    betas = np.geomspace(10.0, 0.01, 25)
    rows = []
    for beta in betas:
        gold_pi, proxy_pi = kl_optimum(log_ref, true, beta), kl_optimum(log_ref, proxy, beta)
        rows.append((beta, kl(gold_pi, log_ref), float(gold_pi @ true), kl(proxy_pi, log_ref),
                     float(proxy_pi @ true), float(proxy_pi @ proxy)))
    rows = np.array(rows)
    if verbose:
        seen = np.bincount(pairs.ravel(), minlength=args.arms)
        print(f"{args.arms} arms, {len(pairs)} preference pairs (label noise {args.noise}); "
              f"reference policy's true reward {ref @ true:.3f}, best arm {true.max():.3f}")
        print(f"reward model: pairwise accuracy on fresh pairs of the reference "
              f"{_pairwise_accuracy(proxy, true, ref, rng):.3f} (noise ceiling "
              f"{1 - args.noise:.2f} of the labels); the best true arm was compared "
              f"{seen[true.argmax()]} times, the reward model's favourite {seen[proxy.argmax()]}")
        print("| beta | KL (true r) | true reward (optimising true r) | KL (learned r) "
              "| true reward (optimising learned r) | learned r |")
        print("|---|---|---|---|---|---|")
        for b, k1, g1, k2, g2, p2 in rows[::3]:
            print(f"| {b:.3g} | {k1:.2f} | {g1:.3f} | {k2:.2f} | {g2:.3f} | {p2:.3f} |")
    return rows


def plot(rows: np.ndarray, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(rows[:, 1], rows[:, 2], label="true reward, optimising the true reward (RLVR)")
    ax.plot(rows[:, 3], rows[:, 4], label="true reward, optimising the learned reward (RLHF)")
    ax.plot(rows[:, 3], rows[:, 5], "--", label="learned reward, optimising it")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("KL(pi || pi_ref)  (falling beta ->)")
    ax.set_ylabel("reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def _pairwise_accuracy(proxy, true, ref, rng, n=20000) -> float:
    pairs = rng.choice(len(true), size=(n, 2), p=ref)
    pairs = pairs[true[pairs[:, 0]] != true[pairs[:, 1]]]
    agree = np.sign(proxy[pairs[:, 0]] - proxy[pairs[:, 1]]) == np.sign(
        true[pairs[:, 0]] - true[pairs[:, 1]])
    return float(agree.mean())


if __name__ == "__main__":
    main()
