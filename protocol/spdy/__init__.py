"""SPDY/3.1 (``protocol.spdy.connection``) and the Kubernetes channel protocols over it
(``protocol.spdy.remotecommand``: ``v4.channel.k8s.io`` for exec and attach), sans-I/O."""
