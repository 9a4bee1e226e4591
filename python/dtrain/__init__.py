"""dtrain from Python: the planner, training runs, collectives and checkpoints.

Each function runs the same code as the `dtrain` command line, in this process: keyword
arguments are the command's flags (``tp=8`` is ``--tp 8``, ``sequence_parallel=True`` is
``--sequence-parallel``, a list is comma-joined), the result is the command's ``--json``
report as a dict, and bad arguments raise ValueError with the message the command line
prints. The GIL is released while C++ runs. Ctrl-C during ``train`` stops the run after the
step in progress (saving a checkpoint under ``save=``) and raises KeyboardInterrupt; a
second Ctrl-C ends the process, as on the command line.
"""

import json as _json

from . import _dtrain

__all__ = ["version", "plan", "train", "collective", "load_checkpoint", "run"]


def version():
    """The library's semantic version, as `dtrain --version` prints it."""
    return _dtrain.version()


def _flags(options):
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def run(*args, on_step=None, on_eval=None):
    """Runs `dtrain ARGS...` and returns what it printed on stdout.

    Raises ValueError with the command line's error message when it fails, and
    KeyboardInterrupt when a run was stopped by Ctrl-C."""
    code, out, err = _dtrain.run([str(a) for a in args], on_step, on_eval)
    if code in (130, 143):
        raise KeyboardInterrupt(err or "dtrain: the run was stopped by a signal")
    if code != 0:
        raise ValueError(err)
    return out


def _json_command(command, options, **callbacks):
    if "json" in options:
        raise ValueError("json: the Python functions always return the JSON report")
    return _json.loads(run(*command, *_flags(options), "--json", **callbacks))


def plan(**options):
    """`dtrain plan --json`: one layout's plan, or with search=True the ranked layouts."""
    return _json_command(["plan"], options)


def train(config=None, on_step=None, on_eval=None, **options):
    """`dtrain train --json`: trains and returns the run's summary.

    `config` (a dict) and keyword arguments are the flags (keywords win). on_step(dict) is
    called after every update with step, loss, lr, grad_norm and ms; on_eval(dict) after
    every evaluation with step and val_loss."""
    merged = dict(config or {})
    merged.update(options)
    return _json_command(["train"], merged, on_step=on_step, on_eval=on_eval)


def collective(**options):
    """`dtrain collectives --json`: runs one collective on thread ranks and reports its
    counters beside the formulas, its time, algbw and busbw."""
    return _json_command(["collectives"], options)


def load_checkpoint(path):
    """A checkpoint's parameters (any layout it was saved in) as {name: float32 ndarray},
    read-only views of one buffer."""
    return _dtrain.load_checkpoint(str(path))
