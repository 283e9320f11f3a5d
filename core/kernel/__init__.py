"""What the kernel gives a process to hold itself to: Landlock (``landlock``, also the launcher
every confined process starts through), namespaces (``world``) and a seccomp filter of sockets
(``sockets``). The bottom layer: standard library only, imported by the engine (a run's bounds)
and by the calls (Procession's own git, held to running git alone)."""
