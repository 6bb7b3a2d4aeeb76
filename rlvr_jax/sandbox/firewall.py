"""The verdict firewall: the one boundary between candidate-controlled data and the host.

Every host-side function that reads what a candidate produced (its completion text, the outputs
its program returned from the sandbox, the arguments of its tool call) and turns it into a
`Verdict` runs through `guarded`. Whatever that function raises, the caller gets a `Verdict`,
so `pool.verify`, `submit().result()`, the trusted in-process checkers and the CLI never raise
because of what a candidate wrote, and one sample cannot change another's verdict.

Attribution (whose fault an exception is) is decided by a control, not guessed from the
exception's type: the same function runs again on the same job with the candidate's part
replaced by a neutral one (an empty completion, a reply with empty outputs). If the control
also raises, the failure does not depend on the candidate: it is our bug or a broken task, a
logged SANDBOX_ERROR (masked out of the loss, never scored). If the control returns, the
candidate's data caused the exception: it is the candidate's verdict (`blame`: RUNTIME_ERROR
for programs, WRONG for answers checked by a trusted grader), with the exception named in the
detail. The control runs only on the exception path, so a correct verdict costs nothing extra.

KeyboardInterrupt is re-raised: Ctrl-C in the trainer stops the run, it is no verdict. The
functions behind the firewall must still be bounded in time by construction (linear parsers,
bounded depths; see tools.py, logic.py, math.py): an exception boundary cannot stop a loop.

No JAX import: the verifier side never touches the trainer's devices.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, TypeVar

from rlvr_jax.types import Status, Verdict

log = logging.getLogger("rlvr_jax.verify")
T = TypeVar("T")


def describe(e: BaseException, limit: int = 200) -> str:
    """`TypeName: message`, cut to `limit` characters; never raises (an exception's own
    `__str__` may)."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - the message itself is untrusted
        text = "<unprintable>"
    return f"{type(e).__name__}: {text}"[:limit]


def attempt(fn: Callable[[], T], control: Optional[Callable[[], object]], blame: Status,
            what: str) -> tuple[Optional[T], Optional[Verdict]]:
    """(fn(), None), or (None, the verdict for what it raised).

    fn: the host function on the candidate's data.
    control: the same function with the candidate's part neutral (None: there is no neutral
        input, so an exception is always the candidate's).
    blame: the candidate's status when its data made `fn` raise.
    what: what was being checked, for the detail and the log ("code reply", "logic check").
    """
    try:
        return fn(), None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit and RecursionError included
        failure = e
    try:
        if control is not None:
            control()
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - it fails without the candidate: not its fault
        return None, bug(what, failure)
    return None, Verdict(blame, f"{what} raised on this answer: {describe(failure)}")


def guarded(check: Callable[[], Verdict], control: Optional[Callable[[], object]],
            blame: Status, what: str) -> Verdict:
    """`check()` as a Verdict, whatever it raises or returns (arguments as `attempt`)."""
    v, refused = attempt(check, control, blame, what)
    if refused is not None:
        return refused
    if not isinstance(v, Verdict) or not isinstance(v.status, Status):
        # a wrong return type is our bug whatever the input
        return bug(what, TypeError(f"returned {type(v).__name__}, not a Verdict"))
    return v


def bug(what: str, failure: BaseException) -> Verdict:
    """Our own failure, provably not the candidate's: logged, and masked out of the loss."""
    log.error("verifier bug (%s), also on a neutral input: %s", what, describe(failure, 1000))
    return Verdict(Status.SANDBOX_ERROR, f"verifier bug in {what}: {describe(failure)}")
