"""Delivery through a message broker: the outbox, the relay that publishes it, and consumers.

- ``records``: the rows the backends store (routes, outbox records, a claim by key) — a leaf;
- ``urls``: broker URLs (``amqp://``, ``nats://``, ``redis://``) and the names they imply;
- ``base``: what every broker adapter does (publish with confirms; receive, ack, release);
- ``rabbitmq``, ``jetstream``, ``redis_streams``: the adapters (clients from the ``brokers``
  extra, imported only when used);
- ``outbox``: routing queues to a broker and inspecting the outbox, for operators;
- ``relay``: publishes outbox records in order, marks them only after the broker confirms;
- ``consumer``: runs the ledger's task handlers for broker messages, claiming by key.

See docs/transports.md. This package's ``__init__`` imports nothing, so that the backends can
import ``records`` without pulling in the rest.
"""
