"""Open-file limits for benchmarks that hold many sockets in one process.

A process of the bench itself can hold thousands of sockets (the ``hub_ha`` balancer holds
two per simulated node: 20,000 at 10,000 nodes). The shell's soft limit is often 1,024 and
its hard limit 20,000 or less; a benchmark that finds out when ``accept`` fails with EMFILE
has wasted the minutes it took to bring the fleet up.
"""

from __future__ import annotations

import resource

__all__ = ["ensure_open_files"]


def ensure_open_files(need: int) -> int:
    """Raise this process's ``RLIMIT_NOFILE`` to at least ``need`` (children inherit it).

    The soft limit goes up to the hard one; above the hard limit it tries to raise both
    (root, or CAP_SYS_RESOURCE; the kernel caps it at ``fs.nr_open``).

    Args:
        need: file descriptors this process (and each child) may need.

    Returns:
        the soft limit now in force (≥ ``need``).

    Raises:
        SystemExit: the limit cannot be raised that far (the message says what to run).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
        except (ValueError, OSError) as exc:
            raise SystemExit(
                f"this benchmark needs {need} open files; the hard limit is {hard} and "
                f"cannot be raised ({exc}): run it from a shell where `ulimit -Hn {need}` "
                "works (raising a hard limit needs root with CAP_SYS_RESOURCE, which a "
                "container may not give)"
            ) from None
        return need
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target
