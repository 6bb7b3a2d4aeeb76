"""How a run starts: the supervised warm start on imperfect demonstrations (or a Hugging Face
checkpoint), the held-out evaluation before RL, and the RL loop's fresh state (resuming from
the last checkpoint is the run scaffold's: run_scaffold.resume).

Each demonstration is the task's prompt and an answer that is wrong with probability
`wrong_fraction` (off by 1..max_offset). A policy that imitates them perfectly answers correctly
only ~(1 - wrong_fraction) of the time when sampled: the ceiling of imitation, which the RL phase
is there to break using the verifier.

Resume: the warm-start params (the frozen reference policy) and the start evaluation come back
from their own files, so a resumed run recomputes nothing an uninterrupted run computed once.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from rlvr_jax import batching, distributed, evaluation, optim
from rlvr_jax.build import Generators, Policy, TaskSetup, Updates, Warmup
from rlvr_jax.checkpoint import Checkpointer
from rlvr_jax.config import ConfigError, EvalConfig, WarmupConfig
from rlvr_jax.episodes import Glue
from rlvr_jax.models import hf
from rlvr_jax.run_control import Stopped
from rlvr_jax.tasks.base import Task
from rlvr_jax.tracking import Tracker
from rlvr_jax.types import SFTBatch, TrainState
from rlvr_jax.verify.verifiers import Verifier


class ToolDemos(NamedTuple):
    """Warm-start demonstrations that call a tool: the call as the policy writes it, the
    tool's output as the environment appends it (ids, not trained on), then the answer."""

    render_call: Callable[[str, dict], str]  # the environment's call format
    glue: Glue  # how the environment's observations become ids
    observation_tokens: int
    fraction: float  # share of demonstrations that call the tool


def demonstration_batch(task: Task, tokenizer, *, seed: int, batch_index: int,
                        count: int, wrong_fraction: float, max_offset: int, prompt_len: int,
                        max_new_tokens: int, tools: Optional[ToolDemos] = None) -> SFTBatch:
    """Batch `batch_index` of demonstrations (a pure function of its arguments)."""
    # A stream distinct from the RL problem stream (whose rng is [seed, step]).
    rng = np.random.default_rng([seed, batch_index, 0xD3])
    problems = task.train_batch(seed + 0x5F7, batch_index, count)
    wrong = rng.random(count) < wrong_fraction
    responses = [task.demonstration(p, w, rng, max_offset) for p, w in zip(problems, wrong)]
    prompt, prompt_mask = batching.encode_prompts(tokenizer, [task.prompt(p) for p in problems],
                                                  prompt_len)
    response, response_mask = batching.encode_responses(tokenizer, responses, max_new_tokens)
    attention = response_mask.copy()
    if tools is not None:
        calls = rng.random(count) < tools.fraction
        for i in np.flatnonzero(calls):
            ids, trained = _tool_demonstration(task, problems[i], tools, tokenizer, rng)
            if len(ids) > max_new_tokens:
                raise ConfigError(f"config key 'sampling.max_new_tokens'={max_new_tokens} is "
                                  f"too small for a tool-calling demonstration ({len(ids)} "
                                  "tokens)")
            response[i], response_mask[i], attention[i] = tokenizer.pad_token_id, 0.0, 0.0
            response[i, :len(ids)], response_mask[i, :len(ids)] = ids, trained
            attention[i, :len(ids)] = 1.0
    return batching.sft_batch(prompt, prompt_mask, response, response_mask, attention)


def _tool_demonstration(task: Task, problem, tools: ToolDemos, tokenizer, rng):
    """(ids, trained): each call, its observation (untrained), then the answer and EOS. A
    task's `tool_demonstration` gives one call, (tool, arguments, output, answer), or
    several, {"calls": [(tool, arguments, output), ...], "answer": answer}."""
    demo = task.tool_demonstration(problem, rng)
    if isinstance(demo, dict):
        calls, answer = demo["calls"], demo["answer"]
    else:
        tool, arguments, output, answer = demo
        calls = [(tool, arguments, output)]
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
    ids, trained = [], []
    for tool, arguments, output in calls:
        call = encode(tools.render_call(tool, arguments))
        observation, _ = tools.glue.ids(output, tools.observation_tokens)
        ids += call + observation
        trained += [1.0] * len(call) + [0.0] * len(observation)
    final = encode(answer) + [tokenizer.eos_token_id]
    return ids + final, trained + [1.0] * len(final)


def run_warmup(sft_step: Callable, state, make_batch: Callable[[int], SFTBatch], steps: int,
               put: Callable, on_log: Callable[[int, dict], None], log_every: int = 100,
               should_stop: Callable[[], bool] = lambda: False):
    """`steps` supervised updates; `make_batch(i)` builds batch i on the host. A stop request
    abandons the warm-up (it is not checkpointed: the rerun starts it again)."""
    for i in range(steps):
        if should_stop():
            raise Stopped(f"stopped during the warm-up, at step {i} of {steps}; the rerun "
                          "starts the warm-up again")
        state, metrics = sft_step(state, put(make_batch(i)))
        if (i + 1) % log_every == 0 or i + 1 == steps:
            on_log(i + 1, metrics)
    return state


def warm_start(policy: Policy, setup: TaskSetup, sft: Warmup, w: WarmupConfig, seed: int,
               key: jax.Array, tracker: Tracker, should_stop: Callable[[], bool],
               tools: Optional[ToolDemos] = None):
    """Supervised warm-up from freshly initialised params; returns the warm params."""
    state = optim.init_train_state(policy.init_params(key), sft.tx)
    state = jax.device_put(state, policy.shardings(state))  # the step's out_shardings: 1 compile
    make = lambda i: demonstration_batch(
        setup.task, setup.tokenizer, seed=seed, batch_index=i, count=w.sequences_per_step,
        wrong_fraction=w.wrong_fraction, max_offset=w.wrong_max_offset,
        prompt_len=setup.prompt_len, max_new_tokens=setup.max_new_tokens, tools=tools)
    t0 = time.perf_counter()

    def on_log(i, metrics):
        metrics = jax.device_get(metrics)
        tracker.write(f"warm-up step {i}/{w.steps}  loss {float(metrics['loss']):.4f}  "
                      f"{time.perf_counter() - t0:.0f}s")
        tracker.log(0, {f"warmup/{k}": v for k, v in metrics.items()} | {"warmup/step": i})

    return run_warmup(sft.step, state, make, w.steps, policy.put, on_log,
                      should_stop=should_stop).params


def held_out_accuracy(generators: Generators, setup: TaskSetup, verifier: Verifier,
                      e: EvalConfig, put: Callable, params, key: jax.Array,
                      score: Optional[Callable] = None, extra: Sequence = (),
                      say: Callable[[str], None] = lambda text: None, label: str = "") -> dict:
    """The held-out evaluation the loop logs (rlvr_jax/evaluation.py), single- or multi-turn
    as the generators are; with a reward model's `score` (learned_reward.eval_scorer), also
    its score of the responses. `extra`: each extra held-out set (build.ExtraSet: its own
    prompt slots and samplers), reported under `<name>/...` (eval.extra_problems of each, 0:
    all). `say` gets its progress lines (`label`: which evaluation, e.g. " before RL").
    eval.num_problems=0: no evaluation ({}; its samplers never compile)."""
    if not e.num_problems:
        return {}
    common = dict(sampled_per_problem=e.sampled_per_problem,
                  sequences_per_batch=e.sequences_per_batch, put=put, key=key, say=say)
    out = evaluation.held_out(generators.greedy, generators.sampled, params, setup.task,
                              setup.tokenizer, verifier, num_problems=e.num_problems,
                              score=score, label=label, prompt_len=setup.prompt_len, **common)
    for s in extra:
        n = len(s.task.heldout_set(e.extra_problems or 10**9))
        result = evaluation.held_out(s.generators.greedy, s.generators.sampled, params, s.task,
                                     setup.tokenizer, s.verifier, num_problems=n,
                                     label=f"{label} ({s.name})",
                                     prompt_len=s.setup.prompt_len, **common)
        out |= {f"{s.name}/{k}": v for k, v in result.items()}
    return out


def warm_params(policy: Policy, setup: TaskSetup, sft: Warmup, *, warmup: WarmupConfig,
                seed: int, ckpt: Checkpointer, tracker: Tracker,
                should_stop: Callable[[], bool] = lambda: False,
                tools: Optional[ToolDemos] = None):
    """The warm policy, placed on the mesh: model.path's weights, else the run's (or the
    shared) warm-start checkpoint, else a supervised warm start, saved for the next time."""
    base_key = jax.random.key(seed)
    shapes = jax.eval_shape(policy.init_params, base_key)
    abstract_params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                   shapes, policy.shardings(shapes))
    model_cfg = setup.model_cfg
    if model_cfg.path:  # pretrained weights: no warm start
        warm = jax.device_put(hf.load(model_cfg.path, model_cfg)[1],
                              jax.tree.map(lambda a: a.sharding, abstract_params))
        tracker.write(f"loaded {model_cfg.path} ({model_cfg.num_layers} layers, hidden "
                      f"{model_cfg.hidden_size}); no warm start")
    elif ckpt.has_warmstart():
        warm = ckpt.restore_warmstart(abstract_params)
        tracker.write(f"found warm-start params in {ckpt.warmstart_dir}; skipping the warm-up")
    else:
        warm = warm_start(policy, setup, sft, warmup, seed,
                          jax.random.fold_in(base_key, 1), tracker, should_stop, tools)
        ckpt.save_warmstart(warm)
    return warm


def rl_state(policy: Policy, updates: Updates, warm, seed: int) -> TrainState:
    """The RL train state at step 0, from the warm params, placed on the mesh (the update's
    out_shardings: one compile). A resumed run restores over it (run_scaffold.resume)."""
    state = optim.init_train_state(
        updates.init_rl_params(warm, jax.random.fold_in(jax.random.key(seed), 4)),
        updates.rl_tx)
    return jax.device_put(state, policy.shardings(state))


def eval_key(seed: int) -> jax.Array:
    """The key of every held-out evaluation of a run (start, during, end): the same draws."""
    return jax.random.fold_in(jax.random.key(seed), 2)


def start_evaluation(run_dir: str, tracker: Tracker, evaluate: Callable[[], dict]) -> dict:
    """The held-out evaluation of the warm params, computed and logged (step 0) once per run;
    a resumed run reads it back from eval_start.json."""
    path = os.path.join(run_dir, "eval_start.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    result = evaluate()
    distributed.publish(path, json.dumps(result))
    tracker.log(0, {f"eval/{k}": v for k, v in result.items()})
    if "greedy_accuracy" in result:
        tracker.write(f"eval before RL: greedy {result['greedy_accuracy']:.3f}  sampled "
                      f"{result['sampled_accuracy']:.3f}")
    return result
