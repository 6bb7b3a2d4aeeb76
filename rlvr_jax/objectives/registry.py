"""The table of policy objectives: `register(ObjectiveSpec(...))` at a module's import; the
package's modules and `rlvr_jax.objectives` entry points are imported on first use."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from rlvr_jax import plugins
from rlvr_jax.config.choices import ConfigError

if TYPE_CHECKING:  # the table is read, and configs checked, without importing JAX
    import jax

# The loss's knobs an objective may declare among its options' fields (algo.loss.*); any
# other option is algo.loss.options.<name>.
SHARED = ("clip_eps_low", "clip_eps_high", "dual_clip_c")


class Inputs(NamedTuple):
    """What an objective sees (B sequences, R response tokens); never the config."""

    logp_B_R: jax.Array  # log pi_theta of the sampled tokens (the gradient flows here)
    anchor_logp_B_R: jax.Array  # what the ratio is taken to: the sampler's, or the proximal
    adv_B_R: jax.Array  # advantages per token
    mask_B_R: jax.Array  # 1 on the tokens in the loss
    # A PRNG key for an objective that samples (Clip-Cov); the update step's own, folded per
    # update and microbatch, so a run repeats. None outside an update (a fixed key is used).
    key: Optional[jax.Array] = None


class Terms(NamedTuple):
    """An objective's output: `loss` per token [B, R] (aggregated by algo.loss.agg, scaled by
    the off-policy weights) or per sequence [B] (averaged over sequences); `fractions`:
    indicators of the same shape, reported as their mean (e.g. `clip_frac_low`)."""

    loss: jax.Array
    fractions: dict


@dataclass(frozen=True)
class ObjectiveSpec:
    name: str  # algo.loss.kind
    fn: Callable[[Inputs, Any], Terms]  # (inputs, options) -> Terms: pure, jit-traceable
    options: type  # a frozen dataclass of plain values; its `check(key)` names a bad one
    level: str = "token"  # "token" | "sequence": what `Terms.loss` holds
    decoupled: bool = True  # takes algo.loss.correction's per-token importance weights
    doc: str = ""  # one line for the table (conf/README.md)


_OBJECTIVES = plugins.Table("objective", "rlvr_jax.objectives", "rlvr_jax.objectives",
                            skip=("registry",))


def register(spec: ObjectiveSpec) -> ObjectiveSpec:
    """Add an objective (at its module's import); two of one name from two modules is an
    error."""
    if spec.level not in ("token", "sequence"):
        raise ValueError(f"objective {spec.name!r}: level must be token or sequence")
    return _OBJECTIVES.add(spec.name, spec, spec.options.__module__)


def specs() -> dict[str, ObjectiveSpec]:
    return _OBJECTIVES.all()


def get(name: str, key: str = "algo.loss.kind") -> ObjectiveSpec:
    return _OBJECTIVES.get(name, key)


def options_for(name: str, shared: dict, extra: Optional[dict] = None,
                key: str = "algo.loss") -> Any:
    """The objective's options from the loss's shared knobs (those it declares) and
    `extra` (algo.loss.options: each must be one of its fields), checked."""
    spec = get(name, f"{key}.kind")
    fields = {f.name for f in dataclasses.fields(spec.options)}
    extra = dict(extra or {})
    unknown = sorted(set(extra) - fields)
    if unknown:
        raise ConfigError(f"config key '{key}.options.{unknown[0]}': objective {name} has no "
                          f"such option (its options: {', '.join(sorted(fields)) or 'none'})")
    values = {k: v for k, v in shared.items() if k in fields} | extra
    try:
        options = spec.options(**values)
    except TypeError as e:
        raise ConfigError(f"config key '{key}.options': objective {name}: {e}") from None
    check = getattr(options, "check", None)
    if check is not None:
        check(key)
    return options
