"""Shared test helpers: compose the real conf/ with overrides, tiny-run overrides."""

import os
import re

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rlvr_jax import config as config_lib

def xla_env(devices: int, **extra) -> dict:
    """The environment for a subprocess with `devices` fake CPU devices and the suite's other
    XLA flags (conftest.py: fast compiles)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    return dict(os.environ, XLA_FLAGS=" ".join(
        [f"--xla_force_host_platform_device_count={devices}"] + flags), **extra)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
CONF_DIR = os.path.join(ROOT, "conf")

# A run small enough for a test: tiny model, 12 warm-up steps (enough to emit digits), batches that split over 8 devices.
TINY = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=64", "warmup.steps=12", "warmup.sequences_per_step=16",
    "warmup.lr_warmup_steps=0", "warmup.learning_rate=0.01",
    "algo.prompts_per_step=4", "algo.samples_per_prompt=4", "eval.num_problems=8",
    "eval.sampled_per_problem=1", "eval.sequences_per_batch=8", "logger.mode=disabled",
    "logger.progress_bar=false", "checkpoint.every_steps=1",
]


def compose_cfg(overrides=()):
    config_lib.register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def run_config(overrides=(), run_dir="."):
    cfg = compose_cfg(overrides)
    cfg.run_dir = str(run_dir)
    return config_lib.to_run_config(cfg)


def rl_step_options(critic=None, epochs=1, minibatches=1, microbatches=1, group_size=1,
                    pack_rows=0, pack_capacity=0, prompt_rows=0, **loss):
    """make_rl_step's option records from flat keywords (loss knobs, critic layout, schedule)."""
    from rlvr_jax.train_step import CriticOptions, LossOptions, UpdateSchedule

    return dict(loss=LossOptions(**loss), critic=CriticOptions(critic) if critic else None,
                schedule=UpdateSchedule(epochs, minibatches, microbatches, group_size,
                                        pack_rows, pack_capacity, prompt_rows))


def sandbox_unavailable() -> str:
    """Why the bubblewrap sandbox cannot run here ("" when it can). With
    RLVR_REQUIRE_SANDBOX=1 (CI) an unavailable sandbox is an error, never a skip."""
    from rlvr_jax.sandbox import bwrap

    try:
        bwrap.check_available()
        return ""
    except bwrap.SandboxUnavailable as e:
        if os.environ.get("RLVR_REQUIRE_SANDBOX") == "1":
            raise RuntimeError(f"RLVR_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {e}")
        return str(e)


UNAVAILABLE = sandbox_unavailable()


def scale_weights(params, factor: float):
    """Kernels and embeddings times `factor` (norms and biases kept): a random model's outputs
    far from uniform, so that tests comparing two paths compare something."""
    import jax

    def scale(path, x):
        name = str(getattr(path[-1], "key", path[-1]))
        return x * factor if name in ("kernel", "embedding") else x

    return jax.tree_util.tree_map_with_path(scale, params)


# A tiny random Qwen2-family model and GSM8K-format files for the real-checkpoint path.
GSM8K_SMALL = ["model.compute_dtype=float32", "sampling.max_new_tokens=12",
               "algo.prompts_per_step=4", "algo.samples_per_prompt=4",
               # Packed rows sized to these prompts: the preset's 1536 slots would make a
               # microbatch of 8 rows ~17x the real tokens (8 s of a CPU update step).
               "algo.pack.microbatch_rows=8", "algo.pack.row_tokens=256",
               "eval.num_problems=8", "eval.sequences_per_batch=8", "eval.every_steps=1",
               "num_steps=2", "logger.mode=disabled", "logger.progress_bar=false",
               "checkpoint.every_steps=1", "verifier.workers=1",
               # a random model is never right: format_penalty still separates unparseable
               # output
               "verifier.reward_scheme=format_penalty", "algo.optim.lr_warmup_steps=0",
               "algo.optim.learning_rate=1e-3"]


def make_tiny_gsm8k(root):
    """root/model (a tiny random qwen2 HF directory), root/data/{train,test}.jsonl."""
    from rlvr_jax.tools import tiny_hf

    tiny_hf.make_model(str(root / "model"), "qwen2")
    os.makedirs(root / "data")
    tiny_hf.make_gsm8k_like(str(root / "data" / "train.jsonl"), 64, seed=0)
    tiny_hf.make_gsm8k_like(str(root / "data" / "test.jsonl"), 16, seed=1)
    return root


def make_char_teacher(out_dir, hidden=48, layers=2, seed=3):
    """A random Hugging Face directory (llama family) with the character tokenizer of the
    procedural tasks: a distillation teacher (distill.teacher) for their students."""
    import jax
    import numpy as np

    from rlvr_jax.config import ModelConfig
    from rlvr_jax.models import hf
    from rlvr_jax.models.policy import Decoder, init_params
    from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer

    save_char_tokenizer(str(out_dir))
    tok = load_tokenizer(str(out_dir))
    cfg = ModelConfig(vocab_size=len(tok), hidden_size=hidden, num_layers=layers, num_heads=4,
                      num_kv_heads=2, intermediate_size=2 * hidden, tie_embeddings=True)
    params = init_params(Decoder(cfg, cfg.vocab_size), jax.random.key(seed))
    hf.save(str(out_dir), jax.tree.map(np.asarray, params), cfg, "llama",
            {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id})
    tok.save_pretrained(str(out_dir))
    return out_dir


def one_and_two_processes(worker: str, out_dir, devices: int, here: tuple = (),
                          there: tuple = ()) -> tuple:
    """`worker` ("module:function", called as (out, process_id, processes, port, *args)) run
    as 2 jax.distributed processes (subprocesses, `devices` / 2 CPU devices each, gloo;
    args `there`) and meanwhile as 1 process here (args `here`: it takes its `devices` of
    this process's); -> the .npz each wrote: (one, [process 0, process 1])."""
    import socket
    import subprocess
    import sys

    import numpy as np

    module, name = worker.split(":")
    env = xla_env(devices // 2, HF_HUB_OFFLINE="1", JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # (tests/test_distributed.py: why)

    def launch():
        with socket.socket() as sock:  # a free port, until the coordinator binds it
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return [subprocess.Popen(
            [sys.executable, "-c", f"from {module} import {name} as w; "
             f"w({os.path.join(str(out_dir), f'p{i}.npz')!r}, {i}, 2, {port}, *{there!r})"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(2)]

    procs = launch()
    try:
        getattr(__import__(module, fromlist=[name]), name)(
            os.path.join(str(out_dir), "one.npz"), 0, 1, 0, *here)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    for attempt in range(3):
        first = procs[0].communicate(timeout=600)[0]  # the coordinator's process
        # Another process (a Ray worker of the suite's cluster) can take the port between
        # its pick and the coordinator's bind: that run never started; again, on a new port.
        if attempt < 2 and procs[0].returncode and "Failed to start RPC server" in first:
            procs[1].kill()
            procs[1].communicate()
            procs = launch()
            continue
        outs = [first, procs[1].communicate(timeout=600)[0]]
        break
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return (np.load(os.path.join(str(out_dir), "one.npz")),
            [np.load(os.path.join(str(out_dir), f"p{i}.npz")) for i in range(2)])


def hlo_computations(hlo: str) -> dict:
    """Optimised HLO text -> {computation name: its instruction lines}."""
    comps, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            name = head.group(1)
            comps[name] = []
        elif name and line.strip() and line.strip() != "}":
            comps[name].append(line.strip())
    return comps


def entry_point_commands(commands: list, env: dict) -> list:
    """Each (args, cwd) of `commands` through `python -m rlvr_jax.train` -> {"code", "stdout",
    "stderr"} each, as a shell would see them (the exit code; a traceback on stderr). One
    process runs them all in turn (_entry_point_worker): a command that fails on its input
    costs ~0.3 s there against ~4 s of interpreter, JAX and Hydra start-up in a process of
    its own."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        spec, out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(spec, "w") as f:
            json.dump([[list(args), str(cwd)] for args, cwd in commands], f)
        proc = subprocess.run([sys.executable, "-c", "from tests.helpers import "
                               f"_entry_point_worker as w; w({spec!r}, {out!r})"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        with open(out) as f:
            return json.load(f)


def _entry_point_worker(spec: str, out: str) -> None:
    import json
    import sys
    import tempfile
    import traceback

    from hydra.core.global_hydra import GlobalHydra

    from rlvr_jax import train

    results = []
    for args, cwd in json.load(open(spec)):
        os.chdir(cwd)
        sys.argv, train._COMPOSED = ["rlvr_jax.train", *args], False
        GlobalHydra.instance().clear()
        with tempfile.TemporaryFile("w+") as o, tempfile.TemporaryFile("w+") as e:
            saved = os.dup(1), os.dup(2)
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(o.fileno(), 1), os.dup2(e.fileno(), 2)  # what the command's fds see
            code = 0
            try:
                train.cli()
            except SystemExit as exc:  # as the interpreter maps sys.exit's argument
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except BaseException:  # an uncaught exception: a traceback and exit code 1
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os.dup2(saved[0], 1), os.dup2(saved[1], 2)
                os.close(saved[0]), os.close(saved[1])
            o.seek(0), e.seek(0)
            results.append({"code": code, "stdout": o.read(), "stderr": e.read()})
    with open(out, "w") as f:
        json.dump(results, f)
