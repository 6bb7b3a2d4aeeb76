"""Host-side verification: checks that turn a completion into a typed Verdict.

No JAX here: verifiers run in worker processes (rlvr_jax/sandbox/pool.py) so a hung or
crashing check is killed and replaced without touching the trainer. The graders register
their kinds with the sandbox package here, which imports none of them."""

from rlvr_jax.sandbox import codecs as _codecs
from rlvr_jax.verify import code as _code
from rlvr_jax.verify import gym_score as _gym_score
from rlvr_jax.verify import sql as _sql
from rlvr_jax.verify import tool_run as _tool_run
from rlvr_jax.verify import tools as _tools
from rlvr_jax.verify import worker as _worker

for _kind, _codec in (("code", _code), ("sql", _sql), ("tool", _tools),
                      ("tool_run", _tool_run), ("reasoning_gym", _gym_score)):
    _codecs.register(_kind, _codec)
# Trusted graders (and the pool's own test kinds), run unsandboxed by verify/worker.py.
_codecs.register_trusted(tuple(_worker.KINDS), "rlvr_jax.verify.worker")
