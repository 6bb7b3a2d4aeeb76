"""Multi-turn rollouts with slow environment calls: the lock-step driver (episodes.py) against
episodes streamed through decode rows (streaming.py), rows held during a call or released,
a late call waited for (at its boundary d chunks on) or deferred (appended once back, d = 0),
each at zero latency (the baseline) and at lognormal call latencies, in one run.

    python experiments/bench/streaming.py [--median 0.2 --p99 5] [--episodes 64 --rows 16]

A random model (char vocabulary, `--hidden` wide, `--layers` deep, float32) whose call
marker `#` and EOS are made likely, so episodes take 1 .. max_turns turns and their lengths
are long-tailed; every call is answered by a world per episode (its reply a function of the
episode and its own calls), delayed by experiments/bench/env_latency.py (a call's latency a
function of its text: the same draw in every arm). The call delay d (chunk boundaries from a
call to its observation) is set from the zero-latency streamed run's chunk time so that d
chunks cover `--cover` seconds. Reports per arm: the step's wall time (median of
`--repeats` after a compile), its ratio to the same arm at zero latency, the devices' idle
share (the driver waiting on the environment), useful decode row-steps (policy tokens /
(decode steps x rows)), and whether every episode's tokens equal lock step's.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere

from experiments.bench import stall_bound  # noqa: E402
from experiments.bench.env_latency import Delayed  # noqa: E402
from rlvr_jax import episodes, streaming  # noqa: E402
from rlvr_jax.config import ModelConfig  # noqa: E402
from rlvr_jax.envs.base import OK, Episode, Reply  # noqa: E402
from rlvr_jax.models.policy import Decoder, init_params  # noqa: E402
from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer  # noqa: E402
from rlvr_jax.turn_sampler import make_turn_sampler  # noqa: E402


class Worlds:
    """A world per episode: replies depend on the episode and its own calls only."""

    stop_texts, tools = ("#",), ("calculator",)
    observation_prefix, observation_suffix = "[", "]"
    concurrent_episodes = True

    def open(self, contexts):
        return [Episode(dict(c)) for c in contexts]

    def step(self, eps, turns):
        out = []
        for e, t in zip(eps, turns):
            e.calls += 1
            out.append(Reply(f"{e.context['id'] * 7 + e.calls}:{len(t)}", OK, "calculator"))
        return out

    def finish(self, eps, texts):
        return [None] * len(eps)

    def close_episodes(self, eps):
        for e in eps:
            e.closed = True

    def stats(self):
        return {}


class ReplCalls:
    """The python_repl environment with real sandboxed sessions (bubblewrap, a session per
    episode, opened, called, closed). The random model's turn text is not Python, so each
    call runs a program chosen by (episode, call): it reads and extends the session's state
    (`x`), then waits a lognormal time inside the sandbox (`time.sleep`: a test run or a
    service call, not CPU the decoding needs), drawn from the episode and call alone (the
    same draw in every arm)."""

    stop_texts, tools = ("#",), ("calculator",)
    observation_prefix, observation_suffix = "[", "]"
    concurrent_episodes = True  # as the environment's own (its session pool is thread-safe)

    def __init__(self, median_s: float, p99_s: float, seed: int = 0):
        from rlvr_jax.envs import registry
        from rlvr_jax.envs.calls import CALL_FORMATS
        from rlvr_jax.envs.session_env import SessionEnvironment
        from rlvr_jax.sandbox.session import SessionLimits

        self.env = SessionEnvironment(registry.world("python_repl"), CALL_FORMATS["tag"],
                                      limits=SessionLimits(call_s=60.0, episode_s=600.0),
                                      max_live=256, spares=2)
        self.median_s, self.p99_s, self.seed = median_s, p99_s, seed

    def prepare(self, contexts):  # a stream's batch announced: its sandboxes start now
        self.env.prepare(contexts)

    def open(self, contexts):
        return self.env.open(contexts)

    def step(self, eps, turns):
        codes = []
        for e in eps:
            rng = np.random.default_rng([self.seed, e.context["id"], e.calls])
            wait = 0.0
            if self.median_s > 0:
                sigma = math.log(self.p99_s / self.median_s) / 2.3263
                wait = float(np.exp(math.log(self.median_s) + sigma * rng.standard_normal()))
            codes.append(f"import time\nx = globals().get('x', 0) * 7 + {e.calls + 1}\n"
                         f"time.sleep({wait:.4f})\nx % 1000")
        return self.env.step(eps, [self.env.render_call("python", {"code": c}) for c in codes])

    def finish(self, eps, texts):
        return [None] * len(eps)

    def close_episodes(self, eps):
        self.env.close_episodes(eps)

    def stats(self):
        return self.env.stats()

    def close(self):
        self.env.close()


def setup(args):
    tmp = tempfile.mkdtemp()
    save_char_tokenizer(tmp)
    tok = load_tokenizer(tmp)
    cfg = ModelConfig(hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                      num_kv_heads=2, intermediate_size=2 * args.hidden,
                      compute_dtype="float32")
    model = Decoder(cfg, len(tok))
    params = init_params(model, jax.random.key(0))
    emb = params["embed_tokens"]["embedding"]
    for t, f in ((tok.convert_tokens_to_ids("#"), args.call_boost),
                 (tok.eos_token_id, args.eos_boost)):
        emb = emb.at[t].mul(f)
    params["embed_tokens"]["embedding"] = emb
    n, g, l = args.episodes, args.group, 8
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    prompt = np.stack([np.full(l, digits[(i // g) % 10], np.int32) for i in range(n)])
    return tok, model, params, prompt, np.ones_like(prompt), [{"id": i} for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=64, help="per step")
    ap.add_argument("--steps", type=int, default=3, help="batches per arm")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--insert", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=192)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--call-boost", type=float, default=3.0)
    ap.add_argument("--eos-boost", type=float, default=1.0)
    ap.add_argument("--median", type=float, default=0.2)
    ap.add_argument("--p99", type=float, default=5.0)
    ap.add_argument("--cover", type=float, default=1.0, help="seconds d chunks cover")
    ap.add_argument("--call-limit", type=float, default=math.inf,
                    help="the environment's own call limit in seconds (a call drawn longer "
                    "ends as a timeout there); default none")
    ap.add_argument("--update-s", type=float, default=0.0,
                    help="seconds an update takes between steps (the devices busy: sleep)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs after one that compiles (0: that one only)")
    ap.add_argument("--env", choices=("worlds", "repl"), default="worlds",
                    help="repl: real sandboxed python_repl sessions (bubblewrap)")
    ap.add_argument("--no-lock", action="store_true",
                    help="leave out lock step (the slowest arm; tokens compared with the first)")
    ap.add_argument("--arms", default="", help="only these arms (comma-separated: lock, held, "
                    "released, deferred, deferred_released, carried, carried_deferred); tokens "
                    "compared with the first")
    ap.add_argument("--carry", type=int, default=1,
                    help="carried arm: batches queued ahead (rollout.stream.carry_batches)")
    ap.add_argument("--lookahead", default="0",
                    help="steps of each chunk queued before a boundary is handled "
                         "(rollout.stream.lookahead_steps); several (0,2): each streamed "
                         "arm once for each, in one run")
    ap.add_argument("--env-threads", type=int, default=0,
                    help="the most calls at once (a call's latency is slept on a thread; "
                         "0: no cap, rollout.stream.env_threads' default)")
    args = ap.parse_args()
    tok, model, params, prompt, pmask, _ = setup(args)
    sampler = make_turn_sampler(model, max_new_tokens=args.new_tokens, observation_tokens=16,
                                eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                                stops=[tok.encode("#", add_special_tokens=False)],
                                temperature=1.0, group_size=args.group, prompt_len=8)
    glue = episodes.Glue.of(tok, "[", "]")
    n = args.episodes
    batches = [(prompt, pmask, jax.random.key(1 + j), [{"id": j * n + i} for i in range(n)])
               for j in range(args.steps)]

    def lock(env):
        return [episodes.run(sampler, env, tok, glue, params, p, m, key,
                             max_turns=args.max_turns, put=jnp.asarray, contexts=ctx)
                for p, m, key, ctx in batches[:args.steps] if _update(args)]

    def schedule(delay, release, defer=False, ahead=0):
        return streaming.Schedule(args.rows, args.insert, args.chunk, delay, args.env_threads,
                                  release, defer=defer, lookahead=ahead)

    def stream(delay, release, defer=False, ahead=0):
        return lambda env: [streaming.run(sampler, env, tok, glue, params, p, m, key,
                                          max_turns=args.max_turns, put=jnp.asarray,
                                          schedule=schedule(delay, release, defer, ahead),
                                          group_size=args.group, contexts=ctx)
                            for p, m, key, ctx in batches[:args.steps] if _update(args)]

    def carried(delay, release, defer=False, ahead=0):
        def run(env):  # one stream for every step, --carry batches queued ahead
            s = streaming.Stream(sampler, env, tok, glue, max_turns=args.max_turns,
                                 put=jnp.asarray, schedule=schedule(delay, release, defer, ahead),
                                 group_size=args.group, carry=args.carry)
            try:
                out = []
                for j in range(args.steps):
                    for k in range(len(out) + len(s.batches),
                                   min(j + 1 + args.carry, args.steps)):
                        s.add(k, *batches[k])
                    _update(args)
                    t0 = time.perf_counter()
                    out.append(s.run(params, j, j))  # the same params, run j's version
                    out[-1].stats["bench/step_s"] = time.perf_counter() - t0
                return out
            finally:
                s.close()
        return run

    def timed(fn, env_of):
        times, made = [], None
        for r in range(args.repeats + 1):  # the first compiles
            env = env_of()
            try:
                t0 = time.perf_counter()
                made = fn(env)
                times.append(time.perf_counter() - t0)
            finally:
                getattr(env, "close", lambda: None)()
        # --repeats 0: one run, its first steps compiling (the carried arms' steady steps
        # are not among them)
        return statistics.median(times[1:] or times) / args.steps, made

    if args.env == "repl":  # real sessions; zero: no wait inside them
        zero = lambda: ReplCalls(0.0, 0.0)
        slow = lambda: ReplCalls(args.median, args.p99)
    else:
        zero = lambda: Worlds()
        slow = lambda: Delayed(Worlds(), args.median, args.p99, seed=0,
                               limit_s=args.call_limit)
    saved, args.steps = args.steps, 1
    probe_s, probe = timed(stream(1, True), zero)
    args.steps = saved
    probe = probe[0]
    chunk_s = probe_s / max(probe.stats["stream/chunks"], 1)
    d = max(1, math.ceil(args.cover / chunk_s))
    specs = {"held": ("streamed, rows held", stream, (d, False)),
             "released": ("streamed, rows released", stream, (d, True)),
             "deferred": ("streamed, rows held, late calls deferred", stream, (0, False, True)),
             "deferred_released": ("streamed, rows released, late calls deferred", stream,
                                   (0, True, True)),
             "carried": (f"carried {args.carry} ahead, rows released", carried, (d, True)),
             "carried_deferred": (f"carried {args.carry} ahead, rows released, late calls "
                                  "deferred", carried, (0, True, True))}
    chosen = args.arms.split(",") if args.arms else ["lock", *specs]
    arms = {} if args.no_lock or "lock" not in chosen else {"lock step": lock}
    for key in (a for a in chosen if a != "lock"):
        label, make, how = specs[key]
        for ahead in (int(a) for a in args.lookahead.split(",")):
            arms[label + (f", {ahead} steps queued ahead" if ahead else "")] = make(*how, ahead)
    base_tokens: dict = {}
    print(f"{args.steps} steps of {n} episodes (groups of {args.group}), {args.rows} streamed "
          f"rows, chunks of {args.chunk} steps ({chunk_s * 1e3:.0f} ms each), call delay d = "
          f"{d} chunks; latencies lognormal(median {args.median} s, p99 {args.p99} s"
          f"{f', limit {args.call_limit:g} s' if args.call_limit < math.inf else ''})"
          f"{' inside real python_repl sessions' if args.env == 'repl' else ''}; "
          f"updates of {args.update_s} s between steps")
    ep = probe.stats
    print(f"episodes: {ep['episode/turns_mean']:.2f} turns, {ep['episode/tool_calls_mean']:.2f} "
          f"calls, response mask {probe.rollout.mask_B_R.sum(1).mean():.0f} tokens mean, "
          f"{np.percentile(probe.rollout.mask_B_R.sum(1), 90):.0f} p90\n")
    print("| driver | latency | step s | x zero latency | device idle | useful row-steps |"
          " late calls | waits open / call / verdict s (a call's wait for a thread, p99) |"
          " host ms / kB / reads a chunk |"
          " tokens = lock step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    steady = range(args.carry, args.steps - args.carry)  # carried: neither filling nor draining
    for name, fn in arms.items():
        zero_s = zero_steady = None
        for label, env_of in (("zero", zero), ("lognormal", slow)):
            s, made = timed(fn, env_of)
            zero_s = zero_s or s
            # Against the first arm's at the same latency (a call limit changes what the
            # timed-out calls answer, never across arms).
            base = base_tokens.setdefault(label, [m.rollout.tokens_B_R for m in made])
            same = all(np.array_equal(m.rollout.tokens_B_R, b) for m, b in zip(made, base))
            wall = [m.stats["rollout/device_idle_share"] for m in made]
            steps = sum(m.stats["rollout/decode_steps"] for m in made)
            rows = n if fn is lock else args.rows
            useful = sum(_made(m, rows) for m in made)
            late = sum(_late(m) for m in made)
            print(f"| {name} | {label} | {s:.2f} | {s / zero_s:.2f} | "
                  f"{float(np.mean(wall)):.1%} | {useful / max(steps * rows, 1):.2f}"
                  f" | {late:.0f} | {_waits(made)} | {_host(made)} | {same} |", flush=True)
            if name.startswith("carried") and len(steady):  # the steady state's steps alone
                mid = [made[j] for j in steady]
                step_s = statistics.median(m.stats["bench/step_s"] for m in mid)
                zero_steady = zero_steady or step_s
                idle = sum(m.stats["rollout/device_idle_share"] * m.stats["bench/step_s"]
                           for m in mid) / sum(m.stats["bench/step_s"] for m in mid)
                made_tokens = sum(_made(m, rows) for m in mid)
                row_steps = sum(m.stats["rollout/decode_steps"] for m in mid) * rows
                late = sum(_late(m) for m in mid)
                print(f"| {name}, steps {steady.start}-{steady.stop - 1} | {label} | "
                      f"{step_s:.2f} | {step_s / zero_steady:.2f} | {idle:.1%} | "
                      f"{made_tokens / max(row_steps, 1):.2f} | {late:.0f} | {_waits(mid)} | "
                      f"{_host(mid)} | {same} |",
                      flush=True)
                if label == "lognormal" and args.median > 0:  # what no such schedule beats
                    ratio, _, idle = stall_bound.bound(
                        1, calls=round(np.mean([_issued(m) for m in mid])), runs=2000,
                        decode_s=zero_steady, update_s=args.update_s, median_s=args.median,
                        p99_s=args.p99, limit_s=args.call_limit, seed=0)
                    print(f"|   (stall_bound.py, 1 run of slack: at least {ratio:.2f}x, "
                          f"idle {idle:.1%}) |||||||||", flush=True)
                if label == "zero":  # runs between a token's sampling and its batch's run
                    lag = np.concatenate([(j - m.rollout.version_B_R)[
                        m.rollout.loss_mask_B_R > 0] for j, m in enumerate(made)])
                    print(f"|   (version lag in runs: mean {lag.mean():.2f}, max {lag.max()}) "
                          "|||||||||", flush=True)


def _made(made, rows: int) -> float:
    """Tokens sampled in one run of the stream (a carried batch's first turns were made in
    the runs before)."""
    return made.stats["rollout/useful_row_steps"] * made.stats["rollout/decode_steps"] * rows


def _issued(made) -> float:
    return made.stats.get("stream/calls_issued", 0)


def _late(made) -> float:
    """Calls not back at their boundary in one run of the stream."""
    return made.stats.get("rollout/late_call_share", 0.0) * _issued(made)


def _waits(made) -> str:
    """Seconds a step the driver waited, by what for (a stream's; lock step waits on its
    whole batch at once, counted in device idle only)."""
    if "rollout/wait_open_s" not in made[0].stats:
        return "-"
    queued = max(m.stats["rollout/env_call_queued_p99_s"] for m in made)
    return " / ".join(f"{sum(m.stats[f'rollout/wait_{k}_s'] for m in made) / len(made):.2f}"
                      for k in ("open", "call", "verdict")) + f" ({queued:.2f})"


def _host(made) -> str:
    """The stream driver's own time a chunk (neither the devices' work nor a wait), ms, what
    it read back from the devices, kB, and in how many reads (each a wait for them)."""
    if "rollout/host_ms_per_chunk" not in made[0].stats:
        return "-"
    med = lambda k: statistics.median(m.stats[f"rollout/host_{k}_per_chunk"] for m in made)
    return f"{med('ms'):.2f} / {med('kb'):.0f} / {med('reads'):.1f}"


def _update(args) -> bool:
    """The devices busy with an update between two steps (a sleep of --update-s)."""
    time.sleep(args.update_s)
    return True


if __name__ == "__main__":
    main()
