"""A desktop's notification service for tests: a D-Bus session bus of the test's own
(``dbus-daemon``, Debian's package of that name) with a server of
``org.freedesktop.Notifications`` on it, as a desktop's notification daemon serves it,
recording what it is asked to show. The engine's ``desktop-notifier`` reaches it as it would
the real one, through ``DBUS_SESSION_BUS_ADDRESS``.

No ``from __future__ import annotations``: dbus-fast reads the D-Bus signatures from the
methods' annotations.
"""

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method, signal

NAME = "org.freedesktop.Notifications"


class Notifications(ServiceInterface):
    """What a notification daemon serves; ``shown``: (application, title, body) of each."""

    def __init__(self) -> None:
        super().__init__(NAME)
        self.shown: list[tuple[str, str, str]] = []

    @method()
    def Notify(self, app_name: "s", replaces_id: "u", app_icon: "s", summary: "s", body: "s",  # noqa: F821
               actions: "as", hints: "a{sv}", expire_timeout: "i") -> "u":  # noqa: F821
        self.shown.append((app_name, summary, body))
        return len(self.shown)

    @method()
    def GetCapabilities(self) -> "as":  # noqa: F821
        return ["body", "actions"]

    @method()
    def GetServerInformation(self) -> "ssss":  # noqa: F821
        return ["procession-tests", "procession", "1", "1.2"]

    @method()
    def CloseNotification(self, id: "u") -> None:  # noqa: F821
        pass

    @signal()
    def NotificationClosed(self) -> "uu":  # noqa: F821
        return [0, 0]

    @signal()
    def ActionInvoked(self) -> "us":  # noqa: F821
        return [0, ""]


@contextlib.asynccontextmanager
async def desktop(folder: Path) -> AsyncIterator[tuple[str, Notifications]]:
    """A session bus (its address) with the notification service on it, until the block ends."""
    daemon = shutil.which("dbus-daemon")
    assert daemon, "dbus-daemon is not installed (Debian: apt-get install dbus-daemon; .ci/run installs it)"
    address = f"unix:path={folder / 'bus'}"
    proc = subprocess.Popen([daemon, "--session", "--nofork", f"--address={address}", "--print-address=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    bus: Any = None
    try:
        assert proc.stdout is not None
        await asyncio.to_thread(proc.stdout.readline)  # printed once it listens
        bus = await MessageBus(bus_address=address).connect()
        service = Notifications()
        bus.export("/org/freedesktop/Notifications", service)
        await bus.request_name(NAME)
        yield address, service
    finally:
        if bus is not None:
            bus.disconnect()
        proc.kill()
        proc.wait()
