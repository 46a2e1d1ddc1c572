"""The relay role (CRCR's upstream side, for many downstreams): the allowlist with our policy
(:mod:`fanout.policy`, :mod:`fanout.registry`), the durable fan-out (ingress writes one outbox
row per admitted downstream with the delivery, :mod:`fanout.send` sends it to GitHub's
``repository_dispatch`` through :mod:`fanout.github` with a signed dispatch token,
:mod:`fanout.dispatch_token`), and authenticated callbacks (:mod:`fanout.oidc`,
:mod:`fanout.callbacks`) driving the job state machine of ``store.callbacks``.

Its vocabulary lives in :mod:`fanout.model`; :class:`fanout.role.RelayRole` is what a process
builds from its settings. The package imports nothing itself, so importing one of its modules
never imports the others.
"""
