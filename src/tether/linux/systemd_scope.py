"""A transient systemd scope with ``Delegate=yes`` for the run's cgroup v2, asked of the user's
or the system's manager; jeepney is imported only here. Why each step: ``docs/containment.md``
("The user's own systemd scope").
"""

from __future__ import annotations

import contextlib
import os
import stat
import time

from tether.linux.cgroup import (
    CgroupUnavailable,
    V2Cgroup,
    enable_controllers,
    make_cgroup,
    own_cgroup,
    unescape,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Final

    from jeepney import Message
    from jeepney.io.blocking import DBusConnection

__all__ = [
    "JOB_MODE",
    "MANAGER_INTERFACE",
    "SCOPE_REMEDY",
    "SUPERVISOR_LEAF",
    "SYSTEMD_BUS_NAME",
    "SYSTEMD_PATH",
    "SYSTEM_MANAGER",
    "USER_MANAGER",
    "enter_scope",
    "hierarchy_controllers",
    "run_cgroup_in_scope",
    "scope_properties",
    "start_scope",
    "system_manager_address",
    "user_bus_address",
]

SYSTEMD_BUS_NAME: Final = "org.freedesktop.systemd1"
SYSTEMD_PATH: Final = "/org/freedesktop/systemd1"
MANAGER_INTERFACE: Final = "org.freedesktop.systemd1.Manager"
#: ``systemd-run``'s default job mode: fail rather than replace a conflicting job.
JOB_MODE: Final = "fail"
#: The leaf of the scope the supervisor moves itself into, leaving the scope free of processes.
SUPERVISOR_LEAF: Final = "supervisor"
#: How long the whole exchange may take, connection to job done (systemd-run allows 25 s a call).
SCOPE_TIMEOUT: Final = 10.0
#: The most ``JobRemoved`` signals held while waiting for a reply (others' jobs: dropped).
_QUEUED: Final = 256
#: What a user can do where tether cannot ask for a scope itself.
SCOPE_REMEDY: Final = "systemd-run --user --scope -p Delegate=yes tether ..."
#: The system manager's own socket: root speaks to it directly, with no bus daemon between
#: (systemd's ``bus_connect_system_systemd``, which ``systemd-run --scope`` uses as root).
SYSTEM_MANAGER_SOCKET: Final = "/run/systemd/private"
#: The system bus, which root's ``systemd-run`` falls back to where that socket is not there.
SYSTEM_BUS_SOCKET: Final = "/run/dbus/system_bus_socket"
#: How messages name the user's manager, and the system's.
USER_MANAGER: Final = "the user's service manager"
SYSTEM_MANAGER: Final = "the system's service manager"


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _reachable(address: str) -> bool:
    """Whether ``address`` names a Unix socket that exists (or an abstract one, which may)."""
    for entry in address.split(";"):
        transport, _, options = entry.partition(":")
        if transport != "unix":
            continue
        pairs = dict(option.partition("=")[::2] for option in options.split(","))
        if "abstract" in pairs:
            return True
        if "path" in pairs and _is_socket(unescape(pairs["path"], "%", 2, 16)):
            return True
    return False


def user_bus_address(environ: Mapping[str, str]) -> str | None:
    """The user bus's address (``$DBUS_SESSION_BUS_ADDRESS``, else ``$XDG_RUNTIME_DIR/bus``),
    if its Unix socket is there; ``None`` otherwise (a stale variable is no bus)."""
    address = environ.get("DBUS_SESSION_BUS_ADDRESS", "")
    if address and _reachable(address):
        return address
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and _is_socket(os.path.join(runtime, "bus")):
        return "unix:path=" + os.path.join(runtime, "bus")
    return None


def system_manager_address(environ: Mapping[str, str]) -> tuple[str, bool] | None:
    """How root reaches the system's manager, as ``systemd-run --scope`` does: its private
    socket (direct: ``True``), else the system bus; ``None`` where there is neither."""
    if _is_socket(SYSTEM_MANAGER_SOCKET):
        return f"unix:path={SYSTEM_MANAGER_SOCKET}", True
    address = environ.get("DBUS_SYSTEM_BUS_ADDRESS", "")
    if address and _reachable(address):
        return address, False
    if _is_socket(SYSTEM_BUS_SOCKET):
        return f"unix:path={SYSTEM_BUS_SOCKET}", False
    return None


def _words(path: str) -> set[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return set(file.read().split())
    except OSError:
        return set()


def hierarchy_controllers(path: str, directory: str) -> set[str]:
    """The controllers the cgroup v2 hierarchy holds, from its root's ``cgroup.controllers``
    (a session scope's own may lack one its manager can delegate)."""
    root = directory
    trimmed = path.rstrip("/")
    if trimmed and directory.endswith(trimmed):
        root = directory[: len(directory) - len(trimmed)] or "/"
    return _words(os.path.join(root, "cgroup.controllers"))


def scope_properties(pid: int, description: str) -> list[tuple[str, tuple[str, object]]]:
    """As ``systemd-run --scope -p Delegate=yes`` sends them (``PIDs``: any systemd takes them)."""
    return [("Description", ("s", description)), ("Delegate", ("b", True)), ("PIDs", ("au", [pid]))]


#: The largest message read from the bus, header and body: every answer tether waits for
#: (``Hello``'s, ``AddMatch``'s, ``StartTransientUnit``'s, ``JobRemoved``) is a few hundred
#: bytes. A larger one is refused as soon as its fixed header declares it, never read whole.
MAX_MESSAGE: Final = 1 << 16


class BusGarbled(ValueError):
    """The bus sent what is not a D-Bus message tether would read (or one too large)."""


def _connect(address: str, deadline: float, *, direct: bool = False) -> DBusConnection:
    """A connection to the bus at ``address``, authenticated and greeted by ``deadline``
    (``direct``: the manager itself, no ``Hello``). Unlike jeepney's own, every message is read
    as untrusted (:class:`BusGarbled`) and none past ``deadline``."""
    from jeepney.bus import get_connectable_addresses
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import DBusConnection, DBusConnectionBase, Proxy, prep_socket
    from jeepney.io.common import MessageFilters

    class Connection(DBusConnection):  # type: ignore[misc]
        def __init__(self, sock: object) -> None:
            DBusConnectionBase.__init__(self, sock)
            self._filters = MessageFilters()
            self.bus_proxy = Proxy(message_bus, self, timeout=_left(deadline))
            self.unique_name = None if direct else self.bus_proxy.Hello()[0]

        def _receive(self, _jeepney_deadline: float | None) -> Message:
            # The exchange's own deadline, whatever jeepney computed from a timeout.
            while True:
                if time.monotonic() >= deadline:
                    raise TimeoutError
                try:
                    message = self.parser.get_next_message()
                    size = self.parser.next_msg_size
                except Exception as error:  # any byte the parser chokes on: not D-Bus
                    raise BusGarbled(f"not a D-Bus message ({type(error).__name__})") from None
                if message is not None:
                    return message
                if size is not None and size > MAX_MESSAGE:
                    raise BusGarbled(f"a message of {size} bytes (at most {MAX_MESSAGE})")
                data, fds = self._read_some_data(timeout=_left(deadline))
                self.parser.add_data(data, fds=fds)

    errors: list[str] = []
    for socket_address in get_connectable_addresses(address):
        try:
            sock = prep_socket(socket_address, timeout=_left(deadline))
        except (OSError, TimeoutError) as error:
            errors.append(str(error))
            continue
        try:
            return Connection(sock)
        except BaseException:
            sock.close()
            raise
    raise OSError("; ".join(errors) or "no Unix socket in the address")


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _answer(
    connection: DBusConnection, message: Message, deadline: float, who: str = USER_MANAGER
) -> tuple[object, ...]:
    """The body of the reply to ``message``; :class:`CgroupUnavailable` for an error reply."""
    from jeepney import HeaderFields, MessageType

    reply = connection.send_and_get_reply(message, timeout=_left(deadline))
    if reply.header.message_type == MessageType.error:
        name = reply.header.fields.get(HeaderFields.error_name, "an error")
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise CgroupUnavailable(f"{who} refused the scope: {name}{': ' if text else ''}{text}")
    return tuple(reply.body)


def start_scope(
    address: str,
    unit: str,
    pid: int,
    *,
    description: str,
    timeout: float = SCOPE_TIMEOUT,
    direct: bool = False,
    who: str = USER_MANAGER,
) -> None:
    """Ask a service manager for scope ``unit`` holding ``pid``; return once its job is
    ``done`` (``JobRemoved``, subscribed to first), within ``timeout`` seconds, or raise
    :class:`CgroupUnavailable`. ``direct``: the manager's own socket, no ``AddMatch``."""
    try:
        from jeepney import DBusAddress, MatchRule, new_method_call
        from jeepney.bus_messages import message_bus
    except ImportError:
        raise CgroupUnavailable(
            "a systemd scope needs the jeepney package, which is not installed"
        ) from None
    from collections import deque

    deadline = time.monotonic() + timeout
    signal = {"type": "signal", "interface": MANAGER_INTERFACE, "member": "JobRemoved"}
    try:
        connection = _connect(address, deadline, direct=direct)
    except TimeoutError:
        raise CgroupUnavailable(f"{who} at {address} did not answer within {timeout:g} s") from None
    except Exception as error:  # any bytes from the bus: the documented refusal, never a crash
        raise CgroupUnavailable(f"cannot reach {who} at {address}: {error}") from None
    # Bounded: a bus flooding signals that match loses the oldest, never grows this.
    queue: deque[Message] = deque(maxlen=_QUEUED)
    try:
        with connection.filter(MatchRule(path=SYSTEMD_PATH, **signal), queue=queue) as removed:
            if not direct:
                bus_rule = MatchRule(sender=SYSTEMD_BUS_NAME, path=SYSTEMD_PATH, **signal)
                _answer(connection, message_bus.AddMatch(bus_rule), deadline, who)
            manager = DBusAddress(
                SYSTEMD_PATH, bus_name=SYSTEMD_BUS_NAME, interface=MANAGER_INTERFACE
            )
            body: tuple[object, ...] = (unit, JOB_MODE, scope_properties(pid, description), [])
            call = new_method_call(manager, "StartTransientUnit", "ssa(sv)a(sa(sv))", body)
            (job,) = _answer(connection, call, deadline, who)
            result = _job_result(connection, removed, job, deadline)
    except TimeoutError:
        raise CgroupUnavailable(f"{who} did not start {unit} within {timeout:g} s") from None
    except CgroupUnavailable:
        raise
    except Exception as error:  # any bytes from the bus: the documented refusal, never a crash
        raise CgroupUnavailable(f"the bus to {who} failed while starting {unit}: {error}") from None
    finally:
        with contextlib.suppress(OSError):
            connection.close()
    if result != "done":
        raise CgroupUnavailable(f"{who} could not start {unit} (its job ended {result!r})")


def _job_result(connection: DBusConnection, removed: object, job: object, deadline: float) -> str:
    """The result of job ``job`` from its ``JobRemoved`` signal (id, job, unit, result)."""
    while True:
        if time.monotonic() >= deadline:  # a stream of other jobs' signals ends nothing else
            raise TimeoutError
        message = connection.recv_until_filtered(removed, timeout=_left(deadline))
        body = message.body
        if len(body) == 4 and body[1] == job and isinstance(body[3], str):
            return body[3]


def enter_scope(unit: str, who: str = USER_MANAGER) -> tuple[str, str]:
    """This process's cgroup, checked in ``/proc/self/cgroup`` (never the manager's word) to
    be scope ``unit``: its path and directory, or :class:`CgroupUnavailable`."""
    path, directory = own_cgroup()
    if os.path.basename(path) != unit:
        raise CgroupUnavailable(f"{who} started {unit}, but this process is in {path}, not in it")
    return path, directory


def _refusal(
    unit: str, missing: Mapping[str, str], offered: Iterable[str], who: str = USER_MANAGER
) -> str:
    controllers = sorted(set(missing.values()))
    listed = " ".join(sorted(offered)) or "none"
    remedy = (
        "an administrator can add it to Delegate= of user@.service "
        "(systemctl edit user@.service), or run tether as root"
        if who == USER_MANAGER
        else "the kernel or the system's cgroup setup lacks it; run without that limit"
    )
    return (
        f"{who} delegates no {' or '.join(controllers)} controller "
        f"(the scope {unit} got: {listed}), so {', '.join(missing)} cannot be enforced: {remedy}"
    )


def run_cgroup_in_scope(
    name: str,
    controllers: tuple[str, ...],
    files: Mapping[str, str],
    limits: Mapping[str, str],
    *,
    address: str,
    direct: bool = False,
    system: bool = False,
) -> V2Cgroup:
    """Move this process (the supervisor) into a new scope; make the run's cgroup ``name``
    there, ``controllers`` enabled and ``files`` written. Every limit (``limits``: by name, its
    controller) the scope did not get is refused first. ``system``: the system's manager."""
    unit = f"{name}.scope"
    who = SYSTEM_MANAGER if system else USER_MANAGER
    try:
        start_scope(
            address, unit, os.getpid(), description=f"tether run {name}", direct=direct, who=who
        )
    except CgroupUnavailable as why:
        remedy = (
            "run without limits"
            if system
            else f"run tether as root, or in a cgroup delegated to you: {SCOPE_REMEDY}"
        )
        raise CgroupUnavailable(f"{why}; {remedy}") from None
    path, scope = enter_scope(unit, who)
    offered = _words(os.path.join(scope, "cgroup.controllers"))
    missing = {limit: needs for limit, needs in limits.items() if needs not in offered}
    if missing:
        raise CgroupUnavailable(_refusal(unit, missing, offered, who))
    leaf = os.path.join(scope, SUPERVISOR_LEAF)
    try:
        os.mkdir(leaf, 0o755)
        fd = os.open(os.path.join(leaf, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    except OSError as error:
        problem = error.strerror or error
        raise CgroupUnavailable(f"cannot move the supervisor into {leaf}: {problem}") from None
    enable_controllers(scope, controllers)
    directory, fd = make_cgroup(scope, name, files.items(), "cgroup.kill")
    return V2Cgroup(os.path.join(path, name), directory, fd)
