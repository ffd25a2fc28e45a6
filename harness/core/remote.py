"""A backend computed in a process of its own: the judge (the oracle, the inputs, the seed, the clock) out of its reach.

``--untrusted`` (``normbench run``, ``normbench test``, ``pytest suites --normbench-untrusted``) selects every backend
as a :class:`RemoteBackend`: the plugin is imported, created and called in a worker process (a new Python: nothing
of the judge's memory is inherited; two pipes of its own carry the messages, its stdout goes to stderr), and the
process that runs the suites holds only handles to its arrays. Every
call the harness makes (``asarray``, an entry point, a hook, ``to_numpy``, ``synchronize``) is one message on a
pipe; host arrays travel pickled, so every output the judge sees is its own copy. The plugin's code, its
import-time code included, never runs in the judge's process: it cannot patch the clock, the verifier or the
oracle, read the inputs' secret order or the seed, or see which call is judged. The judge times each call with
its own clock, around the message and its answer: a sample includes the pipe's round trip (tens of
microseconds on Linux, measured by ``tests/test_remote.py``), so speeds read slightly low, never high.

What this does not do: sandbox the worker (it may use the machine, the GPU and the files like any process of
the user), or judge the worker's own honesty about its device: ``device`` and the declared attributes are the
backend's own words, as in process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.exceptions import NormbenchError

#: the attributes of a backend the harness reads, sent by the worker when it has created the backend
DECLARED = ("name", "description", "operations", "dtypes", "has_backward", "strided", "per_head_weights", "requires",
            "install_hint", "devices", "device", "max_elements", "timing_note", "runtime_note",
            "backward_includes_forward", "limits", "operation_limits", "known_deviations")
#: exceptions a backend's call may raise that are raised in the judge as they are (any other: RuntimeError)
_PASSED_ON = {e.__name__: e for e in (ValueError, TypeError, RuntimeError, NotImplementedError, MemoryError,
                                      ArithmeticError, ZeroDivisionError, OverflowError, IndexError, KeyError,
                                      AssertionError)}


class Handle:
    """An array (or a prepared backward, which the judge calls) that lives in the worker; released there when the
    judge drops it."""

    __slots__ = ("id", "owner", "__weakref__")

    def __init__(self, key: int, owner: RemoteBackend) -> None:
        self.id, self.owner = key, owner
        weakref.finalize(self, owner._release, key)

    def __call__(self) -> Any:
        return self.owner._ask(("invoke", self))

    def __repr__(self) -> str:
        return f"<array {self.id} in the worker>"


def _refs(value: Any) -> Any:
    """``value`` to send: each :class:`Handle` as the worker's key for it."""
    if isinstance(value, Handle):
        return "__ref__", value.id
    if isinstance(value, (tuple, list)):
        return type(value)(_refs(v) for v in value)
    if isinstance(value, dict):
        return {k: _refs(v) for k, v in value.items()}
    return value


class RemoteBackend(Backend):
    """The judge's side of a backend in a worker process (:func:`start` makes one). Its class is made per backend
    (:func:`_proxy_class`) with the backend's declared attributes and exactly the entry points and hooks the
    backend's own class defines, so every check that asks what a backend overrides gets the backend's answer."""

    name = "remote"
    remote_version = ""

    def __init__(self, connection: _Pipes, process: subprocess.Popen) -> None:
        self._connection, self._process = connection, process
        self._lock = threading.Lock()
        self._released: list[int] = []

    @classmethod
    def library_version(cls) -> str:
        return cls.remote_version

    def _release(self, key: int) -> None:
        self._released.append(key)

    def _ask(self, request: tuple) -> Any:
        with self._lock:
            released, self._released = self._released, []
            try:
                self._connection.send((released, _refs(request)))
                status, payload = self._connection.recv()
            except (EOFError, OSError, BrokenPipeError):
                code = _wait(self._process)
                how = "still running" if code is None else (f"signal {-code}" if code < 0 else f"exit status {code}")
                raise RuntimeError(f"the backend's worker process ended ({how}) during {request[0]} "
                                   f"{request[1] if len(request) > 1 and isinstance(request[1], str) else ''}"
                                   .rstrip()) from None
        if status == "raised":
            kind, message = payload
            raise _PASSED_ON.get(kind, RuntimeError)(message if kind in _PASSED_ON else f"{kind}: {message}")
        return self._wrap(payload)

    def _wrap(self, payload: Any) -> Any:
        if isinstance(payload, tuple) and len(payload) == 2 and payload[0] == "__handle__":
            return Handle(payload[1], self)
        if isinstance(payload, (tuple, list)):
            return type(payload)(self._wrap(p) for p in payload)
        return payload

    def asarray(self, host: Any) -> Handle:
        return self._ask(("asarray", np.asarray(host)))

    def to_numpy(self, native: Any) -> np.ndarray:
        return self._ask(("to_numpy", native))

    def synchronize(self) -> None:
        self._ask(("synchronize",))

    def set_threads(self, threads: int | None) -> int | None:
        return self._ask(("set_threads", threads))

    def close(self) -> None:
        """End the worker (also done when the judge's process ends)."""
        try:
            self._connection.send(([], ("close",)))
        except (OSError, BrokenPipeError):
            pass
        if _wait(self._process) is None:
            self._process.kill()
            self._process.wait()
        self._connection.close()


class _Pipes:
    """Two one-way connections as one: what is sent goes out on one pipe, what is received comes in on the other."""

    def __init__(self, incoming: int, outgoing: int) -> None:
        self._in, self._out = Connection(incoming, writable=False), Connection(outgoing, readable=False)

    def send(self, value: Any) -> None:
        self._out.send(value)

    def recv(self) -> Any:
        return self._in.recv()

    def close(self) -> None:
        self._in.close()
        self._out.close()


def _wait(process: subprocess.Popen, seconds: float = 5.0) -> int | None:
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def _call(method: str, parameters: list[str]):
    def call(self, *args, **kwargs):
        return self._ask(("call", method, args, kwargs))
    call.__name__ = method
    if parameters is not None:  # its keywords, as the harness asks which options an entry point takes
        import inspect

        call.__signature__ = inspect.Signature(
            [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in parameters])
    return call


def _hook(name: str):
    def call(self, op, args, *cotangents):
        return self._ask(("hook", name, op, args, cotangents))
    call.__name__ = name
    return call


def _proxy_class(declared: dict[str, Any], methods: dict[str, list[str]], hooks: list[str], version: str) -> type:
    attributes = {k: v for k, v in declared.items() if k != "device"}
    attributes.update({m: _call(m, p) for m, p in methods.items()}, remote_version=version,
                      timed_by_cuda_events=False, **{h: _hook(h) for h in hooks})
    return type(f"Remote[{declared['name']}]", (RemoteBackend,), attributes)


def start(name: str) -> RemoteBackend:
    """Create backend ``name`` in a worker process and return the judge's side of it; a backend that cannot be
    created there is the worker's :class:`NormbenchError`, with its words."""
    to_worker_read, to_worker_write = os.pipe()
    from_worker_read, from_worker_write = os.pipe()
    process = subprocess.Popen([sys.executable, "-c", _WORKER, str(to_worker_read), str(from_worker_write), name],
                               pass_fds=(to_worker_read, from_worker_write), stdin=subprocess.DEVNULL,
                               stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else None)
    os.close(to_worker_read)
    os.close(from_worker_write)
    ours = _Pipes(from_worker_read, to_worker_write)
    try:
        status, payload = ours.recv()
    except EOFError:
        code = _wait(process)
        ours.close()
        raise NormbenchError(f"backend {name!r}: its worker process ended (exit status {code}) while creating it; "
                             f"its output above says why") from None
    if status != "ready":
        _wait(process)
        ours.close()
        raise NormbenchError(payload)
    declared, methods, hooks, version = payload
    backend = _proxy_class(declared, methods, hooks, version)(ours, process)
    backend.device = declared["device"]
    return backend


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


# -- the worker ------------------------------------------------------------------------------------------------

#: the worker's program: ``python -c`` this, the pipes' file descriptors (in, out), the backend's name
_WORKER = ("import sys; from normbench.core.remote import serve, _Pipes; "
           "serve(_Pipes(int(sys.argv[1]), int(sys.argv[2])), sys.argv[3])")


def _overridden(cls: type) -> tuple[dict[str, list[str] | None], list[str]]:
    """The entry points ``cls`` defines beyond the Backend contract's defaults (each with its parameters' names,
    None where they cannot be read), and the hooks it defines."""
    import inspect

    methods: dict[str, list[str] | None] = {}
    for op in operations.OPERATIONS:
        for entry in (op.entry, op.backward_entry, op.statistics_entry, f"{op.name}_with_statistics"):
            function = getattr(cls, entry, None) if entry else None
            if callable(function) and function is not getattr(Backend, entry, None):
                try:
                    methods[entry] = [p for p in inspect.signature(function).parameters if p != "self"]
                except (TypeError, ValueError):
                    methods[entry] = None
    hooks = [name for name in ("warmup", "prepare_backward", "forward_backward")
             if any(not cls.hook_for(name, op.name).is_default for op in operations.OPERATIONS)]
    return methods, hooks


def serve(connection, name: str) -> None:
    """The worker: create backend ``name`` through the registry (its plugin vetted as any), then answer requests
    until the pipe closes."""
    from normbench.core.registry import get_registry

    try:
        backend = get_registry().create(name)
    except Exception as exc:  # the message the judge raises
        connection.send(("error", str(exc)))
        return
    cls = type(backend)
    declared = {k: getattr(backend, k) for k in DECLARED}
    declared["operations"] = operations.implemented(backend)
    connection.send(("ready", (declared, *_overridden(cls), cls.library_version())))
    table: dict[int, Any] = {}
    counter = iter(range(1, 1 << 62))

    def keep(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (tuple, list)):
            return type(value)(keep(v) for v in value)
        key = next(counter)
        table[key] = value
        return "__handle__", key

    def resolve(value: Any) -> Any:
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "__ref__":
            return table[value[1]]
        if isinstance(value, (tuple, list)):
            return type(value)(resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    while True:
        try:
            released, request = connection.recv()
        except (EOFError, OSError):
            return
        for key in released:
            table.pop(key, None)
        kind = request[0]
        if kind == "close":
            return
        try:
            if kind == "asarray":
                answer = keep(backend.asarray(request[1]))
            elif kind == "to_numpy":
                answer = np.array(backend.to_numpy(resolve(request[1])), copy=True)
            elif kind == "synchronize":
                answer = backend.synchronize()
            elif kind == "set_threads":
                answer = backend.set_threads(request[1])
            elif kind == "call":
                _, method, args, kwargs = request
                answer = keep(getattr(backend, method)(*resolve(args), **resolve(kwargs)))
            elif kind == "invoke":  # a prepared backward
                answer = keep(resolve(request[1])())
            else:  # a hook, resolved as in process (a normbench 0.2 spelling included)
                _, hook_name, op, args, cotangents = request
                answer = keep(cls.hook_for(hook_name, op)(backend, resolve(args), *resolve(cotangents)))
        except BaseException as exc:  # the backend's: SystemExit and KeyboardInterrupt included
            connection.send(("raised", (type(exc).__name__, str(exc))))
            continue
        connection.send(("ok", answer))
