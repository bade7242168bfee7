"""Tools to run a fleet on one machine: a private podman engine serving the Docker API
(:mod:`~cloudhub.devtools.engine`) and the processes of hubs and agents
(:mod:`~cloudhub.devtools.fleet`).

Shipped with the hub because ``cloudhub demo`` uses them; the tests and the benchmarks
import them from here, so no test infrastructure lives in the demo and no test values are
copied into it. Imported by nothing of the hub's serving path.
"""
