"""The Kafka shell, the only importer of aiokafka, a folder per job (the imports run downward):

- ``consumption``: the consumer-group shells (the processor's loop, the store writer's feed);
- ``backfill``: a migration's reads of the documents topic;
- ``batchjobs``: work that can wait, sent to the provider's Batch API;
- ``outputs``: what a record's work writes, and the offsets it completes;
- ``client``: the seam to the broker.
"""
