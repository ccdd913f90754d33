"""What the Python programs of the conformance suite share: the step bound, the run's topic
names, the failure type and the result lines conformance.py reads.

    VERSION <tab> release
    RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
"""

import uuid

WAIT_S = 15  # every step is bounded, so a missing feature fails in seconds
RECORDS = 200
RUN = uuid.uuid4().hex[:8]


class Failed(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failed(what)


def topic_name(client, scenario):
    """This run's topic for a scenario of one client (conf-<client>-<scenario>-<run>)."""
    return f"conf-{client}-{scenario.replace(' ', '-')}-{RUN}"


def version(release):
    print(f"VERSION\t{release}", flush=True)


def result(name, error=None):
    """One RESULT line; `error` is an exception or a reason string, None for a pass."""
    if error is None:
        print(f"RESULT\t{name}\tPASS\t", flush=True)
        return
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    reason = reason.replace("\t", " ").replace("\n", " ")
    print(f"RESULT\t{name}\tFAIL\t{reason}", flush=True)
